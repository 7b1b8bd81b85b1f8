"""Module-level functions of kiln.tensor that PyTorch users call as `torch.<name>(...)`."""

from __future__ import annotations

from kiln.tensor.tensor import Tensor
from kiln.uops import ConstType, dtypes

__all__ = ["where"]


def where(condition: Tensor, input: Tensor | ConstType, other: Tensor | ConstType) -> Tensor:
    """`input` where the `condition` tensor is nonzero, else `other`, like `torch.where`; all three broadcast.

    Args:
        condition: a Tensor (bool, or any dtype: nonzero counts as True).
        input: the values (a Tensor or a Python scalar) taken where `condition` holds.
        other: the values taken elsewhere.

    Example:
        >>> x = Tensor([-1.0, 2.0]); where(x > 0, x, 0.0).tolist()
        [0.0, 2.0]
    """
    if not isinstance(condition, Tensor):
        raise TypeError(f"where: condition must be a Tensor, got {condition!r} of type {type(condition).__name__}")
    if condition.dtype != dtypes.bool:
        condition = condition._cast(dtypes.bool)  # so `where` below reads it as the condition in every case
    return condition.where(input, other)
