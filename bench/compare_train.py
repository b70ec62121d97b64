#!/usr/bin/python3
"""Training-step comparison, tapegrad against PyTorch, run interleaved and printed as one ratio table.

For each round (two by default) it runs, in this order: bench_train at 1 thread, torch_train.py at 1
thread, bench_train at 2 threads, torch_train.py at 2 threads, each over all the models asked for
(default: transformer, attention_gru, transformer_base). Interleaving puts both sides of every ratio
under the same machine conditions; two rounds show how much those conditions moved. bench_train
reports through Google Benchmark's JSON output, torch_train.py through its --json rows.

Every run gets the same environment: without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (which force a
slower OpenBLAS kernel) and OMP_NUM_THREADS (each program sets its own thread count), and with
OMP_WAIT_POLICY as --omp-wait-policy says. The default removes it, so both programs (both use libgomp)
get libgomp's own policy: spin a while at a barrier, then sleep. That is what either program does out
of the box, and on a quiet machine it is as fast as `active` (spin forever) for both; `passive`
(sleep at once) slowed PyTorch's 2-thread steps by 15-40% in back-to-back runs on a 2-core Zen 3 while
barely changing tapegrad's, so it would flatter the ratio. On a machine with other work running,
spinning threads measure the neighbours (see bench_train.cpp's header): run this on a quiet machine.

Figures per model and thread count, both sides the same way: ms is the lower of the rounds' median
step times (the round least disturbed), min the fastest single step of all rounds; tokens/s and MFU
come from that ms; MFU is model FLOPs per step (bench_train's GFLOP_step: 3 x the forward GEMM FLOPs,
the same arithmetic in both programs) / ms / (bench_train's measured FMA peak per core x threads);
peak RSS is the largest of the rounds (tapegrad: the row's VmHWM; PyTorch: its child process's
ru_maxrss, which includes the interpreter and torch itself). The parameter counts of both sides are
printed and must agree (exit 1 otherwise).

Usage: bench/compare_train.py [--build DIR] [--models a,b] [--threads 1,2] [--rounds 2]
                              [--omp-wait-policy passive|active|default] [--markdown]
(`tools/run bench --compare [ARGS]` installs what it needs, builds, and runs this with ARGS.)
On a 2-core Zen 3 the default run takes about 6 minutes, three quarters of it transformer_base;
`--models transformer,attention_gru` takes about 1.5.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives in the system interpreter
MODELS = ("transformer", "attention_gru", "transformer_base")


def run_env(wait_policy):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "OMP_WAIT_POLICY"):
        env.pop(k, None)
    if wait_policy != "default":
        env["OMP_WAIT_POLICY"] = wait_policy
    return env


def run_tapegrad(build, models, threads, env):
    """bench_train rows for `models` at `threads`, as {model: row} with the counters as keys."""
    exe = os.path.join(build, "bench", "bench_train")
    filt = f"--benchmark_filter=^train_step/({'|'.join(models)})/omp:{threads}/"
    out = subprocess.run([exe, filt, "--benchmark_format=json"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"compare_train.py: {exe} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    report = json.loads(out.stdout)
    rows = {"context": report["context"]}
    for b in report["benchmarks"]:
        if b.get("error_occurred"):
            sys.exit(f"compare_train.py: {b['name']}: {b.get('error_message', 'error')}")
        rows[b["name"].split("/")[1]] = b
    missing = [m for m in models if m not in rows]
    if missing:
        sys.exit(f"compare_train.py: {exe} printed no row for {', '.join(missing)} at {threads} threads")
    return rows


def run_torch(models, threads, env):
    """torch_train.py rows for `models` at `threads`, as {model: row}."""
    cmd = [TORCH_PYTHON, os.path.join(HERE, "torch_train.py"), "--json", "--models", ",".join(models),
           "--threads", str(threads)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"compare_train.py: torch_train.py failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {r["model"]: r for r in rows}


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def format_table(header, rows, markdown):
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(header)] + [fmt(r) for r in rows])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("TAPEGRAD_BUILD_DIR", "build"), help="meson build directory")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--omp-wait-policy", choices=("default", "active", "passive"), default="default",
                    help="default: leave OMP_WAIT_POLICY unset (libgomp's spin-then-sleep)")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    a = ap.parse_args()
    models = a.models.split(",")
    for m in models:
        if m not in MODELS:
            sys.exit(f"compare_train.py: --models: unknown model {m!r} (one of {', '.join(MODELS)})")
    threads_list = [int(t) for t in a.threads.split(",")]
    if a.rounds < 1:
        sys.exit("compare_train.py: --rounds must be at least 1")
    env = run_env(a.omp_wait_policy)

    # results[side][(model, threads)] = one row per round
    results = {"tapegrad": {}, "torch": {}}
    context = {}
    start = time.monotonic()
    for rnd in range(1, a.rounds + 1):
        for threads in threads_list:
            for side, run in (("tapegrad", lambda: run_tapegrad(a.build, models, threads, env)),
                              ("torch", lambda: run_torch(models, threads, env))):
                t0 = time.monotonic()
                rows = run()
                for m in models:
                    results[side].setdefault((m, threads), []).append(rows[m])
                print(f"round {rnd}: {side} {threads}T done in {time.monotonic() - t0:.0f} s", file=sys.stderr,
                      flush=True)
                context = rows.get("context", context)

    any_tg = next(iter(results["tapegrad"].values()))[0]
    any_pt = next(iter(results["torch"].values()))[0]
    peak = any_tg["peak_GFLOP/s_core"]
    blas = ", ".join(os.path.basename(b) for b in any_pt["blas"] if "openblas" in os.path.basename(b))
    print(f"{cpu_name()}, {os.cpu_count()} cores; tapegrad ISA {context.get('tapegrad_isa', '?')}, measured FMA "
          f"peak {peak:.1f} GFLOP/s per core; PyTorch {any_pt['torch']} ({blas or 'its own BLAS'}); "
          f"OMP_WAIT_POLICY {env.get('OMP_WAIT_POLICY', 'unset')}; {a.rounds} interleaved round"
          f"{'s' if a.rounds > 1 else ''} in {time.monotonic() - start:.0f} s")
    mismatch = False
    for m in models:
        tg, pt = results["tapegrad"][(m, threads_list[0])][0], results["torch"][(m, threads_list[0])][0]
        same = int(tg["params"]) == int(pt["params"])
        mismatch |= not same
        print(f"  {m}: {int(tg['params'])} parameters in tapegrad, {pt['params']} in PyTorch"
              f"{'' if same else '  MISMATCH'}; {tg['GFLOP_step']:.2f} GFLOP per step; timed steps per run: "
              f"tapegrad {tg['iterations']}, PyTorch {pt['steps']} (after {pt['warmup']} warm-up)")

    def summary(side, m, threads):
        runs = results[side][(m, threads)]
        if side == "tapegrad":
            medians = [r["median_ms"] for r in runs]
            mins = [r["min_ms"] for r in runs]
            rss = max(r["peak_rss_MiB"] for r in runs)
            tokens = runs[0]["tok/s_median"] * runs[0]["median_ms"] / 1e3  # tokens per step
        else:
            medians = [r["median_ms"] for r in runs]
            mins = [r["min_ms"] for r in runs]
            rss = max(r["peak_rss_mib"] for r in runs)
            tokens = runs[0]["tokens_per_s"] * runs[0]["median_ms"] / 1e3
        ms = min(medians)
        gflop = results["tapegrad"][(m, threads)][0]["GFLOP_step"]
        return dict(ms=ms, medians=medians, min=min(mins), tok_s=tokens / (ms / 1e3),
                    mfu=100 * gflop / (ms / 1e3) / (peak * threads), rss=rss)

    header = ["model", "thr", "tapegrad ms (rounds)", "min", "torch ms (rounds)", "min", "tok/s ratio",
              "MFU tg", "MFU torch", "RSS tg MiB", "RSS torch MiB", "RSS torch/tg", "2T/1T tg", "2T/1T torch"]
    table = []
    for m in models:
        for threads in threads_list:
            tg, pt = summary("tapegrad", m, threads), summary("torch", m, threads)
            speedups = ["", ""]
            if threads != threads_list[0]:
                base_tg, base_pt = summary("tapegrad", m, threads_list[0]), summary("torch", m, threads_list[0])
                speedups = [f"{base_tg['ms'] / tg['ms']:.2f}x", f"{base_pt['ms'] / pt['ms']:.2f}x"]
            rounds = lambda s: f"{s['ms']:.1f} ({' / '.join(f'{x:.1f}' for x in s['medians'])})"
            table.append([m, str(threads), rounds(tg), f"{tg['min']:.1f}", rounds(pt), f"{pt['min']:.1f}",
                          f"{tg['tok_s'] / pt['tok_s']:.2f}x", f"{tg['mfu']:.1f}%", f"{pt['mfu']:.1f}%",
                          f"{tg['rss']:.0f}", f"{pt['rss']:.0f}", f"{pt['rss'] / tg['rss']:.2f}x", *speedups])
    print(format_table(header, table, a.markdown))
    print("ms: the lower of the rounds' median step times (each round's median in parentheses); tok/s ratio: "
          "tapegrad over PyTorch; RSS torch/tg: PyTorch's peak RSS over tapegrad's")
    if mismatch:
        sys.exit("compare_train.py: the two sides' parameter counts differ: they do not build the same model")


if __name__ == "__main__":
    main()
