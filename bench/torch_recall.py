#!/usr/bin/env python3
"""PyTorch replica of the long-range diagnosis: torch.nn.Transformer of the long-range experiment's size
(d_model 64, 4 heads, 2+2 layers, d_ff 256, no dropout, sin/cos positions, embeddings scaled by
sqrt(d_model)) trained on the recall task with tapegrad's recipe (AdamW, weight decay 0.01, linear
warm-up then cosine, gradient clipping at 1), printing exact match on fresh examples as it trains. It
answers one question: does a standard Transformer implementation plateau where tapegrad's does?

  /usr/bin/python3 bench/torch_recall.py --min-len 6 --max-len 6 --steps 2000 --batch-size 32

The data follow tapegrad's recall task (distinct letter keys, digit values, '?' and a queried key) with
Python's own random numbers, so the examples differ from tapegrad's but not their distribution.
Optional: needs python3-torch (Debian), like the other bench/ scripts.
"""
import argparse, math, random

import torch
import torch.nn as nn

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--min-len", type=int, default=6)
p.add_argument("--max-len", type=int, default=34)
p.add_argument("--symbols", type=int, default=16)
p.add_argument("--steps", type=int, default=3000)
p.add_argument("--batch-size", type=int, default=32)
p.add_argument("--lr", type=float, default=2e-3)
p.add_argument("--warmup", type=int, default=100)
p.add_argument("--pre-ln", action="store_true")
p.add_argument("--eval-every", type=int, default=250)
p.add_argument("--seed", type=int, default=1)
a = p.parse_args()
torch.manual_seed(a.seed)
random.seed(a.seed)
torch.set_num_threads(1)

D, LETTERS = 64, list(range(a.symbols))
DIGITS = list(range(a.symbols, a.symbols + 10))
QUESTION = a.symbols + 10
PAD, BOS, EOS = QUESTION + 1, QUESTION + 2, QUESTION + 3
VOCAB = EOS + 1


def example():
    # L = 2n + 2 in [min_len, max_len], n distinct keys; the queried pair is uniform over all n.
    n = random.randint(max(1, (a.min_len - 1) // 2), min(a.symbols, (a.max_len - 2) // 2))
    keys = random.sample(LETTERS, n)
    values = [random.choice(DIGITS) for _ in range(n)]
    q = random.randrange(n)
    return [t for kv in zip(keys, values) for t in kv] + [QUESTION, keys[q]], values[q]


def batch(size):
    ex = [example() for _ in range(size)]
    src = torch.full((size, max(len(s) for s, _ in ex)), PAD)
    for i, (s, _) in enumerate(ex):
        src[i, : len(s)] = torch.tensor(s)
    v = torch.tensor([ans for _, ans in ex])
    tgt_in = torch.stack([torch.full((size,), BOS), v], 1)
    tgt_out = torch.stack([v, torch.full((size,), EOS)], 1)
    return src, tgt_in, tgt_out


def sinusoids(length):
    pe = torch.zeros(length, D)
    pos = torch.arange(length)[:, None]
    freq = torch.exp(torch.arange(0, D, 2) * (-math.log(10000.0) / D))
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return pe


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_embed, self.tgt_embed = nn.Embedding(VOCAB, D), nn.Embedding(VOCAB, D)
        for e in (self.src_embed, self.tgt_embed):
            nn.init.normal_(e.weight, 0, D**-0.5)  # unit scale after the sqrt(D) factor
        self.core = nn.Transformer(D, 4, 2, 2, 256, 0.0, batch_first=True, norm_first=a.pre_ln)
        self.head = nn.Linear(D, VOCAB)
        self.register_buffer("pe", sinusoids(64))

    def forward(self, src, tgt_in):
        x = self.src_embed(src) * math.sqrt(D) + self.pe[: src.shape[1]]
        y = self.tgt_embed(tgt_in) * math.sqrt(D) + self.pe[: tgt_in.shape[1]]
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1])
        pad = src == PAD
        return self.head(self.core(x, y, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad))


model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
shape = lambda s: min(1.0, (s + 1) / a.warmup) * 0.5 * (1 + math.cos(math.pi * min(s, a.steps) / a.steps))
sched = torch.optim.lr_scheduler.LambdaLR(opt, shape)
for step in range(1, a.steps + 1):
    src, tgt_in, tgt_out = batch(a.batch_size)
    loss = nn.functional.cross_entropy(model(src, tgt_in).reshape(-1, VOCAB), tgt_out.reshape(-1))
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    if step % a.eval_every == 0 or step == a.steps:
        with torch.no_grad():
            src, tgt_in, tgt_out = batch(500)
            exact = (model(src, tgt_in)[:, 0].argmax(-1) == tgt_out[:, 0]).float().mean().item()
        print(f"step {step}  loss {loss.item():.4f}  exact_match {exact:.3f}", flush=True)
