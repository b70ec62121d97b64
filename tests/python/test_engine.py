# The engine from Python: backward (function and method, seeds, retain_graph, create_graph), grad,
# no_grad / enable_grad, the tape and its entries, and the functional transforms against closed forms.
import numpy as np
import pytest

import tapegrad as tg

rng = np.random.default_rng(11)


def leaf(*shape):
    return tg.tensor(rng.standard_normal(shape), requires_grad=True)


def test_backward_accumulates_into_leaves():
    x = leaf(3)
    y = (x * x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy())
    tg.backward((x * 3.0).sum())
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() + 3)
    x.zero_grad()
    assert x.grad is None


def test_backward_with_a_seed_does_not_alias_it():
    x = leaf(2, 2)
    seed = np.ones((2, 2))
    (x * 1.0).backward(seed)
    (x * 1.0).backward(seed)
    np.testing.assert_array_equal(seed, np.ones((2, 2)))  # the second walk added into .grad, not into seed
    np.testing.assert_array_equal(x.grad.numpy(), 2 * np.ones((2, 2)))


def test_backward_refuses_a_cleared_tape_unless_retained():
    x = leaf(2)
    y = (x.exp()).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(x.numpy()))
    with pytest.raises(tg.AutogradError, match="cleared|freed|tape"):
        y.backward()


def test_grad_returns_gradients_and_leaves_dot_grad_alone():
    x, w = leaf(4), leaf(4)
    y = (x * w).sum()
    gx, gw = tg.grad(y, [x, w])
    np.testing.assert_allclose(gx.numpy(), w.numpy())
    np.testing.assert_allclose(gw.numpy(), x.numpy())
    assert x.grad is None and w.grad is None


def test_grad_allow_unused_and_grad_outputs():
    x, z = leaf(3), leaf(3)
    y = x * 2.0
    with pytest.raises(tg.AutogradError):
        tg.grad(y.sum(), [x, z], retain_graph=True)
    (gx, gz) = tg.grad(y, [x, z], grad_outputs=[tg.tensor(np.array([1.0, 2.0, 3.0]))], allow_unused=True)
    np.testing.assert_allclose(gx.numpy(), [2, 4, 6])
    assert gz is None


def test_create_graph_gives_a_differentiable_gradient():
    x = leaf(3)
    (g,) = tg.grad((x ** 3.0).sum(), [x], create_graph=True)
    np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2)
    (h,) = tg.grad(g.sum(), [x])
    np.testing.assert_allclose(h.numpy(), 6 * x.numpy())
    y = (x.tanh()).sum()
    y.backward(create_graph=True)
    assert x.grad.requires_grad
    (d2,) = tg.grad(x.grad.sum(), [x])
    t = np.tanh(x.numpy())
    np.testing.assert_allclose(d2.numpy(), -2 * t * (1 - t ** 2), rtol=1e-10)


def test_no_grad_records_nothing_and_nests():
    x = leaf(2)
    tg.current_tape().clear()
    with tg.no_grad():
        assert not tg.is_grad_enabled()
        y = x * 2.0
        with tg.enable_grad():
            assert tg.is_grad_enabled()
            z = x * 3.0
        assert not tg.is_grad_enabled()
    assert tg.is_grad_enabled()
    assert not y.requires_grad and z.requires_grad
    assert len(tg.current_tape()) == 1
    ctx = tg.no_grad()  # one object, entered twice
    with ctx:
        with ctx:
            pass
        assert not tg.is_grad_enabled()
    assert tg.is_grad_enabled()


def test_the_tape_shows_its_entries():
    tape = tg.current_tape()
    tape.clear()
    x = leaf(2, 3)
    x.name = "x"
    w = leaf(3, 4)
    y = (x @ w).relu().sum()
    entries = tape.entries
    assert [e.op for e in entries] == ["matmul", "relu", "sum_all"]
    assert entries[0].input_shapes == [(2, 3), (3, 4)] and entries[0].output_shape == (2, 4)
    assert entries[2].output_shape == ()
    assert entries[0].inputs[0].same(x)
    assert "matmul" in tg.dump() and "x" in tape.dump()
    assert "matmul" in repr(entries[0])
    y.backward()
    assert len(tape) == 0


def test_vjp_jvp_hvp_against_closed_forms():
    A = rng.standard_normal((3, 4))
    x = tg.tensor(rng.standard_normal(4))
    f = lambda x: tg.tensor(A) @ x
    v = tg.tensor(rng.standard_normal(3))
    out, (g,) = tg.vjp(f, [x], v)
    np.testing.assert_allclose(out.numpy(), A @ x.numpy())
    np.testing.assert_allclose(g.numpy(), A.T @ v.numpy())
    t = tg.tensor(rng.standard_normal(4))
    out, jt = tg.jvp(f, [x], [t])
    np.testing.assert_allclose(jt.numpy(), A @ t.numpy())
    # f(x) = sum(x^3): H = diag(6x)
    value, (g,), (hv,) = tg.hvp(lambda x: (x ** 3.0).sum(), [x], [t])
    np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2)
    np.testing.assert_allclose(hv.numpy(), 6 * x.numpy() * t.numpy())


def test_jacobian_and_hessian():
    A = rng.standard_normal((3, 4))
    x = tg.tensor(rng.standard_normal(4))
    J = tg.jacobian(lambda x: tg.tensor(A) @ x, x)
    np.testing.assert_allclose(J.numpy(), A)
    H = tg.hessian(lambda x: (x ** 3.0).sum(), x)
    np.testing.assert_allclose(H.numpy(), np.diag(6 * x.numpy()))
    y = tg.tensor(rng.standard_normal(4))
    (Jx, Jy) = tg.jacobian(lambda x, y: x * y, [x, y])
    np.testing.assert_allclose(Jx.numpy(), np.diag(y.numpy()))
    blocks = tg.hessian(lambda x, y: (x * y).sum(), [x, y])
    np.testing.assert_allclose(blocks[0][1].numpy(), np.eye(4))


def test_a_python_exception_inside_a_callback_propagates():
    def f(x):
        raise KeyError("from the callback")
    with pytest.raises(KeyError, match="from the callback"):
        tg.jacobian(f, tg.tensor(np.ones(2)))
    with pytest.raises(TypeError, match="must return a tapegrad.Tensor"):
        tg.gradcheck(lambda x: 3, [leaf(2)])


def test_the_tape_recorder_gives_rows_saved_bytes_and_dot():
    w = tg.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    w.name = "w"
    x = tg.tensor(rng.standard_normal((2, 3)))
    with tg.TapeRecorder() as rec:
        loss = (x @ w).tanh().sum()
        loss.backward()
    rows = rec.rows
    assert [r.op for r in rows] == ["matmul", "tanh", "sum_all"]
    assert rows[0].inputs == ["input", "w"] and rows[1].inputs == ["#0"]
    assert rows[1].output_shape == [2, 4]
    assert rows[1].saved_bytes > 0 and rec.saved_bytes >= rows[1].saved_bytes
    assert all(r.grad_norm >= 0 for r in rows)
    assert rec.critical_path == 3
    assert "digraph" in rec.dot() and "matmul" in rec.dot()
    assert '"entries"' in rec.json()


def test_anomaly_mode_names_the_op():
    x = tg.tensor(np.array([-1.0, 1.0]), requires_grad=True)
    with pytest.raises(tg.NonFiniteError, match="log") as e:
        with tg.detect_anomaly():
            x.log()
    assert isinstance(e.value, ArithmeticError)
    x.log()  # off again after the block: no error, just NaN
