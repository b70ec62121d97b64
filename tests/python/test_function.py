# Custom ops written in Python (tapegrad.Function): recorded under the class's name, checked by
# gradcheck, with ctx, non-tensor arguments, wrong backward results refused, and the example script.
import os
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ScaledSquare(tg.Function):
    """y = k * x^2 * w: two tensors and a number."""

    @staticmethod
    def forward(ctx, x, k, w):
        ctx.save_for_backward(x, w)
        ctx.k = k
        return x * x * w * k

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        # dx = 2 k x w dy, dw = k x^2 dy; none for k
        return dy * x * w * (2.0 * ctx.k), None, dy * x * x * ctx.k


def test_a_custom_op_is_recorded_under_its_name_and_passes_gradcheck():
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal(5), requires_grad=True)
    w = tg.tensor(rng.standard_normal(5), requires_grad=True)
    tg.current_tape().clear()
    y = ScaledSquare.apply(x, 1.5, w)
    assert [e.op for e in tg.current_tape().entries] == ["ScaledSquare"]  # the forward's ops left no entries
    assert y.requires_grad
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * x.numpy() * w.numpy())
    np.testing.assert_allclose(w.grad.numpy(), 1.5 * x.numpy() ** 2)
    r = tg.gradcheck(lambda x, w: ScaledSquare.apply(x, 1.5, w), [x, w])
    assert r.ok, r.message


def test_needs_input_grad_and_no_recording_without_grad():
    seen = {}

    class Probe(tg.Function):
        @staticmethod
        def forward(ctx, a, b):
            seen["needs"] = ctx.needs_input_grad
            return a + b

        @staticmethod
        def backward(ctx, dy):
            return dy, dy

    a = tg.tensor(np.ones(2), requires_grad=True)
    b = tg.tensor(np.ones(2))
    Probe.apply(a, b)
    assert seen["needs"] == (True, False)
    tg.current_tape().clear()
    out = Probe.apply(b, b)
    assert not out.requires_grad and len(tg.current_tape()) == 0


def test_a_wrong_backward_is_refused_with_the_name():
    class WrongCount(tg.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, dy):
            return dy

    class WrongShape(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, dy):
            return dy  # [] for an input of [3]

    x = tg.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(tg.AutogradError, match="WrongCount.backward returned 1 gradients for 2"):
        WrongCount.apply(x, x).sum().backward()
    with pytest.raises(tg.ShapeError, match=r"WrongShape.backward.*f64\[\].*f64\[3\]"):
        WrongShape.apply(x).backward()
    with pytest.raises(TypeError, match="must return one tapegrad.Tensor"):
        class NotATensor(tg.Function):
            @staticmethod
            def forward(ctx, x):
                return 1.0
        NotATensor.apply(x)


def test_create_graph_refuses_a_custom_op_by_name():
    x = tg.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(tg.AutogradError, match="ScaledSquare"):
        tg.grad(ScaledSquare.apply(x, 2.0, x).sum(), [x], create_graph=True)


def test_the_example_runs():
    env = dict(os.environ)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples/python/custom_function.py")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SiLU" in r.stdout and "gradcheck: passed" in r.stdout
