# The per-op profile and the allocator's counters from Python: rows per op kind with calls, time and the
# FLOPs of linear / matmul, only for what ran inside the block, and the block's memory peak.
import numpy as np
import pytest

import tapegrad as tg


def mlp_step(x, w1, w2):
    loss = tg.ops.linear(tg.ops.tanh(tg.ops.linear(x, w1)), w2).sum()
    loss.backward()


def test_rows_count_calls_and_flops_per_op_kind():
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((8, 16)).astype(np.float32))
    w1 = tg.tensor(rng.standard_normal((32, 16)).astype(np.float32), requires_grad=True)
    w2 = tg.tensor(rng.standard_normal((4, 32)).astype(np.float32), requires_grad=True)
    mlp_step(x, w1, w2)  # outside: not counted
    with tg.profile() as p:
        for _ in range(3):
            mlp_step(x, w1, w2)
    mlp_step(x, w1, w2)  # after the block: not counted either
    rows = {r["op"]: r for r in p.rows}
    assert set(rows) == {"linear", "tanh", "sum_all"}
    assert rows["linear"]["calls"] == 6 and rows["tanh"]["calls"] == 3 and rows["sum_all"]["calls"] == 3
    # forward 2 * out elements * inner, backward twice that, for both layers, three steps
    forward = 2 * 8 * 32 * 16 + 2 * 8 * 4 * 32
    assert rows["linear"]["flops"] == 3 * 3 * forward
    assert rows["tanh"]["flops"] == 0 and rows["tanh"]["gflops_per_s"] == 0
    for r in p.rows:
        assert r["forward_ms"] >= 0 and r["backward_ms"] > 0
        assert r["total_ms"] == pytest.approx(r["forward_ms"] + r["backward_ms"])
    totals = [r["total_ms"] for r in p.rows]
    assert totals == sorted(totals, reverse=True)  # the most time first
    table = p.table()
    assert table.splitlines()[0].split()[:4] == ["op", "calls", "fwd", "ms"]
    assert any(line.split()[:2] == ["linear", "6"] for line in table.splitlines())
    assert "memory: peak" in table


def test_memory_reports_the_blocks_peak():
    earlier = tg.zeros([1 << 22])  # 16 MiB before the block: not its peak
    del earlier
    before = tg.memory_stats()["bytes_in_use"]
    with tg.profile() as small:
        tg.zeros([16])
    assert small.memory["peak_bytes_above_start"] < 1 << 20
    with tg.profile() as p:
        big = tg.zeros([1 << 20])  # 4 MiB, freed inside the block
        del big
    m = p.memory
    assert m["peak_bytes_above_start"] >= 4 << 20
    assert m["end_bytes"] - m["start_bytes"] < 4 << 20
    assert abs(m["start_bytes"] - before) < 1 << 20
    assert set(tg.memory_stats()) >= {"bytes_in_use", "bytes_cached", "peak_bytes_in_use", "os_allocations"}


def test_custom_ops_and_checkpoints_count_as_what_they_run():
    class Double(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, dy):
            return dy * 2.0

    x = tg.tensor(np.ones((4, 4)), requires_grad=True)
    w = tg.tensor(np.ones((4, 4)), requires_grad=True)
    with tg.profile() as p:
        y = tg.checkpoint(lambda a: tg.ops.tanh(a @ w), x)
        Double.apply(y).sum().backward()
    rows = {r["op"]: r["calls"] for r in p.rows}
    # the checkpoint and Double are custom entries; matmul and tanh ran twice (first call, recomputation)
    assert rows["custom"] == 2 and rows["matmul"] == 2 and rows["tanh"] == 2


def test_a_profile_cannot_be_entered_twice():
    p = tg.profile()
    with p:
        with pytest.raises(tg.AutogradError, match="already watching"):
            p.__enter__()
