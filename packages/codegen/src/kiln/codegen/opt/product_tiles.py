"""Register tiles of products of two loads on vector-ALU CPU renderers: steps 2v and 2r of the heuristic
(`kiln.codegen.opt.heuristic`), and the kernel queries the heuristic shares with them.

Vector-ALU CPU renderers (LLVM IR) take these steps in place of the heuristic's steps 2 and 3:
2v. A kernel reducing a product of two loads (matmul, or conv2d through its padding guard) gets a register tile:
    the "rows" axis (only one operand walks it; its element is broadcast) is upcast first, then the "columns"
    axis (the other operand is contiguous along it) by 32 or 16, the first of MATMUL_TILES that keeps the
    columns the inner lanes (each row of the contiguous operand is then one vector load; 8 x 32 floats are 16
    AVX-512 accumulators, updated with one fused multiply-add each per reduce step; tiles over the renderer's
    `register_tile_lanes` are skipped: 4 x 16 on AVX2). The reduce stays rolled. A columns axis the tile covers
    whole (a (1024, 16) right operand) keeps its lower axis number, so its lanes would be the outer ones: the two
    upcast axes then swap numbers (SWAP), and such tiles take at most 8 rows ((1024, 1024) @ (1024, 16): 1.5x
    less CPU time than the 8 x 8 tile with a 2-step columns loop it got before; @ (1024, 32) 1.7x; conv2d
    (32,16,32,32), whose 32-wide rows now get an 8 x 32 tile, ~10%).
    When the contiguous operand (K x N, 32-bit or wider) is bigger than STREAM_SWAP_BYTES and the columns tile is
    the wider one, the columns loop goes outside the rows loop (SWAP): each K-deep column panel then stays in L2
    while the broadcast operand streams, 4x fewer bytes from L3 / memory with an 8 x 32 tile (matmul 2048's kernel
    measured ~77 -> ~100 GFLOP/s on the loaded 2-core development box, 1024's about the same; the batched
    (8, 512, 512) product and the convolutions stay below the threshold).
    When instead the broadcast operand is a cache line further at each reduce step (a transposed left operand,
    A.T @ B reads A[k, i]) and bigger than STREAM_SWAP_BYTES, the rows loop stays outside and the reduce is
    blocked (BLOCK) in K panels of the largest of REDUCE_PANEL_SIZES whose rows of the contiguous operand fit
    REDUCE_PANEL_BYTES (`_reduce_panels`): a row tile's K panel of lines, 4 KiB apart, is then reused from L2 by
    every column tile instead of coming from memory again for each (A.T @ B, process CPU time on the loaded
    2-core box: 1024 ~85 -> ~157, 2048 ~61 -> ~209 GFLOP/s).
    Every columns candidate (innermost first) and every rows candidate is tried, biggest tile first. Columns no
    tile divides are padded (PADTO) when that wastes at most 1/8, or, when no column tile divides them at all
    (an 11-, 13- or 26-wide convolution output), up to 2x (to 32 within 1/4): vector code doing up to twice the
    work measured 5-10x faster than the scalar code otherwise left (the small CNN of benchmarks/train_bench.py).
    A vector times a matrix (x @ W for one row x: no output axis walks only the broadcast operand) gets a one-row
    tile: the columns upcast by the widest of VECTOR_MATRIX_LANES that divides them (padded as above), the reduce
    rolled ((1, 1024) @ (1024, 2048): 3.5 -> 0.17 ms of kernel time; step 3v had unrolled the reduce along x and
    read W a column at a time).
    An operand may be a fused elementwise expression (the previous layer's bias add and ReLU behind the padding
    guard, a residual add): its main load, the one whose index spans the ranges of all its loads, stands for it
    (`conv_tiles.operand_index`; without it resnet18.onnx's fused convolutions fell to step 3 at 0.3-1 GFLOP/s).
    A kernel of several such sums (a residual block's 3x3 convolution plus its 1x1 downsampling shortcut) takes
    the tile of its longest reduce, shared by all (resnet18's three such kernels: ~20 -> 0.3 ms each; they had
    an unroll of the shortcut's reduce).
2r. A product of two loads without a register tile (the weight gradient of a convolution: a small output and a
    long reduce over the image) unrolls its innermost reduce axis, along which the loads are contiguous, by the
    vector width (padded up to it when that at most doubles it; by half the width when a whole-width unroll would
    put the row's lanes outside the tile's: `conv_tiles.unroll_inner_lanes`); the lowering keeps the lanes as separate
    accumulators and folds them after the loop (measured 2-2.5x faster than the scalar unroll by 4). Output
    lanes come first: the outermost output axis only the first operand walks and the outermost only the second
    walks are upcast by 4 (a 4 x 4 tile: 16 independent chains of fused multiply-adds, each loaded vector used 4
    times), or the one such axis by 8 (a matrix-vector product's rows). One output alone waits on each add's
    latency: the conv2d (32,16,32,32) weight gradient measured 2.5x less CPU time with the 4 x 4 tile, a
    4096 x 4096 matrix-vector product ~15% less with 8 rows (A/B, process CPU time, loaded machine).
    A product of few rows (2 .. FEW_ROWS, an LLM decode step of that many sequences) against an output axis of
    the other operand FEW_ROWS_RATIO times longer upcasts all its rows instead, nothing else: the long matrix is
    read once, each loaded vector of it used by every row. An operand decoded from bytes (an F16 GGUF matrix:
    element i from bytes 2i and 2i + 1) counts as contiguous along the reduce (`_element_stride`), and the
    lowering reads each element's bytes in one access (`lowering.memory_access`); for one row it stays with step
    3v. The 100M llama's output layer, (8, 768) @ (32000, 768).T from F16 bytes, had step 2s's gathered 8 x 16
    tile with the reduce rolled (~1.2 GB/s in the 8-row decode step); a prompt's 64 rows by the same matrix had
    it too until the byte pairs were merged: 17 -> ~80 GFLOP/s of process CPU time (F32 bytes, (2048, 768): 10 ->
    ~75; loaded 2-core box, minimum of 10 TinyJit replays each). A prefill chunk's rows (a bound Variable, so no
    constant axis) count as many rows (`_symbolic_rows`), and the reduce's index may divide it by a multiple of the
    width, also through a chain ((k / 64) / 3: an attention output read in its heads' layout, `divides_axis`):
    the 100M llama's attention output projection from F16 bytes had step 2s's gathered 16 columns, ~25% of a
    64-token prefill's kernel time; the prefill's process CPU time went 0.53 -> 0.35 s (minimum of 4 prompts).
    A 4 x 4 tile whose bigger operand exceeds STREAM_SWAP_BYTES while the other fits in half of it (a language
    model's prefill, x @ W.T: 64 rows of x against a (32000, 768) or (2048, 768) weight, both contiguous along the
    reduce) puts the loop over the big operand's rows outside (SWAP, `_dot_stream_order`): W is read once, each 4
    of its rows reused from L1 by every row tile of x, which stays in L2; with the rows outside, W came from memory
    once per row tile. Unpacked 64-row products, process CPU time, medians of 15 on the loaded 2-core box, with the
    expander's output-major fold of the 256 accumulator lanes: (32000, 768) weight 20 -> ~85 GFLOP/s, (2048, 768)
    36 -> ~65, (768, 2048) 32 -> ~65; float16 weights the same.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.codegen.kernel_info import Opt, OptOps
from kiln.codegen.loop_structure import range_by_axis
from kiln.codegen.opt.conv_tiles import TileBuilder, operand_index, unroll_inner_lanes
from kiln.codegen.opt.kernel_axes import axes_of, constant_size, product_of_sizes, reduces_of, stride_of
from kiln.uops import AxisKind, Ops, PtrDType, UOp

__all__ = [
    "CACHE_LINE_BYTES",
    "MATMUL_TILES",
    "STREAM_SWAP_BYTES",
    "buffer_bytes",
    "divides_axis",
    "largest_dividing",
    "output_axes",
    "product_loads",
    "stride_near_origin",
    "strip_casts",
    "strip_padding",
    "vector_matmul_tile",
    "vector_product_unroll",
]

CACHE_LINE_BYTES = 64


def strip_casts(node: UOp) -> UOp:
    while node.op is Ops.CAST:
        node = node.src[0]
    return node


def strip_padding(node: UOp) -> UOp:
    # WHERE(valid, x, 0): a padded read (conv2d), the load it guards is the operand
    node = strip_casts(node)
    if node.op is Ops.WHERE and node.src[2].op is Ops.CONST and node.src[2].arg == 0:
        return strip_casts(node.src[1])
    return node


def product_loads(sink: UOp) -> tuple[UOp, UOp] | None:
    """`_matmul_operands`, also through padding guards and fused elementwise inputs (`conv_tiles.operand_index`: a
    bias add and ReLU of the previous layer): a matmul or a convolution (vector-ALU CPU renderers)."""
    # several reduces, each a sum of such a product (a residual block's 3x3 convolution and its 1x1 downsampling
    # shortcut in one kernel): the one with the longest reduce picks the tile, which both share
    found: list[tuple[int, tuple[UOp, UOp]]] = []
    for reduction in reduces_of(sink):
        product = strip_casts(reduction.src[0])
        if reduction.arg is not Ops.ADD or product.op is not Ops.MUL:
            return None
        left, right = (operand_index(strip_padding(s)) for s in product.src)
        if left is None or right is None:
            return None
        found.append((product_of_sizes([r for r in reduction.src[1:] if r.op is Ops.RANGE]), (left, right)))
    return max(found, key=lambda pair: pair[0])[1] if found else None


def output_axes(sink: UOp) -> list[UOp]:
    return axes_of(sink, AxisKind.GLOBAL, AxisKind.LOOP)


def largest_dividing(size: int | None, choices: tuple[int, ...], limit: int) -> int | None:
    if size is None:
        return None
    return next((c for c in sorted(choices, reverse=True) if c <= limit and size % c == 0), None)


def stride_near_origin(index_expression: UOp, rng: UOp) -> int | None:
    """`stride_of`, or else the growth from rng = 0 to 1 with every other range at 0 (padded reads are affine inside
    the image only, and the symbolic simplifier cannot prove it for the whole range)."""
    exact = stride_of(index_expression, rng)
    if exact is not None:
        return exact
    others = {r: r.const_like(0) for r in index_expression.toposort() if r.op is Ops.RANGE and r is not rng}
    at = [index_expression.substitute({**others, rng: rng.const_like(value)}).simplify() for value in (0, 1)]
    return int(at[1].arg - at[0].arg) if all(point.op is Ops.CONST for point in at) else None


def divides_axis(indices: list[UOp], rng: UOp, width: int = 0) -> bool:
    """Whether an index divides `rng` by an amount that unrolled lanes would straddle (a flattened (16, 5, 5) view:
    k/25, k/5%5): after an unroll the simplifier leaves it as lane-by-lane division (measured 2x slower than output
    lanes on the small CNN's linear layer). A divisor that is a multiple of `width` keeps each unrolled vector
    inside one block (k/32 and k%32 of a quantized row's 32-value blocks under a 16-lane unroll are a block number
    and a contiguous lane), so it does not count; nor does a division of such a block number ((k/64)/3: the heads
    of an attention output read as one row, a block of 192 values)."""
    for index in indices:
        for node in index.src[1].toposort():
            if node.op not in (Ops.IDIV, Ops.MOD) or rng not in node.toposort():
                continue
            divisor = _chained_divisor(node)
            if node.op is Ops.MOD and not (divisor and width and divisor % width == 0):
                continue  # a plain modulo of the axis was never the problem; only through a division below
            if not (width and divisor and divisor % width == 0):
                return True
    return False


def _chained_divisor(node: UOp) -> int | None:
    """The constant by which `node` (an IDIV or MOD) divides what lies under its chain of constant divisions: 3 for
    k % 3, 192 for (k / 64) / 3; None for a divisor that is not a constant."""
    total = 1
    divisor = node.src[1]
    if divisor.op is not Ops.CONST:
        return None
    total, node = int(divisor.arg), node.src[0]
    while node.op is Ops.IDIV and node.src[1].op is Ops.CONST:
        total, node = total * int(node.src[1].arg), node.src[0]
    return total


def buffer_bytes(pointer: UOp) -> int:
    dtype = pointer.dtype
    assert isinstance(dtype, PtrDType)
    return max(dtype.size, 0) * dtype.base.scalar().itemsize


MATMUL_TILES = ((8, 32), (4, 32), (16, 16), (8, 16), (4, 16), (8, 8), (2, 16), (4, 8), (2, 8))
"""(rows, columns) register tiles of matmul-shaped kernels on vector-ALU CPU renderers, best first; those larger
than the renderer's `register_tile_lanes` are skipped (AVX2 keeps 64 lanes: 4 x 16 measured 5x the GFLOP/s of 8 x 32
on matmul 1024, whose 32 accumulator registers do not fit in 16)."""
STREAM_SWAP_BYTES = 1 << 21
"""Bytes of a matmul's contiguous operand (K x N) from which its columns loop goes outside the rows loop: more than
a core's L2 holds (1-2 MiB), so streaming it once per row tile would run from L3 or memory."""
REDUCE_PANEL_SIZES = (256, 128, 64, 32)
"""K panel sizes of `_reduce_panels`, largest first."""
REDUCE_PANEL_BYTES = 1 << 19
"""Most bytes of the contiguous operand one K panel of `_reduce_panels` spans (a quarter of a core's L2): A.T @ B
measured fastest with panels of 128 at 1024 (512 KiB of B) and of 64 at 2048 (512 KiB; 128: ~10% slower, 256: ~20%)."""


