# tapegrad against PyTorch 1.13 (Debian's python3-torch), in float64: for every op the module exposes and
# for two small models, the forward values and the gradients of sum(output * weights) with respect to every
# differentiable input agree to 1e-10 (relative) / 1e-12 (absolute). Optional: the file is not named
# test_*.py, so the default run of tests/python never collects it and never needs torch; named on the
# command line it runs, and it skips cleanly where torch does not import:
#   PYTHONPATH=build/python /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/torch_agreement.py
import math

import numpy as np
import pytest

import tapegrad as tg
from numeric import Inputs

torch = pytest.importorskip("torch")
F = torch.nn.functional
ops = tg.ops
RTOL, ATOL = 1e-10, 1e-12
inputs = Inputs(11)
rng = inputs.rng
normal, positive, no_kink = inputs.normal, inputs.positive, inputs.no_kink


def distinct(*shape):  # no ties for max, centred near 0
    return inputs.distinct(*shape) - 1.0


class Fixed(np.ndarray):
    """An input that is not differentiated (ids, masks, conditions): passed as is to both sides."""


def fixed(a):
    return np.asarray(a).view(Fixed)


def ids(values, shape):
    return fixed(np.array(values, dtype=np.int32).reshape(shape))


def causal_mask(tq, tk):  # additive: -inf where key j > query i
    return torch.triu(torch.full((tq, tk), -math.inf, dtype=torch.float64), diagonal=1)


def torch_attention(q, k, v, scale, mask=None, causal=False):
    # tapegrad's layout q [B, Tq, H, d]: per (b, h), softmax(scale q k^T + mask) v
    qh, kh, vh = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    s = scale * qh @ kh.transpose(-2, -1)
    if mask is not None:
        s = s + mask
    if causal:
        s = s + causal_mask(s.shape[-2], s.shape[-1])
    return (F.softmax(s, dim=-1) @ vh).permute(0, 2, 1, 3)


def torch_gru_cell(xp, hp, h):
    xr, xz, xn = xp.chunk(3, dim=-1)
    hr, hz, hn = hp.chunk(3, dim=-1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return (1 - z) * n + z * h


def torch_cross_entropy(logits, targets, ignore_index=-100, label_smoothing=0.0):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(),
                           ignore_index=ignore_index, label_smoothing=label_smoothing)


