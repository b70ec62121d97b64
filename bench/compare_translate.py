#!/usr/bin/python3
"""Target tokens per second of a tapegrad Transformer run against its PyTorch replica, interleaved.

For each round and thread count: a short run of `tapegrad train` with the run's own options (its
config.json, its SentencePiece model reused, a 5-pair validation file so the final greedy evaluation
costs nothing), then the same number of steps of bench/torch_translate.py on the same run directory.
Each side's figure is the median per-step target tokens per second after the warm-up steps; the
table gives every round and the ratio tapegrad / PyTorch. Run it alone on the machine:
  bench/compare_translate.py runs/mt [--rounds 2] [--steps 30] [--warmup 8] [--threads 1,2]
Options: --tapegrad PATH (default build/tools/tapegrad).
"""
import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def tiny_valid(run, work):
    """Five lines of the run's validation file: the timed runs' end-of-run scoring stays short."""
    c = json.load(open(os.path.join(run, "config.json")))
    tiny = os.path.join(work, "tiny.tsv")
    with open(c["valid"] or c["train"], encoding="utf-8") as f, open(tiny, "w", encoding="utf-8") as out:
        out.writelines(line for _, line in zip(range(5), f))
    return tiny


def tapegrad_rate(a, tiny, threads, work):
    out = tempfile.mkdtemp(prefix="run-", dir=work)
    # The run's options with its trained SentencePiece model in place of training a new one.
    cmd = [a.tapegrad, "train", "--config", os.path.join(a.run, "config.json"),
           "--spm-model", os.path.abspath(os.path.join(a.run, "sentencepiece.model")), "--steps", str(a.steps),
           "--eval-every", "0", "--log-every", "1", "--save-every", "0", "--valid", tiny, "--threads", str(threads),
           "--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"compare_translate.py: tapegrad failed: {p.stderr.strip()[-400:]}")
    rates = [float(r["tokens_per_second"]) for r in csv.DictReader(open(os.path.join(out, "metrics.csv")))
             if r["tokens_per_second"]]
    return statistics.median(rates[a.warmup:])


def torch_rate(a, tiny, threads, work):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_translate.py"), a.run, "--threads", str(threads),
           "--steps", str(a.steps), "--timing-warmup", str(a.warmup), "--log-every", str(a.steps + 1),
           "--test", tiny, "--out", os.path.join(work, "hyp.txt")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"median target tokens/s after \d+ warm-up steps: (\d+)", p.stdout)
    if p.returncode != 0 or not m:
        sys.exit(f"compare_translate.py: torch_translate.py failed: {(p.stderr or p.stdout).strip()[-400:]}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a tapegrad Transformer run directory trained with --tokens sentencepiece")
    ap.add_argument("--tapegrad", default="build/tools/tapegrad")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="compare-translate-")
    tiny = tiny_valid(a.run, work)
    rows = []
    for rnd in range(1, a.rounds + 1):
        for t in [int(x) for x in a.threads.split(",")]:
            tg, pt = tapegrad_rate(a, tiny, t, work), torch_rate(a, tiny, t, work)
            rows.append((rnd, t, tg, pt))
            print(f"round {rnd} threads {t}: tapegrad {tg:.0f} tok/s, torch {pt:.0f} tok/s", flush=True)
    subprocess.run(["rm", "-rf", work])
    print("\n| round | threads | tapegrad tok/s | PyTorch tok/s | tapegrad / PyTorch |\n|---|---|---|---|---|")
    for rnd, t, tg, pt in rows:
        print(f"| {rnd} | {t} | {tg:.0f} | {pt:.0f} | {tg / pt:.2f}x |")


if __name__ == "__main__":
    main()
