"""`hand_coded_optimizations`: a fixed recipe of opts that is good without search, on CPUs and GPUs.

The recipe, in order (each step is skipped when its opt is illegal):
0. A matmul-shaped kernel on a renderer with tensor cores (knob TENSOR_CORES, on by default): TC on its last reduce
   axis with the first unit its dtypes fit (`Opt(TC, axis, -1)`: float16 / bfloat16 inputs); nothing else is
   applied. float32 products, and shapes no unit divides, go on to step 1.
1. Small output, long reduce, renderer with shared memory: GROUPTOP the last reduce axis by the largest of
   256/128/64/32/16 that divides it; the threads of a block share the reduce. Nothing else is applied.
2. Matmul-shaped kernels (one REDUCE of a product of two loads): register blocking. Each output axis that one
   operand does not depend on (stride 0) is upcast by 4, at most two such axes, innermost first; then the reduce
   axis is unrolled by 4. Each loaded value is then reused 4 times from registers. On CPU renderers (CPU threads)
   each axis is upcast by 8 where 8 divides it (else 4) and the reduce is not unrolled (steps 2 and 4): an 8x8 block
   of accumulators is what the registers hold, and it measured 2.5x the GFLOP/s of 4x4 with the reduce unrolled
   (matmul 1024 in benchmarks/tensor_bench.py, LLVM renderer).
3. Otherwise: the innermost output axis whose store is contiguous is upcast by the widest vector width of the
   renderer that divides it (wide loads and stores). Skipped for kernels without a reduce on CPU renderers (CPU
   threads) that split vector ALU ops into scalars: their compiler's loop vectorizer turns the plain scalar loop
   into full-width vector code, while the scalarized lanes of an upcast are only partly re-vectorized (measured
   with benchmarks/tensor_bench.py: the fused exp2 chain ran 1.5x faster on LLVM, 1.2x on C). Nor, on vector-ALU
   renderers, by 2 lanes in a padded copy (every store writes WHERE(valid, LOAD, 0): a convolution's padded input):
   its 2-lane gated stores compile to branches and mask shuffles, where LLVM vectorizes the rolled loop with masked
   loads (32 -> 34 columns: 0.34 -> 0.12 ms of CPU time per (32,16,32,32) pad, 224 -> 226: ~20% less); computed
   values keep their 2 lanes (a 6-wide exp measured 1.5x slower without). A kernel of one load and one store whose
   innermost loop steps the load by a cache line or more (a transpose) swaps that loop with the one the load is
   contiguous along (`_transposed_copy_order`: 1024 x 1024 float32 ~4x less CPU time).
   Vector-ALU CPU renderers (LLVM IR) take their own steps 2 and 3 instead:
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
       vector width (padded up to it when that at most doubles it); the lowering keeps the lanes as separate
       accumulators and folds them after the loop (measured 2-2.5x faster than the scalar unroll by 4). Output
       lanes come first: the outermost output axis only the first operand walks and the outermost only the second
       walks are upcast by 4 (a 4 x 4 tile: 16 independent chains of fused multiply-adds, each loaded vector used 4
       times), or the one such axis by 8 (a matrix-vector product's rows). One output alone waits on each add's
       latency: the conv2d (32,16,32,32) weight gradient measured 2.5x less CPU time with the 4 x 4 tile, a
       4096 x 4096 matrix-vector product ~15% less with 8 rows (A/B, process CPU time, loaded machine).
       A product of few rows (2 .. FEW_ROWS, an LLM decode step of that many sequences) against an output axis of
       the other operand FEW_ROWS_RATIO times longer upcasts all its rows instead, nothing else: the long matrix is
       read once, each loaded vector of it used by every row. An operand decoded from bytes (an F16 GGUF matrix:
       element i from bytes 2i and 2i + 1) counts as contiguous along the reduce (`_element_stride`); for one row
       it stays with step 3v. The 100M llama's output layer, (8, 768) @ (32000, 768).T from F16 bytes, had step
       2s's gathered 8 x 16 tile with the reduce rolled (~1.2 GB/s in the 8-row decode step).
   2s. A product whose output axes no operand reads contiguously and that step 2r does not take (a stride-2
       convolution; the 2 x 2 and 4 x 4 images of a network's last stages) gets a tile of gathered columns
       (`conv_tiles.strided_tile`): the innermost output axis of at least 8 that only one operand walks (the output
       width, else the channels) by 16 or 8, the longest axis only the other walks by 8 or 4, rows first.
       resnet18.onnx at batch 16 (DEBUG=2, medians of 7 runs, loaded 2-core box): the 7x7 stride-2 stem 62 -> 15
       ms, the fused 3x3 convolutions 19-34 -> 0.3-1.5 ms each, the sum of kernel times 394 -> 88 ms.
   3v. Else the innermost reduce axis along which a load is contiguous is unrolled by the widest vector width that
       divides it, or by up to REDUCE_ACCUMULATOR_VECTORS times it when a loop of 4 or more steps is left (16-64
       exps of a softmax at once; a sum or max reads whole vectors into independent accumulator vectors; a short
       reduce unrolled whole into 64 lanes compiled for 158 ms), its lanes accumulating on their
       own until after the loop (the expander's deferred fold; the 16M sum measured 2.2x faster than with 16 rows
       in output lanes); not when an index divides the axis by an amount the lanes would straddle, but a block
       size the width divides is fine (a Q8_0 row: k/32, k%32; its matrix-vector product measured 3-6x faster
       with 16 lanes per block than with 16 output rows of byte gathers); else step 3 as above.
       A row kernel (the scheduler's row fusion: softmax's max loop, sum loop and output loop per row) has one
       reduce axis per REDUCE: each is unrolled so, and the innermost output axis that no REDUCE depends on (the
       output loop over the row) is upcast by the vector width as in step 3. `lane_count` counts each REDUCE's own
       lanes (the 16 x 16 x 16 lanes of the three loops are 16 per value, not 4096).
4. A reduce axis not unrolled yet is unrolled fully when its size is at most 8, else by 4 when that divides it
   (on vector-ALU CPU renderers with output lanes, only the full unroll: the 4-long reduce of a convolution's
   input gradient (col2im) measured 4x faster without its loop).
5. Renderers with local threads (`prepare_axes` made their loops GLOBAL axes, all but a row kernel's output
   loop: as threads, each would compute the row's reduces again): LOCAL on the output axes, innermost first, by
   the largest of 32/16/8/4/2 that divides the axis while the block stays within 128 threads (and the renderer's
   limit); at most two axes.
6. Renderers with CPU threads: THREAD on the outermost loop axis by the largest divisor of its size that is at
   most `thread_max`, when the kernel does at least 2**14 iterations of work in total (`loop_work`: the loops of
   a row kernel add up, they are not nested in each other).
7. Vector-ALU CPU renderers: reduce blocking (BLOCK) of the outermost reduce axis when the output is small
   (BLOCK_OUTPUT_BYTES: every block loads and stores it once more) and the operands that some output loop re-reads
   exceed BLOCK_REUSED_BYTES, in the largest blocks that read at most BLOCK_PANEL_BYTES of operands: each block's
   panel is then re-read from L2 instead of L3. The conv2d (32,16,32,32) weight gradient gets blocks of 8 of its 32
   images: 3.27 -> 2.98 and 3.51 -> 3.17 ms of CPU time per kernel (A/B in one process, medians of 15 rounds, loaded
   2-core box). Not for matmul 2048 (a 16 MiB output): blocks of 64 / 256 / 512 / 1024 of K measured 1.9x / 1.18x
   / 1.05x / 1.0x its CPU time; its columns-outside order (SWAP, step 2v) already keeps the B panel in L2.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.codegen.kernel_info import KernelOptError, Opt, OptOps
from kiln.codegen.loop_structure import range_by_axis
from kiln.codegen.opt.apply import apply_opt, prepare_axes
from kiln.codegen.opt.conv_tiles import operand_index, strided_tile
from kiln.codegen.opt.kernel_axes import (
    axes_of,
    constant_size,
    loop_work,
    product_of_sizes,
    reduces_of,
    stride_of,
)
from kiln.codegen.opt.tensor_core_opt import ANY_TENSOR_CORE
from kiln.codegen.renderer import Renderer
from kiln.uops import AxisKind, Ops, PtrDType, UOp, knobs

MATMUL_TILES = ((8, 32), (4, 32), (16, 16), (8, 16), (4, 16), (8, 8), (2, 16), (4, 8), (2, 8))
"""(rows, columns) register tiles of matmul-shaped kernels on vector-ALU CPU renderers, best first; those larger
than the renderer's `register_tile_lanes` are skipped (AVX2 keeps 64 lanes: 4 x 16 measured 5x the GFLOP/s of 8 x 32
on matmul 1024, whose 32 accumulator registers do not fit in 16)."""
GROUP_OUTPUT_LIMIT = 256
GROUP_REDUCE_MINIMUM = 1024
THREAD_WORK_MINIMUM = 2**14
STREAM_SWAP_BYTES = 1 << 21
"""Bytes of a matmul's contiguous operand (K x N) from which its columns loop goes outside the rows loop: more than
a core's L2 holds (1-2 MiB), so streaming it once per row tile would run from L3 or memory."""
CACHE_LINE_BYTES = 64
REDUCE_PANEL_SIZES = (256, 128, 64, 32)
"""K panel sizes of `_reduce_panels`, largest first."""
REDUCE_PANEL_BYTES = 1 << 19
"""Most bytes of the contiguous operand one K panel of `_reduce_panels` spans (a quarter of a core's L2): A.T @ B
measured fastest with panels of 128 at 1024 (512 KiB of B) and of 64 at 2048 (512 KiB; 128: ~10% slower, 256: ~20%)."""
LOCAL_THREAD_TARGET = 128
BLOCK_OUTPUT_BYTES = 1 << 18
"""Largest output (bytes) step 7 blocks: every block loads and stores it once more."""
BLOCK_REUSED_BYTES = 1 << 22
"""Bytes of re-read operands (loads some output loop does not move) from which step 7 blocks the reduce (the small
CNN's first weight gradient in benchmarks/train_bench.py, 2.8 MiB re-read by 9 taps, measured no gain at any block
size)."""
BLOCK_PANEL_BYTES = 1 << 21
"""Most operand bytes one block of step 7 reads (the conv2d weight gradient: blocks of 8 of its 32 images, 1.6 MiB,
measured as fast as 4 and 16; 2 lost the gain to the per-block loads and stores of the output)."""


