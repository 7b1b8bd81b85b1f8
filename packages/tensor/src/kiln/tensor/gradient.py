"""Reverse-mode differentiation of the tensor graph: one gradient rule per primitive op, and the backward walk.

Each rule of `pm_gradient` matches one primitive (`ret`) and receives the gradient flowing into it (`ctx`, same shape
and dtype as `ret`). It returns one entry per source of `ret`: the gradient for that source (a tensor-graph UOp of
the source's shape and dtype) or None where no gradient flows (bool conditions, DEVICE sources, overwritten
buffers, DETACH). Rules only build tensor-graph primitives, so a gradient is an ordinary lazy graph that the
scheduler fuses like any other (and can itself be differentiated again).

Choices where the derivative is not unique (the same as PyTorch's):
- MAX of two tensors: on a tie each side gets half of the gradient.
- REDUCE_AXIS MAX: the gradient is split evenly among all elements equal to the maximum (like `torch.amax`).
- REDUCE_AXIS MUL: exact with zeros: a lone zero gets the product of the other elements, everything else in a group
  with a zero gets 0.
- POW: d/dx is 0 where the exponent is 0; d/dy is 0 where x == 0 and the exponent is >= 0.
- TRUNC: zero everywhere (its derivative where it is defined). Comparisons, BITCAST and integer ops pass none.
- MULTI split along an axis: each shard gets its part of the gradient; replicated, the first shard gets it all
  (its replicas are one value).

`compute_gradient` walks the graph from the root in reverse topological order, visiting only float nodes on a
path to a target, and adds up the gradients of nodes used more than once.

Gradient shortcuts: a layer that builds a composite from primitives (a convolution: windows, a broadcast multiply, a
reduce) may attach a `GradientShortcut` to the composite's result node with `set_gradient_shortcut`: a rule that
gives the gradients of the composite's inputs directly, cheaper than the primitives' rules would (a convolution's
input gradient is the transposed convolution, one reduce kernel, where the primitives give a 6-d window gradient and
a scatter). A shortcut changes how the gradient is computed, never its value: it must give exactly the partial
derivatives of the result with respect to each input (the others held fixed). The walk takes it only when no
target lies strictly between the result and its inputs (such a target needs the primitives' path) and the inputs are
distinct nodes; otherwise it uses the primitives' rules as usual. When the rule gives more than one gradient, the
gradient flowing into the result is made a buffer first (`contiguous`), and every other gradient that reads it (a
bias's) reads the buffer: each of the rule's gradients is a kernel that reads it many times per element, and fused
into them it would be recomputed in each (a small CNN's step spent 9.7 ms against 1.9 ms in its second
convolution's weight gradient, and 0.5 ms against 0.07 ms in its bias gradient).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass

from kiln.tensor import graph
from kiln.tensor.sharding import gathered, pieces_like
from kiln.uops import ConstType, NodeSlot, Ops, PatternMatcher, UOp, UPat, dtypes

__all__ = ["GradientShortcut", "compute_gradient", "partial_gradient", "pm_gradient", "set_gradient_shortcut"]

Gradients = tuple[UOp | None, ...]


@dataclass(frozen=True, eq=False)
class GradientShortcut:
    """How to get the gradients of a composite's `inputs` straight from the gradient of its result node.

    `rule(result, upstream, wanted)` receives the result node, the gradient flowing into it and one flag per input
    (whether that input needs a gradient); it returns one entry per input: the partial derivative's contraction
    with `upstream` (a tensor-graph node of the input's shape and dtype), or None where not wanted.
    """

    inputs: tuple[UOp, ...]
    rule: Callable[[UOp, UOp, tuple[bool, ...]], Gradients]


SHORTCUT: NodeSlot[GradientShortcut] = NodeSlot(
    "gradient_shortcut", __name__, "a cheaper rule for the gradients of a composite's inputs (see the module doc)"
)


def set_gradient_shortcut(
    result: UOp, inputs: tuple[UOp, ...], rule: Callable[[UOp, UOp, tuple[bool, ...]], Gradients]
) -> None:
    """Attaches a `GradientShortcut` to `result` (replacing an earlier one: both give the same derivatives)."""
    if len(set(inputs)) != len(inputs):
        return  # the same node in two roles (conv2d(x, x)): the primitives' rules add up both paths correctly
    SHORTCUT.set(result, GradientShortcut(inputs, rule))


def _stored(node: UOp) -> bool:
    """Whether `node` is memory or a constant seen through movement ops (nothing to compute into a buffer)."""
    while node.op in graph.MOVEMENT_OPS or node.op is Ops.DETACH:
        node = node.src[0]
    return node.op in (Ops.BUFFER, Ops.CONST, Ops.CONTIGUOUS)


def _shortcut_for(node: UOp, target_set: set[UOp]) -> GradientShortcut | None:
    shortcut = SHORTCUT.get(node)
    if shortcut is None:
        return None
    inputs = set(shortcut.inputs)
    # a target strictly inside the composite (between the result and its inputs) needs the primitives' path
    interior = node.toposort(gate=lambda inner: inner not in inputs)
    if any(inner in target_set and inner not in inputs for inner in interior):
        return None
    return shortcut


# ---------------------------------------------------------------------------------------------------------------
# small builders over graph.py (every node keeps one shape, dtype and device)
# ---------------------------------------------------------------------------------------------------------------


def _full_like(like: UOp, value: ConstType) -> UOp:
    return graph.const(value, like.dtype, graph.placement_of(like), graph.shape_of(like))


def _add(a: UOp, b: UOp) -> UOp:
    return graph.alu(Ops.ADD, a, b)


def _sub(a: UOp, b: UOp) -> UOp:
    return graph.alu(Ops.SUB, a, b)


def _mul(a: UOp, b: UOp) -> UOp:
    return graph.alu(Ops.MUL, a, b)


def _div(a: UOp, b: UOp) -> UOp:
    return graph.alu(Ops.FDIV, a, b)


def _neg(a: UOp) -> UOp:
    return graph.alu(Ops.NEG, a)


def _scale(a: UOp, factor: float) -> UOp:
    return _mul(a, _full_like(a, factor))


def _where(condition: UOp, if_true: UOp, if_false: UOp) -> UOp:
    return graph.alu(Ops.WHERE, condition, if_true, if_false)


def _equal(a: UOp, b: UOp) -> UOp:
    return graph.alu(Ops.CMPEQ, a, b)


def _sum_to(x: UOp, axes: tuple[int, ...]) -> UOp:
    return graph.reduce_axis(x, Ops.ADD, axes)


def _grown_axes(small: tuple[int, ...], big: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(axis for axis, (before, after) in enumerate(zip(small, big)) if before != after)


# ---------------------------------------------------------------------------------------------------------------
# rules that need more than one line
# ---------------------------------------------------------------------------------------------------------------


def _max_gradient(ctx: UOp, ret: UOp) -> Gradients:
    lhs, rhs = ret.src
    # the winning side takes the whole gradient, a tie splits it in half
    lhs_share = _where(
        graph.alu(Ops.CMPLT, rhs, lhs),
        _full_like(ctx, 1.0),
        _where(_equal(lhs, rhs), _full_like(ctx, 0.5), _full_like(ctx, 0.0)),
    )
    return _mul(ctx, lhs_share), _mul(ctx, _sub(_full_like(ctx, 1.0), lhs_share))


def _pow_gradient(ctx: UOp, ret: UOp) -> Gradients:
    base, exponent = ret.src
    zero = _full_like(ctx, 0.0)
    # d/dbase = exponent * base**(exponent-1), defined as 0 for a zero exponent (0**-1 would give 0*inf)
    power = graph.alu(Ops.POW, base, _sub(exponent, _full_like(exponent, 1.0)))
    base_grad = _where(_equal(exponent, zero), zero, _mul(ctx, _mul(exponent, power)))
    # d/dexponent = base**exponent * ln(base), defined as 0 at base 0 with exponent >= 0 (ln(0) gives nan or -inf)
    log_base = _scale(graph.alu(Ops.LOG2, base), math.log(2.0))
    full = _mul(ctx, _mul(ret, log_base))
    at_zero_base = _where(graph.alu(Ops.CMPLT, exponent, zero), full, zero)
    return base_grad, _where(_equal(base, zero), at_zero_base, full)


def _reduce_gradient(ctx: UOp, ret: UOp) -> Gradients:
    source = ret.src[0]
    shape = graph.shape_of(source)
    axes: tuple[int, ...] = ret.arg.axes
    upstream = graph.expand(ctx, shape)
    if ret.arg.op is Ops.ADD:
        return (upstream,)
    if ret.arg.op is Ops.MAX:
        hits = graph.cast(_equal(source, graph.expand(ret, shape)), source.dtype)
        share = _div(ctx, _sum_to(hits, axes))
        return (_mul(hits, graph.expand(share, shape)),)
    assert ret.arg.op is Ops.MUL, f"unexpected reduce op {ret.arg.op!r}"
    return (_product_gradient(upstream, source, axes),)


def _product_gradient(upstream: UOp, source: UOp, axes: tuple[int, ...]) -> UOp:
    # d(prod x)/dx_i is the product of the other elements; dividing the product by x_i fails at zeros, so the
    # product is taken over the non-zero elements and the zeros of each group are counted
    shape = graph.shape_of(source)
    zero, one = _full_like(source, 0.0), _full_like(source, 1.0)
    is_zero = _equal(source, zero)
    nonzero_product = graph.expand(graph.reduce_axis(_where(is_zero, one, source), Ops.MUL, axes), shape)
    zero_count = graph.expand(_sum_to(graph.cast(is_zero, source.dtype), axes), shape)
    # no zero in the group: product / x_i; one zero: that zero gets the product of the rest; more: all 0
    at_nonzero = _where(_equal(zero_count, zero), _div(nonzero_product, _where(is_zero, one, source)), zero)
    at_zero = _where(_equal(zero_count, one), nonzero_product, zero)
    return _mul(upstream, _where(is_zero, at_zero, at_nonzero))


def _permute_gradient(ctx: UOp, ret: UOp) -> Gradients:
    order: tuple[int, ...] = ret.arg
    inverse = tuple(sorted(range(len(order)), key=lambda axis: order[axis]))
    return (graph.permute(ctx, inverse),)


def _expand_gradient(ctx: UOp, ret: UOp) -> Gradients:
    return (_sum_to(ctx, _grown_axes(graph.shape_of(ret.src[0]), graph.shape_of(ret))),)


def _pad_gradient(ctx: UOp, ret: UOp) -> Gradients:
    sizes = graph.shape_of(ret.src[0])
    return (graph.shrink(ctx, tuple((before, before + size) for (before, _), size in zip(ret.arg, sizes))),)


def _shrink_gradient(ctx: UOp, ret: UOp) -> Gradients:
    sizes = graph.shape_of(ret.src[0])
    return (graph.pad(ctx, tuple((start, size - end) for (start, end), size in zip(ret.arg, sizes))),)


def _cast_gradient(ctx: UOp, ret: UOp) -> Gradients:
    source = ret.src[0]
    return (graph.cast(ctx, source.dtype) if dtypes.is_float(source.dtype) else None,)


def _copy_gradient(ctx: UOp, ret: UOp) -> Gradients:
    source = graph.device_of(ret.src[0])
    if isinstance(graph.placement_of(ctx), tuple):  # a value replicated over devices: its gradient, gathered back
        return (gathered(ctx, source), None)
    return (graph.copy_to(ctx, source), None)


def _multi_gradient(ctx: UOp, ret: UOp) -> Gradients:
    # each shard gets its part of the gradient, on its device; the replicas of a replicated MULTI are one value,
    # whose gradient goes to the first (the others would count it again)
    pieces = pieces_like(ctx, ret)
    if ret.arg is None:
        return (pieces[0], *(None for _ in pieces[1:]))
    return tuple(pieces)


def _mod_gradient(ctx: UOp, ret: UOp) -> Gradients:
    # float MOD is C's fmod: a - trunc(a / b) * b
    lhs, rhs = ret.src
    return ctx, _neg(_mul(ctx, graph.alu(Ops.TRUNC, _div(lhs, rhs))))


# ---------------------------------------------------------------------------------------------------------------
# the rule table: one entry per primitive of the tensor graph
# ---------------------------------------------------------------------------------------------------------------

pm_gradient = PatternMatcher(
    [
        # elementwise arithmetic
        (UPat(Ops.ADD, name="ret"), lambda ctx, ret: (ctx, ctx)),
        (UPat(Ops.SUB, name="ret"), lambda ctx, ret: (ctx, _neg(ctx))),
        (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (_mul(ctx, ret.src[1]), _mul(ctx, ret.src[0]))),
        (UPat(Ops.FDIV, name="ret"), lambda ctx, ret: (_div(ctx, ret.src[1]), _neg(_div(_mul(ctx, ret), ret.src[1])))),
        (UPat(Ops.MULACC, name="ret"), lambda ctx, ret: (_mul(ctx, ret.src[1]), _mul(ctx, ret.src[0]), ctx)),
        (UPat(Ops.NEG, name="ret"), lambda ctx, ret: (_neg(ctx),)),
        (UPat(Ops.MAX, name="ret"), _max_gradient),
        (UPat(Ops.POW, name="ret"), _pow_gradient),
        (UPat(Ops.MOD, name="ret"), _mod_gradient),
        (UPat(Ops.TRUNC, name="ret"), lambda ctx, ret: (_full_like(ctx, 0.0),)),
        # transcendental
        (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (_mul(ctx, _scale(ret, math.log(2.0))),)),
        (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (_div(ctx, _scale(ret.src[0], math.log(2.0))),)),
        (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (_div(ctx, _scale(ret, 2.0)),)),
        (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: (_neg(_mul(ctx, _mul(ret, ret))),)),
        # cos(x) = sin(pi/2 - x): the graph has no COS
        (
            UPat(Ops.SIN, name="ret"),
            lambda ctx, ret: (_mul(ctx, graph.alu(Ops.SIN, _sub(_full_like(ret, math.pi / 2), ret.src[0]))),),
        ),
        # selection and comparisons: the bool condition and comparison operands get nothing
        (
            UPat(Ops.WHERE, name="ret"),
            lambda ctx, ret: (
                None,
                _where(ret.src[0], ctx, _full_like(ctx, 0.0)),
                _where(ret.src[0], _full_like(ctx, 0.0), ctx),
            ),
        ),
        (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ), name="ret"), lambda ctx, ret: (None, None)),
        # dtype changes
        (UPat(Ops.CAST, name="ret"), _cast_gradient),
        (UPat(Ops.BITCAST, name="ret"), lambda ctx, ret: (None,)),
        # movement: each is undone on the gradient
        (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (graph.reshape(ctx, graph.shape_of(ret.src[0])),)),
        (UPat(Ops.PERMUTE, name="ret"), _permute_gradient),
        (UPat(Ops.EXPAND, name="ret"), _expand_gradient),
        (UPat(Ops.PAD, name="ret"), _pad_gradient),
        (UPat(Ops.SHRINK, name="ret"), _shrink_gradient),
        (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (graph.flip(ctx, ret.arg),)),
        # reductions
        (UPat(Ops.REDUCE_AXIS, name="ret"), _reduce_gradient),
        # buffers and devices
        (UPat(Ops.CONTIGUOUS, name="ret"), lambda ctx, ret: (ctx,)),
        (UPat(Ops.DETACH, name="ret"), lambda ctx, ret: (None,)),
        (UPat(Ops.COPY, name="ret"), _copy_gradient),
        (UPat(Ops.MULTI, name="ret"), _multi_gradient),
        # the overwritten target's old value does not reach the result; the written value does
        (UPat(Ops.ASSIGN, name="ret"), lambda ctx, ret: (None, ctx)),
        (UPat(Ops.CONST, name="ret"), lambda ctx, ret: (None,)),
    ]
)


# ---------------------------------------------------------------------------------------------------------------
# the backward walk
# ---------------------------------------------------------------------------------------------------------------


def _differentiable(uop: UOp) -> bool:
    return dtypes.is_float(uop.dtype)


def compute_gradient(
    root: UOp,
    root_gradient: UOp,
    targets: Collection[UOp],
    *,
    constants: Collection[UOp] = (),
    shortcuts: bool = True,
) -> dict[UOp, UOp]:
    """The gradients of `root` with respect to each of `targets`, given the gradient `root_gradient` of `root`.

    Args:
        root: a tensor-graph node of a float dtype.
        root_gradient: the gradient flowing into `root` (same shape and dtype as `root`; ones for d root / d x).
        targets: float tensor-graph nodes.
        constants: nodes held fixed (no gradient flows through them unless they are targets).
        shortcuts: whether `GradientShortcut`s attached to nodes are taken (see the module doc).

    Returns:
        target -> its gradient (a tensor-graph node of the target's shape and dtype) for every target a gradient
        reaches; targets off every differentiable path from `root` (not in its graph, behind DETACH, only used
        through comparisons or integer ops) are left out.

    Example:
        >>> from kiln.tensor import graph
        >>> x = graph.const(3.0, dtypes.float32, "PYTHON")
        >>> compute_gradient(graph.alu(Ops.MUL, x, x), graph.const(1.0, dtypes.float32, "PYTHON"), [x])[x].op
        Ops.ADD
    """
    if not _differentiable(root):
        raise TypeError(f"only float results can be differentiated, got {root.dtype!r}")
    if graph.shape_of(root_gradient) != graph.shape_of(root) or root_gradient.dtype != root.dtype:
        raise ValueError(
            f"the root gradient must match the root: expected shape {graph.shape_of(root)} dtype {root.dtype!r}, "
            f"got shape {graph.shape_of(root_gradient)} dtype {root_gradient.dtype!r}"
        )
    target_set = set(targets)
    constant_set = set(constants)
    for target in target_set:
        if not _differentiable(target):
            raise TypeError(f"only float tensors have gradients, got a target of {target.dtype!r}")
    order = root.toposort()
    # the float nodes a gradient can travel through from root to a target (a target's sources only if they lead on)
    leads: set[UOp] = set()
    for node in order:
        if not _differentiable(node):
            continue
        if node in target_set or (
            node.op is not Ops.DETACH and node not in constant_set and any(source in leads for source in node.src)
        ):
            leads.add(node)
    gradients: dict[UOp, UOp] = {root: root_gradient}
    stored: dict[UOp, UOp] = {}  # a gradient made a buffer for a shortcut's rule -> its CONTIGUOUS
    for node in reversed(order):
        upstream = gradients.get(node)
        if upstream is None or node not in leads or not any(source in leads for source in node.src):
            continue
        shortcut = _shortcut_for(node, target_set) if shortcuts else None
        if shortcut is not None:
            sources = shortcut.inputs
            wanted = tuple(source in leads for source in sources)
            if sum(wanted) > 1 and not _stored(upstream):
                # each wanted gradient is its own kernel reading `upstream` many times per element (a convolution's
                # input and weight gradients): computed once into memory, as PyTorch's grad_output is
                upstream = stored.setdefault(upstream, graph.contiguous(upstream))
            result = shortcut.rule(node, upstream, wanted)
        else:
            sources = node.src
            result, _ = pm_gradient.rewrite_with_rule(node, ctx=upstream)
            if result is None:
                raise RuntimeError(f"no gradient rule for {node.op!r} ({node.dtype!r}): it is not differentiable")
        assert len(result) == len(sources), f"gradient rule for {node.op!r} returned {len(result)} entries"
        for source, gradient in zip(sources, result):
            if gradient is None or source not in leads:
                continue
            assert graph.shape_of(gradient) == graph.shape_of(source) and gradient.dtype == source.dtype, (
                f"gradient rule for {node.op!r}: got {graph.shape_of(gradient)} {gradient.dtype!r} for a source of "
                f"{graph.shape_of(source)} {source.dtype!r}"
            )
            if 0 in graph.shape_of(source):
                # an empty tensor's gradient is empty: a constant, so no kernel ever reduces over nothing
                gradient = _full_like(source, 0.0)
            previous = gradients.get(source)
            gradients[source] = gradient if previous is None else _add(previous, gradient)
    found = {target: gradients[target] for target in targets if target in gradients}
    return _read_stored(found, stored, order) if stored else found


def _read_stored(found: dict[UOp, UOp], stored: dict[UOp, UOp], forward: list[UOp]) -> dict[UOp, UOp]:
    """`found` with every read of a gradient that was made a buffer reading the buffer: the rules that ran before
    the shortcut's read it as a graph (a convolution's bias gradient sums the gradient flowing into the convolution,
    and would compute it again). The walk stays out of the `forward` graph (mapped to itself), which holds no
    gradient unless it is one of them."""
    mapping = {node: node for node in forward}
    mapping.update(stored)
    mapping.update({buffered: buffered for buffered in stored.values()})
    targets = list(found)
    rebuilt = UOp(Ops.SINK, dtypes.void, tuple(found[target] for target in targets)).substitute(mapping)
    return dict(zip(targets, rebuilt.src))


def partial_gradient(root: UOp, root_gradient: UOp, target: UOp, constants: Collection[UOp]) -> UOp | None:
    """The gradient of `root` with respect to `target` with `constants` held fixed, by the primitives' rules only
    (no shortcut): what a `GradientShortcut` rule uses for an input it has no cheaper formula for."""
    found = compute_gradient(root, root_gradient, [target], constants=constants, shortcuts=False)
    return found.get(target)
