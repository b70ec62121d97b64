# Every op the module exposes, differentiated through the Python surface (float64) and compared with
# central differences of numpy perturbations (numeric.py): one row per op, named with its shapes.
import numpy as np
import pytest

import tapegrad as tg
from numeric import Inputs, check_grad, const

ops = tg.ops
inputs = Inputs(7)
normal, positive, no_kink = inputs.normal, inputs.positive, inputs.no_kink
distinct = inputs.distinct


def ids(values, shape):
    return np.array(values, dtype=np.int32).reshape(shape)


# (name, fn, input arrays); a row's fn takes the inputs as tensors, in order.
ROWS = [
    ("exp [3,4]", lambda a: ops.exp(a), [normal(3, 4)]),
    ("log [3,4]", lambda a: a.log(), [positive(3, 4)]),
    ("sqrt [5]", lambda a: ops.sqrt(a), [positive(5)]),
    ("abs [5]", lambda a: ops.abs(a), [no_kink(5)]),
    ("tanh [2,3]", lambda a: a.tanh(), [normal(2, 3)]),
    ("sigmoid [2,3]", lambda a: ops.sigmoid(a), [normal(2, 3)]),
    ("relu [7]", lambda a: a.relu(), [no_kink(7)]),
    ("softplus [4]", lambda a: ops.softplus(a), [normal(4)]),
    ("gelu_tanh [6]", lambda a: a.gelu(), [normal(6)]),
    ("gelu_exact [6]", lambda a: ops.gelu(a, approximate="none"), [normal(6)]),
    ("neg [3]", lambda a: -a, [normal(3)]),
    ("add broadcast [2,3]+[3]", lambda a, b: a + b, [normal(2, 3), normal(3)]),
    ("sub broadcast [2,1]-[1,3]", lambda a, b: a - b, [normal(2, 1), normal(1, 3)]),
    ("mul [2,3]*[2,3]", lambda a, b: a * b, [normal(2, 3), normal(2, 3)]),
    ("div [2,3]/[3]", lambda a, b: a / b, [normal(2, 3), positive(3)]),
    ("pow tensor [4]**[4]", lambda a, b: a ** b, [positive(4), normal(4)]),
    ("ops.add/sub/mul/div", lambda a, b: ops.div(ops.mul(ops.sub(ops.add(a, b), 0.5), a), 2.0), [normal(3), normal(3)]),
    ("scalar ops 2-a, a*3, 1/a, a**2", lambda a: (2.0 - a) * 3.0 + 1.0 / a + a ** 2, [positive(4)]),
    ("rpow 2**a", lambda a: 2.0 ** a, [normal(4)]),
    ("masked_fill [2,3]", lambda a: a.masked_fill(tg.tensor(np.array([[1.0, 0, 0], [0, 1, 0]])), -1.5), [normal(2, 3)]),
    ("where [2,3]", lambda c, a, b: ops.where(c, a, b), [const([[1.0, 0, 1], [0, 0, 1]]), normal(2, 3), normal(3)]),
    ("matmul [2,3]@[3,4]", lambda a, b: a @ b, [normal(2, 3), normal(3, 4)]),
    ("matmul batched [2,2,3]@[3,2]", lambda a, b: ops.matmul(a, b), [normal(2, 2, 3), normal(3, 2)]),
    ("matmul transposed view", lambda a, b: a.T @ b, [normal(3, 2), normal(3, 4)]),
    ("linear [2,3]x[4,3]+[4]", lambda x, w, b: ops.linear(x, w, b), [normal(2, 3), normal(4, 3), normal(4)]),
    ("linear no bias", lambda x, w: ops.linear(x, w), [normal(2, 3), normal(4, 3)]),
    ("reshape [2,6]->[3,4]", lambda a: a.reshape(3, 4) * tg.tensor(np.arange(12.0).reshape(3, 4)), [normal(2, 6)]),
    ("transpose [2,3,4] 0,2, contiguous", lambda a: ops.transpose(a, 0, 2).contiguous(), [normal(2, 3, 4)]),
    ("permute [2,3,4] (2,0,1)", lambda a: a.permute(2, 0, 1), [normal(2, 3, 4)]),
    ("narrow [5,3] axis 0", lambda a: ops.narrow(a, 0, 1, 3), [normal(5, 3)]),
    ("concat axis 1", lambda a, b: ops.concat([a, b], 1), [normal(2, 3), normal(2, 2)]),
    ("stack axis 0", lambda a, b: ops.stack([a, b], 0), [normal(2, 3), normal(2, 3)]),
    ("sum all", lambda a: a.sum(), [normal(3, 4)]),
    ("sum axis 1 keepdim", lambda a: ops.sum(a, 1, keepdim=True), [normal(3, 4)]),
    ("mean all", lambda a: ops.mean(a), [normal(3, 4)]),
    ("mean axis -1", lambda a: a.mean(-1), [normal(3, 4)]),
    ("max all", lambda a: a.max(), [distinct(3, 4)]),
    ("max axis 0", lambda a: ops.max(a, 0), [distinct(3, 4)]),
    ("softmax [2,5]", lambda a: a.softmax(), [normal(2, 5)]),
    ("softmax scale, mask, causal [2,4,4]", lambda a: ops.softmax(a, scale=0.5, causal=True), [normal(2, 4, 4)]),
    ("log_softmax [3,4]", lambda a: ops.log_softmax(a), [normal(3, 4)]),
    ("cross_entropy [4,5]", lambda a, t: ops.cross_entropy(a, t), [normal(4, 5), ids([0, 4, 2, 1], [4])]),
    ("cross_entropy ignore, smoothing [2,3,5]",
     lambda a, t: ops.cross_entropy(a, t, ignore_index=0, label_smoothing=0.1), [normal(2, 3, 5), ids([1, 0, 3, 4, 2, 0], [2, 3])]),
    ("layer_norm [3,5]", lambda x, w, b: ops.layer_norm(x, w, b), [normal(3, 5), normal(5), normal(5)]),
    ("layer_norm no affine", lambda x: ops.layer_norm(x), [normal(2, 6)]),
    ("embedding [5,3] ids [2,2]", lambda t, i: ops.embedding(t, i), [normal(5, 3), ids([0, 4, 4, 2], [2, 2])]),
    ("dropout p=0.3 seed 5", lambda a: ops.dropout(a, 0.3, True, seed=5), [normal(4, 5)]),
    ("gru_cell B=2 H=3", lambda xp, hp, h: ops.gru_cell(xp, hp, h), [normal(2, 9), normal(2, 9), normal(2, 3)]),
    ("additive_score [2,3,4]", lambda k, q, v: ops.additive_score(k, q, v), [normal(2, 3, 4), normal(2, 4), normal(4)]),
    ("feed_forward_relu [2,3] hidden 5", lambda x, w1, b1, w2, b2: ops.feed_forward_relu(x, w1, b1, w2, b2),
     [normal(2, 3), normal(5, 3), normal(5), normal(4, 5), normal(4)]),
    ("feed_forward_relu no biases, dropout 0.3", lambda x, w1, w2: ops.feed_forward_relu(x, w1, None, w2, dropout=0.3, dropout_seed=4),
     [normal(3, 4), normal(6, 4), normal(2, 6)]),
    ("attention [1,3,2,4] causal", lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, scale=0.5, causal=True),
     [normal(1, 3, 2, 4), normal(1, 3, 2, 4), normal(1, 3, 2, 4)]),
    ("attention with mask", lambda q, k, v, m: ops.scaled_dot_product_attention(q, k, v, mask=m),
     [normal(1, 2, 1, 3), normal(1, 4, 1, 3), normal(1, 4, 1, 3), const([[[[0.0, 0.0, -1e9, 0.0]]]])]),
    ("attention_stacked qkv [2,3,12] heads 2 causal",
     lambda x: ops.scaled_dot_product_attention_stacked(x, None, 2, scale=0.5, causal=True), [normal(2, 3, 12)]),
    ("attention_stacked q [1,2,4] kv [1,3,8] heads 2",
     lambda q, kv: ops.scaled_dot_product_attention_stacked(q, kv, 2, scale=0.5), [normal(1, 2, 4), normal(1, 3, 8)]),
    ("indexing [3,4][1:, 2]", lambda a: a[1:, 2], [normal(3, 4)]),
    ("indexing [2,3,4][..., None, 1:3]", lambda a: a[..., None, 1:3], [normal(2, 3, 4)]),
    ("indexing int [3,4][-1]", lambda a: a[-1] * 2.0, [normal(3, 4)]),
]


