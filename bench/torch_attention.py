#!/usr/bin/python3
"""PyTorch's side of bench/bench_attention.cpp: one attention layer's core, forward and backward.

The same step as the tapegrad rows: q, k, v [B, H, T, d] = [1, 8, T, 64] float32 unit normals with
requires_grad, o = softmax(q @ k^T / sqrt(d)) @ v (what PyTorch 1.13 users write; it has no fused
CPU attention), o.sum().backward(), gradients dropped. Times are the median of the timed steps
after two warm-up steps.

Memory: PyTorch 1.13 has no allocator statistics on CPU, so each length runs in a fresh child
process and peak_MiB is the growth of its resident high-water mark (getrusage ru_maxrss) from just
before the first step to after the last: what the step's tensors made the process map. It includes
allocator slack, which tapegrad's allocator-level count does not, so compare the growth with T
rather than absolute values at short T.

Usage: /usr/bin/python3 bench/torch_attention.py [--threads N] [--lengths 64,128,...]
"""
import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time

B, H, D = 1, 8, 64


def child(T, threads, min_time):
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(7)
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    scale = 1.0 / math.sqrt(D)

    def step():
        o = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v
        o.sum().backward()
        q.grad = k.grad = v.grad = None

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(2):
        step()
    times = []
    start = time.perf_counter()
    while time.perf_counter() - start < min_time or len(times) < 3:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    flops = 12.0 * B * H * T * T * D
    ms = statistics.median(times) * 1e3
    print(json.dumps({"T": T, "median_ms": ms, "min_ms": min(times) * 1e3, "GFLOP/s": flops / ms * 1e-6,
                      "peak_MiB": (rss_after - rss_before) / 1024.0, "steps": len(times)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lengths", default="64,128,256,512,1024,2048")
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.child:
        return child(a.child, a.threads, a.min_time)
    print(f"torch attention step, B={B} H={H} d={D}, {a.threads} thread(s)")
    print(f"{'T':>6} {'median_ms':>10} {'min_ms':>10} {'GFLOP/s':>8} {'peak_MiB':>9}")
    for T in (int(x) for x in a.lengths.split(",")):
        out = subprocess.run([sys.executable, __file__, "--child", str(T), "--threads", str(a.threads),
                              "--min-time", str(a.min_time)], check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['T']:>6} {r['median_ms']:>10.2f} {r['min_ms']:>10.2f} {r['GFLOP/s']:>8.1f} {r['peak_MiB']:>9.1f}")


if __name__ == "__main__":
    main()
