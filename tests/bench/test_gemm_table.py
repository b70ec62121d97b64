"""bench/gemm_table.py's reading of Google Benchmark JSON, on small hand-written documents shaped like
bench_gemm's output (repetitions, aggregates, an error row), so no benchmark has to run. `tools/run
test` runs it and counts each test."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import gemm_table  # noqa: E402


def run(name, gflops, repetition=0):
    return {"name": name, "run_name": name, "run_type": "iteration", "repetitions": 2,
            "repetition_index": repetition, "threads": 1, "iterations": 100, "real_time": 1.0,
            "cpu_time": 1.0, "time_unit": "ns", "GFLOP/s": gflops}


def aggregate(name, kind, gflops):
    return {"name": f"{name}_{kind}", "run_name": name, "run_type": "aggregate", "repetitions": 3,
            "threads": 1, "aggregate_name": kind, "aggregate_unit": "time", "iterations": 3,
            "real_time": 1.0, "cpu_time": 1.0, "time_unit": "ns", "GFLOP/s": gflops}


def error(name, message):
    return {"name": name, "run_name": name, "run_type": "iteration", "repetitions": 2, "repetition_index": 0,
            "threads": 1, "iterations": 0, "real_time": 0, "cpu_time": 0, "time_unit": "ns",
            "error_occurred": True, "error_message": message}


SQUARE = "gemm/{}/nn/64x64x64/omp:2"
SWEEP = {"context": {"num_cpus": 2}, "benchmarks": [
    run(SQUARE.format("tapegrad"), 60.0, 0), run(SQUARE.format("tapegrad"), 70.0, 1),
    run(SQUARE.format("openblas"), 50.0, 0), run(SQUARE.format("openblas"), 52.0, 1),
    run(SQUARE.format("blis"), 74.0, 0), run(SQUARE.format("blis"), 71.0, 1),
    run(SQUARE.format("onednn"), 100.0, 0), run(SQUARE.format("onednn"), 109.0, 1),
    run("gemm/tapegrad/tn/1024x1024x1024/omp:1", 80.0), run("gemm/openblas/tn/1024x1024x1024/omp:1", 70.0),
    error("gemm/blis/tn/1024x1024x1024/omp:1", "blis disagrees with tapegrad: max relative error 0.5 > 0.0005"),
    run("gemm/onednn/tn/1024x1024x1024/omp:1", 75.0),
    run("gemm_batched/tapegrad/nt/256x32x32x32/omp:1", 20.0), run("gemm_batched/openblas/nt/256x32x32x32/omp:1", 10.0),
    run("train_step/transformer/omp:1", 5.0),
]}


def row_of(text, start):
    return next(line for line in text.splitlines() if line.startswith(start))


class Reading(unittest.TestCase):
    def test_each_implementation_gets_its_best_repetition(self):
        cells = gemm_table.read_cells([SWEEP])[("gemm", "nn", "64x64x64", 2)]
        self.assertEqual({impl: cells[impl].gflops() for impl in cells},
                         {"tapegrad": 70.0, "openblas": 52.0, "blis": 74.0, "onednn": 109.0})

    def test_rows_of_other_benchmarks_are_left_out(self):
        self.assertEqual(set(gemm_table.read_cells([SWEEP])),
                         {("gemm", "nn", "64x64x64", 2), ("gemm", "tn", "1024x1024x1024", 1),
                          ("gemm_batched", "nt", "256x32x32x32", 1)})

    def test_a_file_of_aggregates_only_gives_the_median_not_the_mean(self):
        name = "gemm/tapegrad/nt/128x128x128/omp:1"
        doc = {"benchmarks": [aggregate(name, "mean", 90.0), aggregate(name, "median", 93.0),
                              aggregate(name, "stddev", 1.5), aggregate(name, "cv", 0.02)]}
        self.assertEqual(gemm_table.read_cells([doc])[("gemm", "nt", "128x128x128", 1)]["tapegrad"].gflops(), 93.0)

    def test_two_sweeps_in_two_files_give_the_better_of_the_two(self):
        second = {"benchmarks": [run(SQUARE.format("tapegrad"), 75.0), run(SQUARE.format("onednn"), 90.0)]}
        cells = gemm_table.read_cells([SWEEP, second])[("gemm", "nn", "64x64x64", 2)]
        self.assertEqual((cells["tapegrad"].gflops(), cells["onednn"].gflops()), (75.0, 109.0))


class Table(unittest.TestCase):
    def setUp(self):
        self.text = gemm_table.render(gemm_table.read_cells([SWEEP]), peak=100.0)

    def test_a_row_shows_every_library_and_the_ratio_to_the_best_marked_when_below_the_goal(self):
        self.assertEqual(row_of(self.text, "| 64x64x64 |"),
                         "| 64x64x64 | nn | 2 | 70.0 | 52.0 | 74.0 | 109.0 | 0.64x (below 0.97) |")
        self.assertEqual(row_of(self.text, "| 256 x [32x32x32] |"),
                         "| 256 x [32x32x32] | nt | 1 | 20.0 | 10.0 | - | - | 2.00x |")

    def test_a_library_that_disagreed_shows_error_is_not_the_best_and_its_message_is_listed(self):
        # even when another sweep timed it: a disagreement once is enough to distrust its figures
        other_sweep = {"benchmarks": [run("gemm/blis/tn/1024x1024x1024/omp:1", 200.0)]}
        text = gemm_table.render(gemm_table.read_cells([SWEEP, other_sweep]))
        self.assertEqual(row_of(text, "| 1024x1024x1024 |"),
                         "| 1024x1024x1024 | tn | 1 | 80.0 | 70.0 | error | 75.0 | 1.07x |")
        self.assertEqual(row_of(self.text, "| 1024x1024x1024 |"),
                         "| 1024x1024x1024 | tn | 1 | 80.0 | 70.0 | error | 75.0 | 1.07x |")
        self.assertIn("error: gemm/blis/tn/1024x1024x1024/omp:1: blis disagrees with tapegrad", self.text)

    def test_the_summary_counts_rows_below_the_goal_and_names_the_worst(self):
        self.assertIn("1 of 3 rows below 0.97x the best library; worst 0.64x (gemm/nn/64x64x64/omp:2)", self.text)

    def test_the_1024_cube_nn_one_thread_figure_is_given_against_the_peak(self):
        doc = {"benchmarks": [run("gemm/tapegrad/nn/1024x1024x1024/omp:1", 81.0)]}
        cells = gemm_table.read_cells([doc])
        self.assertIn("tapegrad 81.0 GFLOP/s = 90.0% of the measured peak 90.0 GFLOP/s",
                      gemm_table.render(cells, peak=90.0))
        self.assertIn("pass --peak GFLOPS", gemm_table.render(cells))

    def test_the_command_reads_files_and_rejects_an_unreadable_one_with_exit_2(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(SWEEP, f)
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                self.assertEqual(gemm_table.main([f.name, "--peak", "90"]), 0)
                self.assertEqual(gemm_table.main([f.name + ".missing"]), 2)
            self.assertIn("| 64x64x64 | nn | 2 |", out.getvalue())
            self.assertIn(f"gemm_table.py: cannot read {f.name}.missing", err.getvalue())
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