def _pad_columns(build: TileBuilder, columns: UOp) -> None:
    """PADTO the columns axis of a register tile when no column tile divides it well (see the module docstring)."""
    size = constant_size(columns)
    if size is None or size % 32 == 0:
        return
    # a little waste (1000 columns -> 1024) is always worth the wider tile
    for multiple in (32, 16):
        if size >= multiple and size % multiple and -size % multiple * 8 <= size:
            build.attempt(Opt(OptOps.PADTO, columns.arg.axis, multiple))
            return
    if size % 8 == 0:
        return
    # no column tile divides it at all (an 11-, 13- or 26-wide convolution output): the kernel would run in scalar
    # code, 5-10x slower than vector code doing up to twice the work (measured on the small CNN's convolutions)
    for multiple, limit in ((32, 1.25), (16, 2.0), (8, 2.0)):
        if -(-size // multiple) * multiple <= limit * size:
            build.attempt(Opt(OptOps.PADTO, columns.arg.axis, multiple))
            return


def vector_matmul_tile(build: TileBuilder, operands: tuple[UOp, UOp]) -> bool:
    """Register tile of a matmul-shaped kernel for a vector-ALU CPU renderer (see the module docstring, step 2)."""
    # every output axis one operand is contiguous along and the other ignores is a columns candidate, innermost first
    # (the input gradient of a convolution has its 3-wide kernel axis and its output width)
    for columns in reversed(output_axes(build.sink)):
        strides = [stride_near_origin(index.src[1], columns) for index in operands]
        contiguous = sorted(strides, key=lambda s: -1 if s is None else s) == [0, 1]
        if contiguous and _tile_with_columns(build, operands, columns, strides.index(1)):
            return True
    return False


def _tile_with_columns(build: TileBuilder, operands: tuple[UOp, UOp], columns: UOp, contiguous: int) -> bool:
    rows_axes: list[int] = []
    for rng in reversed(output_axes(build.sink)):
        strides = [stride_near_origin(index.src[1], rng) for index in operands]
        if rng is not columns and strides[contiguous] == 0 and strides[1 - contiguous] != 0:
            rows_axes.append(rng.arg.axis)
    if not rows_axes:
        return _columns_only_tile(build, columns)
    start_sink, start_opts = build.sink, list(build.opts)
    # sizes no tile divides (1000 columns, a 30-wide convolution output) are padded up first
    _pad_columns(build, columns)
    for axis in rows_axes:
        for multiple in (16, 8):
            size = constant_size(range_by_axis(build.sink)[axis])
            if size is not None and size >= multiple and size % multiple and -size % multiple * 8 <= size:
                build.attempt(Opt(OptOps.PADTO, axis, multiple))
    padded_sink, padded_opts = build.sink, list(build.opts)
    # the biggest tile first, over every rows candidate
    tiles = [tile for tile in MATMUL_TILES if tile[0] * tile[1] <= build.renderer.register_tile_lanes]
    columns_size = constant_size(range_by_axis(padded_sink)[columns.arg.axis])
    for row_amount, column_amount in tiles:
        if column_amount == columns_size and row_amount > 8:
            # the columns upcast whole (then swapped inside, below): 16 x 16 measured 1.5x the time of 8 x 16 on
            # (1024, 1024) @ (1024, 16)
            continue
        for axis in rows_axes:
            build.sink, build.opts = padded_sink, list(padded_opts)
            if not build.attempt(Opt(OptOps.UPCAST, axis, row_amount)):
                continue
            if not build.attempt(Opt(OptOps.UPCAST, columns.arg.axis, column_amount)):
                continue
            # lanes are ordered by axis number: the columns must be the inner lanes (one contiguous vector per row)
            upcast = axes_of(build.sink, AxisKind.UPCAST)
            tiled = product_loads(build.sink)
            assert tiled is not None, "upcasts keep the product of two loads"
            column_lanes = [r for r in upcast if stride_near_origin(tiled[contiguous].src[1], r) == 1]
            if len(column_lanes) == 1 and column_lanes[0].arg.axis == columns.arg.axis:
                # the columns axis was upcast whole, so it kept its (lower) number and its lanes are the outer ones:
                # swap it with the innermost upcast axis (a 16-wide right operand, (1024, 1024) @ (1024, 16))
                innermost = max(r.arg.axis for r in upcast)
                if innermost != columns.arg.axis and build.attempt(Opt(OptOps.SWAP, columns.arg.axis, innermost)):
                    upcast = axes_of(build.sink, AxisKind.UPCAST)
                    tiled = product_loads(build.sink)
                    assert tiled is not None, "a swap keeps the product of two loads"
                    column_lanes = [r for r in upcast if stride_near_origin(tiled[contiguous].src[1], r) == 1]
            if column_lanes and all(column_lanes[0].arg.axis >= r.arg.axis for r in upcast):
                if not _reduce_panels(build, tiled[contiguous], tiled[1 - contiguous]):
                    _stream_order(build, axis, columns, (row_amount, column_amount), tiled[contiguous])
                return True
    build.sink, build.opts = start_sink, start_opts
    return False


VECTOR_MATRIX_LANES = (64, 32, 16, 8)
"""Column tiles of a vector-matrix product (no rows axis), widest first: 64 lanes are four AVX-512 accumulators,
four independent chains of fused multiply-adds per reduce step."""


def _columns_only_tile(build: TileBuilder, columns: UOp) -> bool:
    """The register tile of a vector times a matrix (x @ W with x one row, W contiguous along the output): no output
    axis walks only the broadcast operand, so the tile is one row of columns lanes; each reduce step broadcasts one
    element of x and loads whole vectors of W's row. Without it the product fell to step 3v, which unrolled the
    reduce along x and read W a column at a time ((1, 1024) @ (1024, 2048): 3.5 ms of kernel time against numpy's
    0.11 ms for the whole call)."""
    start_sink, start_opts = build.sink, list(build.opts)
    _pad_columns(build, columns)
    size = constant_size(range_by_axis(build.sink)[columns.arg.axis]) or 0
    lanes = [amount for amount in VECTOR_MATRIX_LANES if amount <= build.renderer.register_tile_lanes]
    amount = largest_dividing(size, tuple(lanes), size)
    if amount is not None and build.attempt(Opt(OptOps.UPCAST, columns.arg.axis, amount)):
        return True
    build.sink, build.opts = start_sink, start_opts
    return False


def _reduce_panels(build: TileBuilder, contiguous: UOp, broadcast: UOp) -> bool:
    """BLOCK the reduce of a register tile whose broadcast operand is a whole cache line further at each reduce step
    (a transposed left operand: A.T @ B reads A[k, i]; step 2v) and bigger than L2 (STREAM_SWAP_BYTES): K panels of
    the largest of REDUCE_PANEL_SIZES that keeps a panel of the contiguous operand within REDUCE_PANEL_BYTES, rows loop
    outside the columns loop (no SWAP).
    A row tile's K panel of the broadcast operand (one line per reduce step) is then reused from L2 by every column
    tile, where the whole K column of lines 4 KiB apart (a power-of-two stride: they share a few cache sets, and no
    prefetcher follows it) came from memory again for each. Returns whether the BLOCK was applied."""
    reduce_axes = axes_of(build.sink, AxisKind.REDUCE)
    pointers = [operand.src[0].dtype for operand in (contiguous, broadcast)]
    if len(reduce_axes) != 1 or not all(isinstance(p, PtrDType) and p.size > 0 for p in pointers):
        return False
    if buffer_bytes(broadcast.src[0]) < STREAM_SWAP_BYTES:
        return False  # it stays in L2 anyway (a linear layer's weight gradient over a small batch): no extra stores
    reduce_axis = reduce_axes[0]
    size = constant_size(reduce_axis)
    stride = stride_of(broadcast.src[1], reduce_axis)
    line_elements = CACHE_LINE_BYTES // broadcast.src[0].dtype.scalar().itemsize
    if size is None or stride is None or abs(stride) < line_elements:
        return False
    step_bytes = buffer_bytes(contiguous.src[0]) // size  # bytes of the contiguous operand per reduce step
    fitting = [p for p in REDUCE_PANEL_SIZES if p < size and size % p == 0 and p * step_bytes <= REDUCE_PANEL_BYTES]
    return bool(fitting) and build.attempt(Opt(OptOps.BLOCK, reduce_axis.arg.axis, fitting[0]))


def _stream_order(build: TileBuilder, rows: int, columns: UOp, tile: tuple[int, int], contiguous: UOp) -> None:
    """SWAP the rows and columns loops of a register tile when the columns should be the outer loop (step 2v).

    With the rows loop outside, every row tile streams the whole contiguous operand (K x N) through the cache: the
    bytes read are M / rows_tile * K * N; with the columns loop outside, each K-deep panel of it stays in L2 and the
    broadcast operand streams instead: N / columns_tile * M * K. When the contiguous operand is too big for the
    cache (STREAM_SWAP_BYTES) and the columns tile is the wider one, the columns go outside."""
    ranges = range_by_axis(build.sink)
    outer = ranges.get(rows)
    if outer is None or outer.arg.kind is not AxisKind.LOOP or columns.arg.axis not in ranges:
        return
    inner = ranges[columns.arg.axis]
    if inner.arg.kind is not AxisKind.LOOP or rows > columns.arg.axis or tile[1] <= tile[0]:
        return
    itemsize = contiguous.src[0].dtype.scalar().itemsize
    if itemsize < 4:
        # 16-bit operands are widened lane by lane after the load, which costs more than the L3 traffic the swap
        # saves: float16 matmul 1024 / 2048 measured ~80 / 93 GFLOP/s swapped against ~103 / 112 not swapped
        # (bfloat16 about even, float32 2048 ~8% faster swapped; tensor_bench's quiet runs)
        return
    streamed = (constant_size(columns) or 0) * product_of_sizes(axes_of(build.sink, AxisKind.REDUCE))
    if streamed * itemsize >= STREAM_SWAP_BYTES:
        build.attempt(Opt(OptOps.SWAP, rows, columns.arg.axis))


def vector_product_unroll(build: TileBuilder, operands: tuple[UOp, UOp]) -> bool:
    """UNROLL the innermost reduce axis of a product of two loads that has no register tile (step 2r of the module
    docstring): the weight gradient of a convolution, a matrix-vector product. Padded up to the vector width first
    when that at most doubles it (an 11- or 26-wide image row)."""
    reduce_axes = axes_of(build.sink, AxisKind.REDUCE)
    width = max(build.renderer.vector_widths, default=1)
    if not reduce_axes or width < 2:
        return False
    last = reduce_axes[-1]
    size = constant_size(last)
    strides = [_element_stride(build.sink, index, last) for index in operands]
    packed = strides != [stride_near_origin(index.src[1], last) for index in operands]
    if packed and len(_walked_axes(build, operands, lambda size: size > 1)) < 2 and not _symbolic_rows(operands):
        return False  # one decoded row (a matrix-vector product) stays with step 3v's long unroll
    if size is None or size < width // 2 or 1 not in strides or not all(s in (0, 1) for s in strides):
        return False
    if divides_axis(list(operands), last, width):
        return False
    start_sink, start_opts = build.sink, list(build.opts)
    _product_rows(build, operands)
    if size % width and not build.attempt(Opt(OptOps.PADTO, last.arg.axis, width)):
        build.sink, build.opts = start_sink, start_opts
        return False
    if unroll_inner_lanes(build, last.arg.axis, width):
        return True
    build.sink, build.opts = start_sink, start_opts
    return False


def _element_stride(sink: UOp, index: UOp, rng: UOp) -> int | None:
    """`stride_near_origin` of `index` along `rng`, counted in decoded elements: an operand decoded from bytes (an
    F16 GGUF matrix: the bytes at 2i and 2i + 1 make element i) loads s bytes per element, at the main index plus 0 ..
    s - 1, so a stride of s bytes is a stride of one element."""
    stride = stride_near_origin(index.src[1], rng)
    if stride is None or stride < 2:
        return stride
    offsets: set[int] = set()
    for node in sink.toposort():
        if node.op is Ops.INDEX and len(node.src) > 1 and node.src[0] is index.src[0]:
            difference = (node.src[1] - index.src[1]).simplify()
            if difference.op is Ops.CONST:
                offsets.add(int(difference.arg))
    return 1 if offsets >= set(range(stride)) else stride


def _walked_axes(build: TileBuilder, operands: tuple[UOp, UOp], fits: Callable[[int], bool]) -> dict[int, UOp]:
    """The outermost output axis of a size that `fits` that only operand 0 walks, and that only operand 1 walks."""
    walked: dict[int, UOp] = {}
    for rng in output_axes(build.sink):
        strides = [stride_near_origin(index.src[1], rng) for index in operands]
        if None not in strides and strides.count(0) == 1 and fits(constant_size(rng) or 0):
            walked.setdefault(0 if strides[0] else 1, rng)
    return walked


def _symbolic_rows(operands: tuple[UOp, UOp]) -> bool:
    """Whether the operands' indices hold a symbolic size (a prompt chunk's rows, x @ W.T with x's row count a bound
    Variable): such a product has many rows, whatever the output axis sizes `_walked_axes` sees."""
    return any(node.op is Ops.DEFINE_VAR for index in operands for node in index.src[1].toposort())


def _few_rows_axis(build: TileBuilder, operands: tuple[UOp, UOp]) -> UOp | None:
    """The rows axis of a product with few rows (2 .. FEW_ROWS) against an output axis of the other operand at least
    FEW_ROWS_RATIO times as long (see FEW_ROWS), else None."""
    walked = list(_walked_axes(build, operands, lambda size: size > 1).values())
    if len(walked) != 2:
        return None
    short, long = sorted(walked, key=lambda rng: constant_size(rng) or 0)
    short_size, long_size = constant_size(short) or 0, constant_size(long) or 0
    return short if short_size <= FEW_ROWS and long_size >= FEW_ROWS_RATIO * short_size else None


FEW_ROWS_RATIO = 64
"""How many times longer than the rows the other operand's output axis must be for a few-rows product (step 2r)."""
FEW_ROWS = 16
"""Most rows of a product with few rows (an LLM decode step of that many sequences: (R, K) @ (K, N) with N much
larger) that step 2r upcasts whole: the matrix is then read once, each loaded vector of it used by every row."""


def _product_rows(build: TileBuilder, operands: tuple[UOp, UOp]) -> None:
    """Output lanes for a product that step 2r unrolls along its reduce (see the module docstring): UPCAST by 4 the
    outermost output axis that only the first operand walks and the outermost that only the second walks (a 4 x 4
    tile: every loaded vector serves 4 outputs), or by 8 the one such axis there is (a matrix-vector product's
    rows). Applied before the unroll, so each output's unrolled lanes are one contiguous load; the accumulators are
    independent chains of fused multiply-adds where one output alone would wait on each add's latency."""
    few = _few_rows_axis(build, operands)
    if few is not None:
        # few rows against a long matrix: all the rows in registers, the matrix read once
        build.attempt(Opt(OptOps.UPCAST, few.arg.axis, constant_size(few) or 0))
        return
    walked = _walked_axes(build, operands, lambda size: size % 4 == 0)
    if len(walked) == 2:
        for rng in sorted(walked.values(), key=lambda r: r.arg.axis, reverse=True):
            build.attempt(Opt(OptOps.UPCAST, rng.arg.axis, 4))
        _dot_stream_order(build, operands, walked)
    elif walked:
        (rng,) = walked.values()
        build.attempt(Opt(OptOps.UPCAST, rng.arg.axis, 8 if (constant_size(rng) or 0) % 8 == 0 else 4))


def _dot_stream_order(build: TileBuilder, operands: tuple[UOp, UOp], walked: dict[int, UOp]) -> None:
    """SWAP the two output loops of a 4 x 4 dot-product tile (step 2r) so that the loop over the bigger operand's rows
    is the outer one, when that operand is bigger than STREAM_SWAP_BYTES: it is then read once, each group of its
    rows reused from L1 by every row tile of the smaller operand, which stays in L2 (x @ W.T for a prompt of 64 rows
    against a (32000, 768) weight; rows outside read W from memory once per row tile). Only for one reduce axis (a
    matrix product): a convolution's weight gradient, which reduces over images and pixels, keeps its order."""
    if len(axes_of(build.sink, AxisKind.REDUCE)) != 1:
        return
    sizes = [buffer_bytes(index.src[0]) for index in operands]
    big = 0 if sizes[0] > sizes[1] else 1
    if sizes[big] <= STREAM_SWAP_BYTES or sizes[1 - big] * 2 > STREAM_SWAP_BYTES:
        return
    ranges = range_by_axis(build.sink)
    outer, inner = ranges.get(walked[big].arg.axis), ranges.get(walked[1 - big].arg.axis)
    if outer is None or inner is None or AxisKind.LOOP is not outer.arg.kind or AxisKind.LOOP is not inner.arg.kind:
        return
    if outer.arg.axis > inner.arg.axis:
        build.attempt(Opt(OptOps.SWAP, inner.arg.axis, outer.arg.axis))
