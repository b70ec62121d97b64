# The GIL is released inside long calls (ops, backward, an optimizer step): two Python threads train
# separate small models at once, each on its own thread's tape, and get exactly what each gets alone.
import threading
import time

import numpy as np

import tapegrad as tg


def train(seed, steps=30):
    """A two-layer MLP regression fit; returns the loss curve."""
    rng = np.random.default_rng(seed)
    x = tg.tensor(rng.standard_normal((64, 16)).astype(np.float32))
    y = tg.tensor(rng.standard_normal((64, 1)).astype(np.float32))
    l1, l2 = tg.nn.Linear(16, 32, seed=seed), tg.nn.Linear(32, 1, seed=seed + 1)
    opt = tg.optim.Adam(list(l1.named_parameters()) + [("l2." + n, p) for n, p in l2.named_parameters()], lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = ((l2(l1(x).tanh()) - y) ** 2.0).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_two_threads_train_separate_models_with_the_results_of_running_alone():
    alone = [train(1), train(2)]
    results = [None, None]
    errors = []

    def run(i):
        try:
            results[i] = train(i + 1)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == alone  # bitwise: separate tapes, no shared state
    assert results[0][-1] < results[0][0] and results[1][-1] < results[1][0]


def test_a_long_op_lets_another_python_thread_run():
    a = tg.randn([600, 600])
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0)

    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.01)
    before = len(ticks)
    for _ in range(5):
        a @ a  # the GIL is released inside: the ticker keeps running
    during = len(ticks) - before
    stop.set()
    t.join()
    assert during > 5