class _Builder:
    """The sink being optimized and the opts applied so far."""

    def __init__(self, sink: UOp, renderer: Renderer) -> None:
        self.sink = sink
        self.renderer = renderer
        self.opts: list[Opt] = []

    def attempt(self, opt: Opt) -> bool:
        try:
            self.sink = apply_opt(self.sink, opt, self.renderer)
        except KernelOptError:
            return False
        self.opts.append(opt)
        return True


def _strip_casts(node: UOp) -> UOp:
    while node.op is Ops.CAST:
        node = node.src[0]
    return node


def _matmul_operands(sink: UOp, strip: Callable[[UOp], UOp] = _strip_casts) -> tuple[UOp, UOp] | None:
    """The two INDEX uops a matmul-shaped kernel loads from (its only REDUCE sums a product of two loads, each seen
    through `strip`: casts, or also padding guards for `_product_loads`)."""
    reduces = reduces_of(sink)
    if len(reduces) != 1 or reduces[0].arg is not Ops.ADD:
        return None
    product = _strip_casts(reduces[0].src[0])
    if product.op is not Ops.MUL:
        return None
    left, right = (strip(s) for s in product.src)
    if left.op is not Ops.LOAD or right.op is not Ops.LOAD:
        return None
    return left.src[0], right.src[0]


