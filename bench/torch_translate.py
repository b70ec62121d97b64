#!/usr/bin/python3
"""PyTorch replica of a tapegrad Transformer translation run (`tapegrad train --model transformer
--tokens sentencepiece ... --out DIR`): the same model, data, tokens, batches, optimizer and schedule,
trained for the same steps, then greedy translations of the test sources written one line each, for
`tapegrad score --ref data/bible-es-en/test-ref.txt --hyp FILE` to score both sides the same way.

It reads DIR/config.json (the run's effective options) and DIR/sentencepiece.model (tapegrad's
vocabulary ids are that model's piece ids, <pad>=0 <bos>=1 <eos>=2 <unk>=3; --spm-model FILE overrides).

Exactly as tapegrad (the code read for each):
  - model (src/models/transformer.cpp, src/nn/): d_model, heads, layers, d_ff, dropout, activation,
    positional, norm_first (pre-LN with final norms), tie_embeddings, max_len; the architecture and the
    distribution of every parameter's initial value (bench/torch_train.py's tapegrad_transformer);
  - data: the TSV lines of config's train (and valid) as tapegrad reads them (blank lines skipped, a
    trailing CR dropped), SentencePiece ids; target in = <bos> + pieces, target out = pieces + <eos>;
    sources padded with <pad>, no <bos>/<eos> (data::make_batch);
  - loss (Seq2Seq::loss): cross-entropy with label smoothing eps spread over all V classes, mean over
    the non-pad target tokens;
  - step (src/train/step.cpp, src/optim/optim.cpp): the learning rate of step s (1-based) from the
    schedule (constant, inverse_sqrt or cosine: linear warm-up, then cosine from lr to min_lr_ratio * lr
    over steps - warmup), global-norm clipping at clip (scale clip / (norm + 1e-6); 0: none), then AdamW
    (decoupled decay on every parameter, tapegrad's betas (0.9, 0.98) and eps 1e-9 unless the config
    has betas / beta1 / beta2 / eps), Adam (L2 in the gradient) or SGD with momentum;
  - batches: --batch-size B takes examples (s-1)B .. sB-1 of a sequence of per-epoch permutations
    (Session::examples_for_step); --batch-tokens N (batch_tokens in the config) cuts each epoch's
    permutation into pools, sorts each pool by length and takes as many examples per batch as fit N
    padded positions (batch size x the longer of the longest source and the longest target + 1), then
    shuffles the epoch's batches (the cost is --batch-tokens' definition in `tapegrad train --help`; the
    pools of --batch-tokens-pool mean batches and the shuffle are this replica's reading of "length
    bucketing", written before tapegrad's bucketing code existed: check them against it);
  - greedy decoding up to decode_max_len (and max_len - 1) tokens, stopping at <eos>, decoded with
    SentencePiece.
Only statistically the same: every random draw (initial values, the epoch permutations, the order of
the batches, dropout masks) comes from torch's / Python's generators seeded with the config's seed, not
from tapegrad's, so the two runs see the same distributions, not the same numbers. Floating-point
summation order differs too.

The throughput reported is the median over the steps after --timing-warmup of the step's target tokens
(non-pad, <eos> included: tapegrad's tok/s) over its wall time (forward, backward, clip, update), and
the padding fraction is the share of <pad> among the batch's source and target positions.

Run it with Debian's PyTorch (python3-torch 1.13) and python3-sentencepiece; it re-executes itself
with the OpenMP OpenBLAS first and without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, as torch_train.py
says why. `tools/run bench --translate DIR [ARGS]` installs both and runs it.
Options: --threads N (default: the config's), --steps N (default: the config's), --out FILE (default
DIR/torch-test-hyp.txt), --test FILE (a TSV or a file of source lines; default test.tsv beside the
config's train file), --log-every N, --timing-warmup N, --spm-model FILE, --batch-tokens-pool N.

Tested end to end on a tiny run (300 training pairs, d_model 32, 4 steps; a few seconds):
  tapegrad train --model transformer --train train.tsv --valid valid.tsv --tokens sentencepiece \\
      --vocab-size 200 --d-model 32 --heads 2 --layers 1 --d-ff 64 --steps 4 --batch-size 8 --out run
  /usr/bin/python3 bench/torch_translate.py run --test test.tsv --threads 1
"""
import argparse
import json
import math
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train  # noqa: E402  (tapegrad_transformer, openmp_blas_env)

