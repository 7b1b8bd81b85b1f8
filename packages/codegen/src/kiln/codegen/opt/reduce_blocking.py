"""The BLOCK opt (reduce blocking): a reduce over K runs as K / arg blocks of `arg`, the block loop outside the
output loops, each block's partial result carried to the next through the output buffer.

    out[o] = epilogue(REDUCE(value(k), k))                               k in 0..K-1
becomes
    for block in 0..K/arg-1:                                             AxisKind.BLOCK, outside the output loops
      for o:
        partial = REDUCE(value(block * arg + k), k)                      k in 0..arg-1
        total = block == 0 ? partial : partial op out[o]                  (the load is gated off in block 0)
        out[o] = block == last ? epilogue(total) : total

On a CPU one K panel of the operands (`arg` rows of B, `arg` columns of A) is then reused by every output tile while
it is in cache. The block loop nests inside THREAD and GPU hardware indices (AXIS_KIND_RANK): each thread walks the
blocks over its own outputs, so no two threads touch one output and no barrier is needed. The rewrite is correct
only when every output element is one accumulator that exactly one iteration of the output loops owns, and the
output holds the accumulator's dtype; `block_reduce` rejects every other kernel with a KernelOptError.
"""

from __future__ import annotations

from kiln.codegen.kernel_info import KernelOptError
from kiln.codegen.loop_structure import REDUCE_KINDS, kernel_ranges, replace_ranges
from kiln.codegen.opt.kernel_axes import constant_size, reduces_of, stride_of
from kiln.uops import AxisKind, Ops, UOp


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise KernelOptError(f"BLOCK: {message}")


def _one_store(sink: UOp) -> tuple[UOp, tuple[UOp, ...]]:
    """The kernel's only STORE and the loops its END closes; KernelOptError for any other kernel shape."""
    stores = [node for node in sink.toposort() if node.op is Ops.STORE]
    _check(len(stores) == 1 and len(sink.src) == 1, f"needs a kernel with one store, this one has {len(stores)}")
    effect = sink.src[0]
    if effect.op is Ops.STORE:
        return effect, ()
    _check(effect.op is Ops.END and effect.src[0] is stores[0], "needs the store's END as the kernel's only effect")
    return stores[0], effect.src[1:]


def _owns_each_output_once(index: UOp, loops: tuple[UOp, ...]) -> None:
    """Each output element is written by exactly one iteration of `loops`: the index is affine in them with
    constant strides that never overlap (sorted by stride, each exceeds the span of the ones below it)."""
    strides = []
    for rng in loops:
        stride = stride_of(index, rng)
        _check(
            stride is not None and stride != 0,
            f"the output index must step by a constant, nonzero stride along every output loop; along axis "
            f"{rng.arg.axis} it steps by {'a non-constant amount' if stride is None else 0}",
        )
        assert stride is not None
        strides.append((abs(stride), constant_size(rng) or 0, rng.arg.axis))
    span = 0
    for stride, size, axis in sorted(strides):
        _check(stride > span, f"output loops overlap: axis {axis} steps by {stride} inside a span of {span + 1}")
        span += stride * (size - 1)


def block_reduce(sink: UOp, rng: UOp, amount: int) -> UOp:
    """`sink` with REDUCE axis `rng` split into a BLOCK loop of size / amount blocks (the next unused axis number)
    outside the output loops and a reduce of `amount` (keeping `rng`'s number); KernelOptError if illegal."""
    size = constant_size(rng)
    assert size is not None and size % amount == 0
    _check(amount < size, f"blocking axis {rng.arg.axis} of size {size} by {amount} leaves one block")
    ranges = kernel_ranges(sink)
    _check(not any(r.arg.kind is AxisKind.BLOCK for r in ranges), "the kernel already has a BLOCK axis")
    _check(
        not any(r.arg.kind is AxisKind.GROUP_REDUCE for r in ranges),
        "a group reduce's partial sums live in shared memory across threads; blocking them is not supported",
    )
    symbolic = [r.arg.axis for r in ranges if constant_size(r) is None]
    _check(not symbolic, f"needs constant loop sizes; axes {symbolic} are symbolic")
    reductions = reduces_of(sink)
    _check(len(reductions) == 1, f"needs a kernel with exactly one REDUCE, this one has {len(reductions)}")
    reduction = reductions[0]
    _check(rng in reduction.src[1:], f"axis {rng.arg.axis} is not a range of the kernel's REDUCE")
    store, loops = _one_store(sink)
    index, value = store.src[0], store.src[1]
    buffer = index.src[0]
    _check(buffer.op is Ops.DEFINE_GLOBAL, "the store must write a global buffer")
    _check(
        value.dtype == reduction.dtype,
        f"the output holds {value.dtype!r}, the reduce accumulates {reduction.dtype!r}: a partial result stored "
        "in the output would be rounded",
    )
    _check(reduction in value.toposort(), "the stored value does not depend on the REDUCE")
    address = index.toposort()
    _check(reduction not in address, "the output address depends on the REDUCE")
    reduce_axes = [r.arg.axis for r in reduction.src[1:] if r in address]
    _check(not reduce_axes, f"the output address depends on reduce axes {reduce_axes}")
    readers = [node for node in sink.toposort() if node.op is Ops.LOAD and buffer in node.src[0].toposort()]
    _check(not readers, f"the kernel also reads its output buffer {buffer.arg}, which would see partial results")
    for node in value.toposort():
        if node.op in (Ops.IDIV, Ops.MOD) and reduction in node.src[1].toposort():
            raise KernelOptError(
                f"BLOCK: the epilogue divides by the REDUCE ({node.op.name}); a partial result may be 0, and the "
                "epilogue is evaluated in every block"
            )
    output_loops = tuple(r for r in loops if r.arg.kind not in REDUCE_KINDS)
    outside = [r.arg.axis for r in index.toposort() if r.op is Ops.RANGE and r not in output_loops]
    _check(not outside, f"the output address depends on axes {outside} the store's loops do not close")
    _owns_each_output_once(index.src[1], output_loops)

    block = UOp.range(size // amount, max(r.arg.axis for r in ranges) + 1, AxisKind.BLOCK)
    inner = UOp.range(amount, rng.arg.axis, AxisKind.REDUCE)
    sink = replace_ranges(sink, {rng: block * amount + inner}, {rng: (inner,)})
    partial = reduces_of(sink)[0]
    store, loops = _one_store(sink)
    index, value = store.src[0], store.src[1]
    # block 0 starts from the reduce's own result; later blocks add (max, multiply) the previous blocks' result
    not_first = block.ne(0)
    gate = not_first if len(index.src) == 2 else index.src[2] & not_first
    previous = index.src[0].index(index.src[1], gate=gate).load()
    total = block.eq(0).where(partial, partial.alu(partial.arg, previous))
    finished = value.substitute({partial: total})  # the epilogue (relu, bias, a scale) once the sum is whole
    stored = total if value is partial else block.eq(size // amount - 1).where(finished, total)
    return sink.replace(src=(store.replace(src=(index, stored, *store.src[2:])).end(*loops, block),))
