"""`nonfinite_bits` against the bit patterns numpy stores for the same values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kiln.renderers.source_writer import nonfinite_bits
from kiln.uops import dtypes


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_nonfinite_bits_are_numpys(value: float) -> None:
    assert nonfinite_bits(value, dtypes.float32) == int(np.array(value, np.float32).view(np.uint32))
    assert nonfinite_bits(value, dtypes.float64) == int(np.array(value, np.float64).view(np.uint64))


def test_nonfinite_bits_refuses_finite_values_and_other_dtypes() -> None:
    with pytest.raises(ValueError, match=r"got 1\.5"):
        nonfinite_bits(1.5, dtypes.float32)
    with pytest.raises(ValueError, match="float16"):
        nonfinite_bits(math.inf, dtypes.float16)
