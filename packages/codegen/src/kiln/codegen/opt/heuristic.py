"""`hand_coded_optimizations`: a fixed recipe of opts that is good without search, on CPUs and GPUs.

The recipe, in order (each step is skipped when its opt is illegal):
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
   with benchmarks/tensor_bench.py: the fused exp2 chain ran 1.5x faster on LLVM, 1.2x on C).
4. A reduce axis not unrolled yet is unrolled fully when its size is at most 8, else by 4 when that divides it.
5. Renderers with local threads: LOCAL on the output axes, innermost first, by the largest of 32/16/8/4/2 that
   divides the axis while the block stays within 128 threads (and the renderer's limit); at most two axes.
6. Renderers with CPU threads: THREAD on the outermost loop axis by the largest divisor of its size that is at
   most `thread_max`, when the kernel does at least 2**14 iterations of work in total.
"""

from __future__ import annotations

from kiln.codegen.kernel_info import KernelOptError, Opt, OptOps
from kiln.codegen.loop_structure import range_by_axis
from kiln.codegen.opt.apply import apply_opt, prepare_axes
from kiln.codegen.opt.kernel_axes import axes_of, constant_size, product_of_sizes, reduces_of, stride_of
from kiln.codegen.renderer import Renderer
from kiln.uops import AxisKind, Ops, UOp

GROUP_OUTPUT_LIMIT = 256
GROUP_REDUCE_MINIMUM = 1024
THREAD_WORK_MINIMUM = 2**14
LOCAL_THREAD_TARGET = 128


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


def _matmul_operands(sink: UOp) -> tuple[UOp, UOp] | None:
    """The two INDEX uops a matmul-shaped kernel loads from (its only REDUCE sums a product of two loads)."""
    reduces = reduces_of(sink)
    if len(reduces) != 1 or reduces[0].arg is not Ops.ADD:
        return None
    product = _strip_casts(reduces[0].src[0])
    if product.op is not Ops.MUL:
        return None
    left, right = (_strip_casts(s) for s in product.src)
    if left.op is not Ops.LOAD or right.op is not Ops.LOAD:
        return None
    return left.src[0], right.src[0]


def _store_indices(sink: UOp) -> list[UOp]:
    return [n.src[0].src[1] for n in sink.toposort() if n.op is Ops.STORE and n.src[0].src[0].op is Ops.DEFINE_GLOBAL]


def _output_axes(sink: UOp) -> list[UOp]:
    return axes_of(sink, AxisKind.GLOBAL, AxisKind.LOOP)


def _largest_dividing(size: int | None, choices: tuple[int, ...], limit: int) -> int | None:
    if size is None:
        return None
    return next((c for c in sorted(choices, reverse=True) if c <= limit and size % c == 0), None)


def hand_coded_optimizations(sink: UOp, renderer: Renderer) -> tuple[Opt, ...]:
    """The opts the recipe of this module picks for `sink` on `renderer` (apply them with `apply_opts`)."""
    build = _Builder(prepare_axes(sink, renderer), renderer)
    reduce_axes = axes_of(build.sink, AxisKind.REDUCE)
    output_size = product_of_sizes(_output_axes(build.sink))

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
    if _matmul_operands(build.sink) is not None:
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
                if width is not None:
                    build.attempt(Opt(OptOps.UPCAST, rng.arg.axis, width))
                break

    # 4. unroll short or divisible reduce axes
    if not unrolled:
        for rng in axes_of(build.sink, AxisKind.REDUCE):
            reduce_size = constant_size(rng)
            if reduce_size is not None and reduce_size <= 8:
                build.attempt(Opt(OptOps.UNROLL, rng.arg.axis, 0))
            elif reduce_size is not None and reduce_size % 4 == 0:
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

    # 6. CPU threads over the outermost loop
    if renderer.has_threads and renderer.thread_max > 1:
        work = product_of_sizes(axes_of(build.sink))
        loops = axes_of(build.sink, AxisKind.LOOP)
        if loops and work >= THREAD_WORK_MINIMUM:
            loop_size = constant_size(loops[0])
            if loop_size is not None:
                count = max(d for d in range(1, min(loop_size, renderer.thread_max) + 1) if loop_size % d == 0)
                if count > 1:
                    build.attempt(Opt(OptOps.THREAD, loops[0].arg.axis, count))
    return tuple(build.opts)
