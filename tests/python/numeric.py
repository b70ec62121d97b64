# Finite differences through the Python surface, for the gradient tests (tests/python/test_*.py import it;
# pytest puts this folder on sys.path). tools/run test runs the suite with /usr/bin/python3 -m pytest:
#   PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python
import numpy as np

import tapegrad as tg


class Const(np.ndarray):
    """An input held constant (a mask, a condition): not perturbed, not differentiated."""


def const(a):
    return np.asarray(a, dtype=np.float64).view(Const)


class Inputs:
    """Random inputs of the kinds the op rows need, all drawn from one seeded generator."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def normal(self, *shape):
        return self.rng.standard_normal(shape)

    def positive(self, *shape):
        return self.rng.uniform(0.5, 2.0, shape)

    def no_kink(self, *shape):  # away from 0, where relu and abs have a kink
        return self.rng.uniform(0.2, 1.0, shape) * self.rng.choice([-1.0, 1.0], shape)

    def distinct(self, *shape):  # no ties for max
        n = int(np.prod(shape))
        return (self.rng.permutation(n) * 0.1).reshape(shape).astype(np.float64)


def differentiated(a):
    return a.dtype == np.float64 and not isinstance(a, Const)


def numeric_grads(fn, arrays, weights, eps=1e-6):
    """Central differences of L = sum(fn(*tensors) * weights) with respect to each float64 array,
    perturbing the arrays in place: the tensors share their memory, so fn sees every change."""
    tensors = [tg.tensor(a) for a in arrays]
    out = []
    for a in arrays:
        if not differentiated(a):
            out.append(None)
            continue
        g = np.zeros_like(a)
        flat, gflat = a.reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + eps
            with tg.no_grad():
                up = float((fn(*tensors).numpy() * weights).sum())
            flat[i] = old - eps
            with tg.no_grad():
                down = float((fn(*tensors).numpy() * weights).sum())
            flat[i] = old
            gflat[i] = (up - down) / (2 * eps)
        out.append(g)
    return out


def analytic_grads(fn, arrays, weights):
    """d sum(fn * weights) / d each float64 array, by backward on fresh leaves (copies of the arrays)."""
    leaves = [tg.tensor(np.array(a), requires_grad=differentiated(a)) for a in arrays]
    y = fn(*leaves)
    tg.backward(y, tg.tensor(weights.copy()))
    return [l.grad.numpy().copy() if l.requires_grad and l.grad is not None else None for l in leaves], y


def check_grad(fn, arrays, atol=1e-6, rtol=1e-4, seed=0):
    """Analytic against numerical gradients through the Python surface; returns fn's output shape."""
    rng = np.random.default_rng(seed)
    with tg.no_grad():
        shape = fn(*[tg.tensor(a) for a in arrays]).shape
    weights = rng.standard_normal(shape)
    analytic, _ = analytic_grads(fn, arrays, weights)
    numeric = numeric_grads(fn, arrays, weights)
    checked = 0
    for i, (an, nu) in enumerate(zip(analytic, numeric)):
        if nu is None:
            continue
        assert an is not None, f"input {i}: no gradient reached it"
        np.testing.assert_allclose(an, nu, atol=atol, rtol=rtol, err_msg=f"input {i}")
        checked += 1
    assert checked > 0
    return shape
