"""Which values of an ONNX graph the translation computes once into memory instead of leaving them to fuse.

kiln fuses an elementwise expression into every kernel that reads it, which recomputes the expression at each read.
That is free for a value read once per element, but a convolution reads each input element once per tap and output
channel, and a matrix product reads each element of its left operand once per output column. Two cases pay:

- a value read by a Conv, MatMul or Gemm and by another node (a ResNet block's output feeds the next block's
  convolution and its residual Add; a transformer's LayerNormalization output feeds the Q, K and V products and the
  residual Add): every other reader would recompute the whole expression (bias + add + relu from the
  convolution's raw sum; the normalization from the residual stream, whose own expression reaches back through
  every earlier layer that was never stored). Materialized at the graph level, all readers read one buffer and the
  expression fuses into the kernel that produces it (resnet18.onnx: 31 -> 24 kernels; bert.onnx: the residual
  stream stored once per layer).
- a MatMul or Gemm operand holding a transcendental (a GELU's erf, a softmax's exp): recomputed for every output
  column. Materialized, it costs one elementwise kernel.
- the input of a LayerNormalization (or SkipLayerNormalization's sum, or a Softmax's input), read three times: left
  lazy, the scheduler computes it in each of three kernels (mean, variance, result); stored by the kernel that
  produces it (a product's epilogue), the normalization is one kernel (bert.onnx: 36 -> 26 kernels).
"""

from __future__ import annotations

from collections import Counter

import onnx

from kiln.tensor.tensor import Tensor
from kiln.uops.ops import GroupOp, Ops

__all__ = ["materialized_if_costly", "materialized_if_computed", "shared_product_inputs"]

# (op type, which inputs): the readers that read each element of that input many times
_PRODUCTS = {"Conv": (0,), "MatMul": (0, 1), "Gemm": (0, 1)}
# ops whose result is already a buffer, or starts a kernel of its own: a walk for fused work stops there
_BOUNDARIES = frozenset({Ops.BUFFER, Ops.CONTIGUOUS, Ops.REDUCE_AXIS, Ops.COPY, Ops.ASSIGN, Ops.DEVICE, Ops.MULTI})
# ops that cost tens of instructions per element (erf and tanh are built from exp2; pow from log2 and exp2)
_COSTLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})
_COMPUTING = GroupOp.Elementwise
# a walk gives up (and calls the expression costly) past this many nodes
_WALK_LIMIT = 256


def shared_product_inputs(graph: onnx.GraphProto) -> frozenset[str]:
    """The values of `graph` read by a Conv, MatMul or Gemm (as a data operand) and by at least one other reader (a
    node or a graph output)."""
    readers: Counter[str] = Counter()
    multiplied: set[str] = set()
    for node in graph.node:
        for name in set(node.input):
            if name:
                readers[name] += 1
        if node.domain in ("", "ai.onnx"):
            for index in _PRODUCTS.get(node.op_type, ()):
                if index < len(node.input) and node.input[index]:
                    multiplied.add(node.input[index])
    for output in graph.output:
        readers[output.name] += 1
    return frozenset(name for name in multiplied if readers[name] > 1)


def _fused_work(tensor: Tensor, counted: frozenset[Ops]) -> bool:
    """Whether the part of `tensor`'s lazy expression a reader's kernel would fuse holds an op of `counted`."""
    pending = [tensor.uop]
    seen: set[int] = set()
    while pending:
        node = pending.pop()
        if id(node) in seen or node.op in _BOUNDARIES:
            continue
        if node.op in counted or len(seen) > _WALK_LIMIT:
            return True
        seen.add(id(node))
        pending.extend(node.src)
    return False


def materialized_if_computed(tensor: Tensor) -> Tensor:
    """`tensor` computed into memory when its expression computes anything (a view of a buffer stays a view)."""
    return tensor.contiguous() if _fused_work(tensor, _COMPUTING) else tensor


def materialized_if_costly(tensor: Tensor, reads: int) -> Tensor:
    """`tensor` computed into memory when a reader reading each element `reads` times would recompute a
    transcendental at every read; else `tensor` itself (a value read once fuses for free)."""
    if reads <= 1 or not _fused_work(tensor, _COSTLY):
        return tensor
    return tensor.contiguous()
