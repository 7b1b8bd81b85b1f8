"""PyTorch's type promotion for Tensor operations, on top of kiln.uops' `least_upper_dtype` lattice.

PyTorch ranks operands in three tiers and lets a lower tier decide the result only when it belongs to a higher
*category* (bool < integer < floating point):

1. tensors with at least one dim,
2. 0-dim tensors,
3. Python scalars ("wrapped numbers"): a bool is `bool`, an int `dtypes.default_int`, a float
   `dtypes.default_float`.

So `int8 tensor + 1000` stays int8, `int32 tensor + 1.5` is `default_float`, `float16 tensor + float64 0-dim tensor`
stays float16, but `int32 tensor + float64 0-dim tensor` is float64. Within a tier dtypes join on the lattice.

Every elementwise op promotes its operands, so the result for each tuple of operand kinds (tier, dtype) is
memoized (`promote_kinds`); `promote_kinds_uncached` is the same rule without the cache.
"""

from __future__ import annotations

import functools

import numpy as np

from kiln.tensor.core import TensorCore
from kiln.uops import ConstType, DType, dtypes, least_upper_dtype

__all__ = [
    "DIMENSIONED",
    "PYTHON_SCALAR",
    "ZERO_DIM",
    "OperandKind",
    "category",
    "operand_kind",
    "promote_kinds",
    "promote_kinds_uncached",
    "result_type",
    "scalar_dtype",
    "scalar_value",
    "true_divide_dtype",
]

# the three promotion tiers, highest first
DIMENSIONED = 0
ZERO_DIM = 1
PYTHON_SCALAR = 2

OperandKind = tuple[int, DType]
"""What promotion sees of one operand: its tier (DIMENSIONED, ZERO_DIM, PYTHON_SCALAR) and its dtype."""

_PROMOTION_CACHE_SIZE = 4096  # distinct operand-kind tuples remembered (pairs of all dtypes and tiers fit)


def category(dtype: DType) -> int:
    """0 for bool, 1 for integers, 2 for floating point: the categories type promotion compares."""
    if dtypes.is_float(dtype):
        return 2
    return 0 if dtypes.is_bool(dtype) else 1


def scalar_value(value: object) -> ConstType:
    """A Python bool / int / float (numpy scalars are unwrapped); TypeError for anything else."""
    if isinstance(value, np.generic) and value.ndim == 0 and value.dtype.kind in "biuf":
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise TypeError(
            f"expected a Tensor or a Python bool / int / float, got {value!r} of type {type(value).__name__}"
        )
    return value


def scalar_dtype(value: ConstType) -> DType:
    """The dtype a Python scalar takes part in promotion with: bool, default_int or default_float."""
    if isinstance(value, bool):
        return dtypes.bool
    return dtypes.default_int if isinstance(value, int) else dtypes.default_float


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
    # a lower tier only matters when its category is above the higher tier's (PyTorch's combine_categories)
    if higher is None:
        return lower
    if lower is None or dtypes.is_float(higher):
        return higher
    if dtypes.is_bool(higher) or dtypes.is_float(lower):
        return least_upper_dtype(higher, lower)
    return higher


def _join(found: list[DType]) -> DType | None:
    return least_upper_dtype(*found) if found else None


def promote_kinds_uncached(kinds: tuple[OperandKind, ...]) -> DType:
    """The promoted dtype of operands of `kinds` (tier, dtype), computed from the rules (no cache)."""
    tiers: tuple[list[DType], list[DType], list[DType]] = ([], [], [])
    for tier, dtype in kinds:
        tiers[tier].append(dtype)
    dimensioned, zero_dim, wrapped = tiers
    result = _combine(_join(dimensioned), _combine(_join(zero_dim), _join(wrapped)))
    if result is None:
        raise ValueError("result_type needs at least one operand")
    return result


promote_kinds = functools.lru_cache(maxsize=_PROMOTION_CACHE_SIZE)(promote_kinds_uncached)
"""`promote_kinds_uncached`, memoized: the dtype lattice walk runs once per distinct tuple of operand kinds."""


def operand_kind(operand: TensorCore | ConstType) -> OperandKind:
    """The (tier, dtype) promotion sees of `operand`, a Tensor or a Python / numpy scalar (TypeError otherwise).

    A scalar's dtype is resolved here (not in the memoized rule), so changing `dtypes.default_float` /
    `dtypes.default_int` takes effect at once.
    """
    if isinstance(operand, TensorCore):
        return (DIMENSIONED if operand.ndim else ZERO_DIM, operand.dtype)
    return (PYTHON_SCALAR, scalar_dtype(scalar_value(operand)))


def result_type(*operands: TensorCore | ConstType) -> DType:
    """The dtype PyTorch gives an elementwise op over `operands` (Tensors and Python scalars).

    Example:
        >>> result_type(Tensor([1, 2], dtype=dtypes.int8), 1000) is dtypes.int8
        True
    """
    return promote_kinds(tuple(operand_kind(operand) for operand in operands))


def true_divide_dtype(dtype: DType) -> DType:
    """The dtype of `/`: integers and bools divide into `dtypes.default_float`, floats keep theirs."""
    return dtype if dtypes.is_float(dtype) else dtypes.default_float
