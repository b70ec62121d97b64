#!/usr/bin/python3
"""tapegrad's gpt against its PyTorch replica (bench/torch_gpt.py) on one text file, nanoGPT's CPU recipe.

Two measurements, both printed as a table:
  time   interleaved: --rounds rounds, each running a short timed run (--timing-iters iterations) of
         tapegrad and then of the replica at each of --threads, so a machine that speeds up or slows down
         over the run affects both alike. Each run reports its median iteration after its first 10
         (tapegrad: the step time in metrics.csv, batch_size x block_size / tokens_per_second with
         --log-every 1; the replica: the same span, forward to update). Printed: the median over rounds of
         each side and the ratio replica / tapegrad (above 1: tapegrad is faster).
  loss   for each of --seeds, a full run of each side (--iters iterations at --loss-threads), the
         validation loss at the last iteration on the same evenly spaced validation blocks; printed per
         seed, then each side's mean and spread (max - min) and the difference of the means, with the
         issue's target: within 0.03 nats or within the seeds' spread, whichever is wider.
Both sides take the recipe from RECIPE below (one list, so they cannot drift apart). Run it alone on the
machine; a full comparison (3 seeds x 2000 iterations x 2 sides) takes tens of minutes. A smoke test:
  bench/compare_gpt.py --text data/bible-en.txt --iters 20 --timing-iters 15 --rounds 1 --seeds 1
Options: --tapegrad PATH (default build/tools/tapegrad), --skip-time, --skip-loss.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import json

HERE = os.path.dirname(os.path.abspath(__file__))
# nanoGPT's CPU recipe (its README's Shakespeare-character command): tapegrad flag -> replica flag, value.
RECIPE = [
    ("--block-size", "--block-size", "64"), ("--batch-size", "--batch-size", "12"), ("--layers", "--layers", "4"),
    ("--heads", "--heads", "4"), ("--d-model", "--d-model", "128"), ("--lr", "--lr", "1e-3"),
    ("--min-lr", "--min-lr", "1e-4"), ("--warmup", "--warmup", "100"), ("--beta2", "--beta2", "0.99"),
    ("--adam-eps", "--eps", "1e-8"), ("--weight-decay", "--weight-decay", "0.1"), ("--clip", "--clip", "1.0"),
    ("--valid-size", "--valid-size", "500"),
]
TAPEGRAD_FIXED = ["--model", "gpt", "--dropout", "0", "--optimizer", "adamw", "--schedule", "cosine", "--decay", "matrices"]


def tapegrad_run(a, threads, iters, seed, eval_every):
    out = tempfile.mkdtemp(prefix="compare-gpt-")
    cmd = [a.tapegrad, "train", "--text", a.text, *TAPEGRAD_FIXED, *[x for f, _, v in RECIPE for x in (f, v)],
           "--threads", str(threads), "--seed", str(seed), "--steps", str(iters), "--eval-every", str(eval_every),
           "--log-every", "1", "--save-every", "0", "--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"compare_gpt.py: tapegrad failed: {p.stderr.strip()[-500:]}")
    rows = list(csv.DictReader(open(os.path.join(out, "metrics.csv"))))
    recipe = {f: v for f, _, v in RECIPE}
    tokens = int(recipe["--batch-size"]) * int(recipe["--block-size"])  # target tokens of a step
    steps = [1e3 * tokens / float(r["tokens_per_second"]) for r in rows if r["tokens_per_second"]]
    valid = [float(r["valid_loss"]) for r in rows if r["valid_loss"]]
    subprocess.run(["rm", "-rf", out])
    timed = steps[10:] or steps
    return {"median_iter_ms": statistics.median(timed), "valid_loss": valid[-1]}


def torch_run(a, threads, iters, seed, eval_interval):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_gpt.py"), "--text", a.text, "--json",
           *[x for _, f, v in RECIPE for x in (f, v)], "--threads", str(threads), "--seed", str(seed),
           "--iters", str(iters), "--eval-interval", str(eval_interval)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"compare_gpt.py: torch_gpt.py failed: {(p.stderr or p.stdout).strip()[-500:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", default="data/bible-en.txt")
    ap.add_argument("--tapegrad", default="build/tools/tapegrad")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--loss-threads", type=int, default=2)
    ap.add_argument("--timing-iters", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-time", action="store_true")
    ap.add_argument("--skip-loss", action="store_true")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    if not a.skip_time:
        times = {(side, t): [] for side in ("tapegrad", "torch") for t in threads}
        for r in range(a.rounds):
            for t in threads:
                times[("tapegrad", t)].append(tapegrad_run(a, t, a.timing_iters, 1, 0)["median_iter_ms"])
                times[("torch", t)].append(torch_run(a, t, a.timing_iters, 1, 0)["median_iter_ms"])
                print(f"round {r + 1} threads {t}: tapegrad {times[('tapegrad', t)][-1]:.2f} ms, "
                      f"torch {times[('torch', t)][-1]:.2f} ms", flush=True)
        print("\n| threads | tapegrad ms/iter | PyTorch ms/iter | PyTorch / tapegrad |\n|---|---|---|---|")
        for t in threads:
            ours, theirs = statistics.median(times[("tapegrad", t)]), statistics.median(times[("torch", t)])
            print(f"| {t} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f}x |")
    if not a.skip_loss:
        seeds = [int(s) for s in a.seeds.split(",")]
        ours, theirs = [], []
        print(f"\n| seed | tapegrad valid loss @ {a.iters} | PyTorch valid loss @ {a.iters} |\n|---|---|---|")
        for s in seeds:
            ours.append(tapegrad_run(a, a.loss_threads, a.iters, s, 0)["valid_loss"])
            theirs.append(torch_run(a, a.loss_threads, a.iters, s, 0)["valid_loss"])
            print(f"| {s} | {ours[-1]:.4f} | {theirs[-1]:.4f} |", flush=True)
        m_ours, m_theirs = statistics.mean(ours), statistics.mean(theirs)
        spread = max(max(theirs) - min(theirs), max(ours) - min(ours))
        allowed = max(0.03, spread)
        print(f"\nmean: tapegrad {m_ours:.4f} (spread {max(ours) - min(ours):.4f}), PyTorch {m_theirs:.4f} "
              f"(spread {max(theirs) - min(theirs):.4f}); difference {m_ours - m_theirs:+.4f} nats, allowed "
              f"{allowed:.4f}: {'within' if abs(m_ours - m_theirs) <= allowed else 'NOT within'}")


if __name__ == "__main__":
    main()
