"""Kernels whose index range passes 2**31 but that touch little memory: index math runs in int64 (codegen's index
dtype pass picks it from the ranges), on both CPU renderers. Oracle: exact integer arithmetic."""

from __future__ import annotations

import pytest

from kiln.tensor import Tensor, dtypes
from kiln.uops import Context

BIG = 2**31


@pytest.mark.parametrize("renderer", ["llvm", "c"])
def test_iota_and_arange_past_2_31(renderer: str) -> None:
    with Context(CPU_RENDERER=renderer):
        # the positions are computed in the 3-element kernel that reads them: no 2**31-element buffer exists
        assert Tensor.arange(BIG + 3, device="CPU")[BIG:].tolist() == [BIG, BIG + 1, BIG + 2]
        assert Tensor.arange(BIG + 3, device="CPU").dtype == dtypes.int64


@pytest.mark.parametrize("renderer", ["llvm", "c"])
def test_reduce_over_more_than_2_31_elements_of_a_view(renderer: str) -> None:
    count = 2**30 + 8  # two rows of this many: 2**31 + 16 elements read from a 2-element buffer
    values = Tensor([1, 5], dtype=dtypes.int64, device="CPU").contiguous().realize()
    flat = values.reshape(2, 1).expand(2, count).reshape(-1)
    with Context(CPU_RENDERER=renderer):
        assert flat.sum().item() == 6 * count
        assert flat[BIG + 8 :].tolist() == [5] * 8
