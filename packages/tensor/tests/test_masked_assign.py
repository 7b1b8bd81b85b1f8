"""Masked assigns (`cache.assign(mask.where(new, cache))`, a KV-cache row update) against numpy: codegen turns them
into gated stores that write only the selected positions (codegen's test_masked_stores.py checks the rewrite)."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor


@pytest.mark.parametrize(("shape", "axis", "position"), [((1, 2, 16, 4), 2, 3), ((3, 64), 0, 2), ((5, 7, 9), 1, 6)])
def test_masked_assign_writes_only_the_selected_rows(shape: tuple[int, ...], axis: int, position: int) -> None:
    rng = np.random.default_rng(sum(shape) + position)
    start = rng.standard_normal(shape).astype(np.float32)
    new_shape = tuple(1 if d == axis else size for d, size in enumerate(shape))
    new = rng.standard_normal(new_shape).astype(np.float32)
    cache = Tensor(start).contiguous().realize()
    rows = Tensor.arange(shape[axis]).reshape(*(shape[axis] if d == axis else 1 for d in range(len(shape))))
    cache.assign((rows == position).where(Tensor(new), cache)).realize()
    expected = start.copy()
    np.put_along_axis(expected, np.full(new_shape, position), new, axis=axis)
    np.testing.assert_array_equal(cache.numpy(), expected)


def test_a_masked_assign_with_a_changing_mask_in_a_jit() -> None:
    from kiln.tensor import TinyJit, Variable

    cache = Tensor.zeros(2, 8, 4).contiguous().realize()
    position = Variable("p", 0, 7)

    @TinyJit
    def write(new: Tensor, at: Tensor) -> Tensor:
        rows = Tensor.arange(8).reshape(1, 8, 1)
        cache.assign((rows == at).where(new, cache)).realize()
        return (cache * 1).contiguous()

    expected = np.zeros((2, 8, 4), np.float32)
    for step in range(8):
        new = np.full((2, 1, 4), step + 1, np.float32)
        got = write(Tensor(new), Tensor(position.bind(step))).numpy()
        expected[:, step : step + 1] = new
        np.testing.assert_array_equal(got, expected)
