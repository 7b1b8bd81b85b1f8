"""`LayoutMixin`: rearranging elements (roll, diagonal, unfold, repeat_interleave, rot90, movedim, rearrange, ...),
splitting and tiling them, composed from movement and indexing methods.

"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from typing import Self, cast

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int, normalize_axis
from kiln.tensor.ops.creation import iota
from kiln.tensor.symbolic import describe_variables, format_size, provably_le, settle
from kiln.uops import Ops, dtypes

__all__ = ["LayoutMixin"]


def _optional_sizes(shape: tuple[int | Sequence[int | None] | None, ...]) -> list[int | None]:
    """Sizes (None: keep) given separately or as one list / tuple."""
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        return list(shape[0])
    sizes: list[int | None] = []
    for size in shape:
        if size is not None and not isinstance(size, int):
            raise TypeError(f"sizes must be ints or None, got {size!r}")
        sizes.append(size)
    return sizes


_ELLIPSIS = "..."
_GROUPED_ELLIPSIS = "(...)"


def _parse_side(side: str) -> list[list[str]]:
    """einops groups of one side: 'b (h w) c' -> [['b'], ['h', 'w'], ['c']]."""
    groups: list[list[str]] = []
    for match in re.finditer(r"\(([^()]*)\)|(\S+)", side):
        if match.group(1) is not None:
            # a "1" inside a group is a factor of length 1; "..." inside one is marked apart from a bare "..."
            names = [name for name in match.group(1).split() if name != "1"]
            groups.append([_GROUPED_ELLIPSIS if name == _ELLIPSIS else name for name in names])
        elif match.group(2) in ("(", ")") or "(" in match.group(2) or ")" in match.group(2):
            raise ValueError(f"rearrange: unbalanced parentheses in {side!r}")
        elif match.group(2) == "1":  # einops' anonymous axis of length 1, like "()"
            groups.append([])
        else:
            groups.append([match.group(2)])
    return groups


def _expand_ellipsis(left: list[list[str]], right: list[list[str]], ndim: int, pattern: str) -> None:
    """Replaces '...' (at most once on the left, not inside parentheses there) by the dims it stands for, named
    '...0', '...1', ...; on the right '...' may stand alone or inside a group (those dims merged). In place."""
    if any(_GROUPED_ELLIPSIS in group for group in left):
        raise ValueError(f"rearrange: '...' cannot be inside parentheses on the left of {pattern!r}")
    where = [index for index, group in enumerate(left) if _ELLIPSIS in group]
    if not where:
        return
    if len(where) > 1:
        raise ValueError(f"rearrange: '...' may appear once on the left of {pattern!r}")
    count = ndim - (len(left) - 1)
    if count < 0:
        raise ValueError(f"rearrange: {pattern!r} names {len(left) - 1} dims besides '...', the tensor has {ndim}")
    names = [f"{_ELLIPSIS}{index}" for index in range(count)]
    left[where[0] : where[0] + 1] = [[name] for name in names]
    expanded: list[list[str]] = []
    for group in right:
        if group == [_ELLIPSIS]:
            expanded.extend([name] for name in names)
        elif _GROUPED_ELLIPSIS in group:
            position = group.index(_GROUPED_ELLIPSIS)
            expanded.append([*group[:position], *names, *group[position + 1 :]])
        else:
            expanded.append(group)
    right[:] = expanded


class LayoutMixin(TensorCore):
    """Element rearrangement, selection, and torch's shape / type conveniences."""

    # ------------------------------------------------------------------------------------------------------------
    # dims
    # ------------------------------------------------------------------------------------------------------------

    def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Self:
        """Dims `source` moved to positions `destination` (the others keep their order).

        Example:
            >>> Tensor.zeros(2, 3, 4).movedim(0, -1).shape
            (3, 4, 2)
        """
        sources = [source] if isinstance(source, int) else list(source)
        targets = [destination] if isinstance(destination, int) else list(destination)
        if len(sources) != len(targets):
            raise ValueError(f"movedim: {len(sources)} source dims but {len(targets)} destination dims")
        moved = [normalize_axis(d, self.shape, "movedim source") for d in sources]
        placed = [normalize_axis(d, self.shape, "movedim destination") for d in targets]
        if len(set(moved)) != len(moved) or len(set(placed)) != len(placed):
            raise ValueError(f"movedim: repeated dims in source {sources} or destination {targets}")
        rest = iter(d for d in range(self.ndim) if d not in moved)
        order = [0] * self.ndim
        where_from = dict(zip(placed, moved))
        for position in range(self.ndim):
            order[position] = where_from[position] if position in where_from else next(rest)
        return self.permute(order)

    def moveaxis(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Self:
        """Alias of `movedim`."""
        return self.movedim(source, destination)

    def swapaxes(self, axis0: int, axis1: int) -> Self:
        """Alias of `transpose(axis0, axis1)`."""
        return self.transpose(axis0, axis1)

    def swapdims(self, dim0: int, dim1: int) -> Self:
        """Alias of `transpose(dim0, dim1)`."""
        return self.transpose(dim0, dim1)

    def t(self) -> Self:
        """The transpose of a matrix (a 0-D or 1-D tensor is returned as is); ValueError beyond 2 dims.

        Example:
            >>> Tensor([[1, 2]]).t().tolist()
            [[1], [2]]
        """
        if self.ndim > 2:
            raise ValueError(f"t() expects a tensor with <= 2 dims, got {self.ndim} (use mT or transpose)")
        return self if self.ndim < 2 else self.transpose(0, 1)

    @property
    def mT(self) -> Self:
        """The last two dims swapped."""
        if self.ndim < 2:
            raise ValueError(f"mT needs at least 2 dims, got shape {self.shape}")
        return self.transpose(-2, -1)

    @property
    def mH(self) -> Self:
        """The conjugate transpose of the last two dims (= mT: kiln has no complex dtypes)."""
        return self.mT

    @property
    def H(self) -> Self:
        """The conjugate transpose of a matrix (= t(): kiln has no complex dtypes)."""
        if self.ndim != 2:
            raise ValueError(f"H needs a 2-D tensor, got shape {self.shape}")
        return self.t()

    def adjoint(self) -> Self:
        """Alias of `mH`."""
        return self.mH

    # ------------------------------------------------------------------------------------------------------------
    # rearranging
    # ------------------------------------------------------------------------------------------------------------

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Self:
        """Elements shifted cyclically by `shifts` along `dims` (of the flattened tensor when None).

        Example:
            >>> Tensor([1, 2, 3, 4]).roll(1).tolist()
            [4, 1, 2, 3]
        """
        if dims is None:
            if not isinstance(shifts, int):
                raise ValueError("roll without dims takes one int shift")
            return self.reshape(-1).roll(shifts, 0).reshape(self.shape)
        shift_list = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
        dim_list = list(dims) if isinstance(dims, (list, tuple)) else [dims]
        if len(shift_list) != len(dim_list):
            raise ValueError(f"roll: {len(shift_list)} shifts for {len(dim_list)} dims; expected one per dim")
        result = self
        for shift, dim in zip(shift_list, dim_list):
            index = normalize_axis(dim, self.shape, "roll dim")
            length = self.shape[index]
            if type(length) is not int:
                result = _roll_symbolic(result, check_int(shift, "roll shift"), index)
                continue
            amount = check_int(shift, "roll shift") % length if length else 0
            if amount:
                head, tail = result.split([length - amount, amount], index)
                result = tail.cat(head, dim=index)
        return result

    def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Self:
        """Rotated by 90 degrees `k` times, from the first of `dims` toward the second.

        Example:
            >>> Tensor([[1, 2], [3, 4]]).rot90().tolist()
            [[2, 4], [1, 3]]
        """
        if len(dims) != 2:
            raise ValueError(f"rot90 needs two dims, got {dims}")
        first, second = (normalize_axis(d, self.shape, "rot90 dim") for d in dims)
        if first == second:
            raise ValueError(f"rot90 dims must differ, got {dims}")
        turns = check_int(k, "rot90 k") % 4
        if turns == 1:
            return self.flip(second).transpose(first, second)
        if turns == 2:
            return self.flip(first, second)
        if turns == 3:
            return self.transpose(first, second).flip(second)
        return self

    def fliplr(self) -> Self:
        """Reversed along dim 1."""
        if self.ndim < 2:
            raise ValueError(f"fliplr needs at least 2 dims, got shape {self.shape}")
        return self.flip(1)

    def flipud(self) -> Self:
        """Reversed along dim 0."""
        if self.ndim < 1:
            raise ValueError("flipud needs at least 1 dim")
        return self.flip(0)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
        """The diagonal `offset` of the matrices in dims (dim1, dim2), as a new last dim.

        Example:
            >>> Tensor([[1, 2], [3, 4]]).diagonal().tolist()
            [1, 4]
        """
        first = normalize_axis(dim1, self.shape, "diagonal dim1")
        second = normalize_axis(dim2, self.shape, "diagonal dim2")
        if first == second:
            raise ValueError(f"diagonal dim1 and dim2 must differ, got {dim1} and {dim2}")
        x = self.movedim((first, second), (-2, -1))
        rows, columns = x.shape[-2:]
        if type(rows) is not int or type(columns) is not int:
            return _symbolic_diagonal(x, check_int(offset, "diagonal offset"))
        start_row, start_column = max(0, -offset), max(0, offset)
        length = max(0, min(rows - start_row, columns - start_column))
        batch = x.shape[:-2]
        if length == 0:
            return self._const(0, (*batch, 0), self.dtype, self.device)
        square = x[..., start_row : start_row + length, start_column : start_column + length]
        flat = square.reshape(*batch, length * length)
        padded = flat.pad([(0, 0)] * len(batch) + [(0, length)])
        return padded.reshape(*batch, length, length + 1)[..., 0]

    def diag(self, diagonal: int = 0) -> Self:
        """A 1-D tensor as the `diagonal` of a square matrix, or a matrix's `diagonal` as a 1-D tensor.

        Example:
            >>> Tensor([1, 2]).diag().tolist()
            [[1, 0], [0, 2]]
        """
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ValueError(f"diag needs a 1-D or 2-D tensor, got shape {self.shape}")
        length = self.shape[0]
        size = length + abs(diagonal)
        # each value followed by `length` zeros, reshaped: the values land on the main diagonal
        spread = self.reshape(length, 1).pad([(0, 0), (0, length)]).reshape(-1)[: length * length]
        square = spread.reshape(length, length)
        before, after = (max(0, -diagonal), max(0, diagonal))
        return square.pad([(before, size - length - before), (after, size - length - after)])

    def unfold(self, dimension: int, size: int, step: int) -> Self:
        """Every window of `size` elements `step` apart along `dimension`, as a new last dim (torch.Tensor.unfold).

        Example:
            >>> Tensor([1, 2, 3, 4, 5]).unfold(0, 2, 2).tolist()
            [[1, 2], [3, 4]]
        """
        index = normalize_axis(dimension, self.shape, "unfold dimension")
        length = self.shape[index] if self.ndim else 1
        if type(length) is not int:
            raise ValueError(
                f"unfold along dim {index} of size {format_size(length)} ({describe_variables(length)}): the number "
                "of windows would change with the variable"
            )
        if check_int(size, "unfold size") < 0 or size > length:
            raise ValueError(f"unfold size {size} must be between 0 and the dim's length {length}")
        if check_int(step, "unfold step") <= 0:
            raise ValueError(f"unfold step must be positive, got {step}")
        count = (length - size) // step + 1
        windows = [self.narrow(index, start * step, size) for start in range(count)]
        return windows[0].stack(*windows[1:], dim=index).movedim(index + 1, -1)

    def repeat_interleave(
        self, repeats: int | Sequence[int] | Self, dim: int | None = None, *, output_size: int | None = None
    ) -> Self:
        """Each element repeated `repeats` times (one count, or one per element along `dim`); flattened when dim is
        None. Counts given as a Tensor are read first (a sync), like torch without output_size.

        Example:
            >>> Tensor([1, 2]).repeat_interleave(2).tolist()
            [1, 1, 2, 2]
        """
        source = self.reshape(-1) if dim is None else self
        index = 0 if dim is None else normalize_axis(dim, self.shape, "repeat_interleave dim")
        if isinstance(repeats, int):
            count = check_int(repeats, "repeat_interleave repeats")
            if count < 0:
                raise ValueError(f"repeat_interleave repeats must be >= 0, got {count}")
            grown = source.unsqueeze(index + 1)
            shape = list(grown.shape)
            shape[index + 1] = count
            return grown.expand(shape).flatten(index, index + 1)
        counts = [int(c) for c in (repeats.tolist() if not isinstance(repeats, Sequence) else repeats)]
        if len(counts) != source.shape[index] or any(c < 0 for c in counts):
            raise ValueError(
                f"repeat_interleave needs {source.shape[index]} counts >= 0 along dim {index}, got {counts}"
            )
        positions = [position for position, c in enumerate(counts) for _ in range(c)]
        if output_size is not None and output_size != len(positions):
            raise ValueError(f"repeat_interleave output_size {output_size} != the counts' total {len(positions)}")
        return source.index_select(index, type(self)(positions, dtype=dtypes.default_int, device=self.device))

    def rearrange(self, pattern: str, **sizes: int) -> Self:
        """einops-style rearrangement, e.g. 'b (h w) c -> b c h w' with h=2: split, permute and merge dims. '...'
        (or '…') stands for the dims not named ('b ... c -> b c ...', '... h w -> ... (h w)'), '1' or '()' for a
        dim of length 1 (tinygrad's and einops' spelling).

        Example:
            >>> Tensor.arange(6).rearrange("(h w) -> w h", h=2).tolist()
            [[0, 3], [1, 4], [2, 5]]
        """
        if pattern.count("->") != 1:
            raise ValueError(f"rearrange pattern needs exactly one '->', got {pattern!r}")
        left_text, right_text = pattern.replace("…", _ELLIPSIS).split("->")
        left, right = _parse_side(left_text), _parse_side(right_text)
        _expand_ellipsis(left, right, self.ndim, pattern)
        if len(left) != self.ndim:
            raise ValueError(f"rearrange: {pattern!r} names {len(left)} dims, the tensor has shape {self.shape}")
        left_names = [name for group in left for name in group]
        right_names = [name for group in right for name in group]
        if sorted(left_names) != sorted(right_names) or len(set(left_names)) != len(left_names):
            raise ValueError(f"rearrange: both sides must name the same dims once each, got {pattern!r}")
        known = dict(sizes)
        for group, length in zip(left, self.shape):
            unknown = [name for name in group if name not in known]
            product = math.prod(known[name] for name in group if name in known)
            if len(unknown) > 1:
                raise ValueError(f"rearrange: cannot infer both {unknown} of group ({' '.join(group)})")
            if unknown:
                if product == 0 or length % product:
                    raise ValueError(f"rearrange: dim of length {length} is not divisible into ({' '.join(group)})")
                known[unknown[0]] = length // product
            elif product != length:
                raise ValueError(f"rearrange: ({' '.join(group)}) = {product} does not match the dim's length {length}")
        atoms = self.reshape([known[name] for name in left_names])
        moved = atoms.permute([left_names.index(name) for name in right_names])
        return moved.reshape([math.prod(known[name] for name in group) for group in right])

    # ------------------------------------------------------------------------------------------------------------
    # splitting and tiling
    # ------------------------------------------------------------------------------------------------------------

    def tensor_split(self, indices_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Split into n nearly equal parts (the first ones one longer), or at the given indices.

        Example:
            >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).tensor_split(2)]
            [[1, 2, 3], [4, 5]]
        """
        axis = normalize_axis(dim, self.shape, "tensor_split dim")
        length = self.shape[axis]
        if isinstance(indices_or_sections, int):
            parts = check_int(indices_or_sections, "tensor_split sections")
            if parts <= 0:
                raise ValueError(f"tensor_split needs a positive number of sections, got {parts}")
            base, extra = divmod(length, parts)
            sizes = [base + (1 if i < extra else 0) for i in range(parts)]
        else:
            cuts = [min(max(0, c if c >= 0 else c + length), length) for c in indices_or_sections]
            bounds = [0, *cuts, length]
            sizes = [max(0, end - start) for start, end in itertools.pairwise(bounds)]
        pieces, start = [], 0
        for piece in sizes:
            pieces.append(self.narrow(axis, min(start, length), min(piece, length - min(start, length))))
            start += piece
        return tuple(pieces)

    def split_with_sizes(self, split_sizes: Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Alias of `split(list_of_sizes, dim)`."""
        return self.split(list(split_sizes), dim)

    def hsplit(self, sections: int | Sequence[int]) -> tuple[Self, ...]:
        """tensor_split along dim 1 (dim 0 for 1-D tensors)."""
        return self.tensor_split(sections, 1 if self.ndim > 1 else 0)

    def vsplit(self, sections: int | Sequence[int]) -> tuple[Self, ...]:
        """tensor_split along dim 0 (needs at least 2 dims)."""
        if self.ndim < 2:
            raise ValueError(f"vsplit needs at least 2 dims, got shape {self.shape}")
        return self.tensor_split(sections, 0)

    def dsplit(self, sections: int | Sequence[int]) -> tuple[Self, ...]:
        """tensor_split along dim 2 (needs at least 3 dims)."""
        if self.ndim < 3:
            raise ValueError(f"dsplit needs at least 3 dims, got shape {self.shape}")
        return self.tensor_split(sections, 2)

    def tile(self, *dims: int | Sequence[int]) -> Self:
        """Repeated `dims` times per dim (missing leading counts are 1), like `torch.tile`.

        Example:
            >>> Tensor([1, 2]).tile(2).tolist()
            [1, 2, 1, 2]
        """
        given: list[int] = []
        for entry in dims:
            given.extend([entry] if isinstance(entry, int) else entry)
        counts = [1] * (self.ndim - len(given)) + given
        source = self.reshape((1,) * (len(counts) - self.ndim) + self.shape)
        return source.repeat(counts)

    def pad_to(self, *shape: int | Sequence[int | None] | None) -> Self:
        """Zero-padded at the end of each dim up to `shape` (None keeps a dim), tinygrad's pad_to.

        Example:
            >>> Tensor([1, 2]).pad_to(4).tolist()
            [1, 2, 0, 0]
        """
        sizes = _optional_sizes(shape)
        if len(sizes) != self.ndim:
            raise ValueError(f"pad_to needs {self.ndim} sizes, got {sizes}")
        return self.pad([(0, 0 if s is None else s - length) for s, length in zip(sizes, self.shape)])

    def shrink_to(self, *shape: int | Sequence[int | None] | None) -> Self:
        """The leading part of each dim, `shape` long (None keeps a dim), tinygrad's shrink_to.

        Example:
            >>> Tensor([1, 2, 3]).shrink_to(2).tolist()
            [1, 2]
        """
        sizes = _optional_sizes(shape)
        if len(sizes) != self.ndim:
            raise ValueError(f"shrink_to needs {self.ndim} sizes, got {sizes}")
        return self.shrink([None if s is None else (0, s) for s in sizes])


