#!/usr/bin/python3
"""PyTorch replica of `tapegrad train --model gpt --text FILE`: nanoGPT's model.py architecture and its
train.py recipe, re-implemented on PyTorch 1.13 (Debian's python3-torch), on the data tapegrad uses.

The same as tapegrad's run, piece by piece:
  data        the text file read whole as UTF-8 (a byte-order mark dropped, newlines kept as they are);
              the vocabulary is tapegrad's: the 4 specials <pad> <bos> <eos> <unk> (ids 0-3, never in the
              text), then every distinct character in code-point order (nanoGPT's sorted(set(text)),
              shifted by 4); the first int(0.9 n) ids train, the rest validate (nanoGPT's prepare.py).
  batches     --batch-size blocks at offsets uniform in [0, len(train) - block - 1], x = ids[o:o+N],
              y = ids[o+1:o+N+1] (nanoGPT's get_batch; the draws come from torch's generator, not
              tapegrad's, so the blocks differ, not their distribution).
  validation  --valid-size blocks at offsets i * last // (K - 1), last = len(valid) - N - 1 (tapegrad's
              evenly spaced blocks, not nanoGPT's random eval_iters); mean cross-entropy over every target
              token in nats, and bits per character = loss x tokens / (characters x ln 2).
  model       nanoGPT's GPT with bias=False: token + learned position embeddings, N pre-LN blocks
              (LayerNorm without bias, causal self-attention with one fused c_attn projection, MLP
              4 x d_model with exact GELU), final LayerNorm, lm_head tied to the token embedding; weights
              normal(0, 0.02), c_proj weights normal(0, 0.02 / sqrt(2 L)); dropout 0. PyTorch 1.13 has no
              scaled_dot_product_attention, so attention is nanoGPT's explicit masked-softmax path.
  recipe      AdamW (betas 0.9 and --beta2, --eps) with weight decay on parameters of 2 or more dimensions
              only (nanoGPT's two groups: tapegrad's --decay matrices), gradient clipping to --clip, and
              tapegrad's schedule for 1-based step s: lr * s / warmup while s < warmup, then
              min + (lr - min) (1 + cos(pi (s - warmup) / (iters - warmup))) / 2. nanoGPT's get_lr is the
              same curve one step earlier (it counts from 0 and warms up as (it + 1) / (warmup + 1)): at
              most one step's difference, a relative 1/warmup during warm-up and under 1e-5 after.
It reports the validation loss every --eval-interval iterations and at the last (after that many updates),
and the median time per iteration (forward, backward, clipping, update; the batch and evaluations excluded) after
--timing-warmup iterations, at each of --threads (torch.set_num_threads), each in its own child process.

Run it with Debian's python3 and the OpenMP build of OpenBLAS, without OPENBLAS_CORETYPE (see
bench/torch_train.py); the parent starts its children that way. By hand:
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \\
      /usr/bin/python3 bench/torch_gpt.py --text data/bible-en.txt --iters 2000 --seed 1
Options: --text, --iters, --seed, --threads 1,2, --json (one JSON object per thread count), the model and
recipe sizes (defaults: nanoGPT's CPU recipe: block 64, batch 12, 4 layers, 4 heads, 128 wide, lr 1e-3 to
1e-4, warm-up 100, beta2 0.99, weight decay 0.1, clip 1.0).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

OPENBLAS_OPENMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]


def read_ids(path):
    with open(path, encoding="utf-8", newline="") as f:  # newline="": \r\n stays two characters
        text = f.read()
    if text.startswith("\ufeff"):
        text = text[1:]
    vocab = SPECIALS + sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    return [index[c] for c in text], vocab


def lr_at(step, a):
    if a.warmup > 0 and step < a.warmup:
        return a.lr * step / a.warmup
    span = max(1.0, a.iters - a.warmup)
    progress = min(max((step - a.warmup) / span, 0.0), 1.0)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def build(torch, a, vocab_size):
    nn, F = torch.nn, torch.nn.functional

    class LayerNorm(nn.Module):  # nanoGPT's: LayerNorm with an optional bias (bias=False here)
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(a.d_model, 3 * a.d_model, bias=False)
            self.c_proj = nn.Linear(a.d_model, a.d_model, bias=False)
            mask = torch.tril(torch.ones(a.block_size, a.block_size)).view(1, 1, a.block_size, a.block_size)
            self.register_buffer("bias", mask)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(a.d_model, dim=2)
            q, k, v = (t.view(B, T, a.heads, C // a.heads).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(a.d_model, 4 * a.d_model, bias=False)
            self.gelu = nn.GELU()  # the exact (erf) form, as nanoGPT
            self.c_proj = nn.Linear(4 * a.d_model, a.d_model, bias=False)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = LayerNorm(a.d_model), CausalSelfAttention(), LayerNorm(a.d_model), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab_size, a.d_model)
            self.wpe = nn.Embedding(a.block_size, a.d_model)
            self.h = nn.ModuleList([Block() for _ in range(a.layers)])
            self.ln_f = LayerNorm(a.d_model)
            self.lm_head = nn.Linear(a.d_model, vocab_size, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * a.layers))

        def forward(self, idx):
            pos = torch.arange(idx.size(1), dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT()


def run_one(a, threads):
    import torch
    F = torch.nn.functional
    torch.set_num_threads(threads)
    torch.manual_seed(a.seed)
    ids, vocab = read_ids(a.text)
    n_train = int(len(ids) * 0.9)
    train = torch.tensor(ids[:n_train], dtype=torch.long)
    valid = ids[n_train:]
    N = a.block_size
    last = len(valid) - N - 1
    K = min(a.valid_size, last + 1)
    offsets = [0 if K == 1 else i * last // (K - 1) for i in range(K)]
    vx = torch.tensor([valid[o:o + N] for o in offsets], dtype=torch.long)
    vy = torch.tensor([valid[o + 1:o + N + 1] for o in offsets], dtype=torch.long)
    chars = sum(len(vocab[t]) for row in vy.tolist() for t in row)
    model = build(torch, a, len(vocab))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=a.lr, betas=(0.9, a.beta2), eps=a.eps)
    gen = torch.Generator().manual_seed(a.seed)

    def evaluate():
        model.eval()
        total = 0.0
        with torch.no_grad():
            for s in range(0, K, 64):
                logits = model(vx[s:s + 64])
                total += F.cross_entropy(logits.view(-1, logits.size(-1)), vy[s:s + 64].reshape(-1),
                                         reduction="sum").item()
        model.train()
        loss = total / (K * N)
        return {"loss": loss, "bits_per_char": total / (chars * math.log(2))}

    evals, times = [], []
    for step in range(1, a.iters + 1):
        o = torch.randint(len(train) - N, (a.batch_size,), generator=gen)
        x = torch.stack([train[i:i + N] for i in o])
        y = torch.stack([train[i + 1:i + N + 1] for i in o])
        t0 = time.perf_counter()  # the step alone, as tapegrad's step time (its batch is built outside too)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, a)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        if step == a.iters or (a.eval_interval > 0 and step % a.eval_interval == 0):
            evals.append({"step": step, **evaluate()})
            if not a.json:
                print(f"threads {threads}  step {step}: train loss {loss.item():.4f}  valid loss "
                      f"{evals[-1]['loss']:.4f} nats/token  {evals[-1]['bits_per_char']:.4f} bits/char", flush=True)
    timed = times[a.timing_warmup:] or times
    return {"threads": threads, "seed": a.seed, "iters": a.iters,
            "parameters": sum(p.numel() for p in model.parameters()),
            "valid_loss": evals[-1]["loss"], "valid_bits_per_char": evals[-1]["bits_per_char"],
            "median_iter_ms": 1e3 * statistics.median(timed), "timed_iters": len(timed), "evals": evals}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", default="data/bible-en.txt")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=12)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--valid-size", type=int, default=500)
    ap.add_argument("--eval-interval", type=int, default=250)
    ap.add_argument("--timing-warmup", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(run_one(a, a.child)), flush=True)
        return
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    if os.path.isdir(OPENBLAS_OPENMP):
        env["LD_LIBRARY_PATH"] = OPENBLAS_OPENMP + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    args = [x for x in sys.argv[1:] if x != "--json"] + ["--json"]
    for threads in [int(t) for t in a.threads.split(",")]:
        out = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), *args, "--child", str(threads)],
                             env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"torch_gpt.py: the child at {threads} threads failed: {out.stderr.strip()[-500:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if a.json:
            print(json.dumps(r), flush=True)
            continue
        for e in r["evals"]:
            print(f"threads {threads}  iter {e['step']}: valid loss {e['loss']:.4f} nats/token, "
                  f"{e['bits_per_char']:.4f} bits/char")
        print(f"threads {threads}: {r['parameters']} parameters; valid loss at iter {r['iters']} "
              f"{r['valid_loss']:.4f}; median iteration {r['median_iter_ms']:.2f} ms over {r['timed_iters']}",
              flush=True)


if __name__ == "__main__":
    main()
