#!/usr/bin/env python3
"""A custom op written in Python: x -> x * sigmoid(x) (SiLU), with its backward in three lines.

tapegrad records it on the tape under its class name, exactly as a C++ custom op (record_custom);
gradcheck compares its backward with central differences. Run from the build tree:
    PYTHONPATH=build/python /usr/bin/python3 examples/python/custom_function.py
"""
import numpy as np

import tapegrad as tg


class SiLU(tg.Function):
    @staticmethod
    def forward(ctx, x):
        s = x.sigmoid()
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, dy):
        x, s = ctx.saved_tensors
        # d/dx x s(x) = s + x s (1 - s)
        return dy * (s + x * s * (1.0 - s))


def main():
    x = tg.tensor(np.linspace(-3, 3, 7), requires_grad=True)
    y = SiLU.apply(x).sum()
    print(tg.dump())  # the entry is called SiLU
    y.backward()
    print("x      ", np.round(x.numpy(), 3))
    print("d/dx   ", np.round(x.grad.numpy(), 4))
    result = tg.gradcheck(lambda x: SiLU.apply(x), [tg.tensor(np.linspace(-3, 3, 7), requires_grad=True)])
    print("gradcheck:", "passed" if result else "FAILED", f"(max abs error {result.max_abs_error:.2e})")
    return 0 if result else 1


if __name__ == "__main__":
    raise SystemExit(main())
