"""Quantized products whose packed bytes hold several values each: unroll the short reduce loop they share.

A GGUF Q4_K (or Q5_K) row stores the values of two 32-runs in the same 32 bytes: run 2p the low nibbles, run 2p + 1
the high ones. The tensor layer sums such a product over (pairs, 2, 32) (kiln.tensor.llm.quantized, NIBBLE_PAIR):
the byte loads walk the pairs and the 32 bytes, not the axis of 2. After the heuristic's product tile (rows upcast,
the 32 unrolled into vector lanes) that axis is still a loop, so each byte vector is loaded, widened, shifted and
masked once per nibble. Unrolled, both nibbles of one loaded vector feed their own fused multiply-adds, with the
shifts by constants (0 and 4) that the compiler folds into one mask and one shift.

llvm-mca (sapphirerapids) on the kernel of a (32000, 768) Q4_K matrix times a vector, per value: 0.30 cycles with
the nibble loop, 0.25 with it unrolled (per 16 lanes of a row and both nibbles: 11 vector instructions, was 14).
"""

from __future__ import annotations

from typing import Protocol

from kiln.codegen.kernel_info import Opt, OptOps
from kiln.codegen.opt.kernel_axes import axes_of, constant_size, lane_count, reduces_of
from kiln.codegen.renderer import Renderer
from kiln.uops import AxisKind, Ops, UOp

__all__ = ["SHARED_LOOP_MOST", "shared_load_unroll", "unroll_shared_loads"]

SHARED_LOOP_MOST = 4
"""Longest reduce loop `shared_load_unroll` unrolls whole (a byte's nibbles: 2; four 2-bit fields: 4)."""


class OptBuilder(Protocol):
    """What `unroll_shared_loads` needs of the heuristic's builder: the sink, the renderer and `attempt`."""

    sink: UOp
    renderer: Renderer

    def attempt(self, opt: Opt) -> bool: ...


def _packed_loads(reduction: UOp) -> list[UOp]:
    """The INDEX of every one-byte load the reduced value reads (packed quants)."""
    return [
        node.src[0]
        for node in reduction.src[0].toposort()
        if node.op is Ops.LOAD and node.src[0].op is Ops.INDEX and node.dtype.itemsize == 1
    ]


def _reads_the_same_along(index: UOp, rng: UOp, size: int) -> bool:
    """Whether `index` (an INDEX) picks the same element for every value of loop `rng`: its address simplified with
    `rng` at each value (syntactically it may still name the loop: (2 p + h) // 2 is p for h in 0..1)."""
    address = index.src[1]
    if rng not in address.toposort():
        return True
    first = address.substitute({rng: rng.const_like(0)}).simplify()
    return all(address.substitute({rng: rng.const_like(value)}).simplify() is first for value in range(1, size))


def shared_load_unroll(sink: UOp, renderer: Renderer) -> Opt | None:
    """The UNROLL of a whole short reduce loop (at most SHARED_LOOP_MOST) of `sink`'s one sum that every one-byte
    load of the summed value reads the same bytes along, while they do walk the lanes already unrolled: the loop
    picks a field of each loaded byte (a nibble). None when there is no such loop, when the kernel has no unrolled
    lanes yet, or when its lanes times the loop would pass the renderer's `register_tile_lanes`."""
    reductions = reduces_of(sink)
    if len(reductions) != 1 or reductions[0].arg is not Ops.ADD:
        return None
    packed = _packed_loads(reductions[0])
    lanes = axes_of(sink, AxisKind.UNROLL)
    if not packed or not lanes:
        return None
    if not all(any(lane in index.toposort() for lane in lanes) for index in packed):
        return None  # a byte load outside the vector lanes (a scale) is not what this unroll shares
    width = lane_count(sink)
    for rng in axes_of(sink, AxisKind.REDUCE):
        size = constant_size(rng)
        if size is None or not 2 <= size <= SHARED_LOOP_MOST or width * size > renderer.register_tile_lanes:
            continue
        if rng not in reductions[0].src[1:] or not all(_reads_the_same_along(index, rng, size) for index in packed):
            continue
        return Opt(OptOps.UNROLL, rng.arg.axis, 0)
    return None


def unroll_shared_loads(build: OptBuilder) -> bool:
    """Apply `shared_load_unroll` to the builder's sink (after a product tile unrolled its lanes); whether it did."""
    opt = shared_load_unroll(build.sink, build.renderer)
    return opt is not None and build.attempt(opt)