def _strip_padding(node: UOp) -> UOp:
    # WHERE(valid, x, 0): a padded read (conv2d), the load it guards is the operand
    node = _strip_casts(node)
    if node.op is Ops.WHERE and node.src[2].op is Ops.CONST and node.src[2].arg == 0:
        return _strip_casts(node.src[1])
    return node


def _is_padded_copy(sink: UOp) -> bool:
    """Whether every store of `sink` writes a padded read (WHERE(valid, LOAD, 0)) and nothing else computed."""
    stores = [node for node in sink.toposort() if node.op is Ops.STORE]
    return bool(stores) and all(
        _strip_casts(store.src[1]).op is Ops.WHERE and _strip_padding(store.src[1]).op is Ops.LOAD for store in stores
    )


def _product_loads(sink: UOp) -> tuple[UOp, UOp] | None:
    """`_matmul_operands`, also through padding guards and fused elementwise inputs (`conv_tiles.operand_index`: a
    bias add and ReLU of the previous layer): a matmul or a convolution (vector-ALU CPU renderers)."""
    # several reduces, each a sum of such a product (a residual block's 3x3 convolution and its 1x1 downsampling
    # shortcut in one kernel): the one with the longest reduce picks the tile, which both share
    found: list[tuple[int, tuple[UOp, UOp]]] = []
    for reduction in reduces_of(sink):
        product = _strip_casts(reduction.src[0])
        if reduction.arg is not Ops.ADD or product.op is not Ops.MUL:
            return None
        left, right = (operand_index(_strip_padding(s)) for s in product.src)
        if left is None or right is None:
            return None
        found.append((product_of_sizes([r for r in reduction.src[1:] if r.op is Ops.RANGE]), (left, right)))
    return max(found, key=lambda pair: pair[0])[1] if found else None


