"""`LinalgMixin`: matmul / `@`, dot, einsum and linear, each a broadcast multiply followed by one ADD reduce.

There is no matmul primitive: (n, k) @ (k, m) is (n, 1, k) * (1, m, k) summed over k, which the scheduler fuses into
one reduce kernel (elementwise work on the inputs and the output fuses into the same kernel). Products accumulate in
the operands' promoted dtype, except 16-bit floats, which accumulate in float32 and round once at the end.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any, Self

from kiln.tensor import graph
from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import ShapeError, broadcast_shapes, check_same_device
from kiln.tensor.ops.promotion import result_type
from kiln.tensor.symbolic import max_int
from kiln.uops import DType, Ops, UOp, dtypes

__all__ = ["LinalgMixin", "accumulate_dtype", "accumulated_sum", "multiply_sum", "product_dtype"]

_LETTERS = frozenset(string.ascii_letters)


def product_dtype(what: str, *operands: TensorCore) -> DType:
    """The promoted dtype of a product of `operands`; TypeError for bool, which has no sum."""
    target = result_type(*operands)
    if target == dtypes.bool:
        raise TypeError(f"{what} is not defined for bool tensors; cast them to an integer or float dtype first")
    return target


def multiply_sum(left: TensorT, right: TensorT, axes: Sequence[int]) -> TensorT:
    """sum(left * right) over `axes` (kept as size 1) for operands of one shape and dtype.

    16-bit floats multiply and accumulate in float32; the result has the operands' dtype.
    """
    compute = accumulate_dtype(left.dtype)
    product = left._cast(compute)._binary(Ops.MUL, right._cast(compute))
    return product._reduce(Ops.ADD, tuple(axes))._cast(left.dtype)


def accumulated_sum(x: TensorT, axes: Sequence[int]) -> TensorT:
    """sum(x) over `axes` (kept as size 1) in x's dtype (16-bit floats accumulate in float32)."""
    return x._cast(accumulate_dtype(x.dtype))._reduce(Ops.ADD, tuple(axes))._cast(x.dtype)


def accumulate_dtype(dtype: DType) -> DType:
    """The dtype products of `dtype` accumulate in: float32 for 16-bit floats, else `dtype` itself."""
    return dtypes.float32 if dtypes.is_float(dtype) and dtype.itemsize < 4 else dtype


def _require_tensor(value: TensorT, what: str) -> TensorT:
    if not isinstance(value, TensorCore):
        raise TypeError(f"{what} takes Tensors, got {type(value).__name__}")
    return value


PANEL_WIDTH = 16
"""Columns of the right operand per contiguous panel when a large matmul copies it (see `_panel_matmul`)."""
PACKED_MINIMUM_ELEMENTS = 2**19
"""Elements of the right operand from which a 2-D matmul copies it into panels first (one extra kernel)."""
PACKED_MINIMUM_ROWS = 64
"""Rows of the left operand from which the copy pays for itself (each panel is read once per block of rows)."""
TRANSPOSED_PACKED_MINIMUM_ROWS = 512
"""The same bound when the right operand is a transposed matrix (`x @ W.T`, as `nn.Linear` and the language models'
projections build it): its reduce axis is then contiguous in memory, and the product's dot-product tile (codegen step
2r) streams W once with the weight's rows outside (process CPU time, 2-core AVX-512 VM, weight read in place vs copied
into panels first: 64 x 768 @ (32000, 768).T float32 57 -> 83 GFLOP/s, float16 59 -> 75; (768, 2048) 37-45 -> 50-59;
64, 128 and 256 rows measured equal or faster in place). A plain `x @ B` keeps the copy from PACKED_MINIMUM_ROWS."""


_STORED = (Ops.BUFFER, Ops.CONTIGUOUS)
_VIEWS = (Ops.CAST, Ops.RESHAPE, Ops.SHRINK)


def _transposed_matrix(value: UOp) -> bool:
    """Whether `value` is a stored 2-D matrix transposed (`W.T`), through casts (`W.float().T`, `W.T.float()`) and
    views. A matrix computed on the way (a GGUF matrix assembled from its bytes) is not: the panel copy computes it
    once, where the product's tile would gather and assemble it per load."""
    while value.op is Ops.CAST:
        value = value.src[0]
    if value.op is not Ops.PERMUTE or tuple(value.arg) != (1, 0):
        return False
    value = value.src[0]
    while value.op in _VIEWS:
        value = value.src[0]
    return value.op in _STORED


