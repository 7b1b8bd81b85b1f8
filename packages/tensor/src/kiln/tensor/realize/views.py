"""Views of a tensor's storage, as PyTorch has them: which tensors alias which, and how a write through a view lands.

A tensor is a view when its graph is a chain of view ops (RESHAPE, PERMUTE, EXPAND, SHRINK, FLIP, DETACH, CONTIGUOUS
of a whole buffer, a PAD whose padding the chain cuts away again: a strided slice) over a *root*: a BUFFER node, a node
realized into a buffer, or a lazy result. Every tensor over the same root shares its storage: a write through one
is seen by all, exactly as in PyTorch. A lazy root has no storage yet; it gets one (`materialize`) as soon as a
write or a realize would otherwise let two of its views drift apart.

A write through a view with no gradient to keep is an ASSIGN into the view chain when the scheduler can store
through it (RESHAPE / PERMUTE / SHRINK); otherwise (a strided slice) and whenever gradients must flow through the
write, it becomes a write of the whole root: `where(mask, value placed back under the chain, old root)`, which is
PyTorch's CopySlices, with the gradient of each part.
"""

from __future__ import annotations

from kiln.tensor import graph
from kiln.tensor.schedule import padding_hidden, realized_view, whole_buffer
from kiln.uops import Ops, UOp, dtypes

__all__ = ["VIEW_OPS", "check_writable", "place", "region_writable", "store_chain", "view_root"]

VIEW_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.DETACH, Ops.PAD, Ops.CONTIGUOUS})
# the ops the scheduler can store through (ASSIGN targets; PAD and EXPAND are refused there)
_STORE_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.DETACH})


def _is_view_link(node: UOp) -> bool:
    if node.op is Ops.CONTIGUOUS:
        return whole_buffer(node.src[0])
    return node.op in VIEW_OPS


def view_root(node: UOp, stop: UOp | None = None) -> UOp:
    """The root under `node`'s view chain: the first node that is not a view op, or a realized node on the way
    (its buffer holds the values), or `stop` (the node of the tensor `node` was taken as a view of) when the chain
    reaches it; `node` itself when the chain shows padding (`pad()` makes a new value). A broadcast constant
    (`Tensor.zeros(2, 3)`) stands for a full tensor: its lowest broadcast is the root unless `stop` is met first."""
    top, padded, broadcast = node, False, None
    while node is not stop and _is_view_link(node) and realized_view(node) is None:
        if node.op is Ops.EXPAND and _constant(node.src[0]):
            broadcast = node
        padded = padded or node.op is Ops.PAD
        node = node.src[0]
    if node is not stop and node.op is Ops.CONST:
        node = top if broadcast is None else broadcast  # a one-element constant: the tensor itself
    if padded and not padding_hidden(top):
        return top
    return node


def _constant(node: UOp) -> bool:
    while node.op in (Ops.RESHAPE, Ops.EXPAND):
        node = node.src[0]
    return node.op is Ops.CONST


def check_writable(chain: UOp, root: UOp, operation: str) -> None:
    """Raises PyTorch's RuntimeError when the view `chain` (over `root`) maps several of its elements to one
    element of the storage (an EXPAND that broadcasts): a write would land more than once."""
    node = chain
    while node is not root:
        if node.op is Ops.EXPAND and graph.shape_of(node) != graph.shape_of(node.src[0]):
            raise RuntimeError(
                f"{operation}: unsupported operation: more than one element of the written-to tensor (shape "
                f"{list(graph.shape_of(chain))}, expanded from {list(graph.shape_of(node.src[0]))}) refers to a "
                "single memory location. Please clone() the tensor before performing the operation."
            )
        node = node.src[0]


def region_writable(chain: UOp, root: UOp) -> bool:
    """Whether the scheduler can store through the chain from `chain` down to `root` (an ASSIGN target)."""
    node = chain
    while node is not root:
        if node.op not in _STORE_OPS and not (node.op is Ops.CONTIGUOUS and whole_buffer(node.src[0])):
            return False
        node = node.src[0]
    return True


def store_chain(chain: UOp, root: UOp, new_root: UOp) -> UOp:
    """The chain from `chain` down to `root` rebuilt over `new_root`, without the links a store ignores
    (CONTIGUOUS of a whole buffer)."""
    links: list[UOp] = []
    node = chain
    while node is not root:
        links.append(node)
        node = node.src[0]
    built = new_root
    for link in reversed(links):
        if link.op is Ops.CONTIGUOUS:
            continue
        built = graph.detach(built) if link.op is Ops.DETACH else graph.movement(link.op, built, link.arg)
    return built


def place(chain: UOp, root: UOp, value: UOp) -> UOp:
    """The new value of `root` after writing `value` (shaped like `chain`) through the view chain: `value` moved
    back under each link (the inverse movement), kept where the chain reads, the root's old value elsewhere."""
    device = graph.device_of(value)
    mask = graph.const(True, dtypes.bool, device, graph.shape_of(chain))
    placed = value
    node = chain
    while node is not root:
        source_shape = graph.shape_of(node.src[0])
        op, arg = node.op, node.arg
        if op is Ops.RESHAPE:
            placed, mask = graph.reshape(placed, source_shape), graph.reshape(mask, source_shape)
        elif op is Ops.PERMUTE:
            inverse = tuple(sorted(range(len(arg)), key=lambda axis: arg[axis]))
            placed, mask = graph.permute(placed, inverse), graph.permute(mask, inverse)
        elif op is Ops.SHRINK:
            padding = tuple((start, size - stop) for (start, stop), size in zip(arg, source_shape))
            placed, mask = graph.pad(placed, padding), graph.pad(mask, padding)
        elif op is Ops.FLIP:
            placed, mask = graph.flip(placed, arg), graph.flip(mask, arg)
        elif op is Ops.PAD:
            bounds = tuple((before, before + size) for (before, _), size in zip(arg, source_shape))
            placed, mask = graph.shrink(placed, bounds), graph.shrink(mask, bounds)
        elif op is Ops.EXPAND:
            raise RuntimeError("place: cannot write through an expanded view")  # check_writable refuses it first
        node = node.src[0]
    return graph.alu(Ops.WHERE, mask, placed, root)