# (name, tapegrad fn, torch fn, inputs): both fns take the inputs as their framework's tensors, in order.
ROWS = [
    ("exp", lambda a: ops.exp(a), torch.exp, [normal(3, 4)]),
    ("log", lambda a: a.log(), torch.log, [positive(3, 4)]),
    ("sqrt", lambda a: ops.sqrt(a), torch.sqrt, [positive(5)]),
    ("abs", lambda a: ops.abs(a), torch.abs, [no_kink(5)]),
    ("tanh", lambda a: a.tanh(), torch.tanh, [normal(2, 3)]),
    ("sigmoid", lambda a: ops.sigmoid(a), torch.sigmoid, [normal(2, 3)]),
    ("relu", lambda a: a.relu(), torch.relu, [no_kink(7)]),
    ("softplus", lambda a: ops.softplus(a), F.softplus, [normal(4) * 3]),
    ("gelu tanh", lambda a: a.gelu(), lambda a: F.gelu(a, approximate="tanh"), [normal(6)]),
    ("gelu exact", lambda a: ops.gelu(a, approximate="none"), F.gelu, [normal(6)]),
    ("neg", lambda a: -a, torch.neg, [normal(3)]),
    ("add broadcast", lambda a, b: a + b, torch.add, [normal(2, 3), normal(3)]),
    ("sub broadcast", lambda a, b: ops.sub(a, b), torch.sub, [normal(2, 1), normal(1, 3)]),
    ("mul broadcast", lambda a, b: a * b, torch.mul, [normal(2, 3, 4), normal(3, 1)]),
    ("div broadcast", lambda a, b: ops.div(a, b), torch.div, [normal(2, 3), positive(3)]),
    ("pow tensor", lambda a, b: a ** b, torch.pow, [positive(4), normal(4)]),
    ("scalar operators", lambda a: (2.0 - a) * 3.0 + 1.0 / a + a ** 2.0 - a / 4.0 + 2.0 ** a,
     lambda a: (2.0 - a) * 3.0 + 1.0 / a + a ** 2.0 - a / 4.0 + 2.0 ** a, [positive(4)]),
    ("masked_fill", lambda a, m: a.masked_fill(m, -1.5), lambda a, m: a.masked_fill(m != 0, -1.5),
     [normal(2, 3), fixed([[1.0, 0, 0], [0, 1, 0]])]),
    ("where", lambda c, a, b: ops.where(c, a, b), lambda c, a, b: torch.where(c != 0, a, b),
     [fixed([[1.0, 0, 1], [0, 0, 1]]), normal(2, 3), normal(3)]),
    ("matmul", lambda a, b: a @ b, torch.matmul, [normal(2, 3), normal(3, 4)]),
    ("matmul batched broadcast", lambda a, b: ops.matmul(a, b), torch.matmul, [normal(2, 2, 3), normal(3, 2)]),
    ("matmul transposed view", lambda a, b: a.T @ b, lambda a, b: a.T @ b, [normal(3, 2), normal(3, 4)]),
    ("linear", lambda x, w, b: ops.linear(x, w, b), F.linear, [normal(2, 5, 3), normal(4, 3), normal(4)]),
    ("reshape", lambda a: a.reshape(3, 4), lambda a: a.reshape(3, 4), [normal(2, 6)]),
    ("transpose contiguous", lambda a: ops.transpose(a, 0, 2).contiguous(),
     lambda a: a.transpose(0, 2).contiguous(), [normal(2, 3, 4)]),
    ("permute", lambda a: a.permute(2, 0, 1), lambda a: a.permute(2, 0, 1), [normal(2, 3, 4)]),
    ("narrow", lambda a: ops.narrow(a, 1, 1, 2), lambda a: a.narrow(1, 1, 2), [normal(5, 3)]),
    ("indexing", lambda a: a[1:, None, 2], lambda a: a[1:, None, 2], [normal(3, 4)]),
    ("concat", lambda a, b: ops.concat([a, b], 1), lambda a, b: torch.cat([a, b], 1), [normal(2, 3), normal(2, 2)]),
    ("stack", lambda a, b: ops.stack([a, b], 1), lambda a, b: torch.stack([a, b], 1), [normal(2, 3), normal(2, 3)]),
    ("sum all", lambda a: a.sum(), torch.sum, [normal(3, 4)]),
    ("sum axis keepdim", lambda a: ops.sum(a, 1, keepdim=True), lambda a: a.sum(1, keepdim=True), [normal(3, 4)]),
    ("mean all", lambda a: ops.mean(a), torch.mean, [normal(3, 4)]),
    ("mean axis", lambda a: a.mean(-1), lambda a: a.mean(-1), [normal(3, 4)]),
    ("max all", lambda a: a.max(), torch.max, [distinct(3, 4)]),
    ("max axis", lambda a: ops.max(a, 0), lambda a: a.max(0).values, [distinct(3, 4)]),
    ("softmax", lambda a: a.softmax(), lambda a: F.softmax(a, -1), [normal(2, 5)]),
    ("softmax scale, mask, causal", lambda a, m: ops.softmax(a, scale=0.5, mask=m, causal=True),
     lambda a, m: F.softmax(0.5 * a + m + causal_mask(4, 4), -1), [normal(2, 4, 4), fixed(normal(4, 4))]),
    ("log_softmax", lambda a: ops.log_softmax(a), lambda a: F.log_softmax(a, -1), [normal(3, 4)]),
    ("cross_entropy", lambda a, t: ops.cross_entropy(a, t), torch_cross_entropy, [normal(4, 5), ids([0, 4, 2, 1], [4])]),
    ("cross_entropy ignore_index, label_smoothing",
     lambda a, t: ops.cross_entropy(a, t, ignore_index=0, label_smoothing=0.1),
     lambda a, t: torch_cross_entropy(a, t, ignore_index=0, label_smoothing=0.1),
     [normal(2, 3, 5), ids([1, 0, 3, 4, 2, 0], [2, 3])]),
    ("layer_norm", lambda x, w, b: ops.layer_norm(x, w, b), lambda x, w, b: F.layer_norm(x, (5,), w, b, 1e-5),
     [normal(3, 5), normal(5), normal(5)]),
    ("layer_norm no affine, eps", lambda x: ops.layer_norm(x, eps=1e-3), lambda x: F.layer_norm(x, (6,), eps=1e-3),
     [normal(2, 6)]),
    ("embedding", lambda t, i: ops.embedding(t, i), lambda t, i: F.embedding(i.long(), t),
     [normal(5, 3), ids([0, 4, 4, 2], [2, 2])]),
    ("dropout off (eval)", lambda a: ops.dropout(a, 0.3, False), lambda a: F.dropout(a, 0.3, False), [normal(4, 5)]),
    ("gru_cell", lambda xp, hp, h: ops.gru_cell(xp, hp, h), torch_gru_cell, [normal(2, 9), normal(2, 9), normal(2, 3)]),
    ("additive_score", lambda k, q, v: ops.additive_score(k, q, v),
     lambda k, q, v: torch.tanh(k + q[:, None, :]) @ v, [normal(2, 3, 4), normal(2, 4), normal(4)]),
    ("feed_forward_relu", lambda x, w1, b1, w2, b2: ops.feed_forward_relu(x, w1, b1, w2, b2),
     lambda x, w1, b1, w2, b2: F.linear(F.relu(F.linear(x, w1, b1)), w2, b2),
     [normal(2, 3, 4), normal(6, 4), normal(6), normal(5, 6), normal(5)]),
    ("attention causal", lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, scale=0.5, causal=True),
     lambda q, k, v: torch_attention(q, k, v, 0.5, causal=True),
     [normal(2, 3, 2, 4), normal(2, 3, 2, 4), normal(2, 3, 2, 5)]),
    ("attention mask, Tq < Tk", lambda q, k, v, m: ops.scaled_dot_product_attention(q, k, v, scale=0.3, mask=m),
     lambda q, k, v, m: torch_attention(q, k, v, 0.3, mask=m),
     [normal(1, 2, 3, 4), normal(1, 5, 3, 4), normal(1, 5, 3, 4), fixed(np.array([0.0, 0.0, -1e9, 0.0, 0.0]))]),
]


