# The recurrent and Transformer layers, the seq2seq models, Python subclasses of nn.Module, the
# learning-rate schedules, train_step and loading checkpoints of `tapegrad train`, from Python.
import math
import os
import shutil
import subprocess

import numpy as np
import pytest

import tapegrad as tg
from numeric import check_grad

nn, optim, data, train = tg.nn, tg.optim, tg.data, tg.train


def randn(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def param_grads_match(model, loss_fn, per_param=3, eps=1e-6, rtol=1e-4, atol=1e-7):
    """backward's gradient of a float64 model's loss against central differences at a few entries of
    every parameter, perturbed in place through the parameter's numpy view (which shares its memory)."""
    model.zero_grad()
    loss_fn().backward()
    rng = np.random.default_rng(0)
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name}: no gradient reached it"
        analytic = p.grad.numpy().reshape(-1).copy()
        flat = p.numpy().reshape(-1)
        for i in rng.choice(flat.size, size=min(per_param, flat.size), replace=False):
            old = flat[i]
            flat[i] = old + eps
            with tg.no_grad():
                up = loss_fn().item()
            flat[i] = old - eps
            with tg.no_grad():
                down = loss_fn().item()
            flat[i] = old
            np.testing.assert_allclose(analytic[i], (up - down) / (2 * eps), rtol=rtol, atol=atol, err_msg=name)


# ---- recurrent layers --------------------------------------------------------------------------------

def test_gru_cell_follows_its_equations():
    cell = nn.RNNCell(3, 4, cell="gru", seed=1)
    assert [n for n, _ in cell.named_parameters()] == ["w_ih", "b_ih", "w_hh", "b_hh"]
    assert cell.w_ih.shape == (12, 3) and cell.hidden_size == 4 and cell.cell == "gru"
    x, h = randn(2, 3, seed=1), randn(2, 4, seed=2)
    out = cell(tg.tensor(x), nn.RnnState(tg.tensor(h)))
    assert out.c is None
    xp = x @ cell.w_ih.numpy().T + cell.b_ih.numpy()
    hp = h @ cell.w_hh.numpy().T + cell.b_hh.numpy()
    r = sigmoid(xp[:, :4] + hp[:, :4])
    z = sigmoid(xp[:, 4:8] + hp[:, 4:8])
    n = np.tanh(xp[:, 8:] + r * hp[:, 8:])
    np.testing.assert_allclose(out.h.numpy(), (1 - z) * n + z * h, rtol=1e-5, atol=1e-6)


def test_rnn_stacks_shapes_states_and_padding():
    gru = nn.GRU(3, 5, layers=2, seed=0)
    assert isinstance(gru, nn.RNN) and gru.cell == "gru" and len(gru.cells) == 2
    x = randn(2, 4, 3)
    out, states = gru(tg.tensor(x))
    assert out.shape == (2, 4, 5) and len(states) == 2 and states[1].h.shape == (2, 5)
    np.testing.assert_allclose(states[1].h.numpy(), out.numpy()[:, -1], rtol=1e-6)
    # a padded step carries the state over: sequence 1 of length 2 ends where 2 steps alone end
    out_p, states_p = gru(tg.tensor(x), lengths=[4, 2])
    _, alone = gru(tg.tensor(x[1:2, :2].copy()))
    np.testing.assert_allclose(states_p[1].h.numpy()[1], alone[1].h.numpy()[0], rtol=1e-5, atol=1e-6)
    assert np.all(out_p.numpy()[1, 2:] == 0)
    # initial states are read; stepping one position at a time gives the unrolled outputs
    states = gru.initial_states(2)
    for t in range(4):
        h, states = gru.step(tg.tensor(x[:, t].copy()), states)
        np.testing.assert_allclose(h.numpy(), out.numpy()[:, t], rtol=1e-5, atol=1e-6)
    lstm = nn.LSTM(3, 5, seed=0)
    _, (s,) = lstm(tg.tensor(x))
    assert s.c.shape == (2, 5)
    assert nn.RNN(3, 5, seed=0).cell == "elman"
    with pytest.raises(tg.ShapeError):
        gru(tg.tensor(randn(2, 3)))
    with pytest.raises(tg.Error, match="gru"):
        nn.RNN(3, 5, cell="transistor")


