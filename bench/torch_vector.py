#!/usr/bin/python3
"""PyTorch side of the vector-kernel comparison (bench/bench_vector.cpp is tapegrad's side).

Times torch's own kernels on the shapes bench_vector uses, float32, contiguous, output buffers
preallocated (out=) where torch allows it, so that only the kernel is timed:
  softmax        torch.softmax(x, dim=-1) over rows x cols
  layernorm      torch.nn.functional.layer_norm(x, (cols,), gamma, beta, 1e-5)
  gelu           torch.nn.functional.gelu(x, approximate="tanh") over 16M floats
For each (op, shape, threads) it prints the best and the median of the timed calls in ms (best of
--repeats runs of as many calls as fill about 0.2 s), under the same names as bench_vector's rows
with impl "torch". Threads: torch.set_num_threads(t) for t in --threads.

Use Debian's PyTorch (python3-torch, 1.13) through /usr/bin/python3, with the benchmark lock held
exclusively like every timing run:
  flock -x /work/cpu.lock /usr/bin/python3 bench/torch_vector.py --threads 1
"""
import argparse
import statistics
import time

import torch

SOFTMAX_SHAPES = [(4096, 1024), (8192, 256), (1000, 1000), (16384, 1024)]
LAYERNORM_SHAPES = [(4096, 1024), (8192, 256), (16384, 1024)]
GELU_N = 1 << 24


def time_call(fn, repeats):
    """Best and median seconds per call of fn over `repeats` runs of ~0.2 s each."""
    fn()  # warm: allocations, page faults, thread pool
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-6)
    calls = max(1, int(0.2 / once))
    per_call = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - start) / calls)
    return min(per_call), statistics.median(per_call)


def cases():
    gen = torch.Generator().manual_seed(1)
    for rows, cols in SOFTMAX_SHAPES:
        x = torch.rand(rows, cols, generator=gen) * 10 - 5
        y = torch.empty_like(x)
        yield f"softmax/torch/{rows}x{cols}", lambda x=x, y=y: torch.softmax(x, -1, out=y)
    for rows, cols in LAYERNORM_SHAPES:
        x = torch.rand(rows, cols, generator=gen) * 10 - 5
        g = torch.rand(cols, generator=gen) + 0.5
        b = torch.rand(cols, generator=gen) * 10 - 5
        yield f"layernorm/torch/{rows}x{cols}", lambda x=x, g=g, b=b: torch.nn.functional.layer_norm(
            x, (x.shape[1],), g, b, 1e-5)
    x = torch.rand(GELU_N, generator=gen) * 10 - 5
    yield f"gelu/torch/{GELU_N}", lambda x=x: torch.nn.functional.gelu(x, approximate="tanh")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--filter", default="", help="substring the case name must contain")
    args = parser.parse_args()
    with torch.no_grad():
        for threads in [int(t) for t in args.threads.split(",")]:
            torch.set_num_threads(threads)
            for name, fn in cases():
                if args.filter not in name:
                    continue
                best, median = time_call(fn, args.repeats)
                print(f"{name}/omp:{threads:<3d} best {best * 1e3:8.3f} ms  median {median * 1e3:8.3f} ms",
                      flush=True)


if __name__ == "__main__":
    main()
