# Tensors from Python: sharing memory with numpy both ways (checked by address and by deleting the
# other side), the copies made otherwise, the attributes, printing, indexing as views, the operators,
# comparisons, and errors as Python exceptions carrying the C++ message.
import gc

import numpy as np
import pytest

import tapegrad as tg


def addr(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_tensor_of_a_contiguous_array_shares_its_memory(dtype):
    a = np.arange(12, dtype=dtype).reshape(3, 4)
    t = tg.tensor(a)
    assert t.data_ptr == addr(a)
    assert t.dtype == np.dtype(dtype).name
    assert t.shape == (3, 4)
    a[1, 2] = 99
    assert t[1, 2].item() == 99  # a write through numpy shows in the tensor


def test_the_tensor_keeps_a_deleted_array_alive():
    a = np.linspace(0, 1, 1000)
    t = tg.tensor(a)
    expected = a.copy()
    del a
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), expected)
    _ = [np.ones(1000) for _ in range(100)]  # reuse freed memory, if any was freed
    np.testing.assert_array_equal(t.numpy(), expected)


def test_numpy_of_a_tensor_shares_its_memory_and_outlives_it():
    t = tg.ones([4, 5], dtype="float64") * 3.0
    a = t.numpy()
    assert addr(a) == t.data_ptr
    assert not a.flags.owndata
    del t
    gc.collect()
    _ = [tg.zeros([4, 5], dtype="float64") for _ in range(50)]  # the allocator would hand the block out again
    assert (a == 3.0).all()


def test_numpy_of_a_view_shares_memory_with_strides():
    base = tg.tensor(np.arange(24.0).reshape(4, 6))
    v = base.T[1:3]  # transpose then narrow: a strided view
    a = v.numpy()
    assert a.shape == (2, 4)
    assert np.shares_memory(a, base.numpy())
    np.testing.assert_array_equal(a, np.arange(24.0).reshape(4, 6).T[1:3])


def test_round_trip_through_numpy_is_the_same_memory():
    a = np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)
    assert addr(tg.tensor(a).numpy()) == addr(a)
    t = tg.randn([5])
    assert tg.tensor(t.numpy()).data_ptr == t.data_ptr


@pytest.mark.parametrize("make,dtype", [
    (lambda: np.arange(12.0).reshape(3, 4)[:, ::2], "float64"),      # strided
    (lambda: np.asfortranarray(np.ones((3, 4), np.float32)), "float32"),  # column-major
    (lambda: np.arange(6, dtype=np.int64), "int32"),                  # int64 -> int32
    (lambda: np.array([True, False]), "float32"),                     # bool -> float32
    (lambda: np.ones(3, np.float16), "float32"),                      # float16 -> float32
    (lambda: [[1.0, 2.0], [3.0, 4.0]], "float64"),                    # a nested list
])
def test_other_arrays_are_copied(make, dtype):
    a = make()
    t = tg.tensor(a)
    assert t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), np.asarray(a).astype(dtype))
    if isinstance(a, np.ndarray):
        assert not np.shares_memory(t.numpy(), a)


def test_a_read_only_array_is_copied():
    a = np.ones(4)
    a.flags.writeable = False
    t = tg.tensor(a)
    assert t.data_ptr != addr(a)


def test_integers_out_of_int32_range_are_refused():
    with pytest.raises(tg.DTypeError, match="do not fit int32"):
        tg.tensor(np.array([0, 2**40]))


def test_attributes_repr_and_item():
    t = tg.tensor(np.array([[1.5, 2.0]]), requires_grad=True)
    assert t.requires_grad and t.is_leaf and t.grad is None
    assert t.ndim == 2 and len(t) == 1 and t.numel() == 2
    assert "float64" in repr(t) and "requires_grad=true" in repr(t)
    assert t[0, 1].item() == 2.0
    assert float(t.sum()) == 3.5
    with pytest.raises(tg.ShapeError, match="one-element|single|size"):
        t.item()


def test_indexing_is_a_recorded_view():
    a = np.arange(12.0).reshape(3, 4)
    t = tg.tensor(a, requires_grad=True)
    v = t[1:, 2]
    assert v.shape == (2,)
    np.testing.assert_array_equal(v.numpy(), a[1:, 2])
    assert any(e.op == "narrow" for e in tg.current_tape().entries)
    v.sum().backward()
    expected = np.zeros((3, 4))
    expected[1:, 2] = 1
    np.testing.assert_array_equal(t.grad.numpy(), expected)


