"""`CreationMixin`: new tensors (zeros, ones, full, arange, linspace, eye, random tensors, *_like), over the
dtype casts of `DTypeMixin` (`kiln.tensor.ops.casting`).

Constant tensors are CONST nodes broadcast to a shape: they take no memory and fuse into their consumers. `arange`
is built without memory too (`iota`). Random tensors come from the counter-based Threefry generator of
`kiln.tensor.ops.random`, so a seed gives the same numbers on every device.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable
from typing import Self, Unpack, cast

import numpy as np

from kiln.tensor import graph
from kiln.tensor.core import ShapeArgument, TensorCore, TensorT
from kiln.tensor.device import canonical_device
from kiln.tensor.ops._checks import (
    check_constant_fits,
    check_device_dtype,
    check_dtype,
    check_int,
    check_size,
    shape_argument,
)
from kiln.tensor.ops.casting import DTypeMixin
from kiln.tensor.ops.promotion import scalar_value
from kiln.tensor.ops.random import threefry2x32
from kiln.tensor.ops.tensor_options import TensorOptions, torch_keywords
from kiln.tensor.realize.buffers import attach_buffer
from kiln.tensor.realize.engine import default_engine
from kiln.tensor.symbolic import BoundVariable, Variable, as_size, carries_variable, is_symbolic, max_int, max_numel
from kiln.uops import ConstType, DType, Ops, UOp, dtypes

__all__ = ["CreationMixin", "DTypeMixin", "TensorOptions", "iota", "torch_keywords"]


def iota(kind: type[TensorT], size: int, device: str | tuple[str, ...] | None = None) -> TensorT:
    """The `kind` tensor [0, 1, ..., size - 1] (int32; int64 past 2**31 elements), built from constants and movement ops
    only (no memory, no reduce).

    The value of position i is the sum of its binary digits: plane k is the vector [0, 2**k] padded from a constant
    and broadcast along one dim of a (2, 2, ..., 2) view, so the graph has O(log size) nodes and fuses into its
    consumer. A size that is a bound Variable expression gets `sized_iota`'s positions.
    """
    if type(size) is not int:
        return sized_iota(kind, size, device)
    # a class is hashable (typeshed does not say so for type[...])
    return kind._from_uop(_iota_node(cast(Hashable, kind), size, canonical_device(device)))


# `iota`'s graph by (size, device): argmax, random numbers, one-hot and sorting build the same iota every call, and
# building it is O(log size) nodes each time. A true cache, so it stays module-level: keyed by immutable values, its
# results are hash-consed, immutable graph nodes that never change meaning; bounded and thread-safe (lru_cache).
@functools.lru_cache(maxsize=256)
def _iota_node(kind: type[TensorCore], size: int, device: str) -> UOp:
    return _build_iota(kind, size, device).uop


def sized_iota(kind: type[TensorT], size: int, device: str | tuple[str, ...] | None = None) -> TensorT:
    """`iota` of a size that may be a bound Variable expression: the positions of its largest value, shrunk to it."""
    if type(size) is int:
        return iota(kind, size, device)
    return iota(kind, max(max_int(size), 1), device)._movement(Ops.SHRINK, ((0, size),))


def _symbolic_arange(
    kind: type[TensorT],
    start: object,
    stop: BoundVariable | Variable | UOp,
    step: object,
    dtype: DType | None,
    device: str | tuple[str, ...] | None,
) -> TensorT:
    """`arange(start, stop, step)` with a bound-Variable `stop` (int start and step): the positions of the largest
    length, shrunk to the bound length, so one kernel serves every value."""
    first, increment = check_int(start, "arange start"), check_int(step, "arange step")
    if increment <= 0:
        raise ValueError(f"arange with a Variable stop needs a positive int step, got {increment}")
    end = cast(UOp, as_size(stop, "arange stop"))
    span = (end - first) if first else end
    if int(span.vmin) < 0:  # a stop below start is an empty range, as with ints
        span = span.maximum(0)
    size = span if increment == 1 else (span + (increment - 1)) // increment
    target_dtype = dtypes.default_int if dtype is None else check_dtype(dtype)
    check_constant_fits(first + (max_int(size) - 1) * increment, target_dtype)
    positions = sized_iota(kind, cast(int, size), device)
    result = positions._cast(target_dtype)
    if increment != 1:
        result = result._binary(Ops.MUL, result._const(increment, result.shape, target_dtype, result.device))
    if first != 0:
        result = result._binary(Ops.ADD, result._const(first, result.shape, target_dtype, result.device))
    return result


def _build_iota(kind: type[TensorT], size: int, device: str) -> TensorT:
    dtype = dtypes.int32 if size <= 2**31 else dtypes.int64
    if size <= 1:
        return kind._const(0, (size,), dtype, device)
    bits = (size - 1).bit_length()
    total: TensorT | None = None
    for bit in range(bits):
        digit = kind._const(1 << bit, (1,), dtype, device)._movement(Ops.PAD, ((1, 0),))
        plane_shape = [1] * bits
        plane_shape[bits - 1 - bit] = 2  # the most significant digit is the outermost dim (row-major order)
        plane = digit._movement(Ops.RESHAPE, tuple(plane_shape))._movement(Ops.EXPAND, (2,) * bits)
        total = plane if total is None else total._binary(Ops.ADD, plane)
    assert total is not None
    return total._movement(Ops.RESHAPE, (1 << bits,))._movement(Ops.SHRINK, ((0, size),))


def _dtype_or(options: TensorOptions, default: DType) -> DType:
    """The dtype `options` ask for (checked), else `default`."""
    dtype = options.get("dtype")
    return default if dtype is None else check_dtype(dtype)


def _float_by_default(options: TensorOptions) -> TensorOptions:
    """`options` whose absent dtype is `dtypes.default_float`."""
    return {**options, "dtype": options.get("dtype") or dtypes.default_float}


def _float_dtype(options: TensorOptions, what: str) -> DType:
    result = _dtype_or(options, dtypes.default_float)
    if not dtypes.is_float(result):
        raise TypeError(f"{what} makes floating-point tensors, got dtype {result!r}")
    return result


def _check_real(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what} must be a real number, got {value!r} of type {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value!r}")


def _with_grad(tensor: TensorT, options: TensorOptions) -> TensorT:
    # every creation function ends here: the device must be able to store the dtype asked for
    check_device_dtype(tensor.device, tensor.dtype)
    if (requires_grad := options.get("requires_grad")) is not None:
        tensor.requires_grad = requires_grad
    return tensor


def _random_words(kind: type[TensorT], count: int, device: str | tuple[str, ...] | None) -> tuple[TensorT, TensorT]:
    """Two uint32 words per element of a (count,) tensor: Threefry of the counter (position, call number)."""
    engine = default_engine()
    key0, key1, call = engine.random.next_stream()
    block = iota(kind, count, device)._cast(dtypes.uint32)
    # the call number comes from memory, not a constant, so every call runs the same (cached) kernel
    stream = kind(np.array([call], dtype=np.uint32), device=device)
    if (recording := engine.recording) is not None:
        recording.observe_stream(stream, call)  # TinyJit rewrites the call number on replay
    stream = stream._movement(Ops.EXPAND, (count,))
    return threefry2x32(block, stream, key0, key1)


def _random_bits(kind: type[TensorT], count: int, device: str | tuple[str, ...] | None) -> TensorT:
    """`count` random uint32 words: both Threefry outputs of ceil(count / 2) counters, first words first."""
    half = (count + 1) // 2
    first, second = _random_words(kind, half, device)
    both = first._movement(Ops.PAD, ((0, half),))._binary(Ops.OR, second._movement(Ops.PAD, ((half, 0),)))
    return both._movement(Ops.SHRINK, ((0, count),))


def _largest_shape(dims: tuple[int, ...]) -> tuple[int, ...]:
    """A symbolic shape at its largest value (what a random tensor of that shape draws, see `_cut`)."""
    return tuple(max_int(size) for size in dims)


def _cut(values: TensorT, dims: tuple[int, ...], options: TensorOptions) -> TensorT:
    """Random `values` drawn at the largest shape, cut to the symbolic shape `dims`.

    A random tensor of a shape with bound Variables draws the stream of its largest shape (the same values as the
    int shape of every variable at its upper bound) and keeps the leading `dims`: one kernel serves every value, and
    two values of a variable give consistent prefixes (`rand(n, 4)` at n = 3 is the first 3 rows of n = 7's). Only
    the kept elements are computed (the cut fuses into the generator)."""
    return _with_grad(values._movement(Ops.SHRINK, tuple((0, size) for size in dims)), options)


def _random_tensor(
    kind: type[TensorT], shape: tuple[ShapeArgument, ...], options: TensorOptions, draw: Callable[[int], TensorT]
) -> TensorT:
    """The random tensor of `shape` whose `count` flat values `draw(count)` makes (in the result's dtype); a
    symbolic shape draws at its largest and is cut (`_cut`)."""
    dims = shape_argument(shape)
    if is_symbolic(dims):
        return _cut(_random_tensor(kind, _largest_shape(dims), {}, draw), dims, options)
    return _with_grad(draw(math.prod(dims))._movement(Ops.RESHAPE, dims), options)


def _unit_interval(bits: TensorT, dtype: DType) -> TensorT:
    """Floats in [0, 1) of `dtype` from uint32 `bits`: the top k bits times 2**-k, k = the dtype's precision.

    Every value is exact in `dtype`, so rounding can never produce 1.0 (float64 gets 32 random bits).
    """
    precision = min(dtypes.finfo(dtype)[1] + 1, 32)
    compute = dtypes.float64 if dtype == dtypes.float64 else dtypes.float32
    top = bits
    if precision < 32:
        top = bits._binary(Ops.SHR, bits._const(32 - precision, bits.shape, dtypes.uint32, bits.device))
    scaled = top._cast(compute)._binary(Ops.MUL, bits._const(2.0**-precision, bits.shape, compute, bits.device))
    return scaled._cast(dtype)


def _normal_values(kind: type[TensorT], count: int, device: str | tuple[str, ...] | None, dtype: DType) -> TensorT:
    """`count` standard normal numbers of `dtype`: the Box-Muller transform of two uniform numbers per element."""
    first, second = _random_words(kind, count, device)
    radius_uniform = _unit_interval(first, dtypes.float32)
    angle_uniform = _unit_interval(second, dtypes.float32)
    # 1 - u lies in (0, 1], so the logarithm is finite
    radius = ((1.0 - radius_uniform).log() * -2.0).sqrt()
    return (radius * (angle_uniform * (2.0 * math.pi)).cos())._cast(dtype)


def _integer_values(
    kind: type[TensorT], count: int, device: str | tuple[str, ...] | None, lowest: int, span: int, dtype: DType
) -> TensorT:
    """`count` uniform integers in [lowest, lowest + span) as `dtype`."""
    bits = _random_bits(kind, count, device)._cast(dtypes.uint64)
    # (bits * span) >> 32 maps the 2**32 words onto [0, span) with at most one count of bias per value
    scaled = bits._binary(Ops.MUL, bits._const(span, bits.shape, dtypes.uint64, bits.device))
    offset = scaled._binary(Ops.SHR, bits._const(32, bits.shape, dtypes.uint64, bits.device))
    start = bits._const(lowest, bits.shape, dtypes.int64, bits.device)
    return offset._cast(dtypes.int64)._binary(Ops.ADD, start)._cast(dtype)


class CreationMixin(DTypeMixin):
    """Constructors of new tensors (static methods) and the *_like methods."""

    # ------------------------------------------------------------------------------------------------------------
    # constants
    # ------------------------------------------------------------------------------------------------------------

    @classmethod
    @torch_keywords
    def empty(cls, *shape: ShapeArgument, **options: Unpack[TensorOptions]) -> Self:
        """A tensor of `shape` in new, uninitialized memory.

        Example:
            >>> Tensor.empty(2, 3).shape
            (2, 3)
        """
        from kiln.runtime import Buffer

        dims = shape_argument(shape)
        target_dtype = _dtype_or(options, dtypes.default_float)
        target = canonical_device(options.get("device"))
        if isinstance(target, tuple):  # memory on each of several devices: one empty tensor copied to each
            return _with_grad(cls.empty(*dims, dtype=target_dtype, device=target[0]).to(target), options)
        size = max_numel(dims)  # a symbolic shape gets the memory of its largest value
        node = graph.buffer_uop(target, size, target_dtype)
        attach_buffer(node, Buffer(target, size, target_dtype).allocate())
        if not isinstance(count := math.prod(dims), int):
            node = graph.shrink(node, ((0, cast(int, count)),))
        return _with_grad(cls._from_uop(graph.reshape(node, dims)), options)

    # full, eye and zeros_like keep TensorCore's signature, which also takes the options by position
    @classmethod
    def full(
        cls,
        shape: ShapeArgument,
        fill_value: ConstType,
        dtype: DType | None = None,
        device: str | tuple[str, ...] | None = None,
        requires_grad: bool | None = None,
    ) -> Self:
        """A tensor of `shape` filled with `fill_value` (dtype: the value's, unless given).

        Example:
            >>> Tensor.full((2,), 7).tolist()
            [7, 7]
        """
        options: TensorOptions = {"dtype": dtype, "device": device, "requires_grad": requires_grad}
        value = scalar_value(fill_value)
        target_dtype = _dtype_or(options, dtypes.from_py(value))
        check_constant_fits(value, target_dtype)
        if isinstance(value, float) and not math.isfinite(value) and not dtypes.is_float(target_dtype):
            raise ValueError(f"cannot fill a {target_dtype!r} tensor with {value!r}")
        dims = shape_argument((shape,))
        return _with_grad(cls._const(value, dims, target_dtype, device), options)

    @classmethod
    @torch_keywords
    def zeros(cls, *shape: ShapeArgument, **options: Unpack[TensorOptions]) -> Self:
        """A tensor of `shape` filled with zeros (default dtype: `dtypes.default_float`).

        Example:
            >>> Tensor.zeros(2, 2).tolist()
            [[0.0, 0.0], [0.0, 0.0]]
        """
        return cls.full(shape_argument(shape), 0, **_float_by_default(options))

    @classmethod
    @torch_keywords
    def ones(cls, *shape: ShapeArgument, **options: Unpack[TensorOptions]) -> Self:
        """A tensor of `shape` filled with ones (default dtype: `dtypes.default_float`).

        Example:
            >>> Tensor.ones(3).tolist()
            [1.0, 1.0, 1.0]
        """
        return cls.full(shape_argument(shape), 1, **_float_by_default(options))

    @classmethod
    @torch_keywords
    def arange(
        cls,
        start: int | float,
        stop: int | float | None = None,
        step: int | float = 1,
        **options: Unpack[TensorOptions],
    ) -> Self:
        """The values start, start + step, ... below `stop` (one argument: 0 .. start - 1), like PyTorch.

        The dtype is `default_float` when any argument is a float, else `default_int`.

        Example:
            >>> Tensor.arange(1, 10, 3).tolist()
            [1, 4, 7]
        """
        if stop is None:
            start, stop = 0, start
        dtype, device = options.get("dtype"), options.get("device")
        if carries_variable(stop):  # a jitted function's Tensor of a bound variable: the variable
            variable_stop = cast(UOp, as_size(stop, "arange stop"))
            return _with_grad(_symbolic_arange(cls, start, variable_stop, step, dtype, device), options)
        if isinstance(stop, (BoundVariable, Variable, UOp)):
            return _with_grad(_symbolic_arange(cls, start, stop, step, dtype, device), options)
        values = [scalar_value(v) for v in (start, stop, step)]
        if any(isinstance(v, bool) for v in values):
            raise TypeError(f"arange takes int or float arguments, got start={start!r} stop={stop!r} step={step!r}")
        first, last, increment = values
        if increment == 0:
            raise ValueError("arange step must not be zero")
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"arange needs finite arguments, got start={first} stop={last} step={increment}")
        size = max(0, math.ceil((last - first) / increment))
        ends = (first, first + (size - 1) * increment) if size else (first,)
        # int arguments whose values pass the default int's range count in int64, as PyTorch infers
        natural = dtypes.default_float if any(isinstance(v, float) for v in values) else dtypes.from_py(list(ends))
        target_dtype = _dtype_or(options, natural)
        for end in ends:
            check_constant_fits(end, target_dtype)
        positions = iota(cls, size, device)
        compute = target_dtype if dtypes.is_float(target_dtype) or natural == dtypes.default_int else natural
        result = positions._cast(compute)
        if increment != 1:
            result = result._binary(Ops.MUL, result._const(increment, result.shape, compute, result.device))
        if first != 0:
            result = result._binary(Ops.ADD, result._const(first, result.shape, compute, result.device))
        return _with_grad(result._cast(target_dtype), options)

    @classmethod
    @torch_keywords
    def linspace(cls, start: int | float, end: int | float, steps: int, **options: Unpack[TensorOptions]) -> Self:
        """`steps` evenly spaced values from `start` to `end` inclusive (computed from both ends, like PyTorch).

        Example:
            >>> Tensor.linspace(0, 1, 5).tolist()
            [0.0, 0.25, 0.5, 0.75, 1.0]
        """
        count = check_int(steps, "linspace steps")
        if count < 0:
            raise ValueError(f"linspace steps must be >= 0, got {count}")
        low, high = float(scalar_value(start)), float(scalar_value(end))
        target_dtype = _dtype_or(options, dtypes.default_float)
        compute = target_dtype if dtypes.is_float(target_dtype) else dtypes.default_float
        device = options.get("device")
        if count <= 1:
            return _with_grad(cls.full((count,), low, dtype=compute, device=device)._cast(target_dtype), options)
        step = (high - low) / (count - 1)
        index = iota(cls, count, device)._cast(compute)
        shape, where = index.shape, index.device
        from_start = index._binary(Ops.MUL, cls._const(step, shape, compute, where))._binary(
            Ops.ADD, cls._const(low, shape, compute, where)
        )
        # the upper half counts back from `end` so that the last value is exactly `end`
        remaining = cls._const(count - 1, shape, compute, where)._binary(Ops.SUB, index)
        from_end = cls._const(high, shape, compute, where)._binary(
            Ops.SUB, remaining._binary(Ops.MUL, cls._const(step, shape, compute, where))
        )
        lower_half = index._binary(Ops.CMPLT, cls._const(count // 2, shape, compute, where))
        return _with_grad(lower_half._ternary(Ops.WHERE, from_start, from_end)._cast(target_dtype), options)

    @classmethod
    def eye(
        cls,
        n: int,
        m: int | None = None,
        dtype: DType | None = None,
        device: str | tuple[str, ...] | None = None,
        requires_grad: bool | None = None,
    ) -> Self:
        """The n x m identity matrix (m defaults to n).

        Example:
            >>> Tensor.eye(2).tolist()
            [[1.0, 0.0], [0.0, 1.0]]
        """
        rows = check_size(n, "eye n")  # sizes may be bound Variables
        columns = rows if m is None else check_size(m, "eye m")
        if (type(rows) is int and rows < 0) or (type(columns) is int and columns < 0):
            raise ValueError(f"eye sizes must be >= 0, got n={rows} m={columns}")
        target_dtype = dtypes.default_float if dtype is None else check_dtype(dtype)
        row = iota(cls, rows, device)._movement(Ops.RESHAPE, (rows, 1))._movement(Ops.EXPAND, (rows, columns))
        column = iota(cls, columns, device)._movement(Ops.RESHAPE, (1, columns))._movement(Ops.EXPAND, (rows, columns))
        return _with_grad(row._binary(Ops.CMPEQ, column)._cast(target_dtype), {"requires_grad": requires_grad})

    # ------------------------------------------------------------------------------------------------------------
    # random
    # ------------------------------------------------------------------------------------------------------------

    @classmethod
    def manual_seed(cls, seed: int = 0) -> None:
        """Seeds the random tensor functions of the current engine (`Engine.random`); the same seed gives the same
        numbers on every device.

        Example:
            >>> Tensor.manual_seed(1); a = Tensor.rand(3).tolist(); Tensor.manual_seed(1)
            >>> a == Tensor.rand(3).tolist()
            True
        """
        default_engine().random.reset(seed)

    @classmethod
    @torch_keywords
    def rand(cls, *shape: ShapeArgument, **options: Unpack[TensorOptions]) -> Self:
        """Uniform random numbers in [0, 1).

        Example:
            >>> values = Tensor.rand(100).numpy(); bool(((values >= 0) & (values < 1)).all())
            True
        """
        target_dtype, device = _float_dtype(options, "rand"), options.get("device")
        return _random_tensor(
            cls, shape, options, lambda count: _unit_interval(_random_bits(cls, count, device), target_dtype)
        )

    @classmethod
    @torch_keywords
    def randn(cls, *shape: ShapeArgument, **options: Unpack[TensorOptions]) -> Self:
        """Standard normal random numbers (Box-Muller transform of two uniform numbers per element).

        Example:
            >>> bool(abs(Tensor.randn(10000).numpy().mean()) < 0.05)
            True
        """
        target_dtype, device = _float_dtype(options, "randn"), options.get("device")
        return _random_tensor(cls, shape, options, lambda count: _normal_values(cls, count, device, target_dtype))

    @classmethod
    @torch_keywords
    def randint(cls, *shape: ShapeArgument, low: int = 0, high: int = 10, **options: Unpack[TensorOptions]) -> Self:
        """Uniform random integers in [low, high) (at most 2**32 distinct values).

        Example:
            >>> values = Tensor.randint(1000, low=-2, high=3).numpy(); (int(values.min()), int(values.max()))
            (-2, 2)
        """
        lowest, highest = check_int(low, "randint low"), check_int(high, "randint high")
        span = highest - lowest
        if not 0 < span <= 2**32:
            raise ValueError(f"randint needs low < high with at most 2**32 values, got low={lowest} high={highest}")
        target_dtype, device = _dtype_or(options, dtypes.default_int), options.get("device")
        if not dtypes.is_int(target_dtype):
            raise TypeError(f"randint makes integer tensors, got dtype {target_dtype!r}")
        if lowest < dtypes.min(target_dtype) or highest - 1 > dtypes.max(target_dtype):
            raise ValueError(f"randint range [{lowest}, {highest}) does not fit in {target_dtype!r}")
        return _random_tensor(
            cls, shape, options, lambda count: _integer_values(cls, count, device, lowest, span, target_dtype)
        )

    @classmethod
    @torch_keywords
    def uniform(
        cls, *shape: ShapeArgument, low: float = 0.0, high: float = 1.0, **options: Unpack[TensorOptions]
    ) -> Self:
        """Uniform random numbers in [low, high).

        Example:
            >>> float(Tensor.uniform(1000, low=2.0, high=3.0).numpy().min()) >= 2.0
            True
        """
        _check_real(low, "uniform low")
        _check_real(high, "uniform high")
        if not low <= high:
            raise ValueError(f"uniform needs low <= high, got low={low!r} high={high!r}")
        values = cls.rand(*shape, dtype=options.get("dtype"), device=options.get("device"))
        return _with_grad(values * (high - low) + low, options)

    @classmethod
    @torch_keywords
    def normal(
        cls, *shape: ShapeArgument, mean: float = 0.0, std: float = 1.0, **options: Unpack[TensorOptions]
    ) -> Self:
        """Normal random numbers with the given mean and standard deviation.

        Example:
            >>> bool(abs(Tensor.normal(10000, mean=5.0, std=0.1).numpy().mean() - 5.0) < 0.01)
            True
        """
        _check_real(mean, "normal mean")
        _check_real(std, "normal std")
        if not std >= 0:
            raise ValueError(f"normal needs std >= 0, got std={std!r}")
        values = cls.randn(*shape, dtype=options.get("dtype"), device=options.get("device"))
        return _with_grad(values * std + mean, options)

    # ------------------------------------------------------------------------------------------------------------
    # *_like: this tensor's shape, and its dtype and device unless given
    # ------------------------------------------------------------------------------------------------------------

    @torch_keywords
    def full_like(self, fill_value: ConstType, **options: Unpack[TensorOptions]) -> Self:
        """A tensor of this one's shape (and dtype and device, unless given) filled with `fill_value`.

        Example:
            >>> Tensor([1, 2]).full_like(5).tolist()
            [5, 5]
        """
        return self.full(self.shape, fill_value, **self._like(options))

    def zeros_like(
        self, dtype: DType | None = None, device: str | tuple[str, ...] | None = None, requires_grad: bool | None = None
    ) -> Self:
        """Zeros of this tensor's shape (and dtype and device, unless given)."""
        return self.full_like(0, dtype=dtype, device=device, requires_grad=requires_grad)

    @torch_keywords
    def ones_like(self, **options: Unpack[TensorOptions]) -> Self:
        """Ones of this tensor's shape (and dtype and device, unless given)."""
        return self.full_like(1, **options)

    @torch_keywords
    def empty_like(self, **options: Unpack[TensorOptions]) -> Self:
        """Uninitialized memory of this tensor's shape (and dtype and device, unless given)."""
        return self.empty(self.shape, **self._like(options))

    @torch_keywords
    def rand_like(self, **options: Unpack[TensorOptions]) -> Self:
        """Uniform [0, 1) random numbers of this tensor's shape (and float dtype and device, unless given)."""
        return self.rand(self.shape, **self._like(options))

    @torch_keywords
    def randn_like(self, **options: Unpack[TensorOptions]) -> Self:
        """Standard normal random numbers of this tensor's shape (and float dtype and device, unless given)."""
        return self.randn(self.shape, **self._like(options))

    @torch_keywords
    def randint_like(self, low: int = 0, high: int | None = None, **options: Unpack[TensorOptions]) -> Self:
        """Uniform random integers in [low, high) of this tensor's shape (and dtype and device, unless given).

        Like PyTorch, one bound is the upper one: `randint_like(x, 5)` draws from [0, 5). A float dtype gets the
        integers as floats.

        Example:
            >>> values = Tensor.zeros(100, dtype=dtypes.int32).randint_like(3, 5).numpy()
            >>> sorted(set(values.tolist()))
            [3, 4]
        """
        if high is None:
            low, high = 0, low
        like = self._like(options)
        target = cast(DType, like["dtype"])
        if target == dtypes.bool:
            raise TypeError(f"randint_like makes integer or float tensors, got dtype {target!r}")
        integer_dtype = target if dtypes.is_int(target) else dtypes.int64
        values = self.randint(self.shape, low=low, high=high, dtype=integer_dtype, device=like["device"])
        return _with_grad(values._cast(target), options)

    def _like(self, options: TensorOptions) -> TensorOptions:
        """`options` with this tensor's dtype and device where they are not given (a given dtype is checked)."""
        dtype = options.get("dtype")
        return {
            "dtype": self.dtype if dtype is None else check_dtype(dtype),
            "device": options.get("device") or self.device,
            "requires_grad": options.get("requires_grad"),
        }
