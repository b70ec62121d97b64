# Activation checkpointing of a Python function: one tape entry, the same gradients as the plain
# call (bitwise), captured parameters included, the same dropout masks in the recomputation.
import numpy as np
import pytest

import tapegrad as tg
from numeric import check_grad

RNG = np.random.default_rng(3)
X = RNG.standard_normal((6, 8))
W1 = RNG.standard_normal((16, 8))
W2 = RNG.standard_normal((8, 16))


def block(x, w1, w2):
    return x + tg.ops.linear(tg.ops.gelu(tg.ops.linear(x, w1)), w2)


W3 = RNG.standard_normal((16, 8))
W4 = RNG.standard_normal((8, 16))


def grads_of(run, weights=(W1, W2)):
    x = tg.tensor(X.copy(), requires_grad=True)
    ws = [tg.tensor(w.copy(), requires_grad=True) for w in weights]
    loss = (run(x, *ws) ** 2.0).sum()
    loss.backward()
    return loss.item(), [t.grad.numpy().copy() for t in [x] + ws]


def test_gradients_equal_the_plain_call_bitwise():
    weights = (W1, W2, W3, W4)
    plain_loss, plain = grads_of(lambda x, a, b, c, d: block(block(x, a, b), c, d), weights)
    ckpt_loss, ckpt = grads_of(
        lambda x, a, b, c, d: tg.checkpoint(block, tg.checkpoint(block, x, a, b), c, d), weights)
    assert ckpt_loss == plain_loss
    for a, b in zip(ckpt, plain):
        np.testing.assert_array_equal(a, b)


def test_a_weight_shared_by_two_checkpoints_gets_the_same_gradient_up_to_rounding():
    # Plain, linear sums a weight's small uses in one GEMM at the end of the walk; each checkpoint's
    # recomputation is a walk of its own, so its uses are summed apart: the same terms, another order.
    plain_loss, plain = grads_of(lambda x, w1, w2: block(block(x, w1, w2), w1, w2))
    ckpt_loss, ckpt = grads_of(
        lambda x, w1, w2: tg.checkpoint(block, tg.checkpoint(block, x, w1, w2), w1, w2))
    assert ckpt_loss == plain_loss
    for a, b in zip(ckpt, plain):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())


def test_captured_parameters_get_gradients_and_the_tape_keeps_one_entry():
    w1 = tg.tensor(W1.copy(), requires_grad=True)
    w2 = tg.tensor(W2.copy(), requires_grad=True)
    x = tg.tensor(X.copy())  # no input requires grad: the parameters are found anyway
    tg.current_tape().clear()
    y = tg.checkpoint(lambda a: block(a, w1, w2), x)
    assert [e.op for e in tg.current_tape().entries] == ["checkpoint"]
    np.testing.assert_array_equal(y.numpy(), block(x, w1, w2).numpy())
    (y ** 2.0).sum().backward()
    _, plain = grads_of(block)
    np.testing.assert_array_equal(w1.grad.numpy(), plain[1])
    np.testing.assert_array_equal(w2.grad.numpy(), plain[2])


def test_dropout_draws_the_same_mask_when_recomputed():
    def noisy(a):
        return tg.ops.dropout(tg.ops.tanh(a), 0.5)

    x = tg.tensor(X.copy(), requires_grad=True)
    tg.manual_seed(7)
    y = tg.checkpoint(noisy, x)
    y.sum().backward()
    tg.manual_seed(7)
    xp = tg.tensor(X.copy(), requires_grad=True)
    yp = noisy(xp)
    yp.sum().backward()
    np.testing.assert_array_equal(y.numpy(), yp.numpy())
    np.testing.assert_array_equal(x.grad.numpy(), xp.grad.numpy())


def test_it_checks_against_central_differences_and_keeps_less():
    check_grad(lambda x, w1, w2: tg.checkpoint(block, x, w1, w2), [X.copy(), W1.copy(), W2.copy()])
    w1 = tg.tensor(W1.copy(), requires_grad=True)
    w2 = tg.tensor(W2.copy(), requires_grad=True)
    kept = {}
    for name, run in [("plain", block), ("checkpoint", lambda *a: tg.checkpoint(block, *a))]:
        x = tg.tensor(X.copy(), requires_grad=True)
        with tg.TapeRecorder() as rec:
            run(x, w1, w2)
        kept[name] = rec.saved_bytes
        tg.current_tape().clear()
    assert kept["checkpoint"] < kept["plain"]


def test_errors_from_the_function_reach_the_caller():
    x = tg.tensor(X.copy(), requires_grad=True)
    with pytest.raises(TypeError, match="must return a tapegrad.Tensor"):
        tg.checkpoint(lambda a: 1.0, x)
    with pytest.raises(ZeroDivisionError):
        tg.checkpoint(lambda a: 1 / 0, x)
