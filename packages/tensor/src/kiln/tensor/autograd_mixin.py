"""`AutogradMixin`: the gradient methods of `Tensor`: `requires_grad`, `requires_grad_`, `backward`, `gradient`.

Gradients are rewrites of the tensor graph (`kiln.tensor.gradient`). `gradient()` returns them as lazy graphs (they
can be differentiated again). `backward()` computes, as PyTorch's does: the `.grad` of every leaf it reaches, the
tensor it was called on and the live results of that tensor's history not computed yet (the logits kept for an
accuracy) are realized together, in one schedule, so the forward pass runs once. The gradients are then data: a
training step that updates its parameters one by one (`p.assign(p.detach() - p.grad * lr)`, or `p -= lr * p.grad`
under `no_grad`) runs one small kernel per write, where gradients still lazy would each be computed from a snapshot
of the parameters written before them, recomputing the forward and backward passes (issue 36; measured in
`benchmarks/train_bench.py`, checked in `tests/test_write_loop_cost.py`).

Leaves: a tensor that requires grad is a leaf when no other live tensor that requires grad lies below it in its graph
(DETACH starts a new history: `w.detach().requires_grad_()` is a leaf; so is a tensor after `assign` of a value
that needs no grad, while `assign` of a value that requires grad makes the tensor a result of it).
Results of operations on leaves require grad too but are not leaves; `backward()` fills `.grad` of leaves only.

Hash-consing makes equal graphs one node, so two tensors built the same way (`Tensor.zeros(3)` twice) share their
node, and so does the literal 0.0 elsewhere. A tensor that starts requiring grad while its graph reads no buffer is
realized into a buffer of its own, and so is any tensor given to `requires_grad_()` that is not plain data in a
buffer, so the gradients of leaves never mix.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Self

from kiln.tensor import graph
from kiln.tensor.core import TensorCore
from kiln.tensor.gradient import compute_gradient
from kiln.tensor.realize.engine import default_engine, engines_in_context, realize_uops
from kiln.tensor.realize.graph_lock import serialized
from kiln.tensor.realize.mutation import check_gradient_operands
from kiln.tensor.schedule import alias_base, realized_view
from kiln.uops import NodeSlot, Ops, UOp, dtypes

__all__ = ["AutogradMixin"]

# a counter giving each tensor that requires grad its place in creation order (a leaf is created before the results
# computed from it); the tensors themselves are registered with the current engine (`Engine.tensors`)
_registrations = itertools.count()


def _requiring_grad() -> list[TensorCore]:
    """The live tensors that require grad, of every engine the calling thread can reach (`engines_in_context`)."""
    engines = engines_in_context()
    if len(engines) == 1:
        return engines[0].tensors.requiring_grad()
    found: dict[int, TensorCore] = {}
    for engine in engines:
        for tensor in engine.tensors.requiring_grad():
            found.setdefault(id(tensor), tensor)
    return list(found.values())


def _history(root: UOp) -> list[UOp]:
    # the nodes a gradient of root can reach: DETACH stops it
    return root.toposort(gate=lambda node: node.op is not Ops.DETACH)


class AutogradMixin(TensorCore):
    """Gradient tracking and reverse-mode differentiation for `Tensor`."""

    @property
    def requires_grad(self) -> bool | None:
        """Whether gradients are tracked for this tensor: True, False (explicitly not) or None (not set).

        Results of operations require grad when any input does (outside `no_grad`).
        """
        value: bool | None = self.__dict__.get("_requires_grad")
        return value

    @requires_grad.setter
    def requires_grad(self, value: bool | None) -> None:
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"requires_grad must be a bool or None, got {value!r}")
        if "_lane" in self.__dict__:  # an eager-lane tensor gets its graph node first (gradients find leaves by it)
            _ = self.uop
        uop: UOp | None = self.__dict__.get("uop")
        if value is True and uop is not None and not dtypes.is_float(uop.dtype):
            raise RuntimeError(f"only float tensors can require gradients, this tensor is {uop.dtype!r}")
        newly = value is True and self.__dict__.get("_requires_grad") is not True
        if newly and uop is not None and dtypes.is_float(uop.dtype) and not _has_buffer(uop) and _is_new_leaf(uop):
            # a constant graph (zeros, randn ...) is hash-consed with every equal one: give the leaf its own buffer
            self.__dict__["uop"] = _into_new_buffer(uop)
        if value is True:
            self._register_requiring_grad()
        else:
            self.__dict__["_requires_grad"] = value
            for engine in engines_in_context():
                engine.tensors.stop_requiring_grad(self)

    def _register_requiring_grad(self) -> None:
        """Makes this float tensor require grad without the leaf checks of the setter: for the result of an op on a
        tensor that requires grad (its graph holds that tensor's node, so it is no new leaf; `Tensor._result`)."""
        self.__dict__["_requires_grad"] = True
        self.__dict__["_grad_order"] = next(_registrations)
        default_engine().tensors.require_grad(self)

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        """Sets `requires_grad` in place and returns this tensor (only float tensors can require gradients).

        A tensor that starts requiring grad here is a leaf: unless it is plain data in a buffer of its own (a tensor
        made from host data or realized), its values are realized now into a new buffer, so it can never share its
        graph node with another tensor built the same way.

        Example:
            >>> w = Tensor([1.0, 2.0]).requires_grad_()
            >>> w.requires_grad
            True
        """
        tensor = self
        if not isinstance(requires_grad, bool):
            raise TypeError(f"requires_grad_ takes a bool, got {requires_grad!r}")
        if requires_grad and not dtypes.is_float(tensor.dtype):
            raise RuntimeError(f"only float tensors can require gradients, this tensor is {tensor.dtype!r}")
        if requires_grad and tensor.requires_grad is not True and not _owns_its_node(tensor):
            tensor.uop = _into_new_buffer(tensor.uop)
        tensor.requires_grad = requires_grad
        return tensor

    def gradient(self, *targets: Self, gradient: Self | Any | None = None) -> list[Self]:
        """The gradients of this tensor with respect to `targets` (lazy tensors of the targets' shapes).

        Args:
            targets: float tensors this one was computed from (they need not require grad).
            gradient: the gradient flowing into this tensor; optional for a one-element tensor (then 1).

        Returns:
            One gradient per target, in order. A target that is in the graph but that no gradient reaches (used only
            through comparisons or integer ops) gets zeros. The gradients are graphs too: differentiating them
            again gives higher derivatives.

        Raises:
            RuntimeError: a target is not in this tensor's graph (or only behind `detach()`); this tensor has more
                than one element and no `gradient` is given.
            ValueError: `gradient` has another shape than this tensor.

        Example:
            >>> x = Tensor([1.0, 2.0, 3.0])
            >>> (x * x).sum().gradient(x)[0].tolist()
            [2.0, 4.0, 6.0]
        """
        root = self
        if not targets:
            raise TypeError("gradient() needs at least one target tensor")
        for position, target in enumerate(targets):
            if not isinstance(target, TensorCore):
                raise TypeError(f"gradient() targets must be Tensors, target {position} is {type(target).__name__}")
            if not dtypes.is_float(target.dtype):
                raise TypeError(f"only float tensors have gradients, target {position} is {target.dtype!r}")
        if not dtypes.is_float(root.dtype):
            raise TypeError(f"gradient() differentiates float tensors, this one is {root.dtype!r}")
        root_gradient = _root_gradient(root, gradient, "gradient()")
        reachable = set(_history(root.uop))
        nodes = [_gradient_node(target.uop) for target in targets]
        for position, (target, node) in enumerate(zip(targets, nodes)):
            if node not in reachable:
                raise RuntimeError(
                    f"gradient(): target {position} ({target!r}) is not in the graph of {root!r} "
                    "(or only behind detach())"
                )
        found = compute_gradient(root.uop, root_gradient, nodes)
        return [
            type(self)._from_uop(_gradient_of(target, node, found.get(node))) for target, node in zip(targets, nodes)
        ]

    @serialized  # it reads every thread's tensors that require grad, and rebinds the ones it computes
    def backward(self, gradient: Self | Any | None = None) -> Self:
        """Adds the gradient of this tensor to `.grad` of every leaf tensor it was computed from that requires grad.

        Args:
            gradient: the gradient flowing into this tensor; optional for a one-element tensor (then 1).

        Returns:
            This tensor, computed: the gradients, this tensor and the live results of its graph not computed yet
            are realized together, in one schedule (see the module doc). Calling backward again adds to `.grad`
            (set `.grad = None` to start over, as an optimizer's `zero_grad` does). Leaves no gradient reaches
            keep their `.grad`.

        Raises:
            RuntimeError: this tensor does not require grad; it has more than one element and no `gradient` is
                given; two leaves share one graph node.
            ValueError: `gradient` has another shape than this tensor.

        Example:
            >>> w = Tensor([1.0, 2.0], requires_grad=True)
            >>> (w * w).sum().backward().item()
            5.0
            >>> w.grad.tolist()
            [2.0, 4.0]
        """
        root = self
        if root.requires_grad is not True:
            raise RuntimeError(
                f"backward() on {root!r}, which does not require grad: no tensor it was computed from has "
                "requires_grad=True (or it was built inside no_grad())"
            )
        if not dtypes.is_float(root.dtype):
            raise RuntimeError(f"backward() needs a float tensor, got {root.dtype!r}")
        root_gradient = _root_gradient(root, gradient, "backward()")
        history = _history(root.uop)
        leaves = _leaves(history)
        found = compute_gradient(root.uop, root_gradient, list(leaves))
        check_gradient_operands(found.values(), set(history))  # PyTorch's version counter error
        grads: list[TensorCore] = []
        for node, leaf in leaves.items():
            gradient_uop = found.get(node)
            if gradient_uop is None:
                continue
            gradient_uop = _gradient_of(leaf, node, gradient_uop)
            if leaf.grad is not None:
                gradient_uop = graph.alu(Ops.ADD, leaf.grad.uop, gradient_uop)
            leaf.grad = type(leaf)._from_uop(gradient_uop)
            grads.append(leaf.grad)
        if grads:
            # computed now, together (see the module doc)
            computed = _computed_with(root, set(history), leaves)
            type(root).realize_all(*computed, *grads)
        return root


def _gradient_node(uop: UOp) -> UOp:
    """The node to differentiate for a tensor whose graph is `uop`.

    A data tensor is a RESHAPE of its BUFFER, and other views of that BUFFER can reach its values without passing
    its RESHAPE node (a realized tensor's view, folded by `graph.fold_movement_chains` before scheduling): the
    gradient is taken for the BUFFER and reshaped back.
    """
    if uop.op is Ops.RESHAPE and uop.src[0].op is Ops.BUFFER:
        return uop.src[0]
    return uop


def _gradient_of(tensor: TensorCore, node: UOp, gradient: UOp | None) -> UOp:
    """`gradient` (of `node`, the tensor's gradient node) as a node of the tensor's shape; zeros for None."""
    if gradient is None:
        return graph.const(0.0, tensor.dtype, tensor.device, tensor.shape)
    if node is tensor.uop:
        return gradient
    # the BUFFER's gradient is the leaf's reshaped (by the leaf's RESHAPE rule), an internal node: undo it directly
    if gradient.op is Ops.RESHAPE:
        gradient = gradient.src[0]
    return graph.reshape(gradient, tensor.shape)


def _owns_its_node(tensor: TensorCore) -> bool:
    """Whether the tensor is plain data in a BUFFER that no other tensor requiring grad is built on as itself."""
    if _gradient_node(tensor.uop).op is not Ops.BUFFER:
        return False
    return not any(other is not tensor and other.uop is tensor.uop for other in _requiring_grad())


HAS_BUFFER: NodeSlot[bool] = NodeSlot("autograd_has_buffer", __name__, "whether a node's graph reads a BUFFER")


def _has_buffer(uop: UOp) -> bool:
    """Whether `uop`'s graph reads a BUFFER (cached on each node, so results built one op at a time cost O(1))."""
    cached = HAS_BUFFER.get(uop)
    if cached is not None:
        return cached
    known = [HAS_BUFFER.get(source) for source in uop.src]
    if None not in known:  # a node built on known sources (one op at a time): no walk
        found = uop.op is Ops.BUFFER or any(known)
        HAS_BUFFER.set(uop, found)
        return found
    for node in uop.toposort(gate=HAS_BUFFER.missing):
        if HAS_BUFFER.missing(node):
            HAS_BUFFER.set(node, node.op is Ops.BUFFER or any(HAS_BUFFER[source] for source in node.src))
    return HAS_BUFFER[uop]


def _is_new_leaf(uop: UOp) -> bool:
    """Whether no live tensor that requires grad is part of `uop`'s graph (so `uop` is not a result of one)."""
    requiring = {tensor.uop for tensor in _requiring_grad()}
    return not any(node in requiring for node in uop.toposort())


def _into_new_buffer(uop: UOp) -> UOp:
    """Realizes `uop`'s values into a new buffer (ASSIGN: never shared through the engine's realized-node memory)."""
    shape = graph.shape_of(uop)
    target = graph.reshape(graph.buffer_uop(graph.device_of(uop), math.prod(shape), uop.dtype), shape)
    return realize_uops([graph.fold_movement_chains(graph.assign(target, uop))])[0]


def _root_gradient(root: TensorCore, gradient: TensorCore | Any | None, caller: str) -> UOp:
    """The gradient flowing into `root` as a node of root's shape, dtype and device (ones for a scalar)."""
    if gradient is None:
        if root.numel() != 1:
            raise RuntimeError(
                f"{caller} without a gradient needs a tensor with one element, got shape {root.shape}; "
                f"pass gradient= with shape {root.shape}"
            )
        return graph.const(1.0, root.dtype, root.device, root.shape)
    if not isinstance(gradient, TensorCore):
        gradient = type(root)(gradient, dtype=root.dtype, device=root.device)
    if gradient.shape != root.shape:
        raise ValueError(f"{caller}: gradient shape {gradient.shape} must equal the tensor's shape {root.shape}")
    if not dtypes.is_float(gradient.dtype):
        raise TypeError(f"{caller}: gradient must be a float tensor, got {gradient.dtype!r}")
    return graph.cast(graph.copy_to(gradient.uop, root.device), root.dtype)


def _computed_with(root: TensorCore, history: set[UOp], leaves: dict[UOp, TensorCore]) -> list[TensorCore]:
    """The tensors `backward()` computes with the gradients: `root` and the other live tensors of its history that
    are results not computed yet (the logits kept for an accuracy, an input a gradient rule holds on to). The
    gradients compute their values anyway; computed later, each would run the forward pass again."""
    found: list[TensorCore] = []
    for tensor in [root, *_requiring_grad()]:
        node = tensor.__dict__.get("uop")
        if node is None:
            continue  # being made on another thread (registered before its node is set): not of this graph
        if tensor is not root and (node not in history or _gradient_node(node) in leaves):
            continue
        if node.op is Ops.BUFFER or alias_base(node) is not None or realized_view(node) is not None:
            continue  # memory already (a view of a buffer, a realized result)
        if all(tensor is not other for other in found):
            found.append(tensor)
    return found


def _leaves(order: list[UOp]) -> dict[UOp, TensorCore]:
    """The live leaf tensors that require grad in a graph (not behind DETACH), by their gradient node; `order` is
    the graph's `_history`."""
    nodes = set(order)
    groups: dict[UOp, list[TensorCore]] = {}
    for tensor in _requiring_grad():
        uop = tensor.__dict__.get("uop")  # None: being made on another thread, not of this graph
        if uop is None or tensor.requires_grad is not True or not dtypes.is_float(uop.dtype):
            continue
        node = _gradient_node(uop)
        if node in nodes:
            groups.setdefault(node, []).append(tensor)
    # whether a node has another requiring-grad node strictly below it; DETACH and ASSIGN start a new history
    below: dict[UOp, bool] = {}
    for node in order:
        if node.op in (Ops.DETACH, Ops.ASSIGN):
            below[node] = False
            continue
        below[node] = any(source in groups or below.get(source, False) for source in node.src)
    leaves: dict[UOp, TensorCore] = {}
    for node, tensors in groups.items():
        if below[node]:
            continue
        if not _has_buffer(node):
            # a constant graph that never got a buffer of its own is the same node as every equal constant (the
            # literal 2.0 in `x * 2.0`): it cannot be told apart from them, so it is not treated as a leaf
            continue
        # a folded reshape makes a result share its data tensor's node: the earliest tensor is the leaf
        tensors.sort(key=lambda tensor: int(tensor.__dict__["_grad_order"]))
        first = tensors[0]
        twins = [tensor for tensor in tensors[1:] if tensor.uop is first.uop]
        if twins:
            raise RuntimeError(
                f"backward(): {len(twins) + 1} leaf tensors share one graph node ({first!r}), so their gradients "
                "cannot be told apart; make leaves with requires_grad_(), which gives each its own buffer"
            )
        leaves[node] = first
    return leaves
