#!/usr/bin/python3
"""Data-parallel scaling: `tapegrad train` in one process and under `mpirun -np N`, one table.

For bench_train's two Transformers (same shapes: the default one, batch 64, lengths 32, vocabulary 32;
the base one, batch 32, lengths 64, vocabulary 1000; dropout 0, AdamW), trained on a generated TSV of
random sequences and their reversals (every source exactly the length, so no padding), it runs:
  1 process at 1 thread (the baseline) and at 2 threads (the other way to use two cores),
  mpirun -np 1, 2 and 4 at 1 thread per rank (4 ranks on a 2-core machine are oversubscribed: two
  processes share each core, so the best possible speed-up is 2, the efficiency at most 0.5),
  mpirun -np 2 with buckets of 1 MiB, and with one bucket of all gradients (sent when backward has completed all of them:
  what the all-reduce costs when nothing hides it), and with the deterministic (rank-order) sum.
The global batch is the same in every row (strong scaling). Each row's figures come from rank 0's
closing line and metrics.csv: the median wall time of the steps after the first (metrics.csv), and the
means of backward's part of a step and of the time spent after backward waiting for the gradient sums
(the all-reduce share not hidden behind backward, plus any wait for a slower rank; part of backward).
speed-up = baseline ms / row ms; efficiency = speed-up / ranks (1 process rows: / threads).

Usage: bench/distributed_scaling.py [--build DIR] [--models transformer,transformer_base]
                                    [--steps-default 30] [--steps-base 4] [--markdown]
Run it under the exclusive CPU lock on a quiet machine:
  flock -x /work/cpu.lock bench/distributed_scaling.py --markdown
About 30 s for the default Transformer and 3.5 min for the base one on a 2-core Zen 3.
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile

MODELS = {
    # name: (batch, length, vocabulary words, model options)
    "transformer": (64, 32, 28, "--d-model 128 --heads 4 --layers 2 --d-ff 512"),
    "transformer_base": (32, 64, 996, "--d-model 512 --heads 8 --layers 6 --d-ff 2048"),
}

SUMMARY = re.compile(r"data-parallel: (\d+) steps after the first, mean ([\d.]+) ms per step, of which ([\d.]+) ms "
                     r".*; backward ([\d.]+) ms")


def write_data(path, length, words, lines, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(lines):
            src = [f"w{rng.randrange(words)}" for _ in range(length)]
            # the target gains <eos>: length - 1 tokens make the decoder's T = length, as in bench_train
            f.write(" ".join(src) + "\t" + " ".join(reversed(src[1:])) + "\n")


def run(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default="transformer,transformer_base")
    ap.add_argument("--steps-default", type=int, default=30)
    ap.add_argument("--steps-base", type=int, default=4)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    tg = os.path.abspath(os.path.join(a.build, "tools", "tapegrad"))
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")}
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models.split(","):
            batch, length, words, shape = MODELS[model]
            train, valid = os.path.join(tmp, model + ".tsv"), os.path.join(tmp, model + "-valid.tsv")
            write_data(train, length, words, 4096, 1)
            write_data(valid, length, words, 1, 2)
            steps = a.steps_base if model == "transformer_base" else a.steps_default
            base = (f"train --model transformer {shape} --train {train} --valid {valid} --tokens whitespace "
                    f"--batch-size {batch} --steps {steps} --warmup 10 --dropout 0 --eval-every 0 "
                    f"--log-every 1 --seed 1").split()
            configs = [("1 process, 1 thread", 0, ["--threads", "1"]),
                       ("1 process, 2 threads", 0, ["--threads", "2"]),
                       ("mpirun -np 1", 1, ["--threads", "1"]),
                       ("mpirun -np 2", 2, ["--threads", "1"]),
                       ("mpirun -np 2, buckets of 1 MiB", 2, ["--threads", "1", "--bucket-mb", "1"]),
                       ("mpirun -np 2, one bucket", 2, ["--threads", "1", "--bucket-mb", "65536"]),
                       ("mpirun -np 2, deterministic", 2, ["--threads", "1", "--deterministic-allreduce"]),
                       ("mpirun -np 4 (oversubscribed)", 4, ["--threads", "1"])]
            baseline = None
            for label, ranks, extra in configs:
                with tempfile.TemporaryDirectory() as out:
                    cmd = ([] if ranks == 0 else mpirun + ["-np", str(ranks)]) + [tg] + base + extra
                    text = run(cmd + ["--out", os.path.join(out, "run")], env)
                    ms = median_step_ms(os.path.join(out, "run", "metrics.csv"), batch * length)
                wait, backward = 0.0, float("nan")
                if ranks:
                    m = SUMMARY.search(text)
                    if not m:
                        sys.exit(f"no closing data-parallel line from {label}:\n{text[-2000:]}")
                    wait, backward = float(m.group(3)), float(m.group(4))
                if baseline is None:
                    baseline = ms
                workers = ranks if ranks else int(extra[1])
                speedup = baseline / ms
                rows.append((model, label, ms, backward, wait, 100 * wait / ms, batch * length / ms * 1e3, speedup,
                             speedup / workers))
                print(f"{model:17s} {label:32s} {ms:9.1f} ms", file=sys.stderr, flush=True)
    head = ("model", "run", "ms/step", "backward ms", "wait ms", "wait %", "tokens/s", "speed-up", "efficiency")
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.1f} | {r[5]:.1f} | {r[6]:.0f} | {r[7]:.2f} | "
                  f"{r[8]:.2f} |")
    else:
        print("%-17s %-32s %9s %11s %8s %7s %9s %8s %10s" % head)
        for r in rows:
            print("%-17s %-32s %9.1f %11.1f %8.1f %7.1f %9.0f %8.2f %10.2f" % r)


def median_step_ms(metrics, tokens):
    """Median wall time of the steps after the first (a warm-up), from metrics.csv's tokens_per_second
    (a step's target tokens over its own wall time; every step has batch x length target tokens). The
    median, because a shared machine disturbs some steps."""
    times = []
    with open(metrics) as f:
        header = f.readline().strip().split(",")
        tps = header.index("tokens_per_second")
        for line in f:
            cols = line.strip().split(",")
            if cols[1] and int(cols[0]) > 1:
                times.append(tokens / float(cols[tps]) * 1e3)
    times.sort()
    return times[len(times) // 2] if len(times) % 2 else (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2


if __name__ == "__main__":
    main()