def _store_indices(sink: UOp) -> list[UOp]:
    """The indices of the kernel's output stores (not of a store kept inside a reduce's loop: `reuse_row_values`)."""
    stores, stack = [], list(sink.src)
    while stack:
        node = stack.pop()
        if node.op in (Ops.END, Ops.GROUP):
            stack.extend(node.src[:1] if node.op is Ops.END else node.src)
        elif node.op is Ops.STORE and node.src[0].src[0].op is Ops.DEFINE_GLOBAL:
            stores.append(node.src[0].src[1])
    return stores


def _output_axes(sink: UOp) -> list[UOp]:
    return axes_of(sink, AxisKind.GLOBAL, AxisKind.LOOP)


def _largest_dividing(size: int | None, choices: tuple[int, ...], limit: int) -> int | None:
    if size is None:
        return None
    return next((c for c in sorted(choices, reverse=True) if c <= limit and size % c == 0), None)


def _stride_near_origin(index_expression: UOp, rng: UOp) -> int | None:
    """`stride_of`, or else the growth from rng = 0 to 1 with every other range at 0 (padded reads are affine inside
    the image only, and the symbolic simplifier cannot prove it for the whole range)."""
    exact = stride_of(index_expression, rng)
    if exact is not None:
        return exact
    others = {r: r.const_like(0) for r in index_expression.toposort() if r.op is Ops.RANGE and r is not rng}
    at = [index_expression.substitute({**others, rng: rng.const_like(value)}).simplify() for value in (0, 1)]
    return int(at[1].arg - at[0].arg) if all(point.op is Ops.CONST for point in at) else None


def _pad_columns(build: _Builder, columns: UOp) -> None:
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


def _vector_matmul_tile(build: _Builder, operands: tuple[UOp, UOp]) -> bool:
    """Register tile of a matmul-shaped kernel for a vector-ALU CPU renderer (see the module docstring, step 2)."""
    # every output axis one operand is contiguous along and the other ignores is a columns candidate, innermost first
    # (the input gradient of a convolution has its 3-wide kernel axis and its output width)
    for columns in reversed(_output_axes(build.sink)):
        strides = [_stride_near_origin(index.src[1], columns) for index in operands]
        contiguous = sorted(strides, key=lambda s: -1 if s is None else s) == [0, 1]
        if contiguous and _tile_with_columns(build, operands, columns, strides.index(1)):
            return True
    return False


def _tile_with_columns(build: _Builder, operands: tuple[UOp, UOp], columns: UOp, contiguous: int) -> bool:
    rows_axes: list[int] = []
    for rng in reversed(_output_axes(build.sink)):
        strides = [_stride_near_origin(index.src[1], rng) for index in operands]
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
            tiled = _product_loads(build.sink)
            assert tiled is not None, "upcasts keep the product of two loads"
            column_lanes = [r for r in upcast if _stride_near_origin(tiled[contiguous].src[1], r) == 1]
            if len(column_lanes) == 1 and column_lanes[0].arg.axis == columns.arg.axis:
                # the columns axis was upcast whole, so it kept its (lower) number and its lanes are the outer ones:
                # swap it with the innermost upcast axis (a 16-wide right operand, (1024, 1024) @ (1024, 16))
                innermost = max(r.arg.axis for r in upcast)
                if innermost != columns.arg.axis and build.attempt(Opt(OptOps.SWAP, columns.arg.axis, innermost)):
                    upcast = axes_of(build.sink, AxisKind.UPCAST)
                    tiled = _product_loads(build.sink)
                    assert tiled is not None, "a swap keeps the product of two loads"
                    column_lanes = [r for r in upcast if _stride_near_origin(tiled[contiguous].src[1], r) == 1]
            if column_lanes and all(column_lanes[0].arg.axis >= r.arg.axis for r in upcast):
                if not _reduce_panels(build, tiled[contiguous], tiled[1 - contiguous]):
                    _stream_order(build, axis, columns, (row_amount, column_amount), tiled[contiguous])
                return True
    build.sink, build.opts = start_sink, start_opts
    return False


VECTOR_MATRIX_LANES = (64, 32, 16, 8)
"""Column tiles of a vector-matrix product (no rows axis), widest first: 64 lanes are four AVX-512 accumulators,
four independent chains of fused multiply-adds per reduce step."""


