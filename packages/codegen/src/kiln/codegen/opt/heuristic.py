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
   Vector-ALU CPU renderers (LLVM IR) take their own steps 2 and 3 instead: 2v, the register tile of a matmul or
   convolution (broadcast rows times contiguous columns), and 2r, the unrolled reduce of a product without one
   (a dot-product tile: a convolution's weight gradient, a matrix-vector product, a prompt's rows times a
   language model's weight); both are written down in `kiln.codegen.opt.product_tiles`.
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
from kiln.codegen.opt.conv_tiles import strided_tile
from kiln.codegen.opt.kernel_axes import (
    axes_of,
    constant_size,
    loop_work,
    product_of_sizes,
    reduces_of,
    stride_of,
)
from kiln.codegen.opt.product_tiles import (
    CACHE_LINE_BYTES,
    buffer_bytes,
    divides_axis,
    largest_dividing,
    output_axes,
    product_loads,
    stride_near_origin,
    strip_casts,
    strip_padding,
    vector_matmul_tile,
    vector_product_unroll,
)
from kiln.codegen.opt.tensor_core_opt import ANY_TENSOR_CORE
from kiln.codegen.renderer import Renderer
from kiln.uops import AxisKind, Ops, UOp, knobs

GROUP_OUTPUT_LIMIT = 256
GROUP_REDUCE_MINIMUM = 1024
THREAD_WORK_MINIMUM = 2**14
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


def _matmul_operands(sink: UOp, strip: Callable[[UOp], UOp] = strip_casts) -> tuple[UOp, UOp] | None:
    """The two INDEX uops a matmul-shaped kernel loads from (its only REDUCE sums a product of two loads, each seen
    through `strip`: casts, or also padding guards for `product_loads`)."""
    reduces = reduces_of(sink)
    if len(reduces) != 1 or reduces[0].arg is not Ops.ADD:
        return None
    product = strip_casts(reduces[0].src[0])
    if product.op is not Ops.MUL:
        return None
    left, right = (strip(s) for s in product.src)
    if left.op is not Ops.LOAD or right.op is not Ops.LOAD:
        return None
    return left.src[0], right.src[0]


def _is_padded_copy(sink: UOp) -> bool:
    """Whether every store of `sink` writes a padded read (WHERE(valid, LOAD, 0)) and nothing else computed."""
    stores = [node for node in sink.toposort() if node.op is Ops.STORE]
    return bool(stores) and all(
        strip_casts(store.src[1]).op is Ops.WHERE and strip_padding(store.src[1]).op is Ops.LOAD for store in stores
    )


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
        width = largest_dividing(constant_size(last), widths, size)
        if width is not None and not divides_axis(loads, last, width):
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
    for rng in reversed(output_axes(build.sink)):
        if rng in used or not store_indices or not all(stride_of(index, rng) == 1 for index in store_indices):
            continue
        width = largest_dividing(constant_size(rng), widths, constant_size(rng) or 0)
        if width is not None:
            build.attempt(Opt(OptOps.UPCAST, rng.arg.axis, width))
        return


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


def _reduce_block(build: _Builder) -> None:
    """BLOCK the outermost reduce axis (step 7) when the output is small (BLOCK_OUTPUT_BYTES: it is loaded and stored
    once per block) and the operands some output loop re-reads exceed BLOCK_REUSED_BYTES; blocks as large as
    BLOCK_PANEL_BYTES of operands allow."""
    reductions = reduces_of(build.sink)
    stores = [n for n in build.sink.toposort() if n.op is Ops.STORE]
    reduce_axes = axes_of(build.sink, AxisKind.REDUCE)
    if len(reductions) != 1 or len(stores) != 1 or not reduce_axes:
        return
    if buffer_bytes(stores[0].src[0].src[0]) > BLOCK_OUTPUT_BYTES:
        return
    loads = [n.src[0] for n in reductions[0].src[0].toposort() if n.op is Ops.LOAD]
    operands = {index.src[0]: index.src[1] for index in loads if index.src[0].op is Ops.DEFINE_GLOBAL}
    loops = axes_of(build.sink, AxisKind.LOOP)
    reused = [b for b, index in operands.items() if any(stride_of(index, rng) == 0 for rng in loops)]
    if sum(buffer_bytes(b) for b in reused) < BLOCK_REUSED_BYTES:
        return
    size = constant_size(reduce_axes[0]) or 0
    total = sum(buffer_bytes(b) for b in operands)
    fitting = [d for d in range(2, size) if size % d == 0 and total * d // size <= BLOCK_PANEL_BYTES]
    if fitting:
        build.attempt(Opt(OptOps.BLOCK, reduce_axes[0].arg.axis, max(fitting)))


def hand_coded_optimizations(sink: UOp, renderer: Renderer) -> tuple[Opt, ...]:
    """The opts the recipe of this module picks for `sink` on `renderer` (apply them with `apply_opts`)."""
    build = _Builder(prepare_axes(sink, renderer), renderer)
    reduce_axes = axes_of(build.sink, AxisKind.REDUCE)
    output_size = product_of_sizes(output_axes(build.sink))

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
        products = product_loads(build.sink)
        tiled = products is not None and vector_matmul_tile(build, products)
        tiled = tiled or (products is not None and vector_product_unroll(build, products))
        # 2s. no output axis read contiguously (a stride-2 convolution, a 2 x 2 image): a tile of gathered columns
        tiled = tiled or (
            products is not None and strided_tile(build, products, output_axes(build.sink), stride_near_origin)
        )
        if tiled or _vector_reduce_unroll(build):
            blocked = unrolled = True
            if not tiled:
                _row_output_upcast(build)
    elif operands is not None:
        for axis in reversed([r.arg.axis for r in output_axes(build.sink)]):
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
        for rng in reversed(output_axes(build.sink)):
            if store_indices and all(stride_of(index, rng) == 1 for index in store_indices):
                width = largest_dividing(constant_size(rng), widths, constant_size(rng) or 0)
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
            local = largest_dividing(constant_size(rng), (32, 16, 8, 4, 2), budget // threads)
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
