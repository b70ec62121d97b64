#!/usr/bin/env python3
"""A tour of backprop on tapegrad's tape, from Python.

1. builds a small expression and prints the tape it records;
2. runs backward under a TapeRecorder and prints, entry by entry in the order the reverse walk
   visits them, the norm of the gradient that reached each output;
3. compares every gradient with central differences computed here in numpy;
4. trains a tiny two-layer network on XOR-like data and prints its loss curve as a text table
   (or draws it with matplotlib, when installed, into --plot FILE).

Run from the build tree:  PYTHONPATH=build/python /usr/bin/python3 examples/python/backprop_tour.py
"""
import argparse

import numpy as np

import tapegrad as tg


def expression(x, w, b):
    """loss = mean(tanh(x @ w + b)^2): matmul, add, tanh, pow, mean."""
    return ((x @ w + b).tanh() ** 2.0).mean()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--plot", help="draw the loss curve into this PNG (needs matplotlib)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    # 1. the tape of one expression
    x = tg.tensor(rng.standard_normal((4, 3)))
    w = tg.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    b = tg.tensor(rng.standard_normal(2), requires_grad=True)
    w.name, b.name = "w", "b"
    print("== the tape of mean(tanh(x @ w + b)^2)")
    with tg.TapeRecorder() as rec:
        loss = expression(x, w, b)
        print(tg.dump())
        # 2. the reverse walk
        loss.backward()
    print("== backward visits the entries last to first")
    for row in reversed(rec.rows):
        print(f"  #{row.index} {row.op:<12} output {str(row.output_shape):<8} inputs {', '.join(row.inputs):<12}"
              f" |d output| = {row.grad_norm:.4f}")

    # 3. against central differences (the tensors share the arrays' memory: perturb them in place)
    print("== analytic against numerical gradients")
    worst = 0.0
    for name, leaf in (("w", w), ("b", b)):
        data = leaf.numpy()
        numeric = np.zeros_like(data)
        for i in np.ndindex(data.shape):
            old = data[i]
            with tg.no_grad():
                data[i] = old + 1e-6
                up = expression(x, w, b).item()
                data[i] = old - 1e-6
                down = expression(x, w, b).item()
            data[i] = old
            numeric[i] = (up - down) / 2e-6
        err = np.abs(leaf.grad.numpy() - numeric).max()
        worst = max(worst, err)
        print(f"  d loss / d {name}: max |analytic - numeric| = {err:.2e}")

    # 4. a tiny model
    print("== training a 2-16-1 network on XOR")
    X = tg.tensor(rng.uniform(-1, 1, (64, 2)).astype(np.float32))
    Y = tg.tensor((np.sign(X.numpy()[:, :1] * X.numpy()[:, 1:]) > 0).astype(np.float32))
    l1, l2 = tg.nn.Linear(2, 16, seed=1), tg.nn.Linear(16, 1, seed=2)
    params = [("l1." + n, p) for n, p in l1.named_parameters()] + [("l2." + n, p) for n, p in l2.named_parameters()]
    opt = tg.optim.Adam(params, lr=0.05)
    losses = []
    for _ in range(args.steps):
        z = l2(l1(X).tanh())  # logits; binary cross-entropy as softplus(z) - y z, finite for any z
        loss = (z.softplus() - Y * z).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    with tg.no_grad():
        accuracy = float(((l2(l1(X).tanh()) > 0.0) == Y).mean().item())
    print("  step   loss")
    for s in range(0, args.steps, max(1, args.steps // 10)):
        print(f"  {s:4d}   {losses[s]:.4f}  " + "#" * int(40 * losses[s] / losses[0]))
    print(f"  {args.steps - 1:4d}   {losses[-1]:.4f}   accuracy {accuracy:.2f}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.plot(losses)
        plt.xlabel("step")
        plt.ylabel("loss")
        plt.savefig(args.plot)
        print(f"  loss curve in {args.plot}")
    ok = worst < 1e-6 and losses[-1] < 0.5 * losses[0]
    print("tour:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