def _columns_only_tile(build: _Builder, columns: UOp) -> bool:
    """The register tile of a vector times a matrix (x @ W with x one row, W contiguous along the output): no output
    axis walks only the broadcast operand, so the tile is one row of columns lanes; each reduce step broadcasts one
    element of x and loads whole vectors of W's row. Without it the product fell to step 3v, which unrolled the
    reduce along x and read W a column at a time ((1, 1024) @ (1024, 2048): 3.5 ms of kernel time against numpy's
    0.11 ms for the whole call)."""
    start_sink, start_opts = build.sink, list(build.opts)
    _pad_columns(build, columns)
    size = constant_size(range_by_axis(build.sink)[columns.arg.axis]) or 0
    lanes = [amount for amount in VECTOR_MATRIX_LANES if amount <= build.renderer.register_tile_lanes]
    amount = _largest_dividing(size, tuple(lanes), size)
    if amount is not None and build.attempt(Opt(OptOps.UPCAST, columns.arg.axis, amount)):
        return True
    build.sink, build.opts = start_sink, start_opts
    return False


def _reduce_panels(build: _Builder, contiguous: UOp, broadcast: UOp) -> bool:
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
    if _buffer_bytes(broadcast.src[0]) < STREAM_SWAP_BYTES:
        return False  # it stays in L2 anyway (a linear layer's weight gradient over a small batch): no extra stores
    reduce_axis = reduce_axes[0]
    size = constant_size(reduce_axis)
    stride = stride_of(broadcast.src[1], reduce_axis)
    line_elements = CACHE_LINE_BYTES // broadcast.src[0].dtype.scalar().itemsize
    if size is None or stride is None or abs(stride) < line_elements:
        return False
    step_bytes = _buffer_bytes(contiguous.src[0]) // size  # bytes of the contiguous operand per reduce step
    fitting = [p for p in REDUCE_PANEL_SIZES if p < size and size % p == 0 and p * step_bytes <= REDUCE_PANEL_BYTES]
    return bool(fitting) and build.attempt(Opt(OptOps.BLOCK, reduce_axis.arg.axis, fitting[0]))


def _stream_order(build: _Builder, rows: int, columns: UOp, tile: tuple[int, int], contiguous: UOp) -> None:
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


def _vector_product_unroll(build: _Builder, operands: tuple[UOp, UOp]) -> bool:
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
    packed = strides != [_stride_near_origin(index.src[1], last) for index in operands]
    if packed and _few_rows_axis(build, operands) is None:
        return False  # one decoded row (a matrix-vector product) stays with step 3v's long unroll
    if size is None or size < width // 2 or 1 not in strides or not all(s in (0, 1) for s in strides):
        return False
    if _divides_axis(list(operands), last):
        return False
    start_sink, start_opts = build.sink, list(build.opts)
    _product_rows(build, operands)
    if size % width and not build.attempt(Opt(OptOps.PADTO, last.arg.axis, width)):
        build.sink, build.opts = start_sink, start_opts
        return False
    if build.attempt(Opt(OptOps.UNROLL, last.arg.axis, width)):
        return True
    build.sink, build.opts = start_sink, start_opts
    return False


def _element_stride(sink: UOp, index: UOp, rng: UOp) -> int | None:
    """`_stride_near_origin` of `index` along `rng`, counted in decoded elements: an operand decoded from bytes (an
    F16 GGUF matrix: the bytes at 2i and 2i + 1 make element i) loads s bytes per element, at the main index plus 0 ..
    s - 1, so a stride of s bytes is a stride of one element."""
    stride = _stride_near_origin(index.src[1], rng)
    if stride is None or stride < 2:
        return stride
    offsets: set[int] = set()
    for node in sink.toposort():
        if node.op is Ops.INDEX and len(node.src) > 1 and node.src[0] is index.src[0]:
            difference = (node.src[1] - index.src[1]).simplify()
            if difference.op is Ops.CONST:
                offsets.add(int(difference.arg))
    return 1 if offsets >= set(range(stride)) else stride


def _walked_axes(build: _Builder, operands: tuple[UOp, UOp], fits: Callable[[int], bool]) -> dict[int, UOp]:
    """The outermost output axis of a size that `fits` that only operand 0 walks, and that only operand 1 walks."""
    walked: dict[int, UOp] = {}
    for rng in _output_axes(build.sink):
        strides = [_stride_near_origin(index.src[1], rng) for index in operands]
        if None not in strides and strides.count(0) == 1 and fits(constant_size(rng) or 0):
            walked.setdefault(0 if strides[0] else 1, rng)
    return walked


def _few_rows_axis(build: _Builder, operands: tuple[UOp, UOp]) -> UOp | None:
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


def _product_rows(build: _Builder, operands: tuple[UOp, UOp]) -> None:
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
    elif walked:
        (rng,) = walked.values()
        build.attempt(Opt(OptOps.UPCAST, rng.arg.axis, 8 if (constant_size(rng) or 0) % 8 == 0 else 4))