def run(fn, inputs, weights, make, backward):
    """fn's output and the gradients of sum(output * weights) with respect to the differentiable inputs."""
    leaves = [make(a) for a in inputs]
    y = fn(*leaves)
    backward(y, weights)
    return y, leaves


def tapegrad_side(fn, inputs, weights):
    def make(a):
        return tg.tensor(np.array(a), requires_grad=not isinstance(a, Fixed) and a.dtype == np.float64)

    y, leaves = run(fn, inputs, weights, make, lambda y, w: tg.backward(y, tg.tensor(w)))
    return y.numpy().copy(), [l.grad.numpy().copy() if l.requires_grad else None for l in leaves]


def torch_side(fn, inputs, weights):
    def make(a):
        t = torch.tensor(np.array(a))
        return t.requires_grad_() if not isinstance(a, Fixed) and a.dtype == np.float64 else t

    y, leaves = run(fn, inputs, weights, make, lambda y, w: y.backward(torch.tensor(w)))
    return y.detach().numpy().copy(), [l.grad.numpy().copy() if l.requires_grad else None for l in leaves]


@pytest.mark.parametrize("name,tg_fn,torch_fn,inputs", ROWS, ids=[r[0] for r in ROWS])
def test_op_agrees_with_torch(name, tg_fn, torch_fn, inputs):
    with tg.no_grad():
        shape = tg_fn(*[tg.tensor(np.array(a)) for a in inputs]).shape
    weights = np.random.default_rng(3).standard_normal(shape)
    y_tg, g_tg = tapegrad_side(tg_fn, inputs, weights)
    y_pt, g_pt = torch_side(torch_fn, inputs, weights)
    assert y_tg.shape == y_pt.shape
    np.testing.assert_allclose(y_tg, y_pt, rtol=RTOL, atol=ATOL, err_msg=f"{name}: forward")
    for i, (a, b) in enumerate(zip(g_tg, g_pt)):
        assert (a is None) == (b is None), f"{name}: input {i} differentiated on one side only"
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"{name}: gradient of input {i}")


def test_every_exposed_op_has_a_row():
    labels = " ".join(r[0] for r in ROWS)
    exposed = {n for n in dir(ops) if not n.startswith("_")}
    covered_by_operators = {"add", "sub", "mul", "div", "pow", "neg"}
    missing = sorted(n for n in exposed if n not in covered_by_operators and n not in labels
                     and n.replace("scaled_dot_product_", "") not in labels)
    assert missing == []


# ---- small models: the same weights in both frameworks, loss and every parameter's gradient compared


def params_of(module):
    return dict(module.named_parameters())


def to_torch(params):
    return {n: torch.tensor(p.numpy().copy(), requires_grad=True) for n, p in params.items()}


def assert_grads_agree(tg_params, torch_params):
    for n, p in tg_params.items():
        assert p.grad is not None and torch_params[n].grad is not None, n
        np.testing.assert_allclose(p.grad.numpy(), torch_params[n].grad.numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=f"gradient of {n}")


