"""`DTypeMixin`: casts between dtypes (`cast`, `bitcast`, and torch's `float()`, `half()`, `int()`, ... shorthands)."""

from __future__ import annotations

from typing import Self

from kiln.tensor.core import TensorCore
from kiln.tensor.ops._checks import check_device_dtype, check_dtype
from kiln.uops import DType, dtypes

__all__ = ["DTypeMixin"]


class DTypeMixin(TensorCore):
    """Casts between dtypes (kept apart so the method names float/int/bool never shadow the builtins)."""

    def cast(self, dtype: DType) -> Self:
        """This tensor's values converted to `dtype` (floats to ints truncate toward zero; ints wrap around).

        Example:
            >>> Tensor([1.7, -1.7]).cast(dtypes.int32).tolist()
            [1, -1]
        """
        target = check_dtype(dtype)
        check_device_dtype(self.device, target)
        return self._cast(target)

    def bitcast(self, dtype: DType) -> Self:
        """This tensor's bits reinterpreted as `dtype` of the same item size.

        Example:
            >>> Tensor([1.0]).bitcast(dtypes.uint32).tolist()
            [1065353216]
        """
        target = check_dtype(dtype)
        if target.itemsize != self.dtype.itemsize:
            raise TypeError(
                f"bitcast needs dtypes of one item size: {self.dtype!r} has {self.dtype.itemsize} bytes, "
                f"{target!r} has {target.itemsize}"
            )
        check_device_dtype(self.device, target)
        return self._bitcast(target)

    def float(self) -> Self:
        """This tensor as float32."""
        return self.cast(dtypes.float32)

    def half(self) -> Self:
        """This tensor as float16."""
        return self.cast(dtypes.float16)

    def double(self) -> Self:
        """This tensor as float64."""
        return self.cast(dtypes.float64)

    def int(self) -> Self:
        """This tensor as int32."""
        return self.cast(dtypes.int32)

    def long(self) -> Self:
        """This tensor as int64."""
        return self.cast(dtypes.int64)

    def bool(self) -> Self:
        """This tensor as bool (nonzero is True)."""
        return self.cast(dtypes.bool)

    def bfloat16(self) -> Self:
        """This tensor as bfloat16."""
        return self.cast(dtypes.bfloat16)

    def short(self) -> Self:
        """This tensor as int16."""
        return self.cast(dtypes.int16)

    def char(self) -> Self:
        """This tensor as int8."""
        return self.cast(dtypes.int8)

    def byte(self) -> Self:
        """This tensor as uint8."""
        return self.cast(dtypes.uint8)