REDUCE_ACCUMULATOR_VECTORS = 4
"""Most vector registers a row reduce's unrolled accumulator spans (step 3v): a row max over (4096, 1024) float32
took 0.76 ms of CPU time with four 16-lane accumulators against 1.03 ms with one (llvm-mca, znver4: 32 against 41
cycles per 128 elements), and exp-sum loops, throughput-bound, kept their speed."""


def _vector_reduce_unroll(build: _Builder) -> bool:
    """UNROLL, for each REDUCE, its innermost reduce axis along which a load is contiguous by a vector width (step 3v
    of the module docstring, vector-ALU CPU renderers): whole-vector loads, elementwise work (exp of a softmax) in
    vector lanes. A row kernel (softmax: max, sum, output) has one loop per reduce: each is unrolled."""
    chosen: list[int] = []
    for reduction in reduces_of(build.sink):
        own = sorted((r for r in reduction.src[1:] if r.op is Ops.RANGE and r.arg.kind is AxisKind.REDUCE), key=_axis)
        if own and own[-1].arg.axis not in chosen:
            chosen.append(own[-1].arg.axis)
    unrolled = False
    for axis in chosen:
        last = range_by_axis(build.sink)[axis]
        loads = [n.src[0] for n in build.sink.toposort() if n.op is Ops.LOAD and n.src[0].op is Ops.INDEX]
        if not any(stride_of(index.src[1], last) == 1 for index in loads):
            continue
        # at least 8 lanes: a 2-lane unroll of a 26-long reduce (a bias gradient) measured 3x slower than output lanes;
        # up to REDUCE_ACCUMULATOR_VECTORS full vectors: each is an independent accumulator chain (a float MAX update
        # is a compare-select chain of ~6 dependent instructions, so one vector leaves the loop latency-bound)
        widths = tuple(w for w in build.renderer.vector_widths if w >= 8)
        widest, size = max(widths, default=0), constant_size(last) or 0
        # more accumulator vectors only for a reduce that keeps a loop of at least 4 steps: a short one unrolled
        # whole into 64 lanes was a 158 ms LLVM compile of lane shuffles (a (400, 64) @ (64, 2) product)
        widths += tuple(widest * k for k in range(2, REDUCE_ACCUMULATOR_VECTORS + 1) if size >= 4 * widest * k)
        width = _largest_dividing(constant_size(last), widths, size)
        if width is not None and not _divides_axis(loads, last, width):
            unrolled = build.attempt(Opt(OptOps.UNROLL, axis, width)) or unrolled
    return unrolled


def _axis(rng: UOp) -> int:
    return int(rng.arg.axis)


def _row_output_upcast(build: _Builder) -> None:
    """UPCAST the innermost output axis of a row kernel by the vector width (step 3v): an axis with contiguous stores
    that no REDUCE depends on runs over the row the reduces were computed from (softmax's output loop)."""
    reductions = reduces_of(build.sink)
    if not reductions:
        return
    used = set().union(*(r.src[0].toposort() for r in reductions))
    store_indices = _store_indices(build.sink)
    widths = tuple(w for w in build.renderer.vector_widths if w > 1)
    for rng in reversed(_output_axes(build.sink)):
        if rng in used or not store_indices or not all(stride_of(index, rng) == 1 for index in store_indices):
            continue
        width = _largest_dividing(constant_size(rng), widths, constant_size(rng) or 0)
        if width is not None:
            build.attempt(Opt(OptOps.UPCAST, rng.arg.axis, width))
        return


def _divides_axis(indices: list[UOp], rng: UOp, width: int = 0) -> bool:
    """Whether an index divides `rng` by an amount that unrolled lanes would straddle (a flattened (16, 5, 5) view:
    k/25, k/5%5): after an unroll the simplifier leaves it as lane-by-lane division (measured 2x slower than output
    lanes on the small CNN's linear layer). A divisor that is a multiple of `width` keeps each unrolled vector
    inside one block (k/32 and k%32 of a quantized row's 32-value blocks under a 16-lane unroll are a block number
    and a contiguous lane), so it does not count."""
    for index in indices:
        for node in index.src[1].toposort():
            if node.op not in (Ops.IDIV, Ops.MOD) or rng not in node.toposort():
                continue
            divisor = node.src[1]
            if node.op is Ops.MOD and not (divisor.op is Ops.CONST and width and divisor.arg % width == 0):
                continue  # a plain modulo of the axis was never the problem; only through a division below
            if not (width and divisor.op is Ops.CONST and divisor.arg % width == 0):
                return True
    return False


