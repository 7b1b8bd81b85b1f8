"""Advanced indexing costs work proportional to its output: `x[ia, ib]`, index_select, take, gather and friends
lower to one indexed load per output element (codegen's gather rewrite of the one-hot sum ops/indexing.py builds),
not a pass over the indexed dims. Counted flops and bytes (GlobalCounters) are checked against the output's size;
values against numpy (the oracle), including the unchecked out-of-range behaviour (selects nothing, reads 0)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor
from kiln.uops import Context

_SIDE = 1000


def _table(shape: tuple[int, ...]) -> tuple[np.ndarray, Tensor]:
    values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return values, Tensor(values).realize()


def _index(values: list[int] | list[list[int]]) -> tuple[np.ndarray, Tensor]:
    array = np.array(values, dtype=np.int32)
    return array, Tensor(array).realize()


def _counted(build: Callable[[], Tensor]) -> tuple[np.ndarray, int, int]:
    """(values, flops, bytes) of realizing `build()`, counted after one warm-up run (compiles are not counted)."""
    build().realize()
    GlobalCounters.reset()
    result = build().realize()
    flops, traffic = GlobalCounters.flops, GlobalCounters.mem_bytes
    return result.numpy(), flops, traffic


def test_two_index_tensors_cost_the_output_not_the_table() -> None:
    x_np, x = _table((_SIDE, _SIDE))
    ia_np, ia = _index([[0, 1, 2], [3, 999, 5]])
    ib_np, ib = _index([[5, 4, 3], [2, 1, -1]])
    values, flops, traffic = _counted(lambda: x[ia, ib])
    np.testing.assert_array_equal(values, x_np[ia_np, ib_np])
    # the one-hot form counted 24e6 flops (a pass over all 1e6 elements per output); a gather reads 6 elements
    assert flops < 10_000, flops
    assert traffic < 10_000, traffic


@pytest.mark.parametrize(
    "case",
    ["rows", "columns", "separated", "broadcast", "host lists", "slice around", "index_select", "take", "gather"],
)
def test_advanced_index_forms_cost_a_few_operations_per_output(case: str) -> None:
    x_np, x = _table((_SIDE, _SIDE))
    cube_np, cube = _table((8, _SIDE, 8))
    ia_np, ia = _index([[0, 1, 2], [3, 4, 5]])
    row_np, row = _index([3, 1, 4, 1, -5])
    builds: dict[str, tuple[Callable[[], Tensor], np.ndarray]] = {
        "rows": (lambda: x[ia], x_np[ia_np]),
        "columns": (lambda: x[:, row], x_np[:, row_np]),
        "separated": (lambda: cube[ia, :, ia], cube_np[ia_np, :, ia_np]),
        "broadcast": (lambda: x[ia, row.reshape(5, 1, 1)], x_np[ia_np, row_np.reshape(5, 1, 1)]),
        "host lists": (lambda: x[[1, 2, -3], [0, 0, 5]], x_np[[1, 2, -3], [0, 0, 5]]),
        "slice around": (lambda: cube[1:7:2, row, ::-3], cube_np[1:7:2, row_np, ::-3]),
        "index_select": (lambda: x.index_select(1, row), np.take(x_np, row_np, axis=1)),
        "take": (lambda: x.take(ia * 1000 + 7), np.take(x_np, ia_np * 1000 + 7)),
        "gather": (
            lambda: x.gather(1, Tensor(np.full((_SIDE, 2), 998, np.int32))),
            np.take_along_axis(x_np, np.full((_SIDE, 2), 998), axis=1),
        ),
    }
    build, expected = builds[case]
    values, flops, traffic = _counted(build)
    np.testing.assert_array_equal(values, expected)
    # a handful of index operations and one load per output element; the one-hot form cost x.size per output
    assert flops <= 40 * expected.size + 200, (flops, expected.size)
    assert traffic <= 40 * expected.size + 200, (traffic, expected.size)


def test_a_long_dim_indexed_by_few_positions_is_still_a_gather() -> None:
    # 2**20 positions for 3 outputs: the scheduler would split such a reduce in two stages, which is no gather
    x_np, x = _table((1 << 20,))
    index_np, index = _index([7, (1 << 20) - 1, -2])
    for build, expected in (
        (lambda: x[index], x_np[index_np]),
        (lambda: x.gather(0, index.maximum(0)), x_np[np.maximum(index_np, 0)]),
    ):
        values, flops, traffic = _counted(build)
        np.testing.assert_array_equal(values, expected)
        assert flops < 1_000 and traffic < 1_000, (flops, traffic)


def test_non_selected_inf_and_nan_do_not_leak_into_the_result() -> None:
    # a one-hot product multiplies every non-selected element by 0: inf * 0 would be nan
    x_np = np.array([[np.inf, 1.0, np.nan], [2.0, -np.inf, 3.0]], np.float32)
    ia_np, ia = _index([1, 0, 1])
    ib_np, ib = _index([0, 1, 2])
    np.testing.assert_array_equal(Tensor(x_np)[ia, ib].numpy(), x_np[ia_np, ib_np])
    np.testing.assert_array_equal(Tensor(x_np)[ia].numpy(), x_np[ia_np])
    np.testing.assert_array_equal(Tensor(x_np).gather(1, Tensor([[1], [2]])).numpy(), [[1.0], [3.0]])


def test_unchecked_out_of_range_index_in_one_dim_selects_nothing() -> None:
    # the flat position of (0, 5) in a (4, 5) tensor is that of (1, 0): it must not alias into the next row
    x_np = np.arange(20, dtype=np.float32).reshape(4, 5)
    rows, columns = np.array([0, 1, 3, 4]), np.array([5, 7, 4, 0])
    inside = (rows < 4) & (columns < 5)
    expected = np.where(inside, x_np[np.minimum(rows, 3), np.minimum(columns, 4)], 0.0)
    with Context(CHECK=False):
        got = Tensor(x_np)[Tensor(rows.astype(np.int32)), Tensor(columns.astype(np.int32))].numpy()
    np.testing.assert_array_equal(got, expected)


def test_checked_out_of_range_index_raises_index_error_naming_it() -> None:
    x = Tensor(np.zeros((4, 5), np.float32))
    with pytest.raises(IndexError, match="index 5 is out of bounds"):
        x[Tensor([0, 1]), Tensor([5, 0])].realize()
    with pytest.raises(IndexError, match="index -6 is out of bounds"):
        x[[0], [-6]]


def test_bool_values_index_as_bools() -> None:
    x_np = np.array([[True, False], [False, True]])
    ia_np, ia = _index([1, 1, 0])
    ib_np, ib = _index([1, 0, 0])
    got = Tensor(x_np)[ia, ib]
    np.testing.assert_array_equal(got.numpy(), x_np[ia_np, ib_np])


def test_setitem_rows_cost_the_rows_not_rows_times_tensor() -> None:
    x_np, _ = _table((_SIDE, _SIDE))
    ia_np, ia = _index([[0, 1, 2], [3, 999, -1]])
    value_np = np.arange(_SIDE, dtype=np.float32) + 0.5

    def write() -> Tensor:
        target = Tensor(x_np).contiguous()
        target[ia] = Tensor(value_np)
        return target

    values, flops, traffic = _counted(write)
    expected = x_np.copy()
    expected[ia_np] = value_np
    np.testing.assert_array_equal(values, expected)
    # the (writes x elements) one-hot grid counted 43e9 flops and 1.5e9 bytes; each element now compares its row
    # against the 6 writes and takes one value
    assert flops < 20 * x_np.size, flops
    assert traffic < 20 * x_np.size, traffic


def test_index_copy_takes_the_written_rows_by_a_gather() -> None:
    x_np, x = _table((_SIDE, _SIDE))
    index_np, index = _index([3, 1, 998, 7])
    source_np = -np.arange(4 * _SIDE, dtype=np.float32).reshape(4, _SIDE)
    source = Tensor(source_np).realize()
    values, flops, traffic = _counted(lambda: x.index_copy(0, index, source))
    expected = x_np.copy()
    expected[index_np] = source_np
    np.testing.assert_array_equal(values, expected)
    assert flops < 10 * x_np.size and traffic < 20 * x_np.size, (flops, traffic)
    columns = x.index_copy(1, index, Tensor(source_np.T.copy())).numpy()
    expected = x_np.copy()
    expected[:, index_np] = source_np.T
    np.testing.assert_array_equal(columns, expected)
    with pytest.raises(IndexError, match=r"index_copy source of shape \(3, 1000\) must have shape \(4, 1000\)"):
        x.index_copy(0, index, source[:3])


def test_backward_accumulates_repeated_positions_like_torch() -> None:
    # PyTorch's gradient of an advanced index sums the output gradients of repeated positions (numpy's add.at)
    x_np = np.arange(30, dtype=np.float32).reshape(5, 6)
    rows, columns = np.array([[1, 1], [4, -1]]), np.array([[0, 0], [5, 2]])
    weights = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    x = Tensor(x_np, requires_grad=True)
    (x[Tensor(rows.astype(np.int32)), Tensor(columns.astype(np.int32))] * Tensor(weights)).sum().backward()
    expected = np.zeros_like(x_np)
    np.add.at(expected, (rows, columns), weights)
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    rows_of = Tensor(x_np, requires_grad=True)
    row_index, row_weights = np.array([[1, 4], [1, -1]]), np.arange(20, dtype=np.float32).reshape(5, 2, 2) - 3
    (rows_of[:, Tensor(row_index.astype(np.int32))] * Tensor(row_weights)).sum().backward()
    expected = np.zeros_like(x_np)
    np.add.at(expected, (np.arange(5)[:, None, None], row_index[None]), row_weights)
    assert rows_of.grad is not None
    np.testing.assert_array_equal(rows_of.grad.numpy(), expected)
    table = Tensor(x_np, requires_grad=True)
    picked = np.array([[2, 2, 0], [5, 1, 5], [0, 0, 0], [3, 3, 3], [1, 4, 1]])
    (table.gather(1, Tensor(picked.astype(np.int32))) * 2).sum().backward()
    expected = np.zeros_like(x_np)
    np.add.at(expected, (np.arange(5)[:, None].repeat(3, 1), picked), 2.0)
    assert table.grad is not None
    np.testing.assert_array_equal(table.grad.numpy(), expected)


def test_backward_of_an_index_costs_the_table_times_the_writes_at_most() -> None:
    # a dense scatter-add: each element of the gradient sums the output gradients whose index hits it
    x_np = np.arange(_SIDE * _SIDE, dtype=np.float32).reshape(_SIDE, _SIDE)
    ia_np, ia = _index([[0, 1, 2], [3, 4, 5]])
    ib_np, ib = _index([[5, 4, 3], [2, 1, 5]])

    def gradient() -> Tensor:
        x = Tensor(x_np, requires_grad=True)
        x[ia, ib].sum().backward()
        assert x.grad is not None
        return x.grad

    values, flops, traffic = _counted(gradient)
    expected = np.zeros_like(x_np)
    np.add.at(expected, (ia_np, ib_np), 1.0)
    np.testing.assert_array_equal(values, expected)
    assert flops < 10 * x_np.size * ia_np.size, flops
    assert traffic < 10 * x_np.nbytes, traffic
