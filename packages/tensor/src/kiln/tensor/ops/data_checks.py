"""Checks of data-dependent arguments (index tensors, integer divisors) and the safe unchecked defaults.

Index tensors and divisors are lazy: their values are known only when the graph runs. By default kiln does not
read them and every op has a defined, memory-safe result (indices are compared, never used as addresses):

- an out-of-range position in an index tensor (`x[idx]`, `gather`, `one_hot`, class targets of `nll_loss` /
  `cross_entropy`) selects nothing: it reads 0 and writes nothing (`x[idx] = v`, `scatter`);
- an integer `x // 0`, `x % 0`, `div(x, 0, rounding_mode=...)` by a zero *in a tensor* gives 0 (numpy's result);
  a literal 0 divisor raises when the op is built.

With the knob `CHECK=1` these ops read (realize) the index or divisor first and raise, naming the op and the bad
value: IndexError "index 10 is out of bounds for dimension 0 with size 3" as PyTorch does, and
IntegerDivisionByZero (a RuntimeError and a ZeroDivisionError) for a zero divisor. The test suite runs with it on.
Inside a function `TinyJit` is capturing the checks are skipped: reading a value to the host cannot be replayed
(replays run no Python), so a jitted function has the unchecked behaviour above; check it un-jitted first.
"""

from __future__ import annotations

import numpy as np

from kiln.tensor import graph
from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.realize import engine
from kiln.tensor.symbolic import bound_int
from kiln.uops import DType, Ops, dtypes, register_knob

__all__ = [
    "CHECK",
    "IntegerDivisionByZero",
    "check_index_values",
    "check_nonzero_divisor",
    "guarded_integer_division",
    "index_compute_dtype",
]


class IntegerDivisionByZero(RuntimeError, ZeroDivisionError):
    """An integer division or remainder by the literal 0 (PyTorch raises too; the kernel result means nothing)."""


CHECK = register_knob(
    "CHECK",
    bool,
    False,
    "Read index tensors and integer divisors before use and raise IndexError / ZeroDivisionError naming the op and "
    "the bad value; off: an out-of-range index selects nothing (reads 0, writes nothing), integer x // 0 and x % 0 "
    "give 0.",
    owner="kiln.tensor",
)


def _checking() -> bool:
    # CHECK is on and no TinyJit capture is running (a capture refuses reads to the host: replays run no Python)
    return bool(CHECK.value()) and engine.default_engine().recording is None


def check_index_values(
    index: TensorCore,
    size: int,
    what: str,
    dim: int,
    *,
    negative: bool = True,
    error: type[Exception] = IndexError,
    ignore: int | None = None,
) -> None:
    """With CHECK on: `error` naming the op and the first index outside [-size, size) ([0, size) when `negative`
    indices are not accepted; the value `ignore` is always accepted). Realizes `index`."""
    if not _checking() or index.numel() == 0:
        return
    size = bound_int(size)  # a dim of bound-Variable size: checked at its value for this call
    values = index.numpy()
    low = -size if negative else 0
    outside = (values < low) | (values >= size)
    if ignore is not None:
        outside &= values != ignore
    bad = values[outside]
    if bad.size:
        raise error(f"{what}: index {int(bad.flat[0])} is out of bounds for dimension {dim} with size {size}")


def check_nonzero_divisor(divisor: TensorCore, what: str) -> None:
    """With CHECK on: IntegerDivisionByZero naming the op and the first zero's position in the integer `divisor`."""
    if not _checking() or divisor.numel() == 0:
        return
    zeros = np.flatnonzero(divisor.numpy() == 0)
    if zeros.size:
        position = tuple(int(i) for i in np.unravel_index(int(zeros[0]), divisor.shape))
        raise IntegerDivisionByZero(
            f"{what}: integer division by zero (the divisor tensor holds 0 at position {position})"
        )


def guarded_integer_division(left: TensorT, right: TensorT, op: Ops, what: str) -> TensorT:
    """`left op right` for op IDIV or MOD of integer tensors, 0 where `right` is 0 (checked first with CHECK on).

    A zero divisor is undefined behaviour in LLVM IR and C and traps on x86: the kernel never divides by it.
    """
    constant = graph.const_value(right.uop)
    if constant is not None and constant != 0:
        return left._binary(op, right)  # a nonzero literal divisor (a literal 0 raised when the op was built)
    check_nonzero_divisor(right, what)
    zero = right._const(0, right.shape, right.dtype, right.device)
    one = right._const(1, right.shape, right.dtype, right.device)
    is_zero = right._binary(Ops.CMPEQ, zero)
    safe = is_zero._ternary(Ops.WHERE, one, right)
    result = left._binary(op, safe)
    return is_zero._ternary(Ops.WHERE, result._const(0, result.shape, result.dtype, result.device), result)


def index_compute_dtype(index: TensorCore, extent: int) -> DType:
    """The dtype index arithmetic on `index` runs in: int32 when its values and positions below `extent` fit, else
    int64 (an int64 index of 2**32 + 1 must not wrap to 1)."""
    wide = index.dtype.itemsize > 4 or index.dtype == dtypes.uint32 or extent > dtypes.max(dtypes.int32)
    return dtypes.int64 if wide else dtypes.int32