PAD, BOS, EOS = 0, 1, 2
REEXEC_MARK = "TORCH_TRANSLATE_ENV_SET"


def fail(msg):
    print(f"torch_translate.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_tsv(path):
    """(sources, targets) of a 'source<TAB>target' file as tapegrad reads it (data::read_tsv_text)."""
    src, tgt = [], []
    with open(path, encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line.endswith("\r"):
                line = line[:-1]
            if not line.strip():
                continue
            if line.count("\t") != 1:
                fail(f"{path}:{lineno}: expected 'source<TAB>target'")
            s, t = line.split("\t")
            src.append(s), tgt.append(t)
    return src, tgt


def read_sources(path):
    """The source column of a TSV, or every line of a plain file of sources."""
    with open(path, encoding="utf-8-sig") as f:
        lines = [l.rstrip("\n").rstrip("\r") for l in f]
    if lines and all("\t" in l for l in lines if l.strip()):
        return [l.split("\t")[0] for l in lines if l.strip()]
    return lines


def learning_rate(schedule, base, step, warmup, total, min_ratio):
    """optim::learning_rate."""
    t = float(max(step, 1))
    w = float(max(warmup, 0))
    ramp = min(1.0, t / w) if w > 0 else 1.0
    if schedule == "constant":
        return base * ramp
    if schedule in ("inverse_sqrt", "noam", "rsqrt"):
        return base * min(t / w, math.sqrt(w / t)) if w > 0 else base / math.sqrt(t)
    if schedule == "cosine":
        if w > 0 and t < w:
            return base * ramp
        span = max(1.0, float(total) - w)
        progress = min(max((t - w) / span, 0.0), 1.0)
        return base * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
    fail(f"config.json: schedule: unknown {schedule!r}")


class Batches:
    """Step s's examples (1-based), as tapegrad's Session chooses them: the per-epoch permutations come
    from Python's generator seeded by (seed, epoch) instead of tapegrad's."""

    def __init__(self, examples, seed, batch_size, batch_tokens, pool):
        self.examples, self.seed, self.B, self.N, self.pool = examples, seed, batch_size, batch_tokens, pool
        self.perms, self.epoch_batches = {}, {}
        self.cursor = (0, 0)  # (epoch, batch index) of the next batch in --batch-tokens mode

    def permutation(self, epoch):
        if epoch not in self.perms:
            perm = list(range(len(self.examples)))
            random.Random(f"{self.seed}:{epoch}").shuffle(perm)
            self.perms = {epoch: perm}  # only the current epoch is needed
        return self.perms[epoch]

    def cost(self, ex):
        return max(len(ex[0]), len(ex[1]) + 1)

    def token_batches(self, epoch):
        perm = self.permutation(epoch)
        batches = []
        for start in range(0, len(perm), self.pool):
            chunk = sorted(perm[start: start + self.pool], key=lambda i: self.cost(self.examples[i]))
            cur, longest = [], 0
            for i in chunk:
                c = self.cost(self.examples[i])
                if cur and (len(cur) + 1) * max(longest, c) > self.N:
                    batches.append(cur)
                    cur, longest = [], 0
                cur.append(i)
                longest = max(longest, c)
            if cur:
                batches.append(cur)
        random.Random(f"{self.seed}:{epoch}:batches").shuffle(batches)
        return batches

    def next(self, step):
        if self.N <= 0:
            n = len(self.examples)
            out = []
            for i in range(self.B):
                k = (step - 1) * self.B + i
                out.append(self.examples[self.permutation(k // n)[k % n]])
            return out
        epoch, index = self.cursor
        if epoch not in self.epoch_batches:
            self.epoch_batches = {epoch: self.token_batches(epoch)}
        batches = self.epoch_batches[epoch]
        self.cursor = (epoch, index + 1) if index + 1 < len(batches) else (epoch + 1, 0)
        return [self.examples[i] for i in batches[index]]


def make_batch(torch, examples):
    """data::make_batch: (src [B,S], tgt_in [B,T], tgt_out [B,T], target tokens, padded positions, positions)."""
    S = max(1, max(len(s) for s, _ in examples))
    T = max(len(t) + 1 for _, t in examples)
    B = len(examples)
    src = torch.full((B, S), PAD, dtype=torch.long)
    tgt_in = torch.full((B, T), PAD, dtype=torch.long)
    tgt_out = torch.full((B, T), PAD, dtype=torch.long)
    for b, (s, t) in enumerate(examples):
        if s:
            src[b, : len(s)] = torch.tensor(s)
        tgt_in[b, 0] = BOS
        if t:
            tgt_in[b, 1: len(t) + 1] = torch.tensor(t)
            tgt_out[b, : len(t)] = torch.tensor(t)
        tgt_out[b, len(t)] = EOS
    tokens = sum(len(t) + 1 for _, t in examples)
    real = sum(len(s) for s, _ in examples) + tokens
    return src, tgt_in, tgt_out, tokens, B * S + B * T - real, B * S + B * T


def greedy(torch, model, srcs, max_len, batch=64):
    """Transformer::greedy_decode, without the KV cache (the prefix re-run each step: the same
    tokens up to float rounding), on batches of similar length."""
    model.eval()
    order = sorted(range(len(srcs)), key=lambda i: len(srcs[i]))
    out = [None] * len(srcs)
    with torch.no_grad():
        for start in range(0, len(order), batch):
            idx = order[start: start + batch]
            S = max(1, max(len(srcs[i]) for i in idx))
            src = torch.full((len(idx), S), PAD, dtype=torch.long)
            for b, i in enumerate(idx):
                if srcs[i]:
                    src[b, : len(srcs[i])] = torch.tensor(srcs[i])
            memory, mask = model.encode(src)
            prefix = torch.full((len(idx), 1), BOS, dtype=torch.long)
            finished = torch.zeros(len(idx), dtype=torch.bool)
            for _ in range(max_len):
                nxt = model.decode(prefix, memory, mask)[:, -1].argmax(-1)
                nxt = torch.where(finished, torch.full_like(nxt, PAD), nxt)
                finished |= nxt == EOS
                prefix = torch.cat([prefix, nxt.unsqueeze(1)], 1)
                if bool(finished.all()):
                    break
            for b, i in enumerate(idx):
                ids = []
                for tok in prefix[b, 1:].tolist():
                    if tok in (EOS, PAD):
                        break
                    ids.append(tok)
                out[i] = ids
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a tapegrad run directory (its config.json and sentencepiece.model)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: the config's)")
    ap.add_argument("--steps", type=int, default=None, help="steps to train (default: the config's)")
    ap.add_argument("--out", default=None, help="greedy test translations (default RUN/torch-test-hyp.txt)")
    ap.add_argument("--test", default=None, help="test TSV or source lines (default: test.tsv beside train)")
    ap.add_argument("--spm-model", default=None, help="SentencePiece model (default RUN/sentencepiece.model)")
    ap.add_argument("--log-every", type=int, default=None, help="log every N steps (default: the config's)")
    ap.add_argument("--timing-warmup", type=int, default=10, help="steps left out of the median tok/s")
    ap.add_argument("--batch-tokens-pool", type=int, default=100,
                    help="--batch-tokens: sort pools of N x (the mean batch size) examples")
    a = ap.parse_args()

    if os.environ.get(REEXEC_MARK) != "1":  # the BLAS is chosen when the process starts
        env = torch_train.openmp_blas_env("torch_translate.py")
        env[REEXEC_MARK] = "1"
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]], env)

    import torch
    from torch import nn
    import sentencepiece as spm

    cfg_path = os.path.join(a.run, "config.json")
    try:
        with open(cfg_path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{cfg_path}: {e}")
    m = cfg.get("model", {})
    if m.get("model") != "transformer":
        fail(f"{cfg_path}: model.model is {m.get('model')!r}, this replica is of the transformer")
    if cfg.get("tokens") != "sentencepiece" and not a.spm_model:
        fail(f"{cfg_path}: tokens is {cfg.get('tokens')!r}; the replica needs SentencePiece (or --spm-model FILE)")
    if cfg.get("spm_sides", "joint") != "joint":
        fail(f"{cfg_path}: spm_sides {cfg.get('spm_sides')!r}: only a joint SentencePiece model is replicated")
    spm_path = a.spm_model or os.path.join(a.run, "sentencepiece.model")
    sp = spm.SentencePieceProcessor()
    try:
        sp.Load(spm_path)
    except (OSError, RuntimeError) as e:
        fail(f"{spm_path}: {e}")
    for i, piece in enumerate(("<pad>", "<s>", "</s>", "<unk>")):
        if sp.IdToPiece(i) != piece and not (i == 1 and sp.IdToPiece(i) == "<bos>") and not (
                i == 2 and sp.IdToPiece(i) == "<eos>"):
            fail(f"{spm_path}: piece {i} is {sp.IdToPiece(i)!r}, expected ids 0-3 <pad> <bos> <eos> <unk>")
    V = int(m.get("vocab_size", sp.GetPieceSize()))
    if V != sp.GetPieceSize():
        fail(f"{cfg_path}: model.vocab_size {V} but {spm_path} has {sp.GetPieceSize()} pieces")

    seed = int(cfg.get("seed", 1))
    torch.manual_seed(seed)
    threads = a.threads or int(cfg.get("threads", 1))
    torch.set_num_threads(threads)
    steps = a.steps if a.steps is not None else int(cfg["steps"])
    log_every = a.log_every or int(cfg.get("log_every", 50))
    max_len = int(m.get("max_len", 512))

    def encode(lines):
        return [sp.EncodeAsIds(l) for l in lines]

    train_src, train_tgt = read_tsv(cfg["train"])
    train = list(zip(encode(train_src), encode(train_tgt)))
    for s, t in train:
        if max(len(s), len(t) + 1) > max_len:
            fail(f"{cfg['train']}: a pair of {max(len(s), len(t) + 1)} tokens is longer than max_len {max_len}")
    if not cfg.get("valid"):
        print("note: the config has no valid file; tapegrad held out valid_fraction of train with its own "
              "generator, so this replica trains on all of train", file=sys.stderr)

    model = torch_train.tapegrad_transformer(
        torch, nn, V, int(m["d_model"]), int(m["heads"]), int(m["layers"]), int(m["d_ff"]),
        dropout=float(m.get("dropout", 0.0)), activation=m.get("activation", "relu"),
        norm_first=bool(m.get("norm_first", False)), positional=m.get("positional", "sinusoidal"),
        max_len=max_len, tie_embeddings=bool(m.get("tie_embeddings", False)))
    params = sum(p.numel() for p in model.parameters())

    betas = tuple(cfg.get("betas", (cfg.get("beta1", 0.9), cfg.get("beta2", 0.98))))
    eps = float(cfg.get("eps", cfg.get("adam_eps", 1e-9)))
    lr, wd = float(cfg["lr"]), float(cfg.get("weight_decay", 0.0))
    min_ratio = float(cfg["min_lr_ratio"]) if "min_lr_ratio" in cfg else float(cfg.get("min_lr", 0.0)) / lr
    name = cfg.get("optimizer", "adamw")
    if name == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=wd)
    elif name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=wd)
    elif name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=float(cfg.get("momentum", 0.9)), weight_decay=wd)
    else:
        fail(f"{cfg_path}: optimizer: unknown {name!r}")
    clip = float(cfg.get("clip", 0.0))
    smoothing = float(cfg.get("label_smoothing", 0.0))
    schedule, warmup = cfg.get("schedule", "constant"), int(cfg.get("warmup", 0))
    total = int(cfg["steps"])  # the schedule's length is the run's, even when --steps cuts it short
    batch_tokens = int(cfg.get("batch_tokens", 0))
    batch_size = int(cfg.get("batch_size", 64))
    mean_batch = batch_size if batch_tokens <= 0 else max(1, batch_tokens // max(
        1, round(statistics.mean(max(len(s), len(t) + 1) for s, t in train))))
    batches = Batches(train, seed, batch_size, batch_tokens, a.batch_tokens_pool * mean_batch)

    print(f"PyTorch {torch.__version__}, {threads} thread(s); transformer with {params} parameters, vocab {V}, "
          f"{len(train)} training pairs; {steps} steps, "
          + (f"--batch-tokens {batch_tokens}" if batch_tokens > 0 else f"--batch-size {batch_size}")
          + f", {name} lr {lr:g} {schedule} warmup {warmup}, clip {clip:g}, label smoothing {smoothing:g}",
          flush=True)
    model.train()
    rates, padded, positions, losses = [], 0, 0, []
    started = time.perf_counter()
    for step in range(1, steps + 1):
        src, tgt_in, tgt_out, tokens, pads, cells = make_batch(torch, batches.next(step))
        t0 = time.perf_counter()
        rate = learning_rate(schedule, lr, step, warmup, total, min_ratio)
        for g in opt.param_groups:
            g["lr"] = rate
        logits = model(src, tgt_in)
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=PAD,
                                           label_smoothing=smoothing)
        if not math.isfinite(loss.item()):
            fail(f"step {step}: the loss is {loss.item()}")
        loss.backward()
        norm = float(nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else float("inf")))
        opt.step()
        opt.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        losses.append(loss.item())
        if step > a.timing_warmup:
            rates.append(tokens / seconds)
        padded, positions = padded + pads, positions + cells
        if step % log_every == 0 or step == steps or step == 1:
            print(f"step {step}/{steps}  loss {loss.item():.4f}  lr {rate:.2e}  grad_norm {norm:.3f}  "
                  f"{tokens / seconds:.0f} tok/s  padding {pads / cells:.3f}  "
                  f"elapsed {time.perf_counter() - started:.0f}s", flush=True)
    median = statistics.median(rates) if rates else float("nan")
    print(f"median target tokens/s after {a.timing_warmup} warm-up steps: {median:.0f} "
          f"({len(rates)} steps); padding {padded / positions:.3f} of the batches' positions", flush=True)

    if cfg.get("valid"):
        vsrc, vtgt = read_tsv(cfg["valid"])
        valid = list(zip(encode(vsrc), encode(vtgt)))
        model.eval()
        total_loss, count = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(valid), 64):
                src, tgt_in, tgt_out, tokens, _, _ = make_batch(torch, valid[start: start + 64])
                lg = model(src, tgt_in)
                total_loss += nn.functional.cross_entropy(lg.reshape(-1, V), tgt_out.reshape(-1),
                                                          ignore_index=PAD, reduction="sum").item()
                count += tokens
        print(f"valid loss {total_loss / count:.4f} nats per target token ({len(valid)} pairs, no smoothing)")

    test = a.test or os.path.join(os.path.dirname(cfg["train"]), "test.tsv")
    sources = read_sources(test)
    decode_len = min(int(cfg.get("decode_max_len", max_len - 1)), max_len - 1)
    t0 = time.perf_counter()
    hyps = greedy(torch, model, encode(sources), decode_len)
    out = a.out or os.path.join(a.run, "torch-test-hyp.txt")
    with open(out, "w", encoding="utf-8") as f:
        for ids in hyps:
            f.write(sp.DecodeIds(ids).replace("\n", " ") + "\n")
    print(f"{len(hyps)} greedy translations of {test} written to {out} ({time.perf_counter() - t0:.0f}s); "
          f"score with: tapegrad score --ref REF --hyp {out}")


if __name__ == "__main__":
    main()