@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
def test_rnn_gradients_match_finite_differences(cell):
    rnn = nn.RNN(2, 3, layers=2, cell=cell, seed=3)
    rnn.to("float64")
    check_grad(lambda x: rnn(x, lengths=[3, 2])[0], [randn(2, 3, 2, dtype=np.float64)])
    x = tg.tensor(randn(2, 3, 2, seed=4, dtype=np.float64))
    w = tg.tensor(randn(2, 3, 3, seed=5, dtype=np.float64))
    param_grads_match(rnn, lambda: (rnn(x)[0] * w).sum())


# ---- Transformer pieces ------------------------------------------------------------------------------

def test_feed_forward_positions_and_dropout():
    ff = nn.FeedForward(4, 8, seed=0)
    x = randn(2, 3, 4)
    want = np.maximum(x @ ff.linear1.weight.numpy().T + ff.linear1.bias.numpy(), 0)
    want = want @ ff.linear2.weight.numpy().T + ff.linear2.bias.numpy()
    np.testing.assert_allclose(ff(tg.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)

    pe = nn.PositionalEncoding("sinusoidal", 16, 4)
    t = np.arange(3)[:, None]
    table = np.zeros((3, 4))
    table[:, 0::2] = np.sin(t / 10000 ** (np.arange(0, 4, 2) / 4))
    table[:, 1::2] = np.cos(t / 10000 ** (np.arange(0, 4, 2) / 4))
    np.testing.assert_allclose(pe(tg.tensor(np.zeros((1, 3, 4), np.float32)), offset=0).numpy()[0], table,
                               atol=1e-6)
    assert pe.parameter_count() == 0 and nn.PositionalEncoding("learned", 16, 4, seed=0).parameter_count() == 64
    with pytest.raises(tg.ShapeError):
        pe(tg.tensor(np.zeros((1, 3, 4), np.float32)), offset=14)

    drop = nn.Dropout(0.5)
    ones = tg.tensor(np.ones((100,), np.float32))
    a, b = drop(ones, generator=tg.Generator(7)), drop(ones, generator=tg.Generator(7))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert set(np.unique(a.numpy())) == {0.0, 2.0}
    drop.eval()
    np.testing.assert_array_equal(drop(ones).numpy(), ones.numpy())


def test_encoder_and_decoder_layers():
    enc = nn.EncoderLayer(dim=8, heads=2, ff_dim=16, dropout=0.0, seed=0)
    assert {n.split(".")[0] for n, _ in enc.named_parameters()} == {"self_attn", "ff", "norm1", "norm2"}
    x = randn(2, 5, 8)
    y = enc(tg.tensor(x), causal=True)
    assert y.shape == (2, 5, 8)
    x2 = x.copy()
    x2[:, 3:] += 1.0  # causal: positions before 3 do not see the change
    np.testing.assert_allclose(enc(tg.tensor(x2), causal=True).numpy()[:, :3], y.numpy()[:, :3], rtol=1e-5,
                               atol=1e-6)
    ids = tg.tensor(np.array([[5, 6, 0], [5, 0, 0]], np.int32))
    mask = nn.key_padding_mask(ids)
    assert mask.shape == (2, 1, 1, 3)
    np.testing.assert_array_equal(mask.numpy()[:, 0, 0], [[0, 0, -1e9], [0, -1e9, -1e9]])
    assert enc(tg.tensor(x[:, :3].copy()), src_mask=mask).shape == (2, 3, 8)

    dec = nn.DecoderLayer(dim=8, heads=2, ff_dim=16, dropout=0.0, norm_first=True, activation="gelu-exact", seed=1)
    mem = randn(2, 3, 8, seed=1)
    out = dec(tg.tensor(x), tg.tensor(mem))
    assert out.shape == (2, 5, 8)
    assert not np.allclose(dec(tg.tensor(x), tg.tensor(mem + 1)).numpy(), out.numpy())
    with pytest.raises(tg.ShapeError):
        nn.EncoderLayer(dim=7, heads=2)


def test_transformer_layer_gradients_match_finite_differences():
    enc = nn.EncoderLayer(dim=4, heads=2, ff_dim=6, dropout=0.0, activation="gelu-tanh", seed=2)
    enc.to("float64")
    check_grad(lambda x: enc(x, causal=True), [randn(1, 3, 4, dtype=np.float64)])
    dec = nn.DecoderLayer(dim=4, heads=2, ff_dim=6, dropout=0.0, seed=3)
    dec.to("float64")
    x, mem = tg.tensor(randn(1, 3, 4, dtype=np.float64)), tg.tensor(randn(1, 2, 4, seed=1, dtype=np.float64))
    w = tg.tensor(randn(1, 3, 4, seed=2, dtype=np.float64))
    param_grads_match(dec, lambda: (dec(x, mem) * w).sum(), per_param=2)


def test_seq_attention_weights_sum_to_one():
    att = nn.SeqAttention("additive", 4, 6, attn_dim=5, seed=0)
    ctx, weights = att(tg.tensor(randn(2, 4)), tg.tensor(randn(2, 3, 6, seed=1)))
    assert ctx.shape == (2, 6) and weights.shape == (2, 3)
    np.testing.assert_allclose(weights.numpy().sum(axis=1), 1, rtol=1e-6)
    with pytest.raises(tg.ShapeError, match="dot"):
        nn.SeqAttention("dot", 4, 6)


# ---- the generator -----------------------------------------------------------------------------------

def test_generators_make_runs_reproducible():
    a, b = nn.Linear(3, 3, seed=tg.Generator(4)), nn.Linear(3, 3, seed=tg.Generator(4))
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    g = tg.Generator(4)
    first, second = nn.Linear(3, 3, seed=g), nn.Linear(3, 3, seed=g)  # one stream: it advances
    np.testing.assert_array_equal(first.weight.numpy(), a.weight.numpy())
    assert not np.array_equal(second.weight.numpy(), first.weight.numpy())
    np.testing.assert_array_equal(nn.Linear(3, 3, seed=4).weight.numpy(), a.weight.numpy())  # int: Generator(4)
    tg.manual_seed(9)
    c = nn.GRU(2, 2, seed=None)
    tg.manual_seed(9)
    np.testing.assert_array_equal(nn.GRU(2, 2).cells[0].w_hh.numpy(), c.cells[0].w_hh.numpy())
    state = g.state
    u = g.uniform()
    g.state = state
    assert g.uniform() == u and 0 <= u < 1 and len(state) == 4
    with pytest.raises(TypeError, match="seed"):
        nn.Linear(3, 3, seed="four")


# ---- the models --------------------------------------------------------------------------------------

COPY = [([4, 5, 6], [4, 5, 6]), ([6, 4], [6, 4]), ([5, 5, 4, 6], [5, 5, 4, 6]), ([4], [4])]
SMALL = dict(vocab_size=7, d_model=16, layers=1, heads=2, d_ff=32, hidden=16, dropout=0.0, max_len=16)


@pytest.mark.parametrize("kind", ["rnn", "attention-rnn", "transformer"])
def test_seq2seq_models_train_decode_and_round_trip(kind, tmp_path):
    config = nn.ModelConfig(kind=kind, **SMALL)
    model = nn.Seq2Seq(config, seed=2)
    assert model.config.kind == kind and model.parameter_count() == config.parameter_count()
    batch = data.Batch(COPY)
    assert batch.src.shape == (4, 4) and batch.tgt_in.shape == (4, 5) and batch.target_tokens() == 14
    assert model.logits(batch).shape == (4, 5, 7)
    opt = optim.Adam(model, lr=0.01)
    first = model.loss(batch).item()
    for _ in range(15):
        loss = model.loss(batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert model.loss(batch).item() < 0.7 * first
    model.eval()
    outs = model.greedy_decode(batch.src, batch.src_len, max_len=6)
    assert len(outs) == 4 and all(len(o) <= 6 for o in outs)
    assert len(model.beam_search([4, 5, 6], beam=3, max_len=6)) <= 6
    path = str(tmp_path / "model.safetensors")
    nn.save(model, path)
    other = nn.make_model(config, seed=5)
    assert type(other) is nn.Seq2Seq
    other.eval()
    nn.load(other, path)
    np.testing.assert_array_equal(other.logits(batch).numpy(), model.logits(batch).numpy())
    with pytest.raises(tg.IoError):
        nn.load(nn.Seq2Seq(config, seed=1, d_model=8, heads=2, hidden=8), path)


def test_model_config_fields_and_errors():
    c = nn.ModelConfig(kind="attention-rnn", cell="lstm", score="general", hidden=8, vocab_size=9)
    assert (c.kind, c.cell, c.score, c.hidden) == ("attention-rnn", "lstm", "general", 8)
    assert nn.ModelConfig.from_json(c.to_json()).to_json() == c.to_json()
    with pytest.raises(TypeError, match="colour"):
        nn.ModelConfig(colour="blue")
    with pytest.raises(tg.Error, match="heads"):
        nn.ModelConfig(vocab_size=9, d_model=10, heads=3)
    with pytest.raises(tg.Error, match="nn.GPT"):
        nn.Seq2Seq(kind="gpt", vocab_size=9)
    gpt = nn.make_model(kind="gpt", vocab_size=9, d_model=8, heads=2, layers=1, max_len=8)
    assert isinstance(gpt, nn.GPT) and isinstance(gpt, nn.Seq2Seq)
    blocks = data.Batch.blocks([[4, 5, 6, 7], [5, 6, 7, 8]])
    assert blocks.tgt_in.shape == (2, 3) and gpt.loss(blocks).shape == ()


def test_seq2seq_dropout_follows_the_models_generator():
    config = nn.ModelConfig(kind="transformer", **dict(SMALL, dropout=0.3))
    batch = data.Batch(COPY)
    a, b = nn.Seq2Seq(config, seed=1), nn.Seq2Seq(config, seed=1)
    np.testing.assert_array_equal(a.loss(batch).numpy(), b.loss(batch).numpy())
    state = a.generator.state
    first = a.loss(batch).item()
    assert a.loss(batch).item() != first  # new masks
    a.generator.state = state
    assert a.loss(batch).item() == first


# ---- Python subclasses of nn.Module --------------------------------------------------------------------

class Scale(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.gain = tg.tensor(np.ones(n, np.float32), requires_grad=True)

    def forward(self, x):
        return x * self.gain


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(2, 16, seed=1)
        self.scale = Scale(16)
        self.fc2 = nn.Linear(16, 1, seed=2)
        self.offset = tg.tensor(np.zeros(1, np.float32), requires_grad=True)
        self.register_buffer("mask", tg.tensor(np.ones(1, np.float32)))
        self.note = "a plain attribute"
        self.last = tg.tensor(np.zeros(1, np.float32))  # no grad: not a parameter

    def forward(self, x):
        return self.fc2(tg.ops.tanh(self.scale(self.fc1(x)))) + self.offset


def test_python_modules_register_their_attributes():
    m = MLP()
    names = [n for n, _ in m.named_parameters()]
    # as named_parameters orders a C++ module: its own parameters first, then each sub-module
    assert names == ["offset", "fc1.weight", "fc1.bias", "scale.gain", "fc2.weight", "fc2.bias"]
    assert m.parameter_count() == 2 * 16 + 16 + 16 + 16 + 1 + 1
    assert m.note == "a plain attribute" and m.last.requires_grad is False
    assert len(m.buffers()) == 1
    m.eval()
    assert not m.fc1.training and not m.scale.training
    m.train()
    m.to("float64")
    assert m.fc1.weight.dtype == "float64" and m.scale.gain.dtype == "float64" and m.mask.dtype == "float64"
    m.fc1 = m.fc1  # the same object again is fine
    with pytest.raises(AttributeError, match="fc1"):
        m.fc1 = nn.Linear(2, 16)
    with pytest.raises(AttributeError, match="offset"):
        m.offset = None

    class Forgot(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(1, 1)

    with pytest.raises(TypeError, match="__init__"):
        Forgot()


def test_a_python_module_trains_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (64, 2)).astype(np.float32)
    y = (np.sin(2 * x[:, :1]) * x[:, 1:]).astype(np.float32)
    xt, yt = tg.tensor(x), tg.tensor(y)
    m = MLP()
    opt = optim.Adam(m, lr=0.02)
    losses = []
    for _ in range(40):
        loss = ((m(xt) - yt) ** 2.0).mean()
        losses.append(loss.item())
        loss.backward()
        optim.clip_grad_norm(m, 5.0)
        opt.step()
        opt.zero_grad()
    assert losses[-1] < 0.3 * losses[0]
    assert m.scale.gain.numpy().std() > 0  # the nested Python module's parameter was trained
    path = str(tmp_path / "mlp.safetensors")
    nn.save(m, path)
    fresh = MLP()
    nn.load(fresh, path)
    np.testing.assert_array_equal(fresh(xt).numpy(), m(xt).numpy())
    m64 = MLP()
    m64.to("float64")
    param_grads_match(m64, lambda: ((m64(tg.tensor(x[:8].astype(np.float64))) - 1.0) ** 2.0).mean())


# ---- schedules and train_step ------------------------------------------------------------------------

def schedule_formula(schedule, base, step, warmup, total, min_ratio=0.0):
    """optim.hpp's formulas, written again in Python."""
    ramp = min(1.0, step / warmup) if warmup > 0 else 1.0
    if schedule == "constant":
        return base * ramp
    if schedule == "inverse_sqrt":
        return base * min(step / warmup, math.sqrt(warmup / step)) if warmup > 0 else base / math.sqrt(step)
    if warmup > 0 and step < warmup:
        return base * ramp
    progress = min(max((step - warmup) / max(1.0, total - warmup), 0.0), 1.0)
    return base * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@pytest.mark.parametrize("schedule", ["constant", "inverse_sqrt", "cosine"])
def test_schedules_follow_the_formula(schedule):
    for step in [1, 2, 5, 10, 11, 30, 100, 150]:
        for warmup in [0, 10]:
            want = schedule_formula(schedule, 0.5, step, warmup, 100, 0.1)
            assert optim.learning_rate(schedule, 0.5, step, warmup, 100, 0.1) == pytest.approx(want, rel=1e-12)
    lin = nn.Linear(2, 2, seed=0)
    opt = optim.SGD(lin, lr=0.5)
    sched = optim.Scheduler(opt, schedule, warmup=3, total_steps=10)
    seen = [opt.lr]
    for _ in range(9):
        sched.step()
        seen.append(opt.lr)
    assert sched.last_step == 10 and sched.lr == opt.lr
    assert seen == pytest.approx([schedule_formula(schedule, 0.5, s, 3, 10) for s in range(1, 11)], rel=1e-12)
    with pytest.raises(tg.Error, match="cosine"):
        optim.learning_rate("linear", 1.0, 1)


def test_train_step_runs_the_trainers_step_on_a_python_module():
    rng = np.random.default_rng(1)
    x = tg.tensor(rng.uniform(-1, 1, (32, 2)).astype(np.float32))
    y = tg.tensor((x.numpy()[:, :1] * x.numpy()[:, 1:]).astype(np.float32))
    m = MLP()
    opt = optim.AdamW(m, lr=0.02, weight_decay=0.0)
    recipe = train.StepRecipe(lr=0.02, schedule="cosine", warmup=3, total_steps=30, clip_norm=1.0)
    results = [train.train_step(m, opt, recipe, lambda: ((m(x) - y) ** 2.0).mean(), s) for s in range(1, 31)]
    assert [r.step for r in results] == list(range(1, 31))
    assert [r.lr for r in results] == pytest.approx([optim.learning_rate("cosine", 0.02, s, 3, 30) for s in
                                                     range(1, 31)], rel=1e-12)
    assert results[-1].loss < 0.5 * results[0].loss and opt.steps == 30
    assert all(p.grad is None for p in m.parameters())  # zeroed after the update
    before = [p.numpy().copy() for p in m.parameters()]
    with pytest.raises(tg.NonFiniteError):
        train.train_step(m, opt, recipe, lambda: m(x).sum() * float("nan"), 31)
    for b, p in zip(before, m.parameters()):
        np.testing.assert_array_equal(b, p.numpy())

    def broken():
        raise KeyError("from the loss")

    with pytest.raises(KeyError, match="from the loss"):
        train.train_step(m, opt, recipe, broken, 31)


def test_train_step_on_a_seq2seq_batch():
    model = nn.Seq2Seq(kind="rnn", **SMALL)
    opt = optim.Adam(model, lr=0.01)
    batch = data.Batch(COPY)
    r = train.train_step(model, opt, train.StepRecipe(lr=0.01), batch, 1)
    assert r.tokens == batch.target_tokens() and r.grad_norm > 0


# ---- checkpoints of `tapegrad train` --------------------------------------------------------------------

def tapegrad_cli():
    here = os.path.dirname(os.path.abspath(tg.__file__))
    for path in [os.environ.get("TAPEGRAD_CLI", ""), os.path.join(here, "..", "tools", "tapegrad"),
                 shutil.which("tapegrad") or ""]:
        if path and os.access(path, os.X_OK):
            return path
    pytest.skip("the tapegrad program is not built beside the module")


def run_cli(*args, stdin=None):
    r = subprocess.run([tapegrad_cli(), *args], capture_output=True, text=True, input=stdin, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


TINY = ["--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "32", "--hidden", "16", "--batch-size",
        "8", "--threads", "1", "--valid-size", "8", "--log-every", "5", "--eval-every", "0", "--warmup", "2"]


@pytest.mark.parametrize("kind", ["transformer", "attention-rnn"])
def test_a_checkpoint_of_the_command_line_translates_from_python(kind, tmp_path):
    out = str(tmp_path / "run")
    run_cli("train", "--model", kind, "--task", "reverse", "--min-len", "3", "--max-len", "5", "--symbols", "4",
            "--steps", "12", "--seed", "3", "--out", out, *TINY)
    ck = train.load_checkpoint(out)
    assert ck.step == 12 and ck.options["steps"] == 12 and ck.config.kind == kind and ck.config.d_model == 16
    assert isinstance(ck.model, nn.Seq2Seq) and not ck.model.training
    assert ck.tokenization == "chars" and len(ck.vocab) == 8 and ck.vocab.token(0) == "<pad>"
    lines = ["abc", "dab", "cadb"]
    cli = run_cli("translate", "--checkpoint", out, stdin="\n".join(lines) + "\n").splitlines()
    srcs = [ck.encode(line) for line in lines]
    batch = data.Batch([(s, s) for s in srcs])
    greedy = ck.model.greedy_decode(batch.src, batch.src_len, max_len=2 * 4 + 8)
    assert [ck.decode(o) for o in greedy] == cli
    beam_cli = run_cli("translate", "--checkpoint", out, "--beam", "3", stdin="abc\n").splitlines()
    assert [ck.decode(ck.model.beam_search(srcs[0], beam=3, max_len=2 * 3 + 8))] == beam_cli
    # the loaded parameters are the file's, and training continues from Python
    again = nn.Seq2Seq(ck.config, seed=99)
    nn.load(again, os.path.join(out, "model.safetensors"))
    again.eval()
    np.testing.assert_array_equal(again.logits(batch).numpy(), ck.model.logits(batch).numpy())


def test_a_gpt_checkpoint_generates_from_python(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. " * 40)
    out = str(tmp_path / "gpt")
    run_cli("train", "--model", "gpt", "--text", str(text), "--block-size", "8", "--steps", "6", "--layers", "1",
            "--heads", "2", "--d-model", "16", "--batch-size", "4", "--threads", "1", "--valid-size", "4",
            "--eval-every", "0", "--log-every", "3", "--out", out)
    ck = train.load_checkpoint(out)
    assert isinstance(ck.model, nn.GPT) and ck.model.block_size == 8
    cli = run_cli("generate", "--checkpoint", out, "--prompt", "the", "--max-new-tokens", "12", "--seed", "5")
    ids = ck.model.generate(ck.encode("the"), max_new_tokens=12, seed=5)
    assert ck.detokenize([ck.vocab.token(i) for i in ids], side="source") + "\n" == cli
    with pytest.raises(tg.IoError):
        train.load_checkpoint(str(tmp_path / "nothing"))
