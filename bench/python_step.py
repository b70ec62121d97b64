#!/usr/bin/python3
"""One training step driven from Python against the same step driven from C++ (build/bench/step_driver).

Both sides build the same model from the same seeds, on the same data, and time the same step: forward,
cross_entropy, backward, AdamW(lr 1e-3, weight decay 0.01) step, zero_grad (the models and data are
described in bench/step_driver.cpp; here they are written with the Python module: nn.GPT, or three
nn.Linear with exact GELU between, and optim.AdamW). Each measurement is a fresh process (this script
with --side python, or the driver), run with TAPEGRAD_THREADS set, that takes --warmup untimed steps and
then times --steps steps; its median step is one sample. Rounds interleave the two sides (the order
alternating from round to round) for every model and thread count, so a machine that slows down affects
both alike. Printed per row: each side's median over rounds of the per-process medians, the best
process median, and the ratio Python / C++ (1.00: no cost for driving from Python). The first losses of
the two sides must agree, or the script stops: they ran the same computation.

Run it alone on the machine, from the repository root (the build directory holds both the module and
the driver):
  PYTHONPATH=build/python /usr/bin/python3 bench/python_step.py [--models gpt,mlp] [--threads 1,2] [--rounds 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = {"gpt": 20, "mlp": 200}  # timed steps per process: about a second or two each


def gpt_workload(tg):
    import numpy as np
    vocab, batch, block = 65, 12, 64
    model = tg.nn.GPT(vocab, d_model=128, layers=4, heads=4, d_ff=512, block_size=block, dropout=0.0, seed=0)
    model.train()
    opt = tg.optim.AdamW(model, lr=1e-3, weight_decay=0.01)
    flat = (7919 * np.arange(batch * (block + 1), dtype=np.int64) + 13) % vocab
    grid = flat.reshape(batch, block + 1).astype(np.int32)
    ids, targets = tg.tensor(np.ascontiguousarray(grid[:, :block])), tg.tensor(np.ascontiguousarray(grid[:, 1:]))

    def step():
        loss = tg.ops.cross_entropy(model(ids), targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    return step


def mlp_workload(tg):
    import numpy as np
    batch, widths = 64, [784, 512, 512, 10]
    layers = [tg.nn.Linear(widths[l], widths[l + 1], seed=l + 1) for l in range(3)]
    params = [t for layer in layers for t in (layer.weight, layer.bias)]
    opt = tg.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    i = np.arange(batch * widths[0], dtype=np.int64)
    x = tg.tensor((((37 * i) % 101) / 101.0 - 0.5).astype(np.float32).reshape(batch, widths[0]))
    labels = tg.tensor((np.arange(batch) % widths[-1]).astype(np.int32))

    def step():
        h = x
        for l, layer in enumerate(layers):
            h = layer(h)
            if l + 1 < len(layers):
                h = h.gelu("none")
        loss = tg.ops.cross_entropy(h, labels)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    return step


def python_side(model, steps, warmup):
    """The measurement of one process: what the driver does, from Python; prints the same JSON."""
    import tapegrad as tg
    step = {"gpt": gpt_workload, "mlp": mlp_workload}[model](tg)
    first_loss = step()
    for _ in range(warmup - 1):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    threads = int(os.environ.get("TAPEGRAD_THREADS", "0"))
    print(json.dumps({"model": model, "threads": threads, "first_loss": first_loss, "step_ms": times}))


def measure(cmd, threads):
    env = dict(os.environ, TAPEGRAD_THREADS=str(threads))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"python_step: {' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return statistics.median(out["step_ms"]), out["first_loss"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="gpt,mlp")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per process (the first included)")
    p.add_argument("--steps", type=int, default=0, help="timed steps per process (0: the model's default)")
    p.add_argument("--driver", default=os.path.join("build", "bench", "step_driver"))
    p.add_argument("--side", choices=["python"], help=argparse.SUPPRESS)  # one measurement process
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        python_side(args.model, args.steps or STEPS[args.model], args.warmup)
        return
    if not os.path.exists(args.driver):
        sys.exit(f"python_step: no {args.driver} (build it: ninja -C build bench/step_driver)")

    models = args.models.split(",")
    thread_counts = [int(t) for t in args.threads.split(",")]
    samples = {(m, t, side): [] for m in models for t in thread_counts for side in ("python", "c++")}
    for r in range(args.rounds):
        for m in models:
            steps = str(args.steps or STEPS[m])
            cmds = {"python": [sys.executable, os.path.abspath(__file__), "--side", "python", "--model", m,
                               "--steps", steps, "--warmup", str(args.warmup)],
                    "c++": [args.driver, "--model", m, "--steps", steps, "--warmup", str(args.warmup)]}
            for t in thread_counts:
                losses = {}
                for side in (("python", "c++") if r % 2 == 0 else ("c++", "python")):
                    ms, losses[side] = measure(cmds[side], t)
                    samples[(m, t, side)].append(ms)
                if abs(losses["python"] - losses["c++"]) > 1e-5 * max(1.0, abs(losses["c++"])):
                    sys.exit(f"python_step: {m} first losses differ: Python {losses['python']}, C++ {losses['c++']}")

    print(f"python_step: one training step from Python and from C++, {args.rounds} interleaved rounds of fresh "
          f"processes, each the median of its timed steps ({args.warmup} untimed first)")
    print(f"{'model':6} {'threads':>7} {'python ms':>10} {'c++ ms':>8} {'python min':>11} {'c++ min':>8} {'python/c++':>11}")
    for m in models:
        for t in thread_counts:
            py, cc = samples[(m, t, "python")], samples[(m, t, "c++")]
            print(f"{m:6} {t:7} {statistics.median(py):10.2f} {statistics.median(cc):8.2f} {min(py):11.2f} "
                  f"{min(cc):8.2f} {statistics.median(py) / statistics.median(cc):11.3f}")


if __name__ == "__main__":
    main()
