#!/usr/bin/python3
"""PyTorch side of the training-step comparison (bench/bench_train.cpp is tapegrad's side).

The same models, sizes and data as bench_train.cpp: one step = forward + backward + AdamW update +
zero_grad on a fixed batch of random (source, target) pairs, no padding, dropout 0, no clipping.
  transformer:      batch 64, lengths 32, vocabulary 32; d_model 128, 4 heads, 2 encoder + 2 decoder
                    layers (nn.TransformerEncoderLayer / DecoderLayer, post-LN, ReLU, d_ff 512, no final
                    norms: like tapegrad's post-LN model), embeddings * sqrt(d_model) + sinusoidal
                    positions, output Linear to the vocabulary; tapegrad_transformer below, which
                    bench/torch_translate.py shares, with tapegrad's initialisation (the step's
                    time does not depend on it).
  attention_gru:    batch 64, lengths 32, vocabulary 32; embeddings 128, a 2-layer nn.GRU encoder
                    (hidden 256), a decoder of two nn.GRUCell stepped over time with input feeding
                    ([embedding; previous attentional vector]), additive attention
                    v^T tanh(W_q h + W_k enc), combine tanh(W_c [h; ctx]), output Linear.
  transformer_base: the same Transformer at the original paper's base size: batch 32, lengths 64,
                    vocabulary 1000; d_model 512, 8 heads, 6 + 6 layers, d_ff 2048.
Each (model, threads) runs in its own child process, so its peak RSS (ru_maxrss) is its own; each
reports the median of its timed steps after its warm-up steps (30 after 5; 3 after 1 for
transformer_base, whose step takes seconds), the fastest step, the median CPU time of a step over all
threads, and the model's parameter count (bench_train's `params` counter is the same count), at
torch.set_num_threads(1) and (2).

Use Debian's PyTorch (python3-torch, 1.13) through /usr/bin/python3, and the OpenMP build of OpenBLAS
(libopenblas0-openmp): the default pthreads build fights torch's OpenMP threads at 2 threads. The
children are started with that library first on LD_LIBRARY_PATH and without OPENBLAS_CORETYPE /
OPENBLAS_L2_SIZE (which force a slower kernel); the same command by hand:
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
      LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 bench/torch_train.py
Options: --steps N and --warmup N (default: per model, as above), --models transformer,attention_gru
(transformer_base on request), --threads 1,2, --json.
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

OPENBLAS_OPENMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
BOS = 1
# Per model: batch, source length, target length, vocabulary, model sizes, default (timed, warm-up) steps.
WORKLOADS = {
    "transformer": dict(B=64, S=32, T=32, V=32, sizes=dict(d=128, heads=4, layers=2, ff=512), steps=(30, 5)),
    "attention_gru": dict(B=64, S=32, T=32, V=32, sizes=dict(E=128, H=256, layers=2), steps=(30, 5)),
    "transformer_base": dict(B=32, S=64, T=64, V=1000, sizes=dict(d=512, heads=8, layers=6, ff=2048), steps=(3, 1)),
}


def openmp_blas_env(script):
    """The environment for a PyTorch process: the OpenMP OpenBLAS first on LD_LIBRARY_PATH and no
    OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE / OMP_NUM_THREADS (see the header). `script` names the caller
    in the warning printed when the OpenMP build is missing."""
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS"):
        env.pop(k, None)
    if os.path.isdir(OPENBLAS_OPENMP):
        paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p and p != OPENBLAS_OPENMP]
        env["LD_LIBRARY_PATH"] = ":".join([OPENBLAS_OPENMP] + paths)
    else:
        print(f"warning: {script}: {OPENBLAS_OPENMP} missing (apt-get install libopenblas0-openmp); "
              "2-thread figures will suffer from OpenBLAS pthreads vs OpenMP", file=sys.stderr)
    return env


def tapegrad_transformer(torch, nn, vocab, d, heads, layers, ff, dropout=0.0, activation="relu",
                         norm_first=False, positional="sinusoidal", max_len=512, tie_embeddings=False):
    """tapegrad's Transformer (src/models/transformer.cpp, src/nn/{transformer,attention,layers}.cpp)
    in PyTorch modules, with tapegrad's initialisation of every parameter:
      - embeddings N(0, 1/d), times sqrt(d) in forward, plus sinusoidal positions (computed in float64
        as tapegrad does) or a learned table N(0, 0.02^2), or none; then dropout;
      - every Linear, the attention projections included (q, k, v stacked in in_proj_weight): weight and
        bias uniform(+-1/sqrt(fan_in)); LayerNorm 1 and 0, eps 1e-5;
      - post-LN layers, or pre-LN (norm_first) with a final LayerNorm after the encoder and the decoder;
      - dropout on the attention weights, on each sub-layer's output before its residual add and after
        the feed-forward activation (nn.Transformer*Layer's placement, which is tapegrad's);
      - relu, gelu-exact or gelu-tanh in the feed-forward;
      - an output Linear to the vocabulary, or with tie_embeddings one table for the source and target
        embeddings and the output projection (x E^T, no bias);
      - the source key-padding mask (encoder self-attention and cross-attention) only when the batch
        has padding; causal decoder self-attention without a target padding mask, as tapegrad.
    forward(src [B,S], tgt_in [B,T]) -> logits [B,T,vocab]; pad id 0."""
    F = nn.functional
    act = {"relu": "relu", "gelu-exact": "gelu", "gelu-tanh": lambda x: F.gelu(x, approximate="tanh"),
           "gelu": lambda x: F.gelu(x, approximate="tanh")}[activation]

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.d = d
            self.src_embed = nn.Embedding(vocab, d)
            self.tgt_embed = self.src_embed if tie_embeddings else nn.Embedding(vocab, d)
            self.positional = positional
            if positional == "sinusoidal":
                t = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
                i = torch.arange(d, dtype=torch.float64)
                angle = t / torch.pow(10000.0, 2 * torch.div(i, 2, rounding_mode="floor") / d)
                pe = torch.where(torch.arange(d) % 2 == 0, torch.sin(angle), torch.cos(angle)).float()
                self.register_buffer("src_pos", pe)
                self.register_buffer("tgt_pos", pe.clone())
            elif positional == "learned":
                self.src_pos = nn.Parameter(torch.randn(max_len, d) * 0.02)
                self.tgt_pos = nn.Parameter(torch.randn(max_len, d) * 0.02)
            else:
                self.src_pos = self.tgt_pos = None
            self.drop = nn.Dropout(dropout)
            enc = nn.TransformerEncoderLayer(d, heads, ff, dropout=dropout, activation=act, batch_first=True,
                                             norm_first=norm_first)
            dec = nn.TransformerDecoderLayer(d, heads, ff, dropout=dropout, activation=act, batch_first=True,
                                             norm_first=norm_first)
            self.encoder = nn.TransformerEncoder(enc, layers, norm=nn.LayerNorm(d) if norm_first else None,
                                                 enable_nested_tensor=False)
            self.decoder = nn.TransformerDecoder(dec, layers, norm=nn.LayerNorm(d) if norm_first else None)
            self.out = None if tie_embeddings else nn.Linear(d, vocab)
            self.causal = {}
            with torch.no_grad():
                # nn.TransformerEncoder/Decoder deep-copy one layer (every layer would start equal) and
                # nn.MultiheadAttention draws in_proj with Xavier and zero biases: re-draw all of it the
                # way tapegrad does, independently per layer.
                for m in self.modules():
                    if isinstance(m, nn.Linear):
                        bound = 1 / math.sqrt(m.in_features)
                        m.weight.uniform_(-bound, bound)
                        if m.bias is not None:
                            m.bias.uniform_(-bound, bound)
                    elif isinstance(m, nn.MultiheadAttention):
                        bound = 1 / math.sqrt(m.embed_dim)
                        m.in_proj_weight.uniform_(-bound, bound)
                        m.in_proj_bias.uniform_(-bound, bound)
                    elif isinstance(m, nn.Embedding):
                        m.weight.normal_(0.0, 1 / math.sqrt(d))

        def embed(self, table, pos, ids):
            x = table(ids) * math.sqrt(self.d)
            return self.drop(x if pos is None else x + pos[: ids.shape[1]])

        def causal_mask(self, T):
            if T not in self.causal:
                self.causal[T] = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
            return self.causal[T]

        def encode(self, src):
            """(memory [B,S,d], the key-padding mask or None)"""
            pad = src == 0
            mask = pad if bool(pad.any()) else None
            return self.encoder(self.embed(self.src_embed, self.src_pos, src), src_key_padding_mask=mask), mask

        def decode(self, tgt_in, memory, mask):
            x = self.embed(self.tgt_embed, self.tgt_pos, tgt_in)
            x = self.decoder(x, memory, tgt_mask=self.causal_mask(tgt_in.shape[1]), memory_key_padding_mask=mask)
            return self.out(x) if self.out is not None else x @ self.src_embed.weight.t()

        def forward(self, src, tgt_in):
            memory, mask = self.encode(src)
            return self.decode(tgt_in, memory, mask)

    return Transformer()


def build(name, torch, nn):
    F = nn.functional
    w = WORKLOADS[name]
    V = w["V"]

    class AttentionGRU(nn.Module):
        def __init__(self, E, H, layers):
            super().__init__()
            self.H = H
            self.src_embed = nn.Embedding(V, E)
            self.tgt_embed = nn.Embedding(V, E)
            self.encoder = nn.GRU(E, H, layers, batch_first=True)
            self.cells = nn.ModuleList([nn.GRUCell(E + H if l == 0 else H, H) for l in range(layers)])
            self.query_proj = nn.Linear(H, H, bias=False)
            self.key_proj = nn.Linear(H, H)
            self.v = nn.Parameter(torch.empty(H).uniform_(-1 / math.sqrt(H), 1 / math.sqrt(H)))
            self.combine = nn.Linear(2 * H, H, bias=False)
            self.out = nn.Linear(H, V)

        def forward(self, src, tgt_in):
            enc, h_n = self.encoder(self.src_embed(src))  # [B, S, H], [layers, B, H]
            keys = self.key_proj(enc)                      # [B, S, H]
            emb = self.tgt_embed(tgt_in)                   # [B, T, E]
            states = list(h_n.unbind(0))
            feed = torch.zeros(src.shape[0], self.H)
            outs = []
            for t in range(tgt_in.shape[1]):
                x = torch.cat([emb[:, t], feed], 1)
                for l, cell in enumerate(self.cells):
                    states[l] = cell(x, states[l])
                    x = states[l]
                scores = torch.tanh(keys + self.query_proj(x).unsqueeze(1)) @ self.v  # [B, S]
                w = F.softmax(scores, -1)
                ctx = torch.bmm(w.unsqueeze(1), enc).squeeze(1)                         # [B, H]
                feed = torch.tanh(self.combine(torch.cat([x, ctx], 1)))
                outs.append(feed)
            return self.out(torch.stack(outs, 1))

    if name == "attention_gru":
        return AttentionGRU(**w["sizes"])
    return tapegrad_transformer(torch, nn, V, **w["sizes"])


def run_one(name, threads, steps, warmup):
    import torch
    from torch import nn

    w = WORKLOADS[name]
    B, S, T, V = w["B"], w["S"], w["T"], w["V"]
    steps = steps if steps is not None else w["steps"][0]
    warmup = warmup if warmup is not None else w["steps"][1]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2024)
    src = torch.randint(4, V, (B, S), generator=g)
    tgt = torch.randint(4, V, (B, T - 1), generator=g)
    tgt_in = torch.cat([torch.full((B, 1), BOS), tgt], 1)
    tgt_out = torch.cat([tgt, torch.full((B, 1), 2)], 1)  # + <eos>
    model = build(name, torch, nn)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    def step():
        logits = model(src, tgt_in)
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=0)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(warmup):
        step()
    times, cpu = [], []
    for _ in range(steps):
        c0, t0 = time.process_time(), time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    blas = sorted({line.split()[-1] for line in open("/proc/self/maps") if "blas" in line and ".so" in line})
    return {
        "model": name,
        "threads": threads,
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "cpu_ms": statistics.median(cpu) * 1e3,
        "tokens_per_s": B * T / statistics.median(times),
        "steps": steps,
        "warmup": warmup,
        "params": sum(p.numel() for p in model.parameters()),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "torch": torch.__version__,
        "blas": blas,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="transformer,attention_gru")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default: 30, 3 for transformer_base)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: 5, 1 for transformer_base)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per row instead of a table")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(run_one(a.child[0], int(a.child[1]), a.steps, a.warmup)))
        return
    env = openmp_blas_env("torch_train.py")
    names = a.models.split(",")
    for name in names:
        if name not in WORKLOADS:
            sys.exit(f"torch_train.py: --models: unknown model {name!r} (one of {', '.join(WORKLOADS)})")
    rows = []
    for name in names:
        for threads in (int(t) for t in a.threads.split(",")):
            counts = [f"--{k}={v}" for k, v in (("steps", a.steps), ("warmup", a.warmup)) if v is not None]
            out = subprocess.run([sys.executable, __file__, "--child", name, str(threads), *counts], env=env,
                                 check=True, capture_output=True, text=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            if a.json:
                print(json.dumps(rows[-1]), flush=True)
    if a.json:
        return
    print(f"PyTorch {rows[0]['torch']}, BLAS {', '.join(rows[0]['blas'])}; median of the timed steps after "
          "the warm-up ones")
    # Columns: the first four as before the timed-steps and parameter columns were added (scripts
    # read "model threads ms/step min-ms"), the new ones at the end.
    print(f"{'model':<18}{'threads':>8}{'ms/step':>10}{'min ms':>9}{'cpu ms':>9}{'tokens/s':>11}"
          f"{'peak RSS MiB':>14}{'steps':>7}{'params':>11}")
    for r in rows:
        print(f"{r['model']:<18}{r['threads']:>8}{r['median_ms']:>10.1f}{r['min_ms']:>9.1f}"
              f"{r['cpu_ms']:>9.1f}{r['tokens_per_s']:>11.0f}{r['peak_rss_mib']:>14.0f}{r['steps']:>7}{r['params']:>11}")


if __name__ == "__main__":
    main()
