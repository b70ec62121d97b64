#!/usr/bin/python3
"""Per-op cost of the Python layer on tiny tensors: tapegrad against PyTorch eager, interleaved.

The workload (issue #24), the same in both frameworks:
  a, b   two float32 leaves of 16 elements with requires_grad, made once per run
  loop   N times (default 10,000): c = a * b + a, each c kept in a list (2 recorded ops per iteration)
  loss   the sum of all the c: stack(cs).sum() (2 more recorded ops)
  back   loss.backward(): 2N + 2 entries walked, a.grad and b.grad written
What is timed, per run (a fresh pair of leaves each time, the gradients of the last run dropped, the
garbage collector run before the clock starts and left on during it, as a user has it):
  forward  the loop alone
  step     the loop + the loss + backward, the whole thing a user waits for
Per-op figures divide by the 2N ops of the loop (the loss's two ops and backward's entries are part of
the step's cost, charged to the loop's ops as a user pays them). Each round runs tapegrad and then torch,
or torch and then tapegrad on odd rounds, so a machine that slows down or speeds up affects both alike;
printed are the median over rounds of each side and the ratio tapegrad / torch (below 1: tapegrad is
cheaper). Both run on one thread (torch.set_num_threads(1); tapegrad's kernels on 16 elements never fork).
Before timing, both sides' results are checked against each other (loss and gradients), so the two
loops compute the same thing.

Run it alone on the machine, from the repository root:
  PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--iters N] [--rounds R]
Without torch (Debian's python3-torch) it times tapegrad only.
"""
import argparse
import gc
import statistics
import sys
import time

import numpy as np

import tapegrad as tg

try:
    import torch
except ImportError:
    torch = None

SIZE = 16


def leaves(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(SIZE).astype(np.float32), rng.standard_normal(SIZE).astype(np.float32))


def run_loop(leaf, stack, iters, a0, b0):
    """The timed loop, the same code for both frameworks: leaf(array) makes a leaf with grad, stack joins."""
    a, b = leaf(a0), leaf(b0)
    gc.collect()
    t0 = time.perf_counter()
    cs = []
    for _ in range(iters):
        c = a * b + a
        cs.append(c)
    t1 = time.perf_counter()
    loss = stack(cs).sum()
    loss.backward()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t0, (loss.item(), a.grad.numpy().copy(), b.grad.numpy().copy())


def run_tapegrad(iters, a0, b0):
    return run_loop(lambda x: tg.tensor(x.copy(), requires_grad=True), tg.ops.stack, iters, a0, b0)


def run_torch(iters, a0, b0):
    return run_loop(lambda x: torch.tensor(x, requires_grad=True), torch.stack, iters, a0, b0)


def check_agreement(iters, a0, b0):
    # The same arithmetic in float32, summed in different orders: loose relative tolerances.
    loss_tg, da_tg, db_tg = run_tapegrad(iters, a0, b0)[2]
    loss_pt, da_pt, db_pt = run_torch(iters, a0, b0)[2]
    ok = (abs(loss_tg - loss_pt) <= 1e-4 * max(1.0, abs(loss_pt)) and np.allclose(da_tg, da_pt, rtol=1e-4)
          and np.allclose(db_tg, db_pt, rtol=1e-4))
    if not ok:
        sys.exit(f"python_overhead: tapegrad and torch disagree: loss {loss_tg} vs {loss_pt}, "
                 f"da max diff {np.abs(da_tg - da_pt).max()}, db max diff {np.abs(db_tg - db_pt).max()}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iters", type=int, default=10000, help="loop iterations per run (2 ops each)")
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds (median reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    args = p.parse_args()

    a0, b0 = leaves(0)
    sides = {"tapegrad": run_tapegrad}
    if torch is not None:
        torch.set_num_threads(1)
        sides["torch"] = run_torch
        check_agreement(args.iters, a0, b0)
    else:
        print("python_overhead: torch does not import (apt-get install python3-torch): tapegrad only")
    times = {name: {"forward": [], "step": []} for name in sides}
    names = list(sides)
    for r in range(args.warmup + args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            forward, step, _ = sides[name](args.iters, a0, b0)
            if r >= args.warmup:
                times[name]["forward"].append(forward)
                times[name]["step"].append(step)

    ops = 2 * args.iters
    versions = f"tapegrad (numpy {np.__version__})" + (f", torch {torch.__version__}" if torch else "")
    print(f"python_overhead: {args.iters} iterations of c = a * b + a on {SIZE}-element float32 leaves "
          f"with grad, then stack(cs).sum().backward(); {args.rounds} interleaved rounds, medians; {versions}")
    print(f"{'':10} {'forward us/op':>14} {'step us/op':>11} {'forward ms':>11} {'step ms':>8} {'step min ms':>12}")
    med = {}
    for name in names:
        f, s = statistics.median(times[name]["forward"]), statistics.median(times[name]["step"])
        med[name] = (f, s)
        print(f"{name:10} {f / ops * 1e6:14.2f} {s / ops * 1e6:11.2f} {f * 1e3:11.1f} {s * 1e3:8.1f} "
              f"{min(times[name]['step']) * 1e3:12.1f}")
    if "torch" in med:
        (ft, st), (fp, sp) = med["tapegrad"], med["torch"]
        print(f"ratio tapegrad / torch: forward {ft / fp:.2f}, step {st / sp:.2f} (below 1: tapegrad is cheaper)")


if __name__ == "__main__":
    main()
