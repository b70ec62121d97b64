# The README's Python example runs as printed.
import os
import re

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_readme_python_example_runs(capsys):
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1
    scope = {}
    exec(blocks[0], scope)
    out = capsys.readouterr().out
    assert "linear" in out and "cross_entropy" in out
    assert scope["w"].grad.shape == (2, 3)
    np.testing.assert_allclose(scope["g"].numpy(), 3 * 0.5 ** 2)
    assert scope["g"].requires_grad
