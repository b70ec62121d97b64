# nn and optim from Python: the layers' parameters and forward, training a tiny model with SGD and
# Adam, clipping, and nn.save / nn.load round trips.
import numpy as np
import pytest

import tapegrad as tg

nn, optim = tg.nn, tg.optim


def test_linear_embedding_layernorm_forward():
    lin = nn.Linear(3, 2, seed=0)
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    assert lin.weight.shape == (2, 3) and lin.weight.requires_grad
    x = tg.tensor(np.ones((4, 3), np.float32))
    np.testing.assert_allclose(lin(x).numpy(), x.numpy() @ lin.weight.numpy().T + lin.bias.numpy(), rtol=1e-6)
    emb = nn.Embedding(5, 3, seed=0)
    ids = tg.tensor(np.array([[0, 4]], np.int32))
    np.testing.assert_array_equal(emb(ids).numpy()[0, 1], emb.weight.numpy()[4])
    ln = nn.LayerNorm(3)
    out = ln(tg.tensor(np.array([[1.0, 2.0, 3.0]], np.float32))).numpy()
    np.testing.assert_allclose(out.mean(), 0, atol=1e-6)
    assert nn.Linear(3, 2, bias=False, seed=0).bias is None
    assert lin.parameter_count() == 8


def test_layers_are_seeded():
    a, b = nn.Linear(4, 4, seed=5), nn.Linear(4, 4, seed=5)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())


@pytest.mark.parametrize("make", [lambda p: optim.SGD(p, lr=0.1, momentum=0.9), lambda p: optim.Adam(p, lr=0.05),
                                  lambda p: optim.AdamW(p, lr=0.05)])
def test_optimizers_fit_a_linear_map(make):
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((32, 3)).astype(np.float32))
    y = tg.tensor((x.numpy() @ np.diag([1.0, -2.0, 0.5])).astype(np.float32))
    lin = nn.Linear(3, 3, seed=1)
    opt = make(lin)
    first = None
    for _ in range(200):
        loss = ((lin(x) - y) ** 2.0).mean()
        first = first if first is not None else loss.item()
        loss.backward()
        optim.clip_grad_norm(lin, 10.0)
        opt.step()
        opt.zero_grad()
    assert loss.item() < 0.02 * first
    assert opt.steps == 200


def test_save_and_load_round_trip(tmp_path):
    a, b = nn.Linear(3, 2, seed=1), nn.Linear(3, 2, seed=2)
    path = str(tmp_path / "lin.safetensors")
    nn.save(a, path)
    nn.load(b, path)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    with pytest.raises(tg.IoError, match="lin.safetensors"):
        nn.load(nn.Linear(4, 2, seed=0), path)
    with pytest.raises(OSError):
        nn.load(b, str(tmp_path / "missing.safetensors"))


def test_module_modes_and_dtype():
    lin = nn.Linear(2, 2, seed=0)
    lin.eval()
    assert not lin.training
    lin.train()
    assert lin.training
    lin.to("float64")
    assert lin.weight.dtype == "float64"


def test_multi_head_attention_self_and_cross():
    mha = nn.MultiHeadAttention(8, 2, seed=0)
    x = tg.tensor(np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32))
    y = mha(x, causal=True)
    assert y.shape == (2, 5, 8)
    m = tg.tensor(np.random.default_rng(1).standard_normal((2, 3, 8)).astype(np.float32))
    assert mha(x, m).shape == (2, 5, 8)
    # causal: position 0 sees itself only, so changing later positions leaves it alone
    x2 = x.numpy().copy()
    x2[:, 1:] += 1.0
    np.testing.assert_allclose(mha(tg.tensor(x2), causal=True).numpy()[:, 0], y.numpy()[:, 0], rtol=1e-5, atol=1e-6)
    with pytest.raises(tg.ShapeError):
        nn.MultiHeadAttention(7, 2)


def test_a_tiny_gpt_overfits_a_sequence_and_generates_it():
    seq = np.array([[4, 5, 6, 7, 8, 9, 10, 11]], np.int32)  # ids 0-3 are the specials, never generated
    model = nn.GPT(vocab_size=12, d_model=32, layers=1, heads=2, d_ff=64, block_size=8, seed=0)
    opt = optim.AdamW(model, lr=3e-3, weight_decay=0.0)
    ids, targets = tg.tensor(seq[:, :-1]), tg.tensor(seq[:, 1:].copy())
    for _ in range(60):
        loss = tg.ops.cross_entropy(model(ids), targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert loss.item() < 0.1
    assert model.generate([4], max_new_tokens=6, temperature=0.0) == [4, 5, 6, 7, 8, 9, 10]