def _transposed_copy_order(build: _Builder) -> None:
    """SWAP the innermost loop of a kernel with one load and one store (a transpose: `x.T.contiguous()`, maybe scaled)
    with the outer loop its load is contiguous along, when the innermost one steps the load a cache line or more
    (step 3). Each vector store then gathers its lanes from rows that the next iteration reads one element further,
    a stream per lane, where the unswapped order came back to a row's line after touching a line of every other row
    (1024 x 1024 float32, process CPU time of the whole call on the loaded 2-core box: 8.5 -> 1.2-2.4 ms)."""
    loads = [node for node in build.sink.toposort() if node.op is Ops.LOAD]
    stores = [node for node in build.sink.toposort() if node.op is Ops.STORE]
    loops = axes_of(build.sink, AxisKind.LOOP)
    if reduces_of(build.sink) or len(loads) != 1 or len(stores) != 1 or len(loops) < 2:
        return
    index = loads[0].src[0]
    if index.op is not Ops.INDEX or index.src[0].op is not Ops.DEFINE_GLOBAL:
        return
    inner = loops[-1]
    inner_stride = stride_of(index.src[1], inner)
    if inner_stride is None or abs(inner_stride) * index.src[0].dtype.scalar().itemsize < CACHE_LINE_BYTES:
        return
    for outer in reversed(loops[:-1]):
        if stride_of(index.src[1], outer) == 1:
            build.attempt(Opt(OptOps.SWAP, outer.arg.axis, inner.arg.axis))
            return


def _buffer_bytes(pointer: UOp) -> int:
    dtype = pointer.dtype
    assert isinstance(dtype, PtrDType)
    return max(dtype.size, 0) * dtype.base.scalar().itemsize


