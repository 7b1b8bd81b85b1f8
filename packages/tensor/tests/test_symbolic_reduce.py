"""Reductions and scans along a dim of bound-Variable size (issue 37): argmax / argmin, max / min with indices,
var / std, cumsum (one block and several), the other running ops, sort and topk. Each against numpy at several
bound values with one compile (the engine's program counter), and the error paths."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from kiln.tensor import Tensor, Variable
from kiln.tensor.realize.engine import Engine

EachValue = Callable[[Callable[[int], None], Sequence[int]], None]
N = Variable("n", 1, 10)
VALUES = (1, 4, 7, 10)
# small integers: many ties, so the first-position rule of argmax / argmin / sort is exercised
TIES = np.random.default_rng(37).integers(-3, 4, (10, 6)).astype(np.float32)
RANDOM = np.random.default_rng(38).standard_normal((10, 6)).astype(np.float32)


def test_argmax_argmin_over_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    x, columns = Tensor(TIES).realize(), Tensor(TIES.T.copy()).realize()

    def run(value: int) -> None:
        rows, want = x[: N.bind(value)], TIES[:value]
        np.testing.assert_array_equal(rows.argmax(0).numpy(), want.argmax(0))
        np.testing.assert_array_equal(rows.argmin(dim=0).numpy(), want.argmin(0))
        np.testing.assert_array_equal(rows.argmax(0, keepdim=True).numpy(), want.argmax(0)[None])
        np.testing.assert_array_equal(rows.argmax(1).numpy(), want.argmax(1))
        assert rows.argmax().item() == want.argmax()  # of the flattened tensor: (n * 6) positions
        assert rows.argmin().item() == want.argmin()
        inner = columns[:, : N.bind(value)]
        np.testing.assert_array_equal(inner.argmax(-1).numpy(), want.T.argmax(-1))
        np.testing.assert_array_equal(inner.argmin(1, keepdim=True).numpy(), want.T.argmin(1)[:, None])

    each_value(run, VALUES)


def test_max_min_along_a_variable_dim_give_values_and_indices(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(TIES).realize()

    def run(value: int) -> None:
        rows, want = x[: N.bind(value)], TIES[:value]
        values, indices = rows.max(0)
        np.testing.assert_array_equal(values.numpy(), want.max(0))
        np.testing.assert_array_equal(indices.numpy(), want.argmax(0))
        values, indices = rows.min(dim=0, keepdim=True)
        np.testing.assert_array_equal(values.numpy(), want.min(0, keepdims=True))
        np.testing.assert_array_equal(indices.numpy(), want.argmin(0)[None])
        np.testing.assert_array_equal(rows.amin(0).numpy(), want.min(0))

    each_value(run, VALUES)


def test_argmax_counts_nan_as_largest_on_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    data = RANDOM.copy()
    data[2, 1] = data[5, 3] = np.nan
    x = Tensor(data).realize()

    def run(value: int) -> None:
        # numpy's argmax also returns the first NaN
        np.testing.assert_array_equal(x[: N.bind(value)].argmax(0).numpy(), data[:value].argmax(0))

    each_value(run, VALUES)


def test_var_and_std_over_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(RANDOM).realize()

    def run(value: int) -> None:
        rows, want = x[: N.bind(value)], RANDOM[:value]
        close = {"rtol": 1e-5, "atol": 1e-5}
        np.testing.assert_allclose(rows.var(0, correction=0).numpy(), want.var(0), **close)
        np.testing.assert_allclose(rows.std(1).numpy(), want.std(1, ddof=1), **close)
        if value > 1:  # one element with Bessel's correction divides by 0, as in numpy (inf / nan)
            np.testing.assert_allclose(rows.var(0).numpy(), want.var(0, ddof=1), **close)
            np.testing.assert_allclose(rows.std().numpy(), want.std(ddof=1), **close)

    each_value(run, (2, 5, 10))


def test_cumsum_and_running_ops_over_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(RANDOM).realize()

    def run(value: int) -> None:
        rows, want = x[: N.bind(value)], RANDOM[:value]
        close = {"rtol": 1e-5, "atol": 1e-5}
        np.testing.assert_allclose(rows.cumsum(0).numpy(), np.cumsum(want, 0), **close)
        np.testing.assert_allclose(rows.cumsum(1).numpy(), np.cumsum(want, 1), **close)
        np.testing.assert_allclose(rows.cumprod(0).numpy(), np.cumprod(want, 0), **close)
        values, positions = rows.cummax(0)
        np.testing.assert_array_equal(values.numpy(), np.maximum.accumulate(want, 0))
        np.testing.assert_allclose(rows.logcumsumexp(0).numpy(), np.logaddexp.accumulate(want, 0), **close)
        assert positions.numpy().shape == (value, 6)

    each_value(run, VALUES)


def test_cumsum_over_a_variable_dim_past_one_block(engine: Engine, each_value: EachValue) -> None:
    # past 256 elements cumsum runs blocks: the zero-padded largest length, cut back to the bound length
    length = Variable("length", 1, 700)
    data = np.random.default_rng(39).standard_normal((700, 3)).astype(np.float32)
    x = Tensor(data).realize()

    def run(value: int) -> None:
        got = x[: length.bind(value)].cumsum(0).numpy()
        np.testing.assert_allclose(got, np.cumsum(data[:value], 0, dtype=np.float64), rtol=1e-4, atol=1e-3)

    each_value(run, (1, 255, 257, 700, 512))


def test_sort_and_topk_along_a_variable_dim(engine: Engine, each_value: EachValue) -> None:
    x = Tensor(TIES).realize()

    def run(value: int) -> None:
        rows, want = x[: N.bind(value)], TIES[:value]
        values, positions = rows.sort(0)
        np.testing.assert_array_equal(values.numpy(), np.sort(want, 0))
        np.testing.assert_array_equal(positions.numpy(), np.argsort(want, 0, kind="stable"))
        values, positions = rows.topk(1, dim=0)
        np.testing.assert_array_equal(values.numpy(), want.max(0, keepdims=True))
        np.testing.assert_array_equal(positions.numpy(), want.argmax(0)[None])
        # descending and stable: the order of -x ascending
        order = np.argsort(-want, 0, kind="stable")
        values, positions = rows.sort(0, descending=True)
        np.testing.assert_array_equal(positions.numpy(), order)
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(want, order, 0))

    each_value(run, VALUES)


def test_topk_of_a_variable_dim_needs_k_within_its_smallest_value() -> None:
    rows = Tensor(RANDOM)[: Variable("n", 2, 10).bind(5)]
    assert rows.topk(2, dim=0)[0].shape == (2, 6)
    with pytest.raises(ValueError, match=r"topk k=3 is out of range for dim 0 of size n=5 .*'n' in \[2, 10\]"):
        rows.topk(3, dim=0)
