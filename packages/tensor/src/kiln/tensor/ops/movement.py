"""`MovementMixin`: reshape, expand, permute, flip, shrink, pad, cat, stack, split and friends.

They map onto the movement primitives (RESHAPE, EXPAND, PERMUTE, PAD, SHRINK, FLIP), so none of them copies data
until a kernel reads it; `cat` is a sum of zero-padded pieces and `pad` with a value or a mode other than
'constant' is composed from shrinks, flips and cats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Self, cast

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int, check_size, normalize_axis
from kiln.tensor.ops.creation import iota
from kiln.tensor.ops.padding import check_mode_pad, mode_pad_dim
from kiln.tensor.ops.promotion import result_type
from kiln.tensor.symbolic import (
    BoundVariable,
    Variable,
    carries_variable,
    describe_variables,
    format_shape,
    format_size,
    is_symbolic,
    pairs_symbolic,
    settle,
    sizes_equal,
)
from kiln.uops import ConstType, Ops, UOp, dtypes

__all__ = ["MovementMixin"]

_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _int_arguments(arguments: tuple[Any, ...], what: str) -> tuple[int, ...]:
    """Ints given separately (`f(2, 3)`) or as one tuple / list (`f((2, 3))`)."""
    if len(arguments) == 1 and isinstance(arguments[0], (tuple, list)):
        arguments = tuple(arguments[0])
    return tuple(check_size(value, what) for value in arguments)


# the most operands one cat kernel joins (see cat)
_CAT_GROUP = 32


class MovementMixin(TensorCore):
    """Methods that rearrange elements without computing new values."""

    # ------------------------------------------------------------------------------------------------------------
    # shape
    # ------------------------------------------------------------------------------------------------------------

    def reshape(self, *shape: int | Sequence[int | None] | None) -> Self:
        """The same elements (row-major order) in `shape`; one size may be -1 (inferred), and None keeps the size
        of the dim at that position (tinygrad's spelling).

        Example:
            >>> Tensor.arange(6).reshape(2, -1).shape
            (2, 3)
        """
        given = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if any(size is None for size in given):
            if len(given) > self.ndim and any(size is None for size in given[self.ndim :]):
                raise ValueError(f"reshape: None keeps a dim of the input, but {given} has None past its {self.ndim}")
            given = tuple(self.shape[i] if size is None else size for i, size in enumerate(given))
        sizes = _int_arguments(given, "reshape size")
        if is_symbolic(sizes) or is_symbolic(self.shape):
            return self._movement(Ops.RESHAPE, _symbolic_reshape(self.shape, sizes))
        unknown = [i for i, size in enumerate(sizes) if size == -1]
        if len(unknown) > 1 or any(size < -1 for size in sizes):
            raise ValueError(f"reshape sizes must be >= 0 with at most one -1, got {sizes}")
        if unknown:
            known = math.prod(size for size in sizes if size != -1)
            if known == 0 or self.numel() % known:
                raise ValueError(f"cannot reshape a tensor of shape {self.shape} ({self.numel()} elements) to {sizes}")
            sizes = tuple(self.numel() // known if size == -1 else size for size in sizes)
        if math.prod(sizes) != self.numel():
            raise ValueError(f"cannot reshape a tensor of shape {self.shape} ({self.numel()} elements) to {sizes}")
        return self._movement(Ops.RESHAPE, sizes)

    def view(self, *shape: int | Sequence[int]) -> Self:
        """Alias of `reshape` (kiln tensors have no strides, so every reshape is a view)."""
        return self.reshape(*shape)

    def expand(self, *shape: int | Sequence[int]) -> Self:
        """This tensor with size-1 dims repeated to `shape` (-1 keeps a size; new dims are added in front).

        Example:
            >>> Tensor([[1], [2]]).expand(2, 3).tolist()
            [[1, 1, 1], [2, 2, 2]]
        """
        sizes = _int_arguments(shape, "expand size")
        if is_symbolic(sizes) or is_symbolic(self.shape):
            return self._broadcast_to(_symbolic_expand(self.shape, sizes))
        extra = len(sizes) - self.ndim
        if extra < 0:
            raise ValueError(f"expand shape {sizes} has fewer dims than the tensor's shape {self.shape}")
        resolved = []
        for position, size in enumerate(sizes):
            if size == -1:
                if position < extra:
                    raise ValueError(f"expand shape {sizes}: -1 is not allowed for the new leading dim {position}")
                size = self.shape[position - extra]
            if size < 0:
                raise ValueError(f"expand sizes must be >= 0 or -1, got {sizes}")
            old = 1 if position < extra else self.shape[position - extra]
            if old != 1 and old != size:
                raise ValueError(
                    f"cannot expand shape {self.shape} to {sizes}: dim {position - extra} has size {old}, "
                    "only size-1 dims can be expanded"
                )
            resolved.append(size)
        return self._broadcast_to(tuple(resolved))

    def broadcast_to(self, shape: Sequence[int]) -> Self:
        """This tensor broadcast to `shape` (numpy rules)."""
        return self.expand(tuple(shape))

    def permute(self, *order: int | Sequence[int]) -> Self:
        """The dims reordered: dim i of the result is dim order[i] of this tensor.

        Example:
            >>> Tensor.zeros(2, 3, 4).permute(2, 0, 1).shape
            (4, 2, 3)
        """
        axes = _int_arguments(order, "permute dim")
        if len(axes) != self.ndim:
            raise ValueError(f"permute needs {self.ndim} dims for shape {self.shape}, got {axes}")
        normalized = tuple(normalize_axis(axis, self.shape, "permute dim") for axis in axes)
        if sorted(normalized) != list(range(self.ndim)):
            raise ValueError(f"permute order {axes} is not a permutation of the {self.ndim} dims of shape {self.shape}")
        return self._movement(Ops.PERMUTE, normalized)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
        """Dims `dim0` and `dim1` swapped.

        Example:
            >>> Tensor.zeros(2, 3).transpose(0, 1).shape
            (3, 2)
        """
        if self.ndim == 0:
            normalize_axis(dim0, self.shape, "transpose dim")
            normalize_axis(dim1, self.shape, "transpose dim")
            return self
        first = normalize_axis(dim0, self.shape, "transpose dim")
        second = normalize_axis(dim1, self.shape, "transpose dim")
        order = list(range(self.ndim))
        order[first], order[second] = order[second], order[first]
        return self._movement(Ops.PERMUTE, tuple(order))

    @property
    def T(self) -> Self:
        """All dims in reverse order."""
        return self._movement(Ops.PERMUTE, tuple(reversed(range(self.ndim))))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Dims start_dim..end_dim (inclusive) merged into one (a 0-dim tensor becomes shape (1,)).

        Example:
            >>> Tensor.zeros(2, 3, 4).flatten(1).shape
            (2, 12)
        """
        if self.ndim == 0:
            return self.reshape(1)
        start = normalize_axis(start_dim, self.shape, "flatten start_dim")
        end = normalize_axis(end_dim, self.shape, "flatten end_dim")
        if start > end:
            raise ValueError(f"flatten start_dim {start_dim} comes after end_dim {end_dim} for shape {self.shape}")
        merged = math.prod(self.shape[start : end + 1])
        return self.reshape(*self.shape[:start], merged, *self.shape[end + 1 :])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
        """Dim `dim` split into `sizes` (one may be -1).

        Example:
            >>> Tensor.zeros(2, 12).unflatten(1, (3, -1)).shape
            (2, 3, 4)
        """
        index = normalize_axis(dim, self.shape, "unflatten dim")
        parts = _int_arguments((sizes,), "unflatten size")
        inner = self.shape[index]
        if -1 in parts:
            known = math.prod(size for size in parts if size != -1)
            if known == 0 or inner % known:
                raise ValueError(f"cannot unflatten dim {dim} of size {inner} into {parts}")
            parts = tuple(inner // known if size == -1 else size for size in parts)
        if math.prod(parts) != inner:
            raise ValueError(f"cannot unflatten dim {dim} of size {inner} into {parts} ({math.prod(parts)} elements)")
        return self.reshape(*self.shape[:index], *parts, *self.shape[index + 1 :])

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Self:
        """Size-1 dims removed (all, or those of `dim`; a named dim of another size is kept, like PyTorch).

        Example:
            >>> Tensor.zeros(1, 3, 1).squeeze().shape
            (3,)
        """
        if dim is None:
            targets = set(range(self.ndim))
        else:
            items = list(dim) if isinstance(dim, (tuple, list)) else [dim]
            targets = {normalize_axis(item, self.shape, "squeeze dim") for item in items}
        if self.ndim == 0:
            return self
        return self.reshape(tuple(size for i, size in enumerate(self.shape) if not (i in targets and size == 1)))

    def unsqueeze(self, dim: int) -> Self:
        """A size-1 dim inserted at `dim` (-1: at the end).

        Example:
            >>> Tensor.zeros(3).unsqueeze(0).shape
            (1, 3)
        """
        index = normalize_axis(dim, (*self.shape, 1), "unsqueeze dim")
        return self.reshape(*self.shape[:index], 1, *self.shape[index:])

    # ------------------------------------------------------------------------------------------------------------
    # windows
    # ------------------------------------------------------------------------------------------------------------

    def flip(self, *axis: int | Sequence[int]) -> Self:
        """The elements reversed along `axis` (one or more dims).

        Example:
            >>> Tensor([[1, 2], [3, 4]]).flip(1).tolist()
            [[2, 1], [4, 3]]
        """
        axes = _int_arguments(axis, "flip dim")
        if not axes:
            raise ValueError("flip needs at least one dim")
        normalized = {normalize_axis(item, self.shape, "flip dim") for item in axes}
        if len(normalized) != len(axes):
            raise ValueError(f"flip dims {axes} repeat a dim of shape {self.shape}")
        if self.ndim == 0:
            return self
        return self._movement(Ops.FLIP, tuple(i in normalized for i in range(self.ndim)))

    def shrink(self, bounds: Sequence[tuple[int, int] | None]) -> Self:
        """The window [start, end) along each dim (None keeps the whole dim).

        Example:
            >>> Tensor([[1, 2, 3], [4, 5, 6]]).shrink((None, (1, 3))).tolist()
            [[2, 3], [5, 6]]
        """
        if len(bounds) != self.ndim:
            raise ValueError(f"shrink needs one (start, end) or None per dim of shape {self.shape}, got {bounds}")
        pairs = tuple((0, size) if pair is None else (pair[0], pair[1]) for pair, size in zip(bounds, self.shape))
        if pairs_symbolic(pairs) or is_symbolic(self.shape):
            pairs = tuple((check_size(start, "shrink start"), check_size(end, "shrink end")) for start, end in pairs)
            return self._movement(Ops.SHRINK, pairs)  # the graph proves the bounds for every value
        for (start, end), size in zip(pairs, self.shape):
            check_int(start, "shrink start")
            check_int(end, "shrink end")
            if not 0 <= start <= end <= size:
                raise ValueError(f"shrink bounds {pairs} must satisfy 0 <= start <= end <= size for shape {self.shape}")
        return self._movement(Ops.SHRINK, pairs)

    def pad(
        self,
        padding: Sequence[int] | Sequence[tuple[int, int] | None],
        mode: str = "constant",
        value: ConstType = 0.0,
    ) -> Self:
        """This tensor padded. `padding` is PyTorch's flat form (last dim first: (left, right, top, bottom, ...))
        or one (before, after) pair (or None) per dim; negative amounts crop (as `torch.nn.functional.pad` does:
        'circular' wraps what is left, 'reflect' / 'replicate' mirror or repeat the uncropped edge). Modes:
        'constant' (with `value`), 'reflect' (mirror without the edge), 'replicate' (repeat the edge), 'circular'
        (wrap around).

        Example:
            >>> Tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist()
            [3, 2, 1, 2, 3, 2]
        """
        pairs = _padding_pairs(padding, self.shape)
        if mode not in _PAD_MODES:
            raise ValueError(f"pad mode must be one of {_PAD_MODES}, got {mode!r}")
        if pairs_symbolic(pairs) or is_symbolic(self.shape):
            if mode == "constant":
                return _grow(self, tuple(pairs), value)  # the graph proves every amount >= 0
            check_mode_pad(pairs, mode)  # int amounts >= 0 over a symbolic shape: the mode's ops below
        if mode == "constant":
            return _constant_pad(self, pairs, value)
        # negative amounts crop. PyTorch's order: 'circular' wraps the cropped tensor; 'reflect' and 'replicate'
        # extend the whole tensor (a reflection may reach cells the other side crops), then crop
        cropping = [(min(0, before), min(0, after)) for before, after in pairs]
        crops = any(pair != (0, 0) for pair in cropping)
        result = _constant_pad(self, cropping, 0) if crops and mode == "circular" else self
        for axis, (before, after) in enumerate((max(0, before), max(0, after)) for before, after in pairs):
            if before or after:
                result = mode_pad_dim(result, axis, before, after, mode)
        if crops and mode != "circular":
            result = _constant_pad(result, cropping, 0)
        return result

    # ------------------------------------------------------------------------------------------------------------
    # joining and splitting
    # ------------------------------------------------------------------------------------------------------------

    def cat(self, *others: Self, dim: int = 0) -> Self:
        """This tensor and `others` joined along `dim` (dtypes promoted; other dims must match).

        `Tensor.cat(a, b, dim=1)` reads like `torch.cat([a, b], dim=1)`.

        Example:
            >>> Tensor([1, 2]).cat(Tensor([3])).tolist()
            [1, 2, 3]
        """
        if isinstance(self, (list, tuple)):  # Tensor.cat([a, b], dim=1) or Tensor.cat([a, b], 1), torch's forms
            first, rest, dim = _listed(self, others, dim, "cat")
            return first.cat(*rest, dim=dim)
        tensors = (self, *others)
        _check_tensors(tensors, "cat")
        if self.ndim == 0:
            raise ValueError("cat needs tensors with at least one dim; 0-dim tensors cannot be joined (use stack)")
        index = normalize_axis(dim, self.shape, "cat dim")
        for position, tensor in enumerate(tensors):
            if tensor.ndim != self.ndim or any(
                not sizes_equal(a, b) for i, (a, b) in enumerate(zip(tensor.shape, self.shape)) if i != index
            ):
                raise ValueError(
                    f"cat: tensor {position} has shape {format_shape(tensor.shape)}, but all tensors must match shape "
                    f"{format_shape(self.shape)} except in dim {index}"
                )
        if len(tensors) > _CAT_GROUP:
            # one kernel holds one branch per operand, and its cost grows faster than the branch count: join groups
            # into buffers of their own first (a tree of kernels of at most _CAT_GROUP branches: linear in total)
            groups = [
                tensors[start].cat(*tensors[start + 1 : start + _CAT_GROUP], dim=index).contiguous()
                for start in range(0, len(tensors), _CAT_GROUP)
            ]
            return groups[0].cat(*groups[1:], dim=index)
        target = result_type(*tensors)
        total = sum(tensor.shape[index] for tensor in tensors)
        pieces = []
        offset = 0
        for tensor in tensors:
            size = tensor.shape[index]
            # an empty operand adds nothing, but joins the graph when it needs a gradient (an empty one, like torch)
            if size or len(tensors) == 1 or tensor.requires_grad is True:
                padding = [(0, 0)] * self.ndim
                padding[index] = (offset, total - offset - size)
                pieces.append(tensor._cast(target)._movement(Ops.PAD, tuple(padding)))
            offset += size
        if not pieces:
            shape = list(self.shape)
            shape[index] = 0
            return self._const(0, tuple(shape), target, self.device)
        joined = pieces[0]
        combine = Ops.OR if target == dtypes.bool else Ops.ADD
        for piece in pieces[1:]:
            joined = joined._binary(combine, piece)
        return joined

    def stack(self, *others: Self, dim: int = 0) -> Self:
        """This tensor and `others` (all of one shape) joined along a new dim `dim`.

        Example:
            >>> Tensor([1, 2]).stack(Tensor([3, 4])).tolist()
            [[1, 2], [3, 4]]
        """
        if isinstance(self, (list, tuple)):  # Tensor.stack([a, b], dim=1) or Tensor.stack([a, b], 1), torch's forms
            first, rest, dim = _listed(self, others, dim, "stack")
            return first.stack(*rest, dim=dim)
        tensors = (self, *others)
        _check_tensors(tensors, "stack")
        for position, tensor in enumerate(tensors):
            if tensor.shape != self.shape:
                raise ValueError(
                    f"stack needs tensors of one shape: tensor 0 has {self.shape}, {position} has {tensor.shape}"
                )
        index = normalize_axis(dim, (*self.shape, 1), "stack dim")
        expanded = [tensor.unsqueeze(index) for tensor in tensors]
        return expanded[0].cat(*expanded[1:], dim=index)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Pieces along `dim`: of `sizes` elements each (the last may be smaller), or of the listed sizes.

        Example:
            >>> [piece.tolist() for piece in Tensor([1, 2, 3, 4, 5]).split(2)]
            [[1, 2], [3, 4], [5]]
        """
        if self.ndim == 0:
            raise ValueError("split needs a tensor with at least one dim")
        index = normalize_axis(dim, self.shape, "split dim")
        length = self.shape[index]
        if isinstance(sizes, (list, tuple)) and (type(length) is not int or any(_symbolic(size) for size in sizes)):
            parts = [check_size(size, "split size") for size in sizes]  # a bound Variable among the sizes or the dim
            if any(type(part) is int and part < 0 for part in parts) or not sizes_equal(sum(parts), length):
                raise ValueError(
                    f"split sizes ({', '.join(format_size(part) for part in parts)}) must sum to the dim size "
                    f"{format_size(length)} (dim {index}) for every value of their variables "
                    f"({describe_variables(length, *parts)})"
                )
        elif isinstance(sizes, (list, tuple)):
            parts = [check_int(size, "split size") for size in sizes]
            if any(size < 0 for size in parts) or sum(parts) != length:
                raise ValueError(f"split sizes {parts} must be >= 0 and sum to the dim size {length} (dim {index})")
        elif type(length) is not int:
            raise ValueError(
                f"split of dim {index} of size {format_size(length)} ({describe_variables(length)}) into pieces of "
                f"{sizes!r}: the number of pieces would change with the variable; give sizes that sum to the dim, "
                "e.g. split([2, n - 2])"
            )
        else:
            step = check_int(sizes, "split size")
            if step <= 0:
                raise ValueError(f"split size must be positive, got {step}")
            parts = [min(step, length - start) for start in range(0, length, step)] or [0]
        pieces = []
        start = 0
        for size in parts:
            bounds: list[tuple[int, int] | None] = [None] * self.ndim
            bounds[index] = (start, start + size)
            pieces.append(self.shrink(bounds))
            start += size
        return tuple(pieces)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
        """About `chunks` equal pieces along `dim` (each ceil(size / chunks); fewer when the size runs out).

        Example:
            >>> [piece.shape for piece in Tensor.zeros(5).chunk(3)]
            [(2,), (2,), (1,)]
        """
        count = check_int(chunks, "chunk count")
        if count <= 0:
            raise ValueError(f"chunk count must be positive, got {count}")
        if self.ndim == 0:
            raise ValueError("chunk needs a tensor with at least one dim")
        length = self.shape[normalize_axis(dim, self.shape, "chunk dim")]
        if type(length) is not int:
            raise ValueError(
                f"chunk of dim {dim} of size {format_size(length)} ({describe_variables(length)}): the pieces' sizes "
                "and number would change with the variable; use split with sizes that sum to the dim"
            )
        return self.split(max(1, -(-length // count)), dim)

    def repeat(self, *repeats: int | Sequence[int]) -> Self:
        """The whole tensor tiled `repeats` times along each dim (extra leading repeats add dims), like PyTorch.

        Example:
            >>> Tensor([1, 2]).repeat(2).tolist()
            [1, 2, 1, 2]
        """
        counts = _int_arguments(repeats, "repeat count")
        if len(counts) < self.ndim or any(count < 0 for count in counts):
            raise ValueError(f"repeat needs >= {self.ndim} non-negative counts for shape {self.shape}, got {counts}")
        shape = (1,) * (len(counts) - self.ndim) + self.shape
        interleaved = tuple(size for pair in ((1, size) for size in shape) for size in pair)
        grown = tuple(size for pair in zip(counts, shape) for size in pair)
        tiled = self.reshape(interleaved)._broadcast_to(grown)
        return tiled.reshape(tuple(cast(int, settle(count * size)) for count, size in zip(counts, shape)))

    def tril(self, diagonal: int = 0) -> Self:
        """The lower triangle of the last two dims (column - row <= diagonal kept, the rest zero).

        Example:
            >>> Tensor([[1, 2], [3, 4]]).tril().tolist()
            [[1, 0], [3, 4]]
        """
        return _triangle(self, check_int(diagonal, "tril diagonal"), lower=True)

    def triu(self, diagonal: int = 0) -> Self:
        """The upper triangle of the last two dims (column - row >= diagonal kept, the rest zero).

        Example:
            >>> Tensor([[1, 2], [3, 4]]).triu().tolist()
            [[1, 2], [0, 4]]
        """
        return _triangle(self, check_int(diagonal, "triu diagonal"), lower=False)


def _listed(items: Sequence[TensorT], others: tuple[Any, ...], dim: int, what: str) -> tuple[TensorT, list[Any], int]:
    """torch's list form of a join, `Tensor.cat([a, b], dim=1)` or `Tensor.cat([a, b], 1)`: (the first tensor, the
    others, the dim)."""
    if len(others) == 1 and isinstance(others[0], int):
        return _listed(items, (), others[0], what)
    tensors = [*items, *others]
    if not tensors:
        raise ValueError(f"{what} needs at least one tensor")
    return tensors[0], tensors[1:], dim


def _check_tensors(tensors: tuple[Any, ...], what: str) -> None:
    for position, tensor in enumerate(tensors):
        if not isinstance(tensor, TensorCore):
            raise TypeError(f"{what} takes Tensors, got {type(tensor).__name__} at position {position}")
    devices = [tensor.device for tensor in tensors]
    if any(device != devices[0] for device in devices):
        raise ValueError(f"{what}: tensors must be on one device, got {devices}")


def _padding_pairs(padding: Any, shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """Either padding form as one (before, after) pair per dim."""
    if not isinstance(padding, (tuple, list)):
        raise TypeError(f"pad padding must be a tuple, got {padding!r}")
    items = list(padding)
    if all(not isinstance(item, (tuple, list)) and item is not None for item in items):
        amounts = [check_size(item, "pad amount") for item in items]
        if len(amounts) % 2 or len(amounts) > 2 * len(shape):
            raise ValueError(
                f"flat pad amounts (last dim first) need an even count of at most {2 * len(shape)} for shape "
                f"{shape}, got {tuple(amounts)}"
            )
        pairs = [(0, 0)] * len(shape)
        for k in range(len(amounts) // 2):
            pairs[len(shape) - 1 - k] = (amounts[2 * k], amounts[2 * k + 1])
        return pairs
    if len(items) != len(shape):
        raise ValueError(f"pad needs one (before, after) pair or None per dim of shape {shape}, got {tuple(items)}")
    pairs = []
    for item in items:
        if item is None:
            pairs.append((0, 0))
            continue
        if len(item) != 2:
            raise ValueError(f"pad pairs must be (before, after), got {item!r}")
        pairs.append((check_size(item[0], "pad amount"), check_size(item[1], "pad amount")))
    return pairs


def _constant_pad(x: TensorT, pairs: list[tuple[int, int]], value: ConstType) -> TensorT:
    # negative amounts crop first (like PyTorch)
    bounds = tuple((max(0, -before), size - max(0, -after)) for (before, after), size in zip(pairs, x.shape))
    for start, end in bounds:
        if start > end:
            raise ValueError(f"pad amounts {tuple(pairs)} crop more than the shape {x.shape} holds")
    if any(pair != (0, size) for pair, size in zip(bounds, x.shape)):
        x = x._movement(Ops.SHRINK, bounds)
    return _grow(x, tuple((max(0, before), max(0, after)) for before, after in pairs), value)


def _grow(x: TensorT, grow: tuple[tuple[int, int], ...], value: ConstType) -> TensorT:
    # `x` padded by the amounts `grow` (>= 0) with `value`
    padded = x._movement(Ops.PAD, grow)
    if value == 0 or padded is x:
        return padded
    inside = x._const(True, x.shape, dtypes.bool, x.device)._movement(Ops.PAD, grow)
    fill = x._const(value, padded.shape, x.dtype, x.device)
    return inside._ternary(Ops.WHERE, padded, fill)


def _symbolic(value: object) -> bool:
    # a bound Variable (or an expression of one, or a Tensor standing for one) where a size is expected
    return isinstance(value, (BoundVariable, Variable, UOp)) or carries_variable(value)


def _triangle(x: TensorT, diagonal: int, lower: bool) -> TensorT:
    if x.ndim < 2:
        raise ValueError(f"{'tril' if lower else 'triu'} needs a tensor with at least 2 dims, got shape {x.shape}")
    rows, columns = x.shape[-2:]
    offset = iota(type(x), columns, x.device).reshape(1, columns) - iota(type(x), rows, x.device).reshape(rows, 1)
    keep = (offset <= diagonal) if lower else (offset >= diagonal)
    zero = x._const(0, x.shape, x.dtype, x.device)
    return keep._broadcast_to(x.shape)._ternary(Ops.WHERE, x, zero)


def _symbolic_reshape(shape: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[int, ...]:
    """`reshape`'s sizes when a size or the shape holds a bound Variable: -1 inferred by exact division."""
    count = math.prod(shape)
    unknown = [i for i, size in enumerate(sizes) if type(size) is int and size == -1]
    if len(unknown) > 1 or any(type(size) is int and size < -1 for size in sizes):
        raise ValueError(f"reshape sizes must be >= 0 with at most one -1, got {sizes}")
    if unknown:
        known = math.prod(size for size in sizes if not (type(size) is int and size == -1))
        inferred = (count // known) if type(known) is not int or known != 1 else count
        inferred = cast(int, settle(inferred))
        sizes = tuple(inferred if i == unknown[0] else size for i, size in enumerate(sizes))
    if not sizes_equal(math.prod(sizes), count):
        raise ValueError(
            f"cannot reshape a tensor of shape {format_shape(shape)} to {format_shape(sizes)}: the element counts "
            f"differ for some values of {describe_variables(*shape, *sizes)} (a reshape keeps the element count for "
            "every value of its variables: reshape a tensor whose shape holds the variable, e.g. x[:v].reshape(v, -1))"
        )
    return sizes


def _symbolic_expand(shape: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[int, ...]:
    """`expand`'s target when a size or the shape holds a bound Variable."""
    extra = len(sizes) - len(shape)
    if extra < 0:
        raise ValueError(f"expand shape {sizes} has fewer dims than the tensor's shape {shape}")
    resolved = []
    for position, size in enumerate(sizes):
        old = 1 if position < extra else shape[position - extra]
        if type(size) is int and size == -1 and position >= extra:
            size = old
        if type(size) is int and size < 0:
            raise ValueError(f"expand sizes must be >= 0 or -1, got {sizes}")
        if not (type(old) is int and old == 1) and not sizes_equal(old, size):
            raise ValueError(f"cannot expand shape {shape} to {sizes}: dim {position - extra} has size {old}")
        resolved.append(size)
    return tuple(resolved)
