"""The operand loads of a convolution whose input is a fused elementwise expression (step 2v of the heuristic).

A network's convolution reads the previous layer's output through the ops the scheduler fused into it: a bias add
and a ReLU (`WHERE(valid, WHERE(x + b > 0, x + b, 0), 0)` behind the padding guard), a residual add. The register
tile of step 2v needs, per operand, the index whose strides tell the rows axis from the columns axis; a fused operand
has several loads. Its main load is the one whose index depends on every range any of its loads depends on (the
activation `x`, not the per-channel bias `b`): along the output axes the others are then constant or move with it,
so the strides of the main load stand for the operand. Without this the fused convolutions of resnet18.onnx fell to
step 3 (one upcast axis) at 0.3-1 GFLOP/s.

Also the reduce unroll of a weight gradient's output tile (step 2r, `unroll_inner_lanes`): its lanes must be the
innermost ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kiln.codegen.kernel_info import Opt, OptOps
from kiln.codegen.opt.kernel_axes import axes_of, constant_size
from kiln.codegen.renderer import Renderer
from kiln.uops import AxisKind, Ops, UOp

__all__ = ["STRIDED_TILES", "operand_index", "strided_tile", "unroll_inner_lanes"]

STRIDED_TILES = ((8, 16), (4, 16), (8, 8), (4, 8))
"""(rows, columns) tiles of a product whose columns no operand reads contiguously (`strided_tile`), best first."""

_ELEMENTWISE_STOP = frozenset({Ops.REDUCE, Ops.STORE, Ops.AFTER})
"""Ops an operand expression must not contain: its value would not be a function of its loads at this point."""


def _ranges_of(index: UOp) -> frozenset[UOp]:
    if len(index.src) < 2:
        return frozenset()
    return frozenset(node for node in index.src[1].toposort() if node.op is Ops.RANGE)


def operand_index(node: UOp) -> UOp | None:
    """The INDEX of the main load of an operand expression (see the module docstring): the load itself for a plain
    load, else the load of a fused elementwise expression whose index ranges contain those of every other load in
    it; None when there is no load, a reduce or store inside, or no single load spans the others."""
    if node.op is Ops.LOAD:
        return node.src[0]
    nodes = node.toposort()
    if any(n.op in _ELEMENTWISE_STOP for n in nodes):
        return None
    indices = [n.src[0] for n in nodes if n.op is Ops.LOAD and n.src[0].op is Ops.INDEX]
    if not indices:
        return None
    spans = {index: _ranges_of(index) for index in indices}
    widest = max(indices, key=lambda index: len(spans[index]))
    if not all(span <= spans[widest] for span in spans.values()):
        return None
    return widest


class TileBuilder(Protocol):
    """What `strided_tile` needs of the heuristic's builder: the sink, the renderer, the opts and `attempt`."""

    sink: UOp
    renderer: Renderer
    opts: list[Opt]

    def attempt(self, opt: Opt) -> bool: ...


def strided_tile(
    build: TileBuilder,
    operands: tuple[UOp, UOp],
    output_axes: list[UOp],
    stride: Callable[[UOp, UOp], int | None],
) -> bool:
    """A register tile for a product whose output axes no operand reads contiguously (step 2s of the heuristic): a
    stride-2 convolution (its input walks 2 elements per output column), or the 2 x 2 / 4 x 4 images of a network's
    last stages, whose only long axes besides the channels are the batch. The columns axis is the innermost output
    axis of at least 8 that only one operand walks (the output width), the rows axis the longest that only the
    other walks (the output channels); each columns vector is gathered once per reduce step and serves
    every row of the tile, each row's value is broadcast. `stride(index_expression, rng)` is the heuristic's stride
    measure."""
    sizes = {rng.arg.axis: rng.src[0].arg for rng in output_axes if rng.src[0].op is Ops.CONST}
    walks: dict[int, list[int]] = {0: [], 1: []}
    for rng in output_axes:
        strides = [stride(index.src[1], rng) for index in operands]
        if None in strides or strides.count(0) != 1 or rng.arg.axis not in sizes:
            continue
        walks[0 if strides[0] else 1].append(rng.arg.axis)
    if not walks[0] or not walks[1]:
        return False
    tiles = [tile for tile in STRIDED_TILES if tile[0] * tile[1] <= build.renderer.register_tile_lanes]
    start_sink, start_opts = build.sink, list(build.opts)
    # the columns: the innermost output axis of at least 8 that one operand walks (a convolution's output width,
    # stored contiguously; else the batch or the channels), the rows: the other operand's longest axis
    candidates = [rng.arg.axis for rng in reversed(output_axes) if sizes.get(rng.arg.axis, 0) >= 8]
    for columns in candidates:
        side = 0 if columns in walks[0] else 1
        if columns not in walks[side]:
            continue
        rows_axes = sorted(walks[1 - side], key=lambda axis: -sizes[axis])
        for rows_amount, columns_amount in tiles:
            for rows in rows_axes:
                if sizes[columns] % columns_amount or sizes[rows] % rows_amount:
                    continue
                build.sink, build.opts = start_sink, list(start_opts)
                # rows first: the lanes of the later upcast are the inner ones (the columns, stored contiguously)
                if build.attempt(Opt(OptOps.UPCAST, rows, rows_amount)) and build.attempt(
                    Opt(OptOps.UPCAST, columns, columns_amount)
                ):
                    return True
    build.sink, build.opts = start_sink, start_opts
    return False


def unroll_inner_lanes(build: TileBuilder, axis: int, width: int) -> bool:
    """UNROLL reduce `axis` by `width` (step 2r of the heuristic: a convolution's weight gradient, its output tile
    upcast first), or by the largest half of it (down to 4) whose lanes are then the innermost ones when the whole-width
    unroll would leave them outside the tile's. Returns whether an UNROLL was applied.

    Lanes are ordered by axis number, and an UNROLL by an axis's whole size keeps its number while the splits of the
    output tile's UPCASTs took new, higher ones: the image row's lanes then come outside the tile's, so each loaded
    row vector is scattered over the tile lane by lane. The conv2d (32,16,16,16) x (16,16,3,3) weight gradient (a
    16-wide row: the ResNet block of benchmarks/train_bench.py) compiled so to ~1500 instructions of permutes and
    spills per reduce step at ~2 GFLOP/s; unrolled by 8 (a new, innermost axis) each half row is one vector load
    that the 4 x 4 tile uses as is: ~230 instructions, ~85 GFLOP/s (AVX-512 LLVM, BEAM's timer, loaded 2-core box).
    A row padded up to the width (PADTO: 11 -> 16, the small CNN's second convolution) is read by masked lane loads
    either way and keeps the whole-width unroll (unrolled by 8 it measured 7x slower)."""
    padded = any(opt.op is OptOps.PADTO and opt.axis == axis for opt in build.opts)
    start_sink, start_opts = build.sink, list(build.opts)
    amount = width
    while amount >= 4 and not padded:
        if build.attempt(Opt(OptOps.UNROLL, axis, amount)):
            lanes = axes_of(build.sink, AxisKind.UPCAST, AxisKind.UNROLL)
            innermost = max(lanes, key=lambda rng: rng.arg.axis)
            if innermost.arg.kind is AxisKind.UNROLL and constant_size(innermost) == amount:
                return True
        build.sink, build.opts = start_sink, list(start_opts)
        amount //= 2
    return build.attempt(Opt(OptOps.UNROLL, axis, width))