def _panel_matmul(left: TensorT, right: TensorT) -> TensorT:
    """`left @ right` (2-D, cast) through a copy of `right` in column panels: (columns / w, inner, w), contiguous.

    The product kernel walks the reduce axis inside a block of output rows: read in place, each step of it jumps a
    whole row of `right` (4 KiB for 1024 float32 columns), which defeats the hardware prefetchers and keeps only half
    of a panel in the cache (the rows share cache sets). In panels, one block of columns is one contiguous stream
    (the packing BLAS libraries do). Measured on the CPU device, float32: 1024^2 130 -> 185 GFLOP/s, 2048^2 87 ->
    195 GFLOP/s, the copy included; below PACKED_MINIMUM_ELEMENTS the extra kernel costs more than it saves.
    16-bit floats are widened to float32 by the copies (products of two 16-bit floats are exact in float32, which
    is where they accumulate anyway), and the result is rounded back once.
    """
    (rows, inner), columns = left.shape, right.shape[1]
    dtype = left.dtype
    panels = -(-columns // PANEL_WIDTH)
    if (extra := panels * PANEL_WIDTH - columns) > 0:  # the last panel is filled up with zero columns
        right = right._movement(Ops.PAD, ((0, 0), (0, extra)))
    wide = accumulate_dtype(dtype)
    if wide != dtype:
        # 16-bit floats are widened once, in copies (the panels' copy anyway, and one of `left`), instead of one
        # conversion per loaded element in the product kernel, where each element of `left` is converted alone
        # before it is broadcast: float16 1024^2 measured 2x less CPU time, bfloat16 1.3-1.5x (the copies included)
        right, left = right._cast(wide), left._cast(wide).contiguous()
    packed = right.reshape(inner, panels, PANEL_WIDTH).permute(1, 0, 2).contiguous()
    full = (rows, panels, PANEL_WIDTH, inner)
    left_view = left.reshape(rows, 1, 1, inner)._broadcast_to(full)
    right_view = packed.permute(0, 2, 1).reshape(1, panels, PANEL_WIDTH, inner)._broadcast_to(full)
    result = multiply_sum(left_view, right_view, (3,)).reshape(rows, panels * PANEL_WIDTH)._cast(dtype)
    return result._movement(Ops.SHRINK, ((0, rows), (0, columns))) if extra else result


class LinalgMixin(TensorCore):
    """Matrix products."""

    def matmul(self, other: Self) -> Self:
        """The matrix product with PyTorch's rules: 1-D operands act as a row (left) or column (right) vector that is
        dropped from the result, and the dims before the last two broadcast (batched matmul).

        Example:
            >>> (Tensor([[1.0, 2.0], [3.0, 4.0]]) @ Tensor([1.0, 1.0])).tolist()
            [3.0, 7.0]
        """
        other = _require_tensor(other, "matmul")
        # the shapes are read once: each `.shape` / `.ndim` is a property call, and a matmul read them ~30 times
        self_shape, other_shape = self.shape, other.shape
        if not self_shape or not other_shape:
            raise ShapeError(
                f"matmul needs operands with at least 1 dim, got shapes {self_shape} and {other_shape} "
                "(use * to multiply by a scalar)"
            )
        check_same_device("matmul", self, other)
        dtype = product_dtype("matmul", self, other)
        left_vector, right_vector = len(self_shape) == 1, len(other_shape) == 1
        left_shape = (1, self_shape[0]) if left_vector else self_shape
        right_shape = (other_shape[0], 1) if right_vector else other_shape
        inner, rows, columns = left_shape[-1], left_shape[-2], right_shape[-1]
        if right_shape[-2] != inner:
            raise ShapeError(
                f"matmul: shapes {self_shape} and {other_shape} do not line up: the left operand's last dim ({inner}) "
                f"must equal the right operand's {'only' if right_vector else 'second-to-last'} dim "
                f"({right_shape[-2]})"
            )
        try:
            batch = (
                broadcast_shapes(left_shape[:-2], right_shape[:-2]) if len(left_shape) + len(right_shape) > 4 else ()
            )
        except ValueError:
            raise ShapeError(
                f"matmul: the batch dims of shapes {self_shape} and {other_shape} do not broadcast "
                f"({left_shape[:-2]} vs {right_shape[:-2]})"
            ) from None
        # panels need int inner and column sizes; rows of bound-Variable size count at their largest value
        large = (
            type(inner) is int
            and type(columns) is int
            and inner * columns >= PACKED_MINIMUM_ELEMENTS
            and max_int(rows)
            >= (TRANSPOSED_PACKED_MINIMUM_ROWS if _transposed_matrix(other.uop) else PACKED_MINIMUM_ROWS)
        )
        if not batch and large:  # 2-D operands only (a vector has 1 row or column)
            left = self.reshape(*left_shape) if left_vector else self
            right = other.reshape(*right_shape) if right_vector else other
            return _panel_matmul(left._cast(dtype), right._cast(dtype))
        # (..., n, k) -> (..., n, 1, k); (..., k, m) -> (..., 1, m, k); both broadcast to (*batch, n, m, k), multiplied
        # and summed over k. Built on graph nodes (the shapes, dtypes and device are checked above): one tensor for
        # the result instead of one per view, a matmul's Python cost halved
        full = (*batch, rows, columns, inner)
        compute = accumulate_dtype(dtype)
        lead = len(batch) + 2
        left_node = graph.cast(graph.cast(self.uop, dtype), compute)
        left_node = graph.reshape(left_node, (*(1,) * (lead - len(left_shape)), *left_shape[:-1], 1, inner))
        right_node = graph.cast(graph.cast(other.uop, dtype), compute)
        if right_vector:
            right_node = graph.reshape(right_node, (*(1,) * (lead - 2), 1, 1, inner))
        else:
            last = len(right_shape) - 1
            right_node = graph.permute(right_node, (*range(last - 1), last, last - 1))
            right_node = graph.reshape(
                right_node, (*(1,) * (lead - len(right_shape)), *right_shape[:-2], 1, columns, inner)
            )
        product = graph.binary_alu(Ops.MUL, graph.expand(left_node, full), graph.expand(right_node, full))
        node = graph.cast(graph.reduce_axis(product, Ops.ADD, (len(full) - 1,)), dtype)
        shape = (*batch, *(() if left_vector else (rows,)), *(() if right_vector else (columns,)))
        return self._result(graph.reshape(node, shape), other)

    def __matmul__(self, other: Self) -> Self:
        return self.matmul(other)

    def __rmatmul__(self, other: Any) -> Self:
        return type(self)(other, device=self.device).matmul(self)

    def dot(self, other: Self) -> Self:
        """The inner product of two 1-D tensors of one length (a 0-dim tensor), like `torch.dot`; for other ranks,
        `matmul` (tinygrad's N-d dot).

        Example:
            >>> Tensor([1, 2, 3]).dot(Tensor([4, 5, 6])).item()
            32
        """
        other = _require_tensor(other, "dot")
        if self.ndim != 1 or other.ndim != 1:
            return self.matmul(other)
        if self.shape != other.shape:
            raise ShapeError(f"dot needs two 1-D tensors of one length, got shapes {self.shape} and {other.shape}")
        check_same_device("dot", self, other)
        dtype = product_dtype("dot", self, other)
        return multiply_sum(self._cast(dtype), other._cast(dtype), (0,)).reshape(())

    def linear(self, weight: Self, bias: Self | None = None) -> Self:
        """self @ weight.T + bias, like `torch.nn.functional.linear`: weight is (out_features, in_features) (or 1-D:
        (in_features,), which drops the feature dim) and bias broadcasts to the result.

        Example:
            >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0, 0.0], [1.0, 1.0]]), Tensor([0.5, 0.5])).tolist()
            [[1.5, 3.5]]
        """
        weight = _require_tensor(weight, "linear")
        if weight.ndim not in (1, 2):
            raise ValueError(f"linear weight must be (out_features, in_features) or 1-D, got shape {weight.shape}")
        if self.ndim == 0 or self.shape[-1] != weight.shape[-1]:
            raise ValueError(
                f"linear: input shape {self.shape} must end with in_features = {weight.shape[-1]} "
                f"(weight shape {weight.shape})"
            )
        result = self.matmul(weight.T)
        if bias is None:
            return result
        bias = _require_tensor(bias, "linear bias")
        try:
            broadcast_shapes(result.shape, bias.shape)
        except ValueError:
            raise ValueError(
                f"linear bias of shape {bias.shape} does not broadcast to the output {result.shape}"
            ) from None
        return result + bias

    @staticmethod
    def einsum(formula: str, *operands: TensorT | Sequence[TensorT]) -> TensorT:
        """Einstein summation over `operands`, like `torch.einsum`: each operand gets one letter per dim; letters
        missing from the output are summed; a letter repeated in one operand takes the diagonal; `...` stands for
        broadcast dims; without `->` the output is `...` and then the letters used once, in alphabetical order.

        Example:
            >>> Tensor.einsum("ij,j->i", Tensor([[1, 2], [3, 4]]), Tensor([1, 1])).tolist()
            [3, 7]
            >>> Tensor.einsum("ii", Tensor([[1, 2], [3, 4]])).item()
            5
        """
        tensors = _einsum_operands(operands)
        return _einsum(formula, tensors)


# ---------------------------------------------------------------------------------------------------------------
# einsum
# ---------------------------------------------------------------------------------------------------------------

Label = str  # a letter, or "...<k>" (k < 0, counted from the right) for a broadcast dim of the ellipsis


def _einsum_operands(operands: tuple[TensorT | Sequence[TensorT], ...]) -> list[TensorT]:
    items: list[Any] = (
        list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    )
    for position, item in enumerate(items):
        if not isinstance(item, TensorCore):
            raise TypeError(f"einsum operands must be Tensors, got {type(item).__name__} at position {position}")
    if not items:
        raise ValueError("einsum needs at least one operand")
    return items


def _einsum(formula: str, tensors: list[TensorT]) -> TensorT:
    if not isinstance(formula, str):
        raise TypeError(f"einsum formula must be a str such as 'ij,jk->ik', got {formula!r}")
    text = formula.replace(" ", "")
    if text.count("->") > 1:
        raise ValueError(f"einsum {formula!r}: at most one '->' is allowed")
    inputs_text, arrow, output_text = text.partition("->")
    terms = inputs_text.split(",")
    if len(terms) != len(tensors):
        raise ValueError(f"einsum {formula!r} has {len(terms)} operand terms but {len(tensors)} operands were given")
    check_same_device("einsum", *tensors)
    dtype = product_dtype("einsum", *tensors)
    labeled: list[tuple[TensorT, list[Label]]] = []
    for term, tensor in zip(terms, tensors):
        letters = _parse_term(term, formula)
        labels = _expand_ellipsis(letters, term, formula, tensor.shape)
        labeled.append(_diagonal(tensor._cast(dtype), labels, formula))
    sizes = _label_sizes(labeled, formula)
    ellipsis = sorted((label for label in sizes if label.startswith("...")), key=lambda label: int(label[3:]))
    if arrow:
        output_letters = _parse_term(output_text, formula)
        for letter in output_letters:
            if letter != "." and letter not in sizes:
                raise ValueError(f"einsum {formula!r}: output letter {letter!r} does not appear in any operand")
            if letter != "." and output_letters.count(letter) > 1:
                raise ValueError(f"einsum {formula!r}: output letter {letter!r} appears more than once")
        # the ellipsis dims are summed when the output leaves them out (PyTorch's rule)
        output = [label for letter in output_letters for label in (ellipsis if letter == "." else [letter])]
    else:
        counts: dict[str, int] = {}
        for term in terms:
            for letter in _parse_term(term, formula):
                counts[letter] = counts.get(letter, 0) + 1
        output = ellipsis + sorted(letter for letter, count in counts.items() if count == 1 and letter in _LETTERS)
    return _contract(labeled, output, sizes)


def _parse_term(term: str, formula: str) -> list[str]:
    """The letters of one subscript term, with "." marking where its ellipsis (if any) stands."""
    if term.count("...") > 1 or term.replace("...", "").count("."):
        raise ValueError(f"einsum {formula!r}: term {term!r} may hold one '...' and no other '.'")
    letters = list(term.replace("...", "."))
    for character in letters:
        if character != "." and character not in _LETTERS:
            raise ValueError(f"einsum {formula!r}: subscripts must be letters a-z / A-Z or '...', got {character!r}")
    return letters


def _expand_ellipsis(letters: list[str], term: str, formula: str, shape: tuple[int, ...]) -> list[Label]:
    """The label of each dim of an operand of `shape` (its ellipsis becomes right-aligned "...k" labels, k < 0)."""
    named = [letter for letter in letters if letter != "."]
    hidden = len(shape) - len(named)
    if hidden < 0 or (hidden > 0 and "." not in letters):
        raise ValueError(f"einsum {formula!r}: term {term!r} names {len(named)} dims but its operand has shape {shape}")
    labels: list[Label] = []
    for letter in letters:
        labels.extend([f"...{k}" for k in range(-hidden, 0)] if letter == "." else [letter])
    return labels


def _label_sizes(labeled: Sequence[tuple[TensorCore, list[Label]]], formula: str) -> dict[Label, int]:
    """The size of each label over all operands (size-1 dims broadcast; other sizes must agree)."""
    sizes: dict[Label, int] = {}
    for tensor, labels in labeled:
        for label, size in zip(labels, tensor.shape):
            known = sizes.get(label)
            if known is None or known == 1:
                sizes[label] = size
            elif size not in (1, known):
                name = "the '...' dims" if label.startswith("...") else f"subscript {label!r}"
                raise ValueError(
                    f"einsum {formula!r}: {name} has size {known} in one operand and {size} in another "
                    f"(operand shapes {[t.shape for t, _ in labeled]})"
                )
    return sizes


def _diagonal(tensor: TensorT, labels: list[Label], formula: str) -> tuple[TensorT, list[Label]]:
    """`tensor` with every repeated label reduced to its diagonal (one dim per label)."""
    while len(set(labels)) != len(labels):
        label = next(label for label in labels if labels.count(label) > 1)
        first = labels.index(label)
        second = labels.index(label, first + 1)
        size = tensor.shape[first]
        if tensor.shape[second] != size:
            raise ValueError(
                f"einsum {formula!r}: repeated subscript {label!r} needs equal dims, got sizes {size} and "
                f"{tensor.shape[second]} in shape {tensor.shape}"
            )
        rest = [axis for axis in range(tensor.ndim) if axis not in (first, second)]
        lead = tuple(tensor.shape[axis] for axis in rest)
        # the diagonal of an (n, n) block is every (n + 1)-th element of its flattened form
        flat = tensor.permute(*rest, first, second).reshape(*lead, size * size)
        flat = flat._movement(Ops.PAD, (*((0, 0) for _ in lead), (0, size)))
        rows = flat.reshape(*lead, size, size + 1)
        column = rows._movement(Ops.SHRINK, (*((0, extent) for extent in lead), (0, size), (0, 1)))
        tensor = column.reshape(*lead, size)
        labels = [labels[axis] for axis in rest] + [label]
    return tensor, labels


def _aligned(tensor: TensorT, labels: list[Label], order: list[Label], sizes: dict[Label, int]) -> TensorT:
    """`tensor` (unique `labels`) permuted to `order`, with size-1 dims for missing labels, broadcast to `sizes`."""
    present = [label for label in order if label in labels]
    moved = tensor.permute(*[labels.index(label) for label in present]) if tensor.ndim else tensor
    view = tuple(moved.shape[present.index(label)] if label in labels else 1 for label in order)
    return moved.reshape(view)._broadcast_to(tuple(sizes[label] for label in order))


def _contract(labeled: list[tuple[TensorT, list[Label]]], output: list[Label], sizes: dict[Label, int]) -> TensorT:
    """Multiplies the operands left to right, summing each label as soon as no later operand and no output needs it
    (so a chain like 'ij,jk,kl->il' never builds the full i * j * k * l product).
    """
    current, current_labels = labeled[0]
    for position in range(1, len(labeled) + 1):
        later = {label for _, labels in labeled[position:] for label in labels}
        incoming = labeled[position] if position < len(labeled) else None
        union = list(current_labels)
        if incoming is not None:
            union += [label for label in incoming[1] if label not in current_labels]
        summed = [label for label in union if label not in later and label not in output]
        kept = [label for label in union if label not in summed]
        order = kept + summed
        axes = tuple(range(len(kept), len(order)))
        left = _aligned(current, current_labels, order, sizes)
        if incoming is not None:
            current = multiply_sum(left, _aligned(incoming[0], incoming[1], order, sizes), axes)
        elif axes:
            current = accumulated_sum(left, axes)
        else:
            current = left
        current = current.reshape(tuple(sizes[label] for label in kept))
        current_labels = kept
    return _aligned(current, current_labels, output, sizes)