@pytest.mark.parametrize("key", [(slice(None), 1), (-1,), (Ellipsis, 0), (None, 1, slice(1, 3)), (slice(5, 9),)])
def test_indexing_agrees_with_numpy(key):
    a = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(tg.tensor(a)[key].numpy(), a[key])


def test_bad_indices_raise_index_error_with_the_shape():
    t = tg.zeros([2, 3])
    with pytest.raises(IndexError, match=r"out of range for axis 1 of shape \[2,3\]"):
        t[0, 3]
    with pytest.raises(ValueError, match="step cannot be zero"):
        t[:, ::0]
    with pytest.raises(IndexError, match="3 indices"):
        t[0, 0, 0]


def test_operators_broadcast_like_numpy():
    a = np.random.default_rng(1).standard_normal((2, 3))
    b = np.random.default_rng(2).uniform(0.5, 2, (3,))
    ta, tb = tg.tensor(a), tg.tensor(b)
    for got, want in [(ta + tb, a + b), (ta - tb, a - b), (ta * tb, a * b), (ta / tb, a / b),
                      (tb ** 2.0, b ** 2), (2.0 ** tb, 2.0 ** b), (tb ** tb, b ** b), (-ta, -a),
                      (1.0 - ta, 1 - a), (3.0 / tb, 3 / b), (ta @ tb, a @ b), (ta + b, a + b),
                      (ta.T @ ta, a.T @ a)]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_comparisons_are_float_masks():
    t = tg.tensor(np.array([1.0, 2.0, 3.0]))
    m = t > 1.5
    assert m.dtype == "float64" and not m.requires_grad
    np.testing.assert_array_equal(m.numpy(), [0, 1, 1])
    np.testing.assert_array_equal((t <= tg.tensor(np.array([1.0, 1.0, 5.0]))).numpy(), [1, 0, 1])
    np.testing.assert_array_equal((t == 2.0).numpy(), [0, 1, 0])
    np.testing.assert_array_equal((t != 2.0).numpy(), [1, 0, 1])
    np.testing.assert_array_equal((t >= 2.0).numpy(), [0, 1, 1])
    np.testing.assert_array_equal((t < 2.0).numpy(), [1, 0, 0])
    assert (t == None) is False and (t != "a") is True  # not comparable: identity, as for any object
    with pytest.raises(TypeError):
        t < "a"


def test_errors_are_python_exceptions_with_the_message():
    a, b = tg.zeros([2, 3]), tg.zeros([4, 5])
    with pytest.raises(tg.ShapeError, match=r"matmul.*\[2,3\].*\[4,5\]") as e:
        a @ b
    assert isinstance(e.value, ValueError) and isinstance(e.value, tg.Error)
    with pytest.raises(TypeError):  # DTypeError is a TypeError
        tg.zeros([2]) + tg.zeros([2], dtype="float64")
    with pytest.raises(tg.AutogradError) as e:
        tg.backward(tg.zeros([1]).sum())
    assert isinstance(e.value, RuntimeError)
    assert issubclass(tg.IndexError, IndexError) and issubclass(tg.DTypeError, tg.Error)
    with pytest.raises(tg.IndexError):
        tg.ops.cross_entropy(tg.zeros([2, 3]), tg.tensor(np.array([0, 7], dtype=np.int32)))


def test_creation_functions():
    assert tg.zeros([2, 3]).dtype == "float32"
    np.testing.assert_array_equal(tg.full([2], 7.0, dtype="float64").numpy(), [7, 7])
    np.testing.assert_array_equal(tg.arange(4, dtype="int32").numpy(), [0, 1, 2, 3])
    tg.manual_seed(3)
    r1 = tg.randn([4]).numpy().copy()
    tg.manual_seed(3)
    np.testing.assert_array_equal(tg.randn([4]).numpy(), r1)
    assert np.asarray(tg.ones([2])).tolist() == [1.0, 1.0]
    assert tg.Tensor(np.ones(2)).shape == (2,)
    with pytest.raises(tg.DTypeError):
        tg.zeros([2], dtype="int8")


def test_exit_with_shared_tensors_on_the_tape_is_clean():
    import subprocess
    import sys
    code = ("import numpy as np, tapegrad as tg\n"
            "a = np.ones(3); w = tg.tensor(a, requires_grad=True)\n"
            "y = (w * tg.tensor(np.arange(3.0))).sum()\n"  # on the tape at exit, holding both arrays
            "b = y.numpy()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