def _roll_symbolic(x: TensorT, shift: int, index: int) -> TensorT:
    """`x` rolled by the int `shift` along dim `index`, whose size holds a bound Variable: the shift must be within
    the dim for every value (no wrap-around count that changes with the variable), else ValueError naming it."""
    length = x.shape[index]
    if not provably_le(abs(shift), length):
        raise ValueError(
            f"roll by {shift} along dim {index} of size {format_size(length)} ({describe_variables(length)}): a shift "
            "of a dim with a bound Variable must be at most its smallest size"
        )
    amount = shift if shift >= 0 else length + shift
    if type(amount) is int and amount == 0:
        return x
    head, tail = x.split([length - amount, amount], index)
    return tail.cat(head, dim=index)


def _symbolic_diagonal(x: TensorT, offset: int) -> TensorT:
    """The `offset` diagonal of the last two dims of `x`, one of which holds a bound Variable: the diagonal must end
    at the same side for every value (its length is then that side's size), else ValueError naming the variable.
    The elements are picked from the square it spans by comparing positions (one kernel for every value)."""
    rows, columns = x.shape[-2:]
    start_row, start_column = max(0, -offset), max(0, offset)
    down, across = cast(int, settle(rows - start_row)), cast(int, settle(columns - start_column))
    if provably_le(down, across):
        length = down
    elif provably_le(across, down):
        length = across
    else:
        raise ValueError(
            f"diagonal {offset} of a ({format_size(rows)}, {format_size(columns)}) matrix: its length would switch "
            f"between the rows and the columns with the variable ({describe_variables(rows, columns)})"
        )
    square = x[..., start_row : start_row + length, start_column : start_column + length]
    positions = iota(type(x), length, x.device)
    hits = (positions.reshape(length, 1) == positions.reshape(1, length))._broadcast_to(square.shape)
    values = square._cast(dtypes.uint8) if square.dtype == dtypes.bool else square
    picked = hits.where(values, 0)._cast(values.dtype)._reduce(Ops.ADD, (square.ndim - 1,))
    return picked.reshape(*square.shape[:-1])._cast(x.dtype)
