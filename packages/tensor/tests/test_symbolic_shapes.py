"""Bound Variables in Tensor shapes (issue 37): results against numpy at several bound values, one compile per
structure (the engine's program counter), and the error paths."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from kiln.tensor import Tensor, Variable, dtypes
from kiln.tensor.realize.engine import Engine

VALUES = (1, 3, 7, 10)
EachValue = Callable[[Callable[[int], None], Sequence[int]], None]
N = Variable("n", 1, 10)


# -- slice 1: creation, elementwise, reading the bound shape ---------------------------------------------------------


def test_shape_holds_the_variable_and_numpy_the_bound_shape(engine: Engine) -> None:
    v = N.bind(4)
    x = Tensor.zeros(v, 3)
    assert x.shape[1] == 3 and x.shape[0] is v.uop
    assert x.ndim == 2
    assert x.numpy().shape == (4, 3)
    assert x.tolist() == [[0.0] * 3] * 4


def test_repr_shows_the_variable_and_its_value() -> None:
    v = N.bind(3)
    assert "shape=(n=3, 4)" in repr(Tensor.zeros(v, 4))
    assert "shape=((n+1)=4,)" in repr(Tensor.zeros(v + 1))
    assert "shape=(2, 4)" in repr(Tensor.zeros(2, 4))


def test_creation_and_elementwise_one_compile(engine: Engine, each_value: EachValue) -> None:
    def run(value: int) -> None:
        v = N.bind(value)
        result = (Tensor.full((v, 4), 2.0) * 3 + Tensor.ones(v, 4)).exp2()
        np.testing.assert_allclose(result.numpy(), np.exp2(np.full((value, 4), 7.0, np.float32)), rtol=1e-6)

    each_value(run, VALUES)


def test_symbolic_inner_dim(engine: Engine, each_value: EachValue) -> None:
    def run(value: int) -> None:
        v = N.bind(value)
        result = Tensor.ones(2, v, dtype="int32") * 5 - 1
        assert result.numpy().tolist() == np.full((2, value), 4, np.int32).tolist()

    each_value(run, VALUES)


def test_arange_one_compile(engine: Engine, each_value: EachValue) -> None:
    def run(value: int) -> None:
        v = N.bind(value)
        np.testing.assert_array_equal(Tensor.arange(v).numpy(), np.arange(value))
        np.testing.assert_array_equal((Tensor.arange(2, v, 3) * 2).numpy(), np.arange(2, value, 3) * 2)

    each_value(run, VALUES)


def test_empty_symbolic_reads_the_bound_shape(engine: Engine) -> None:
    for value in VALUES:
        x = Tensor.empty(N.bind(value), 3)
        assert x.numpy().shape == (value, 3)


def test_bound_expression_in_a_shape(engine: Engine, each_value: EachValue) -> None:
    def run(value: int) -> None:
        v = N.bind(value)
        result = Tensor.full((v + 1, 2), 1.5) + Tensor.full((v + 1, 2), 0.5)
        np.testing.assert_array_equal(result.numpy(), np.full((value + 1, 2), 2.0, np.float32))

    each_value(run, VALUES)


# -- slice 2: shrink, slicing, reshape, pad, expand ------------------------------------------------------------------

DATA = np.arange(40, dtype=np.float32).reshape(10, 4)
START = Variable("s", 0, 10 - 1)  # x[s : s + 1] stays inside 10 rows


def test_slicing_by_a_variable_one_compile(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()
    xt = Tensor(DATA.T.copy()).realize()

    def run(value: int) -> None:
        v = N.bind(value)
        rows = x[:v]
        assert rows.shape[0] is v.uop and rows.shape[1] == 4
        np.testing.assert_array_equal(rows.numpy(), DATA[:value])
        np.testing.assert_array_equal((xt[:, :v] * 2).numpy(), DATA.T[:, :value] * 2)
        np.testing.assert_array_equal(x.shrink(((0, v), None)).numpy(), DATA[:value])

    each_value(run, VALUES)


def test_slice_between_variable_bounds(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()

    def run(value: int) -> None:
        s = START.bind(value - 1)  # 0, 2, 6, 9
        row = x[s : s + 1]
        assert row.shape == (1, 4)
        np.testing.assert_array_equal(row.numpy(), DATA[value - 1 : value])

    each_value(run, VALUES)


def test_integer_index_by_a_variable(engine: Engine, each_value: EachValue) -> None:
    x, columns = Tensor(DATA).realize(), Tensor(DATA.T.copy()).realize()

    def run(value: int) -> None:
        s = START.bind(value - 1)
        np.testing.assert_array_equal(x[s].numpy(), DATA[value - 1])
        np.testing.assert_array_equal((columns[:, s] + 1).numpy(), DATA.T[:, value - 1] + 1)

    each_value(run, VALUES)


def test_integer_index_by_a_variable_that_can_leave_the_dim_raises() -> None:
    with pytest.raises(ValueError, match=r"'p' in \[0, 10\]"):
        Tensor(DATA)[Variable("p", 0, 10).bind(2)]
    with pytest.raises(ValueError, match=r"'p'.*\[0, 9\].*unbound"):
        Tensor(DATA)[Variable("p", 0, 9)]


def test_reshape_pad_expand_one_compile(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()

    def run(value: int) -> None:
        v = N.bind(value)
        rows = x[:v]
        np.testing.assert_array_equal(rows.reshape(-1).numpy(), DATA[:value].reshape(-1))
        np.testing.assert_array_equal(rows.reshape(v, 2, 2).numpy(), DATA[:value].reshape(value, 2, 2))
        padded = (rows + 1).pad(((0, 0), (1, 2)))
        np.testing.assert_array_equal(padded.numpy(), np.pad(DATA[:value] + 1, ((0, 0), (1, 2))))
        filled = rows.pad(((1, 0), (0, 0)), value=-1.0)
        np.testing.assert_array_equal(filled.numpy(), np.pad(DATA[:value], ((1, 0), (0, 0)), constant_values=-1))
        np.testing.assert_array_equal(Tensor.ones(v, 1).expand(v, 5).numpy(), np.ones((value, 5), np.float32))
        np.testing.assert_array_equal(Tensor(DATA[:1]).expand(v, 4).numpy(), np.broadcast_to(DATA[:1], (value, 4)))

    each_value(run, VALUES)


def test_reshape_to_a_variable_size(engine: Engine, each_value: EachValue) -> None:
    flat = Tensor(np.arange(30, dtype=np.float32)).realize()

    def run(value: int) -> None:
        v = N.bind(value)
        part = flat[: v * 3].reshape(v, -1)
        assert part.shape[1] == 3
        np.testing.assert_array_equal(part.numpy(), np.arange(value * 3, dtype=np.float32).reshape(value, 3))

    each_value(run, VALUES)


# -- slice 3: reductions over a symbolic dim -------------------------------------------------------------------------

RANDOM = np.random.default_rng(37).standard_normal((10, 6)).astype(np.float32)


def _softmax(values: np.ndarray, axis: int) -> np.ndarray:
    shifted = np.exp(values - values.max(axis, keepdims=True))
    return shifted / shifted.sum(axis, keepdims=True)


def test_reductions_over_a_variable_dim_one_compile(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(RANDOM).realize()
    xt = Tensor(RANDOM.T.copy()).realize()

    def run(value: int) -> None:
        v = N.bind(value)
        rows, columns, want = x[:v], xt[:, :v], RANDOM[:value]
        close = {"rtol": 1e-5, "atol": 1e-5}
        np.testing.assert_allclose(rows.sum(0).numpy(), want.sum(0), **close)
        np.testing.assert_allclose(rows.sum(1).numpy(), want.sum(1), **close)
        np.testing.assert_allclose(rows.sum().numpy(), want.sum(), **close)
        np.testing.assert_allclose(rows.amax(0).numpy(), want.max(0), **close)
        np.testing.assert_allclose(rows.max().numpy(), want.max(), **close)
        np.testing.assert_allclose(rows.mean(0).numpy(), want.mean(0), **close)
        np.testing.assert_allclose(columns.mean(1).numpy(), want.T.mean(1), **close)
        np.testing.assert_allclose(columns.softmax(-1).numpy(), _softmax(want.T, -1), **close)
        np.testing.assert_allclose(columns.logsumexp(-1).numpy(), np.log(np.exp(want.T).sum(-1)), **close)

    each_value(run, VALUES)


# -- slice 4 (part): matmul and cat along a symbolic dim -------------------------------------------------------------


def test_matmul_and_cat_one_compile(engine: Engine, each_value: EachValue) -> None:
    other = np.random.default_rng(1).standard_normal((6, 5)).astype(np.float32)
    x, w = Tensor(RANDOM).realize(), Tensor(other).realize()

    def run(value: int) -> None:
        v = N.bind(value)
        rows, want = x[:v], RANDOM[:value]
        np.testing.assert_allclose((rows @ w).numpy(), want @ other, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose((rows.T @ rows).numpy(), want.T @ want, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(rows.cat(rows * 2, dim=0).numpy(), np.concatenate([want, want * 2], 0))
        joined = rows.cat(x[:v, :2], dim=1)
        np.testing.assert_array_equal(joined.numpy(), np.concatenate([want, want[:, :2]], 1))

    each_value(run, VALUES)


def test_gather_and_index_with_a_symbolic_bound_one_compile(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(RANDOM).realize()

    def run(value: int) -> None:
        v = N.bind(value)
        rows_wanted = np.array([value - 1, 0, value // 2], dtype=np.int32)
        picks = Tensor(rows_wanted)
        rows, want = x[:v], RANDOM[:value]
        np.testing.assert_array_equal(rows[picks].numpy(), want[rows_wanted])
        chosen = (Tensor.arange(v) % 4).reshape(v, 1)
        np.testing.assert_array_equal(rows.gather(1, chosen).numpy(), np.take_along_axis(want, chosen.numpy(), 1))
        # the row index into a dim of bound size: the embedding-row read of a decode step
        np.testing.assert_array_equal(rows.T[:, picks].numpy(), want.T[:, rows_wanted])

    each_value(run, VALUES)


def test_index_past_the_bound_size_raises() -> None:
    rows = Tensor(RANDOM)[: N.bind(2)]
    with pytest.raises(IndexError, match=r"index 2 is out of bounds for dimension 0 with size 2"):
        rows[Tensor(np.array([2], dtype=np.int32))]


# -- slice 5 (started): errors ---------------------------------------------------------------------------------------


def test_unbound_variable_in_a_shape_raises() -> None:
    with pytest.raises(ValueError, match=r"'n'.*\[1, 10\].*unbound"):
        Tensor.zeros(N, 4)
    with pytest.raises(ValueError, match=r"'n'.*\[1, 10\].*unbound"):
        Tensor.zeros(N.uop, 4)


def test_unbound_variable_in_a_slice_reshape_or_arange_raises() -> None:
    x = Tensor(DATA)
    for build in (lambda: x[:N], lambda: x.reshape(N, -1), lambda: Tensor.arange(N)):
        with pytest.raises(ValueError, match=r"'n'.*\[1, 10\].*unbound"):
            build()


def test_one_variable_bound_to_two_values_in_one_kernel_raises() -> None:
    x = Tensor(DATA)
    with pytest.raises(ValueError, match=r"'n' is bound to both 3 and 4"):
        Tensor.realize_all(x[: N.bind(3)].sum(0), x[: N.bind(4)].sum(0))


def test_out_of_range_bind_raises() -> None:
    with pytest.raises(ValueError, match=r"'n' = 11 is outside its bounds \[1, 10\]"):
        N.bind(11)
    with pytest.raises(ValueError, match=r"'n' = 0 is outside its bounds \[1, 10\]"):
        N.bind(0)


def test_bad_variable_bounds_raise() -> None:
    with pytest.raises(ValueError, match=r"'m'.*\[5, 2\]"):
        Variable("m", 5, 2)
    with pytest.raises(TypeError, match=r"'m'.*low"):
        Variable("m", 1.5, 2)  # type: ignore[arg-type]


def test_non_int_shape_entry_raises_type_error() -> None:
    with pytest.raises(TypeError, match=r"shape entry must be an int or a bound Variable, got 2.5"):
        Tensor.zeros(2.5, 3)  # type: ignore[arg-type]


def test_slice_past_the_dim_for_some_values_raises() -> None:
    x = Tensor(DATA)
    with pytest.raises(ValueError, match=r"'n' in \[1, 10\]"):
        x[: N.bind(3) + 1]  # n + 1 reaches 11 > 10 rows for n = 10
    with pytest.raises(ValueError, match=r"negative step only over the whole dim"):
        x[: N.bind(3) : -1]


def test_reshape_with_other_element_count_raises() -> None:
    rows = Tensor(DATA)[: N.bind(4)]
    with pytest.raises(ValueError, match=r"element counts differ"):
        rows.reshape(N.bind(4), 3)
    with pytest.raises(ValueError, match=r"cannot expand"):
        rows.expand(N.bind(4), 8)
    with pytest.raises(ValueError, match=r"reflect padding \(1, 1\).*got n=4 \('n' in \[1, 10\]"):
        rows.pad(((1, 1), (0, 0)), mode="reflect")  # n = 1 has no row to mirror


def test_tinyjit_replays_a_symbolic_kernel_with_its_variable_values() -> None:
    from kiln.tensor import TinyJit

    x = Tensor(DATA).realize()
    v = N.bind(3)
    step = TinyJit(lambda scale: (x[:v] * scale).sum(0))
    for value in (2.0, 3.0, 5.0):  # run, capture, replay: the kernel launches with n = 3 each time
        np.testing.assert_array_equal(step(Tensor(np.float32(value))).numpy(), (DATA[:3] * value).sum(0))
    assert step.captured is not None


def test_a_bound_variable_as_tensor_data_is_its_value_as_a_0_dim_int32() -> None:
    bound = Variable("i", 0, 9).bind(7)
    value = Tensor(bound)
    assert (value.shape, value.dtype, value.item()) == ((), dtypes.int32, 7)
