# The Python examples run as scripts and check their own figures (exit code 0).
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_backprop_tour_runs():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples/python/backprop_tour.py"), "--steps", "120"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for text in ["matmul", "backward visits", "max |analytic - numeric|", "accuracy", "tour: ok"]:
        assert text in r.stdout