def _reduce_block(build: _Builder) -> None:
    """BLOCK the outermost reduce axis (step 7) when the output is small (BLOCK_OUTPUT_BYTES: it is loaded and stored
    once per block) and the operands some output loop re-reads exceed BLOCK_REUSED_BYTES; blocks as large as
    BLOCK_PANEL_BYTES of operands allow."""
    reductions = reduces_of(build.sink)
    stores = [n for n in build.sink.toposort() if n.op is Ops.STORE]
    reduce_axes = axes_of(build.sink, AxisKind.REDUCE)
    if len(reductions) != 1 or len(stores) != 1 or not reduce_axes:
        return
    if _buffer_bytes(stores[0].src[0].src[0]) > BLOCK_OUTPUT_BYTES:
        return
    loads = [n.src[0] for n in reductions[0].src[0].toposort() if n.op is Ops.LOAD]
    operands = {index.src[0]: index.src[1] for index in loads if index.src[0].op is Ops.DEFINE_GLOBAL}
    loops = axes_of(build.sink, AxisKind.LOOP)
    reused = [b for b, index in operands.items() if any(stride_of(index, rng) == 0 for rng in loops)]
    if sum(_buffer_bytes(b) for b in reused) < BLOCK_REUSED_BYTES:
        return
    size = constant_size(reduce_axes[0]) or 0
    total = sum(_buffer_bytes(b) for b in operands)
    fitting = [d for d in range(2, size) if size % d == 0 and total * d // size <= BLOCK_PANEL_BYTES]
    if fitting:
        build.attempt(Opt(OptOps.BLOCK, reduce_axes[0].arg.axis, max(fitting)))


def hand_coded_optimizations(sink: UOp, renderer: Renderer) -> tuple[Opt, ...]:
    """The opts the recipe of this module picks for `sink` on `renderer` (apply them with `apply_opts`)."""
    build = _Builder(prepare_axes(sink, renderer), renderer)
    reduce_axes = axes_of(build.sink, AxisKind.REDUCE)
    output_size = product_of_sizes(_output_axes(build.sink))

    # 0. tensor cores for a matmul whose dtypes fit a unit
    product = bool(renderer.tensor_cores) and bool(reduce_axes) and _matmul_operands(build.sink) is not None
    if knobs.TENSOR_CORES and product and build.attempt(Opt(OptOps.TC, reduce_axes[-1].arg.axis, ANY_TENSOR_CORE)):
        return tuple(build.opts)

    # 1. group reduce for a small output and a long reduction
    if renderer.has_local and renderer.has_shared and reduce_axes and output_size <= GROUP_OUTPUT_LIMIT:
        last = reduce_axes[-1]
        if (constant_size(last) or 0) >= GROUP_REDUCE_MINIMUM:
            for amount in (256, 128, 64, 32, 16):
                if build.attempt(Opt(OptOps.GROUPTOP, last.arg.axis, amount)):
                    return tuple(build.opts)

    # 2. register blocking of matmul-shaped kernels, or 3. vector width of the innermost contiguous axis
    unrolled = False
    blocked = 0
    vector_cpu = renderer.vector_alu and renderer.has_threads
    operands = _matmul_operands(build.sink)
    if vector_cpu:
        products = _product_loads(build.sink)
        tiled = products is not None and _vector_matmul_tile(build, products)
        tiled = tiled or (products is not None and _vector_product_unroll(build, products))
        # 2s. no output axis read contiguously (a stride-2 convolution, a 2 x 2 image): a tile of gathered columns
        tiled = tiled or (
            products is not None and strided_tile(build, products, _output_axes(build.sink), _stride_near_origin)
        )
        if tiled or _vector_reduce_unroll(build):
            blocked = unrolled = True
            if not tiled:
                _row_output_upcast(build)
    elif operands is not None:
        for axis in reversed([r.arg.axis for r in _output_axes(build.sink)]):
            operands = _matmul_operands(build.sink)
            rng = range_by_axis(build.sink)[axis]
            assert operands is not None
            strides = [stride_of(index.src[1], rng) for index in operands]
            if blocked < 2 and strides.count(0) == 1:
                size = constant_size(rng) or 0
                amount = 8 if renderer.has_threads and size % 8 == 0 else 4
                if build.attempt(Opt(OptOps.UPCAST, axis, amount)):
                    blocked += 1
        if blocked and renderer.has_threads:
            unrolled = True  # the 8x8 block already fills the registers: the reduce stays rolled
        elif blocked:
            for rng in axes_of(build.sink, AxisKind.REDUCE):
                unrolled = build.attempt(Opt(OptOps.UNROLL, rng.arg.axis, 4)) or unrolled
    loop_vectorized = renderer.has_threads and not renderer.vector_alu and not reduce_axes
    if not blocked and not loop_vectorized:
        store_indices = _store_indices(build.sink)
        widths = tuple(w for w in renderer.vector_widths if w > 1)
        for rng in reversed(_output_axes(build.sink)):
            if store_indices and all(stride_of(index, rng) == 1 for index in store_indices):
                width = _largest_dividing(constant_size(rng), widths, constant_size(rng) or 0)
                if width == 2 and renderer.vector_alu and _is_padded_copy(build.sink):
                    break  # LLVM's loop vectorizer does better with the rolled loop (see step 3)
                if width is not None and build.attempt(Opt(OptOps.UPCAST, rng.arg.axis, width)):
                    _transposed_copy_order(build)
                break

    # 4. unroll short or divisible reduce axes (under vector lanes short ones only: the reduce loop is then gone and
    # its lanes are added once per output, while a partial unroll would widen a long reduce's accumulators)
    if not unrolled:
        lanes_taken = vector_cpu and bool(axes_of(build.sink, AxisKind.UPCAST))
        for rng in axes_of(build.sink, AxisKind.REDUCE):
            reduce_size = constant_size(rng)
            if reduce_size is not None and reduce_size <= 8:
                build.attempt(Opt(OptOps.UNROLL, rng.arg.axis, 0))
            elif reduce_size is not None and reduce_size % 4 == 0 and not lanes_taken:
                build.attempt(Opt(OptOps.UNROLL, rng.arg.axis, 4))

    # 5. local threads on GPU-like renderers
    if renderer.has_local:
        budget = min(LOCAL_THREAD_TARGET, renderer.local_size_max)
        threads, local_axes = 1, 0
        for rng in reversed(axes_of(build.sink, AxisKind.GLOBAL)):
            local = _largest_dividing(constant_size(rng), (32, 16, 8, 4, 2), budget // threads)
            if local_axes < 2 and local is not None and build.attempt(Opt(OptOps.LOCAL, rng.arg.axis, local)):
                threads *= local
                local_axes += 1

    # 6. CPU threads over the outermost loop of constant size (a loop over a variable's range, e.g. the tokens of a
    # prompt chunk, cannot be split evenly: the next loop is)
    if renderer.has_threads and renderer.thread_max > 1:
        work = loop_work(build.sink)
        sized = [(rng, constant_size(rng)) for rng in axes_of(build.sink, AxisKind.LOOP)]
        constant = [(rng, size) for rng, size in sized if size is not None]
        if constant and work >= THREAD_WORK_MINIMUM:
            loop, loop_size = constant[0]
            count = max(d for d in range(1, min(loop_size, renderer.thread_max) + 1) if loop_size % d == 0)
            if count > 1:
                build.attempt(Opt(OptOps.THREAD, loop.arg.axis, count))

    # 7. reduce blocking of a small output whose operands are re-read and too big for the cache
    if vector_cpu:
        _reduce_block(build)
    return tuple(build.opts)
