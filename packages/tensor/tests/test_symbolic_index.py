"""Indexing and padding over dims of bound-Variable size (issue 37): slices with steps, negative indices, two
Variables in one index, shrink / pad with Variable arguments, and the reflect / replicate / circular pad modes.
Each against numpy at several bound values with one compile (the engine's program counter), and the error paths."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tensor import Tensor, Variable
from kiln.tensor.realize.engine import Engine

EachValue = Callable[[Callable[[int], None], Sequence[int]], None]
N = Variable("n", 1, 10)
WIDTH = Variable("w", 1, 6)
START = Variable("s", 0, 9)  # s + 1 <= 10 rows
VALUES = (1, 4, 7, 10)
DATA = np.arange(60, dtype=np.float32).reshape(10, 6)


def _equal(tensor: Tensor, expected: np.ndarray) -> None:
    got = tensor.numpy()
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_slices_with_steps_over_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()

    def run(value: int) -> None:
        v = N.bind(value)
        rows, want = x[:v], DATA[:value]
        _equal(x[:v:2], DATA[:value:2])
        _equal(rows[::2], want[::2])
        _equal(rows[::3] * 2, want[::3] * 2)
        _equal(rows[1::2], want[1::2])
        _equal(rows.T[:, ::4], want.T[:, ::4])
        _equal(rows[::-1], want[::-1])
        _equal(rows[::-2], want[::-2])

    each_value(run, (2, 5, 10))


def test_negative_indices_on_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()

    def run(value: int) -> None:
        v = N.bind(value)
        rows, want = x[:v], DATA[:value]
        _equal(rows[-1], want[-1])
        _equal(rows.T[:, -1], want.T[:, -1])
        _equal(rows[:, -1], want[:, -1])
        _equal(x[v - 1], DATA[value - 1])
        _equal(rows[-1:], want[-1:])
        _equal(rows[:-1] + 1, want[:-1] + 1)  # n - 1 rows (none for n = 1)

    each_value(run, VALUES)


def test_two_variables_in_one_index(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()

    def run(value: int) -> None:
        v, w, s = N.bind(value), WIDTH.bind(min(value, 6)), START.bind(value - 1)
        width = min(value, 6)
        _equal(x[:v, :w], DATA[:value, :width])
        _equal(x[s : s + 1, :w], DATA[value - 1 : value, :width])
        _equal(x[s:, :w:2], DATA[value - 1 :, :width:2])
        _equal(x[:v, :w].sum(0), DATA[:value, :width].sum(0))

    each_value(run, VALUES)


def test_shrink_and_pad_with_variable_arguments(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(DATA).realize()

    def run(value: int) -> None:
        v, w, s = N.bind(value), WIDTH.bind(min(value, 6)), START.bind(value - 1)
        width = min(value, 6)
        _equal(x.shrink(((0, v), None)), DATA[:value])
        _equal(x.shrink(((s, s + 1), (0, w))), DATA[value - 1 : value, :width])
        _equal(x[:v].pad(((0, v), None)), np.pad(DATA[:value], ((0, value), (0, 0))))
        _equal(x[:v].pad((None, (w, 1)), value=-1.0), np.pad(DATA[:value], ((0, 0), (width, 1)), constant_values=-1))

    each_value(run, VALUES)


@pytest.mark.parametrize(("mode", "numpy_mode"), [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
def test_pad_modes_on_a_tensor_with_a_variable_dim(
    engine: Engine, mode: str, numpy_mode: str, each_value: EachValue
) -> None:
    at_least_three = Variable("m", 3, 10)
    x = Tensor(DATA).realize()

    def run(value: int) -> None:
        rows, want = x[: at_least_three.bind(value)], DATA[:value]
        for pairs in (((1, 2), (0, 0)), ((0, 0), (2, 1)), ((2, 2), (1, 1))):
            _equal(rows.pad(pairs, mode=mode), np.pad(want, pairs, mode=numpy_mode))  # type: ignore[call-overload]

    each_value(run, (3, 6, 10))


def test_pad_modes_that_cannot_hold_for_every_value_raise() -> None:
    rows = Tensor(DATA)[: N.bind(3)]
    with pytest.raises(ValueError, match=r"reflect padding \(1, 1\).*size >= 2, got n=3 \('n' in \[1, 10\]"):
        rows.pad(((1, 1), (0, 0)), mode="reflect")  # n = 1 has no row to mirror
    with pytest.raises(ValueError, match=r"circular padding \(2, 0\).*size >= 2, got n=3"):
        rows.pad(((2, 0), (0, 0)), mode="circular")
    for mode in ("reflect", "replicate", "circular"):
        with pytest.raises(ValueError, match=rf"pad mode '{mode}' takes int amounts, got n=3 .*'n' in \[1, 10\]"):
            rows.pad(((0, N.bind(3)), (0, 0)), mode=mode)
        with pytest.raises(ValueError, match=rf"pad mode '{mode}' .* cannot crop: got amount -1"):
            rows.pad(((-1, 0), (0, 0)), mode=mode)


def test_index_outside_a_variable_dim_for_some_values_raises() -> None:
    rows = Tensor(DATA)[: N.bind(4)]
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for dim 0 of size n=4 \('n' in \[1, 10\]"):
        rows[3]  # inside for n = 4, outside for n <= 3
    with pytest.raises(IndexError, match=r"index -2 is out of bounds for dim 0 of size n=4"):
        rows[-2]
    with pytest.raises(ValueError, match=r"negative step only over the whole dim"):
        rows[2::-1]
    with pytest.raises(ValueError, match=r"slice step cannot be zero"):
        rows[::0]
    with pytest.raises(ValueError, match=r"'n' in \[1, 10\]"):
        rows[1:3]  # 3 rows need n >= 3


def _inside_for_every_value(start: int | None, stop: int | None, step: int | None) -> bool:
    """Whether x[:n][start:stop:step] keeps its bounds inside the dim, unclamped, for every n in [1, 10] (negative
    ints counting from the end); a negative step only over the whole dim."""
    if step is not None and step < 0:
        return start is None and stop is None
    for n in range(1, 11):
        first = 0 if start is None else start + n if start < 0 else start
        last = n if stop is None else stop + n if stop < 0 else stop
        if not 0 <= first <= last <= n:
            return False
    return True


@settings(max_examples=80, deadline=None)
@given(
    value=st.integers(1, 10),
    start=st.none() | st.integers(-10, 10),
    stop=st.none() | st.integers(-10, 10),
    step=st.sampled_from([None, 1, 2, 3, -1, -2]),
)
def test_slices_of_a_variable_dim_match_numpy_or_raise(
    value: int, start: int | None, stop: int | None, step: int | None
) -> None:
    """Any int slice of x[:n]: numpy's result at the bound value when its bounds hold for every n in [1, 10], else
    ValueError / IndexError (never numpy's silent clamping, which would change the kernel with n)."""
    rows = Tensor(DATA)[: N.bind(value)]
    if not _inside_for_every_value(start, stop, step):
        with pytest.raises((ValueError, IndexError)):
            rows[start:stop:step]
        return
    np.testing.assert_array_equal(rows[start:stop:step].numpy(), DATA[:value][start:stop:step])
