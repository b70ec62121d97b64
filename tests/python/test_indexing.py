# Indexing as numpy does it: every key gives numpy's values and a gradient checked against central
# differences (basic indexing as views, steps / integer arrays / masks as a recorded gather), and
# assignment in place, with the writes that would make a gradient wrong refused.
import numpy as np
import pytest

import tapegrad as tg
from numeric import check_grad

RNG = np.random.default_rng(0)
A = RNG.standard_normal((4, 5, 3))

KEYS = [
    (slice(None, None, 2),),                        # a step: even rows
    (slice(None, None, -1),),                       # reversed
    (slice(3, 0, -2), 1),                           # a negative step with an int
    (Ellipsis, slice(None, None, -2)),              # on the last axis
    (slice(1, None, 3), slice(None), slice(2, None, -1)),
    ([0, 2, 2],),                                   # repeated rows: their gradients add up
    ([-1, -4],),                                    # negative positions
    ([1, 3], [0, 4]),                               # two arrays pair up
    (slice(None), [0, 3, 3]),                       # an array on a middle axis stays in place
    ([1, 2], slice(None), [0, 2]),                  # non-adjacent arrays: their dimension goes first
    (0, slice(None), [2, 1]),                       # an int beside an array is one of the arrays
    (slice(1, 3), [[0, 1], [2, 3]]),                # a 2-d index array
    ([[0], [3]], slice(None, None, 2), [1, 2]),      # arrays broadcasting together, around a step
    (np.array([True, False, True, True]),),         # a mask on the first axis
    (A[:, :, 0] > 0,),                              # a 2-d mask
    (slice(None), A[0, :, 1] > 0, slice(None, 2)),  # a mask on a middle axis
    (None, [1, 0]),                                 # a new axis before an array
    (Ellipsis, [2, 0], None),
]


def key_id(key):
    return repr(key).replace("\n", "")[:60]


@pytest.mark.parametrize("key", KEYS, ids=key_id)
def test_values_are_numpys_and_the_gradient_checks(key):
    x = tg.tensor(A.copy())
    np.testing.assert_array_equal(x[key].numpy(), A[key])
    shape = check_grad(lambda t: t[key], [A.copy()])
    assert shape == A[key].shape


def test_repeated_positions_accumulate_and_a_step_is_a_copy():
    x = tg.tensor(np.arange(6.0), requires_grad=True)
    x[[1, 1, 4]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 2, 0, 0, 1, 0])
    base = np.arange(6.0)
    t = tg.tensor(base)
    assert t[1:4].data_ptr == base.ctypes.data + 8  # step 1: a view on the same memory
    stepped = t[::2]
    base[0] = 100.0
    assert stepped.numpy()[0] == 0.0  # any other step: a gathered copy


def test_gather_is_recorded_and_differentiates_twice():
    x = tg.tensor(RNG.standard_normal((5, 2)), requires_grad=True)
    tg.current_tape().clear()
    x[[4, 0]]
    assert [e.op for e in tg.current_tape().entries] == ["embedding"]  # rows of a [5, 2] table
    x[:, [1]]
    assert [e.op for e in tg.current_tape().entries][1:] == ["permute", "embedding", "permute"]
    r = tg.gradgradcheck(lambda t: (t[[4, 0, 0], ::-1] ** 3.0), [x])
    assert r.ok, r.message


def test_tensor_keys_int32_positions_and_comparison_masks():
    a = A.copy()
    x = tg.tensor(a)
    ids = tg.tensor(np.array([3, 0, 3], np.int32))
    np.testing.assert_array_equal(x[ids].numpy(), a[[3, 0, 3]])
    np.testing.assert_array_equal(x[x > 0].numpy(), a[a > 0])  # a float 0/1 tensor is a mask
    check_grad(lambda t: t[tg.tensor((a > 0).astype(np.float64))], [a.copy()])
    with pytest.raises(tg.IndexError, match="mask of 0s and 1s"):
        x[x * 2.0]


