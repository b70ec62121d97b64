# Custom ops written in Python (tapegrad.Function): recorded under the class's name, checked by
# gradcheck, with ctx, non-tensor arguments, wrong backward results refused, and the example script;
# several outputs (one gradient each, None for an unused one), int32 outputs and aliased outputs.
import os
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from numeric import check_grad

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


# ---- several outputs, inputs without gradients


class SplitScale(tg.Function):
    """(a, b) = (x * w * k, tanh(x) * k): two outputs of two tensors and a number; backward receives
    one gradient per output (None for one no gradient reached)."""

    @staticmethod
    def forward(ctx, x, w, k):
        ctx.save_for_backward(x, w)
        ctx.k = k
        ctx.seen = []
        return x * w * k, tg.ops.tanh(x) * k

    @staticmethod
    def backward(ctx, da, db):
        ctx.seen.append((da is None, db is None))
        x, w = ctx.saved_tensors
        dx = tg.zeros(list(x.shape), dtype=x.dtype)
        if da is not None:
            dx = dx + da * w * ctx.k
        if db is not None:
            t = tg.ops.tanh(x)
            dx = dx + db * (1.0 - t * t) * ctx.k
        dw = da * x * ctx.k if da is not None and ctx.needs_input_grad[1] else None
        return dx, dw, None


def test_several_outputs_are_recorded_and_pass_gradcheck():
    rng = np.random.default_rng(1)
    x = tg.tensor(rng.standard_normal(5), requires_grad=True)
    w = tg.tensor(rng.standard_normal(5), requires_grad=True)
    tg.current_tape().clear()
    a, b = SplitScale.apply(x, w, 2.0)
    assert [e.op for e in tg.current_tape().entries] == ["SplitScale", "SplitScale[0]", "SplitScale[1]"]
    assert a.requires_grad and b.requires_grad
    (a * 3.0 + b).sum().backward()
    t = np.tanh(x.numpy())
    np.testing.assert_allclose(x.grad.numpy(), 6.0 * w.numpy() + 2.0 * (1 - t * t))
    np.testing.assert_allclose(w.grad.numpy(), 6.0 * x.numpy())
    r = tg.gradcheck(lambda x, w: tg.ops.concat(list(SplitScale.apply(x, w, 1.5)), 0), [x, w])
    assert r.ok, r.message
    check_grad(lambda x, w: tg.ops.stack(list(SplitScale.apply(x, w, 0.5)), 1),
               [rng.standard_normal(4), rng.standard_normal(4)])


def test_an_unused_output_gets_none_and_an_input_without_grad_no_gradient():
    x = tg.tensor(np.linspace(-1, 1, 4), requires_grad=True)
    w = tg.tensor(np.ones(4))  # needs no gradient
    a, b = SplitScale.apply(x, w, 1.0)
    b.sum().backward()  # only b reaches the loss
    np.testing.assert_allclose(x.grad.numpy(), 1 - np.tanh(x.numpy()) ** 2)
    assert w.grad is None
    x.zero_grad()
    a, b = SplitScale.apply(x, w, 1.0)
    a.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), w.numpy())

    seen = {}

    class Probe(tg.Function):
        @staticmethod
        def forward(ctx, x, w, k):
            seen["needs"] = ctx.needs_input_grad
            return x * w, x + w

        @staticmethod
        def backward(ctx, da, db):
            seen.setdefault("grads", []).append((da is None, db is None))
            return (da if da is not None else db * 0.0), None, None

    y0, y1 = Probe.apply(x, w, 3)
    assert seen["needs"] == (True, False, False)
    y0.sum().backward()
    y0, y1 = Probe.apply(x, w, 3)
    y1.sum().backward()
    assert seen["grads"] == [(False, True), (True, False)]


def test_retained_walks_each_deliver_their_own_gradients():
    received = []

    class Pair(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0, x * 3.0

        @staticmethod
        def backward(ctx, da, db):
            received.append((None if da is None else da.numpy().tolist(), None if db is None else db.numpy().tolist()))
            return (da * 2.0 if da is not None else 0.0) + (db * 3.0 if db is not None else 0.0)

    x = tg.tensor(np.ones(2), requires_grad=True)
    a, b = Pair.apply(x)
    (a.sum() + (b * 5.0).sum()).backward(retain_graph=True)
    b.sum().backward(retain_graph=True)  # the first walk's d(a) is not delivered again
    a.sum().backward()
    assert received == [([1.0, 1.0], [5.0, 5.0]), (None, [1.0, 1.0]), ([1.0, 1.0], None)]
    np.testing.assert_array_equal(x.grad.numpy(), [17.0 + 3.0 + 2.0] * 2)


def test_int32_outputs_are_not_differentiated_and_inputs_are_not_rebound():
    class MaxWithIndex(tg.Function):
        @staticmethod
        def forward(ctx, x):
            i = int(np.argmax(x.numpy()))
            ctx.i, ctx.n = i, x.shape[0]
            return x[i], tg.tensor(np.array([i], np.int32)), x

        @staticmethod
        def backward(ctx, dmax, dindex, dsame):
            assert dindex is None
            g = np.zeros(ctx.n)
            g[ctx.i] = dmax.item() if dmax is not None else 0.0
            return tg.tensor(g) + (dsame if dsame is not None else 0.0)

    x = tg.tensor(np.array([1.0, 5.0, 2.0]), requires_grad=True)
    m, i, same = MaxWithIndex.apply(x)
    assert i.dtype == "int32" and not i.requires_grad
    assert x.is_leaf and not same.same(x)  # the output aliasing the input is a handle of its own
    (m * 2.0 + same.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 3.0, 1.0])


def test_a_wrong_several_output_forward_is_refused():
    class Mixed(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0, 2.0

    class Empty(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return ()

    x = tg.tensor(np.ones(2), requires_grad=True)
    with pytest.raises(TypeError, match="Mixed.forward must return .* a tuple holding a float"):
        Mixed.apply(x)
    with pytest.raises(TypeError, match="Empty.forward returned an empty tuple"):
        Empty.apply(x)