@pytest.mark.parametrize("name,fn,arrays", ROWS, ids=[r[0] for r in ROWS])
def test_gradient_matches_finite_differences(name, fn, arrays):
    check_grad(fn, [a.copy() for a in arrays])


def test_every_op_in_tapegrad_ops_has_a_gradient_row():
    # ops named in a row's label (or reached through an operator); non-differentiable helpers excluded.
    labels = " ".join(r[0] for r in ROWS)
    covered_by_operators = {"add", "sub", "mul", "div", "pow", "neg"}
    exposed = {n for n in dir(ops) if not n.startswith("_")}
    missing = [n for n in exposed if n not in covered_by_operators and n not in labels
               and n.replace("scaled_dot_product_", "") not in labels]
    assert missing == []


def test_the_c_plus_plus_gradcheck_runs_a_python_function():
    x = tg.tensor(normal(3, 4), requires_grad=True)
    w = tg.tensor(normal(4, 2), requires_grad=True)
    r = tg.gradcheck(lambda x, w: (x @ w).tanh(), [x, w])
    assert r and r.ok, r.message
    assert set(r.ops_seen) >= {"matmul", "tanh"}
    r2 = tg.gradgradcheck(lambda x, w: (x @ w).tanh(), [x, w])
    assert r2.ok, r2.message


def test_gradcheck_fails_a_wrong_backward():
    class Bad(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, dy):
            return dy * 3.0  # wrong: d(2x)/dx = 2

    x = tg.tensor(normal(4), requires_grad=True)
    r = tg.gradcheck(lambda x: Bad.apply(x), [x])
    assert not r
    assert "Bad" in r.message or r.worst_input == 0


def test_the_finite_difference_check_catches_a_wrong_gradient():
    class Wrong(tg.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            return dy * x  # wrong: 2 x dy

    with pytest.raises(AssertionError):
        check_grad(lambda x: Wrong.apply(x), [normal(3)])