def test_a_small_attention_classifier_agrees_with_torch():
    # embedding -> self-attention (4 projections) with a residual -> layer norm -> tanh MLP -> mean over
    # positions -> cross-entropy, written with the Python module's layers and ops
    vocab, dim, heads, classes, batch, length = 11, 8, 2, 3, 2, 5
    emb = tg.nn.Embedding(vocab, dim, seed=1)
    attn = tg.nn.MultiHeadAttention(dim, heads, seed=2)
    norm = tg.nn.LayerNorm(dim)
    hidden = tg.nn.Linear(dim, 16, seed=3)
    out = tg.nn.Linear(16, classes, seed=4)
    modules = {"emb": emb, "attn": attn, "norm": norm, "hidden": hidden, "out": out}
    for m in modules.values():
        m.to("float64")
    token_ids = np.array(rng.integers(0, vocab, (batch, length)), dtype=np.int32)
    labels = np.array([2, 0], dtype=np.int32)

    x = emb(tg.tensor(token_ids))
    h = norm(x + attn(x, causal=True))
    loss = ops.cross_entropy(out(hidden(h).tanh()).mean(1), tg.tensor(labels))
    loss.backward()

    tp = {f"{k}.{n}": p for k, m in modules.items() for n, p in params_of(m).items()}
    pt = to_torch(tp)

    def lin(name, v):
        return F.linear(v, pt[f"{name}.weight"], pt.get(f"{name}.bias"))

    xt = F.embedding(torch.tensor(token_ids).long(), pt["emb.weight"])
    q, k, v = (lin(f"attn.{p}_proj", xt).reshape(batch, length, heads, dim // heads) for p in "qkv")
    a = torch_attention(q, k, v, 1 / math.sqrt(dim // heads), causal=True).reshape(batch, length, dim)
    ht = F.layer_norm(xt + lin("attn.out_proj", a), (dim,), pt["norm.weight"], pt["norm.bias"], 1e-5)
    loss_t = F.cross_entropy(lin("out", torch.tanh(lin("hidden", ht))).mean(1), torch.tensor(labels).long())
    loss_t.backward()

    assert loss.item() == pytest.approx(loss_t.item(), rel=RTOL)
    assert_grads_agree(tp, pt)


def test_the_gpt_model_agrees_with_torch():
    # nn.GPT (pre-LN blocks, learned positions, exact GELU MLP 4 x wide, no biases, the token table tied to
    # the output) against the same architecture written in torch, reading the tapegrad model's weights
    vocab, dim, layers, heads, block, batch, length = 13, 16, 2, 2, 8, 2, 6
    model = tg.nn.GPT(vocab, d_model=dim, layers=layers, heads=heads, block_size=block, dropout=0.0, seed=5)
    model.to("float64")
    token_ids = np.array(rng.integers(0, vocab, (batch, length + 1)), dtype=np.int32)
    inputs, targets = np.ascontiguousarray(token_ids[:, :-1]), np.ascontiguousarray(token_ids[:, 1:])
    loss = ops.cross_entropy(model(tg.tensor(inputs)), tg.tensor(targets))
    loss.backward()

    tp = params_of(model)
    pt = to_torch(tp)

    def lin(name, v):
        return F.linear(v, pt[f"{name}.weight"])

    def norm(name, v):
        return F.layer_norm(v, (dim,), pt[f"{name}.weight"], None, 1e-5)

    pos_table = next(n for n in pt if n.startswith("pos_embed."))
    x = F.embedding(torch.tensor(inputs).long(), pt["tok_embed.weight"]) + pt[pos_table][:length]
    for l in range(layers):
        p = f"layers.{l}"
        h = norm(f"{p}.norm1", x)
        q, k, v = (lin(f"{p}.self_attn.{n}_proj", h).reshape(batch, length, heads, dim // heads) for n in "qkv")
        a = torch_attention(q, k, v, 1 / math.sqrt(dim // heads), causal=True).reshape(batch, length, dim)
        x = x + lin(f"{p}.self_attn.out_proj", a)
        x = x + lin(f"{p}.ff.linear2", F.gelu(lin(f"{p}.ff.linear1", norm(f"{p}.norm2", x))))
    logits = norm("norm", x) @ pt["tok_embed.weight"].T
    loss_t = torch_cross_entropy(logits, torch.tensor(targets))
    loss_t.backward()

    assert loss.item() == pytest.approx(loss_t.item(), rel=RTOL)
    assert_grads_agree(tp, pt)
