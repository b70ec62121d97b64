#!/usr/bin/env python3
"""The GEMM comparison table from bench_gemm's Google Benchmark JSON output.

For every (shape, transposes, threads) that bench_gemm ran, one Markdown row with the GFLOP/s of
tapegrad, OpenBLAS, BLIS and oneDNN and tapegrad's rate over the best library's, marked when it is
below 0.97x; then the worst ratio, the libraries' disagreements (rows that reported an error instead
of a time) and the 1024^3 nn 1-thread figure as a fraction of the measured peak. bench_gemm does not
measure the peak itself: pass --peak (bench_train's peak_GFLOP/s_core, or `tapegrad profile`).

Input: one or more files written with --benchmark_out=FILE --benchmark_out_format=json (or the
stdout of --benchmark_format=json). A row's figure is its best repetition over all files (best of N
sweeps); a file holding only aggregates (--benchmark_report_aggregates_only) gives its median.

  build/bench/bench_gemm --benchmark_repetitions=2 --benchmark_out=gemm.json --benchmark_out_format=json
  python3 bench/gemm_table.py gemm.json --peak 92
"""
import argparse
import json
import re
import sys

LIBRARIES = ("openblas", "blis", "onednn")
TITLES = {"tapegrad": "tapegrad", "openblas": "OpenBLAS", "blis": "BLIS", "onednn": "oneDNN"}
GOAL = 0.97
# gemm/<impl>/<ta><tb>/<M>x<K>x<N>/omp:<t> and gemm_batched/<impl>/<ta><tb>/<batch>x<M>x<K>x<N>/omp:<t>
ROW = re.compile(r"^(gemm|gemm_batched)/(\w+)/([nt][nt])/((?:\d+x)?\d+x\d+x\d+)/omp:(\d+)$")
PEAK_ROW = ("gemm", "nn", "1024x1024x1024", 1)


class Cell:
    """One implementation's figures for one row: every timed run's GFLOP/s, aggregates, errors."""

    def __init__(self):
        self.runs, self.aggregates, self.errors = [], {}, []

    def gflops(self):
        """The best run, else the median (or mean) aggregate, else None."""
        if self.runs:
            return max(self.runs)
        return self.aggregates.get("median", self.aggregates.get("mean"))


def read_cells(documents):
    """{(family, op, shape, threads): {impl: Cell}} in the order the rows first appear."""
    table = {}
    for doc in documents:
        for entry in doc.get("benchmarks", []):
            name = entry.get("run_name", entry["name"])
            match = ROW.match(name)
            if not match:
                continue
            family, impl, op, shape, threads = match.groups()
            cell = table.setdefault((family, op, shape, int(threads)), {}).setdefault(impl, Cell())
            if entry.get("error_occurred"):
                cell.errors.append(entry.get("error_message", "error"))
            elif entry.get("run_type") == "aggregate":
                if "GFLOP/s" in entry:
                    cell.aggregates[entry.get("aggregate_name", "")] = float(entry["GFLOP/s"])
            elif "GFLOP/s" in entry:
                cell.runs.append(float(entry["GFLOP/s"]))
    return table


def ratio(cells):
    """tapegrad's GFLOP/s over the best library's on this row, or None without both."""
    ours = cells["tapegrad"].gflops() if "tapegrad" in cells else None
    theirs = [cells[lib].gflops() for lib in LIBRARIES if lib in cells and not cells[lib].errors]
    theirs = [g for g in theirs if g]
    return ours / max(theirs) if ours and theirs else None


def shape_title(family, shape):
    if family == "gemm_batched":
        batch, rest = shape.split("x", 1)
        return f"{batch} x [{rest}]"
    return shape


def figure(cells, impl):
    cell = cells.get(impl)
    if cell is None:
        return "-"
    if cell.errors:
        return "error"
    g = cell.gflops()
    return "-" if g is None else f"{g:.1f}"


def render(table, peak=None):
    """The Markdown table and the summary lines below it."""
    lines = ["| M x K x N | op | threads | " + " | ".join(TITLES.values()) + " | tapegrad / best |",
             "| --- | --- | --- | " + " | ".join("---" for _ in TITLES) + " | --- |"]
    ratios, errors = [], []
    for (family, op, shape, threads), cells in table.items():
        r = ratio(cells)
        if r is None:
            shown = "-"
        else:
            ratios.append((r, f"{family}/{op}/{shape}/omp:{threads}"))
            shown = f"{r:.2f}x" + (f" (below {GOAL})" if r < GOAL else "")
        lines.append(f"| {shape_title(family, shape)} | {op} | {threads} | "
                     + " | ".join(figure(cells, impl) for impl in TITLES) + f" | {shown} |")
        for impl, cell in cells.items():
            errors += [f"{family}/{impl}/{op}/{shape}/omp:{threads}: {e}" for e in sorted(set(cell.errors))]
    lines.append("")
    if ratios:
        below = [name for r, name in ratios if r < GOAL]
        worst = min(ratios)
        lines.append(f"{len(below)} of {len(ratios)} rows below {GOAL}x the best library; "
                     f"worst {worst[0]:.2f}x ({worst[1]})")
    else:
        lines.append("no row has both a tapegrad figure and a library's")
    lines += [f"error: {e}" for e in errors]
    cells = table.get(PEAK_ROW, {})
    ours = cells["tapegrad"].gflops() if "tapegrad" in cells else None
    if ours is None:
        lines.append("no gemm/tapegrad/nn/1024x1024x1024/omp:1 row")
    elif peak:
        lines.append(f"1024^3 nn, 1 thread: tapegrad {ours:.1f} GFLOP/s = {100 * ours / peak:.1f}% "
                     f"of the measured peak {peak:.1f} GFLOP/s")
    else:
        lines.append(f"1024^3 nn, 1 thread: tapegrad {ours:.1f} GFLOP/s (pass --peak GFLOPS for the fraction of the peak)")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description="bench_gemm's JSON output as the GEMM comparison table")
    parser.add_argument("files", nargs="+", help="Google Benchmark JSON output of bench_gemm (best over all)")
    parser.add_argument("--peak", type=float, help="measured FMA peak of one core, GFLOP/s")
    args = parser.parse_args(argv)
    documents = []
    for path in args.files:
        try:
            with open(path) as f:
                documents.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"gemm_table.py: cannot read {path}: {e}", file=sys.stderr)
            return 2
    if args.peak is not None and args.peak <= 0:
        print(f"gemm_table.py: --peak must be positive, got {args.peak}", file=sys.stderr)
        return 2
    print(render(read_cells(documents), args.peak))
    return 0


if __name__ == "__main__":
    sys.exit(main())