def test_an_int32_tensor_indexes_like_numpy():
    ids = np.arange(24, dtype=np.int32).reshape(4, 6)
    t = tg.tensor(ids)
    for key in [(slice(None, None, -1), [0, 5]), ([2, 2],), (ids % 2 == 0,), (slice(None), slice(None, None, 4))]:
        got = t[key]
        assert got.dtype == "int32"
        np.testing.assert_array_equal(got.numpy(), ids[key])


def test_bad_keys_are_one_line_errors():
    x = tg.tensor(A.copy())
    with pytest.raises(tg.IndexError, match=r"index 7 is out of range for axis 1 of shape \[4,5,3\]"):
        x[:, [0, 7]]
    with pytest.raises(tg.IndexError, match="index -5 is out of range for axis 0"):
        x[[-5]]
    with pytest.raises(tg.IndexError, match="must hold integers or bools, not float64"):
        x[[0.5]]
    with pytest.raises(tg.IndexError, match=r"boolean mask of shape \(3,\) does not match"):
        x[np.array([True, False, True])]
    with pytest.raises(tg.IndexError, match="do not broadcast"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(tg.IndexError, match="4 indices for a tensor of shape"):
        x[0, 0, 0, 0]
    with pytest.raises(tg.IndexError, match="not str"):
        x["a"]


# ---- assignment


ASSIGNMENTS = [
    ((slice(1, 3),), 0.0),
    (([0, 3],), lambda: RNG.standard_normal((2, 5, 3))),
    ((slice(None, None, 2), 1), 7.5),
    ((A > 0.5,), -1.0),
    ((Ellipsis, [2, 0]), lambda: RNG.standard_normal((4, 5, 2))),
    ((slice(None, None, -1), slice(None), 0), lambda: np.arange(5.0)),  # broadcast over the first axis
]


@pytest.mark.parametrize("key,value", ASSIGNMENTS, ids=lambda v: key_id(v) if not callable(v) else "array")
def test_assignment_writes_in_place_as_numpy_does(key, value):
    value = value() if callable(value) else value
    expected = A.copy()
    expected[key] = value
    base = A.copy()
    t = tg.tensor(base)
    t[key] = tg.tensor(value) if isinstance(value, np.ndarray) else value
    np.testing.assert_array_equal(t.numpy(), expected)
    np.testing.assert_array_equal(base, expected)  # the array the tensor shares was written


def test_assignment_through_a_view_and_with_tensor_keys():
    base = np.zeros((3, 4))
    t = tg.tensor(base)
    row = t[1]
    row[tg.tensor(np.array([0, 2], np.int32))] = 5.0
    t[t > 4] += 1.0
    np.testing.assert_array_equal(base[1], [6, 0, 6, 0])
    assert base.sum() == 12


def test_assignment_refuses_what_would_break_a_gradient():
    w = tg.tensor(np.ones(4), requires_grad=True)
    with pytest.raises(tg.AutogradError, match="a leaf that requires grad"):
        w[0] = 2.0
    with tg.no_grad():
        w[0] = 2.0  # initialisation, as in PyTorch
    assert w.numpy()[0] == 2.0
    y = w * 3.0
    with pytest.raises(tg.AutogradError, match="result on the tape"):
        y[1] = 0.0
    plain = tg.tensor(np.ones(4))
    with pytest.raises(tg.AutogradError, match="the value .* requires grad"):
        plain[:2] = w[:2]
    x = tg.tensor(np.arange(4.0))
    loss = (w * x).sum()  # mul keeps x for w's gradient
    with pytest.raises(tg.AutogradError, match=r"tape entry #\d+ \(mul\) keeps this tensor's memory"):
        x[0] = 10.0
    loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [0, 1, 2, 3])  # the gradient of the unchanged x
    x[0] = 10.0  # the tape is cleared: nothing holds x any more
    assert x.numpy()[0] == 10.0
