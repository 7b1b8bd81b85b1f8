"""The scheduler's cost model: what a placement rule weighs when it could fuse a value into its readers or give it a
buffer, in one unit (nanoseconds of one core's time, `Cost`).

Three things cost time, and one record of machine parameters (`MachineCosts`) prices them:

- **Bytes moved** between memory and the core (`memory_bytes_per_ns`): a value given a buffer is written once and
  read back by its readers.
- **Recomputed work** (`alu_ops_per_ns`, `costly_op_work`): a value fused under an EXPAND is computed once per
  expanded element. A fused kernel that streams memory has ALU time to spare: recomputation only costs what it adds
  beyond the kernel's memory time (a roofline: per element, the larger of the two).
- **Register tiles** (`cache_bytes`, `tile_rows`): codegen gives a matrix product a register tile only when it is
  the one REDUCE of its kernel (kiln.codegen.opt.heuristic, step 2). Without a tile, the operand that does not fit
  in the cache is streamed from memory once per row of the other operand; with one, once per tile of `tile_rows`
  rows.
- **A launch** (`launch_ns`): every kernel more.

The defaults (`DEFAULT_COSTS`) describe the development box (a 2-core AVX-512 Xeon, 2 MiB of L2 per core, loaded
by other work); `machine_costs(device)` adds what the device's renderer decides (row fusion: only where a kernel's
loops run in one CPU thread). A decision compares two `Cost`s and says both in its text (`Comparison`), so the viz
trace shows why the rule chose as it did.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

from kiln.tensor.graph import MOVEMENT_OPS, shape_of
from kiln.tensor.symbolic import max_numel
from kiln.uops import Ops, UOp

COSTLY_OPS = frozenset(
    {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW, Ops.FDIV, Ops.RECIPROCAL, Ops.IDIV, Ops.MOD, Ops.THREEFRY}
)
"""ALU ops that a vector unit computes as a sequence of many instructions (a polynomial, a division, a hash):
`costly_op_work` cheap ops each."""


@dataclass(frozen=True)
class MachineCosts:
    """The machine parameters the cost model prices work with (see the module docstring)."""

    memory_bytes_per_ns: float = 10.0
    """Bytes per ns one core moves between memory (or L3) and itself while other cores work (~10 GB/s)."""
    alu_ops_per_ns: float = 32.0
    """Cheap elementwise ops per ns one core computes: 16 float32 lanes at ~2 GHz."""
    costly_op_work: float = 20.0
    """Cheap ops one costly op (`COSTLY_OPS`: exp2, sin, a division, ...) counts for. With the other defaults, one
    costly float32 op fused under an expand of 4 or more elements per value costs more than a buffer (3: less),
    the ratio measured before there was a cost model."""
    launch_ns: float = 2000.0
    """One kernel launch more (the thread pool woken, the arguments passed)."""
    cache_bytes: int = 1 << 21
    """A core's L2 (2 MiB): an operand that fits is read from memory once however often a kernel re-reads it (the
    same figure as codegen's STREAM_SWAP_BYTES)."""
    tile_rows: int = 8
    """Rows of the register tile codegen gives a matrix product alone in its kernel (the rows of MATMUL_TILES' best
    tiles): its large operand is streamed once per this many rows of the other."""
    row_cache_bytes: int = 1 << 15
    """Largest row (reduced elements times their size) a reduce may have to stay in the kernel that reads it back
    (row fusion): a core's L1 (32 KiB on the development box; its L2 holds many such rows). Softmax and layer_norm
    over (N, 1024) to (N, 8192) float32 measured equal or faster fused (CPU time, LLVM renderer); longer rows are
    split in two stages anyway from 32768 elements (split_reduce.py)."""
    row_min_elements: int = 32
    """Shortest row a fused reduce may have. A short row leaves each reduce loop a few scalar iterations, while the
    separate kernels put 16 rows in vector lanes: log_softmax over rows of 2 / 4 / 8 measured 10x / 8x / 1.06x
    slower fused, 16 about even, 32 and longer equal or faster (4M float32 elements, LLVM renderer)."""
    fuses_rows: bool = False
    """Whether kernels for the device fuse short rows (row_fusion.py): only where a kernel's loops run in one CPU
    thread (a renderer without local threads)."""

    def __post_init__(self) -> None:
        for name in ("memory_bytes_per_ns", "alu_ops_per_ns", "costly_op_work", "cache_bytes", "tile_rows"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MachineCosts.{name} must be positive, got {getattr(self, name)!r}")
        if self.launch_ns < 0:
            raise ValueError(f"MachineCosts.launch_ns must be zero or positive, got {self.launch_ns!r}")

    def move(self, byte_count: float) -> float:
        """ns to move `byte_count` bytes between memory and the core."""
        return byte_count / self.memory_bytes_per_ns

    def compute(self, work: float) -> float:
        """ns to compute `work` cheap ALU ops."""
        return work / self.alu_ops_per_ns


DEFAULT_COSTS = MachineCosts()
"""The development box's parameters (for a device without row fusion)."""


@functools.cache
def machine_costs(device: str) -> MachineCosts:
    """The costs of kernels on `device`: `DEFAULT_COSTS`, with row fusion where the device's renderer has no local
    threads. A GPU-style renderer would give each fused row to one thread of its own, reading the row serially and
    uncoalesced, where the separate kernels reduce each row with a block of threads; row fusion on GPUs is not
    measured yet."""
    from kiln.runtime import Device  # the device's renderer, opened lazily (the scheduler is otherwise device-blind)

    return replace(DEFAULT_COSTS, fuses_rows=not Device[device].renderer.has_local)


class Cost(NamedTuple):
    """An estimate in ns and what it consists of (in words, for a decision's text)."""

    ns: float
    parts: str


class Comparison(NamedTuple):
    """Two plans' costs: `cut` (the value gets a buffer / a kernel of its own) against `fused` (it stays in its
    readers). `cuts` says which one the rule chooses; `describe` puts both in the decision's text."""

    cut: Cost
    fused: Cost

    @property
    def cuts(self) -> bool:
        """Whether the cut plan costs less (a tie stays fused: no kernel more)."""
        return self.cut.ns < self.fused.ns

    def describe(self) -> str:
        """Both costs in words, the chosen one first: "apart 1.2 ms (...) < fused 3.4 ms (...)"."""
        apart = f"apart {format_ns(self.cut.ns)} ({self.cut.parts})"
        fused = f"fused {format_ns(self.fused.ns)} ({self.fused.parts})"
        return f"{apart} < {fused}" if self.cuts else f"{fused} <= {apart}"


def format_ns(ns: float) -> str:
    """`ns` nanoseconds in the largest unit that keeps it >= 1 ("850 ns", "1.2 us", "3.4 ms", "2.1 s")."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def format_bytes(count: float) -> str:
    """`count` bytes in the largest binary unit that keeps it >= 1 ("512 B", "3 KiB", "6.29 MiB")."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.3g} B"


# -- recomputed work under an expand ----------------------------------------------------------------------------------
def work_of(nodes: Iterable[UOp], costs: MachineCosts) -> float:
    """Cheap-op equivalents of computing each of `nodes` (ALU nodes) once: 1 each, `costly_op_work` for a costly op."""
    return sum(costs.costly_op_work if node.op in COSTLY_OPS else 1.0 for node in nodes)


def expand_comparison(source: UOp, expanded: int, work: float, costs: MachineCosts) -> Comparison:
    """Fusing elementwise `source` (of `work` cheap ops per value) under an expand to `expanded` elements, against
    giving it a buffer.

    Fused, the reader computes the value at every expanded element; while that work fits in the reader's memory
    time (it moves at least one element of `source`'s size per expanded element) it costs nothing more. Apart, the
    value is written once and read back once per value (the reader's loads of it replace its loads of the value's
    own inputs), and it costs a launch."""
    values = max_numel(shape_of(source))
    itemsize = source.dtype.itemsize
    spare = max(0.0, costs.compute(work) - costs.move(itemsize))
    fused = Cost(expanded * spare, f"{work:g} ops recomputed at {expanded} elements, beyond their memory time")
    apart = Cost(
        costs.move(2 * values * itemsize) + costs.launch_ns,
        f"{format_bytes(values * itemsize)} written and read, 1 launch",
    )
    return Comparison(apart, fused)


# -- matrix products and their register tiles ------------------------------------------------------------------------
@dataclass(frozen=True)
class ProductShape:
    """A matrix product (a REDUCE_AXIS summing the product of two broadcast operands over one axis): its multiply-
    adds, its outputs, the bytes of its two operands (`large` >= `small`), the rows of the smaller operand (each
    re-reads the larger one when the kernel gives the product no register tile) and the bytes of one output."""

    macs: int
    outputs: int
    large_bytes: int
    small_bytes: int
    rows: int
    output_itemsize: int


def product_shape(node: UOp) -> ProductShape | None:
    """The shape of matrix product `node`, or None if it is not one: a REDUCE_AXIS adding, over one axis, the
    product of two operands that each reach their value through a movement chain holding an EXPAND (casts
    included).

    A product summed over more axes is not one: kiln.tensor.llm.quantized sums a quantized weight's runs of 32 values
    as two axes, which get no register tile either way, and two of them in one kernel share the loads of their input
    (the Q8_0 bench model prefilled ~195 tok/s with its gate and up products together, 161 apart)."""
    if node.op is not Ops.REDUCE_AXIS or node.arg.op is not Ops.ADD or len(node.arg.axes) != 1:
        return None
    value = node.src[0]
    while value.op is Ops.CAST:
        value = value.src[0]
    if value.op is not Ops.MUL:
        return None
    first, second = (_broadcast_value(source) for source in value.src)
    if first is None or second is None:
        return None
    shape = shape_of(node.src[0])
    macs = max_numel(shape)
    depth = max(1, max_numel((shape[node.arg.axes[0]],)))
    (small_elements, small), (_, large) = sorted(
        (max_numel(shape_of(operand)), max_numel(shape_of(operand)) * operand.dtype.itemsize)
        for operand in (first, second)
    )
    rows = max(1, small_elements // depth)
    return ProductShape(macs, macs // depth, large, small, rows, node.dtype.itemsize)


def _broadcast_value(node: UOp) -> UOp | None:
    # the value under a movement chain (casts included) that holds an EXPAND, or None without one
    expanded = False
    while node.op in MOVEMENT_OPS or node.op in (Ops.CAST, Ops.DETACH):
        expanded = expanded or node.op is Ops.EXPAND
        node = node.src[0]
    return node if expanded else None


def product_bytes(product: ProductShape, tiled: bool, costs: MachineCosts) -> int:
    """Bytes a kernel moves from memory for `product`'s operands: the small one once; the large one once if it fits
    in the cache, else once per row of the small one (`tiled`: per tile of `tile_rows` rows)."""
    if product.large_bytes <= costs.cache_bytes:
        return product.small_bytes + product.large_bytes
    passes = math.ceil(product.rows / costs.tile_rows) if tiled else product.rows
    return product.small_bytes + product.large_bytes * passes


def products_comparison(products: list[ProductShape], costs: MachineCosts) -> Comparison:
    """Several matrix products in one kernel (none with a register tile) against each in a kernel of its own (each
    tiled, its output written and read back by the reader, one launch each)."""
    merged = sum(product_bytes(product, False, costs) for product in products)
    tiled = sum(product_bytes(product, True, costs) for product in products)
    outputs = sum(2 * product.outputs * product.output_itemsize for product in products)
    count = len(products)
    fused = Cost(costs.move(merged), f"{format_bytes(merged)} of operands without register tiles")
    apart = Cost(
        costs.move(tiled + outputs) + count * costs.launch_ns,
        f"{format_bytes(tiled)} of tiled operands, {format_bytes(outputs)} of outputs written and read, "
        f"{count} launches",
    )
    return Comparison(apart, fused)


def keeps_its_tile(product: ProductShape, costs: MachineCosts) -> bool:
    """Whether `product` alone in its kernel (tiled) costs less than sharing one with another product (untiled) plus
    the launch that sharing saves: such a product never joins another in a multi-output kernel."""
    untiled = costs.move(product_bytes(product, False, costs))
    return costs.move(product_bytes(product, True, costs)) + costs.launch_ns < untiled
