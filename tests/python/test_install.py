# meson install puts the module where Debian's /usr/bin/python3 looks: PREFIX/lib/python3.X/dist-packages
# (for the default prefix /usr/local, a directory on that Python's sys.path). Installed into a DESTDIR
# from the build tree the tests use, then imported from there by a fresh interpreter.
import json
import os
import subprocess
import sys

import pytest

import tapegrad as tg

BUILD = os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__)))


@pytest.mark.skipif(not os.path.isdir(os.path.join(BUILD, "meson-info")), reason="not a meson build tree")
def test_meson_install_puts_the_module_on_the_system_python_path(tmp_path):
    with open(os.path.join(BUILD, "meson-info", "intro-buildoptions.json")) as f:
        prefix = next(o["value"] for o in json.load(f) if o["name"] == "prefix")
    r = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--quiet", "--tags", "python-runtime",
                        "--destdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    site = os.path.join(prefix, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "dist-packages")
    installed = str(tmp_path) + site
    assert any(n.startswith("tapegrad.") and n.endswith(".so") for n in os.listdir(installed))
    if prefix in ("/usr/local", "/usr"):
        assert site in sys.path  # Debian's python3 reads it
    env = dict(os.environ, PYTHONPATH=installed)
    r = subprocess.run([sys.executable, "-c", "import tapegrad; print(tapegrad.__file__)"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(installed), r.stdout + r.stderr
