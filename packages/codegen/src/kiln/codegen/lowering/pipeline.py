"""The kernel pipeline declared as data: optimize -> the lowering passes -> linearize (`PIPELINE`, stage names in
order), and the lowering passes themselves (`LOWERING_PASSES`), which `lower` runs.

Every stage is traced and spec-checked the same way: a pass that is one named graph_rewrite of a pattern table is
recorded by graph_rewrite itself; a pass written as a function (`LoweringPass.function`: hardware dims, dtype
emulation, loop ends, ...) is recorded by `run_stage` as one trace under its name (the rewrites it
runs inside nest after it). With `SPEC=1` each stage's result is checked against the full spec of its IR level
(`stage_spec`): the kernel sink format up to "accumulators", the lowering format after it, and from "index dtype"
on the lowering format without index dtypes; `get_program` checks the LINEAR against the linear format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiln.codegen.lowering.accumulators import RegisterSlots, pm_reduce_to_accumulator
from kiln.codegen.lowering.decompositions import decomposition_rewrites
from kiln.codegen.lowering.dtype_emulation import emulate_dtypes
from kiln.codegen.lowering.expander import pm_expand
from kiln.codegen.lowering.fused_multiply_add import pm_multiply_add
from kiln.codegen.lowering.gates import pm_gated_loads, pm_masked_stores
from kiln.codegen.lowering.gpu_dims import map_hardware_dims
from kiln.codegen.lowering.group_reduce import lower_group_reduces
from kiln.codegen.lowering.index_dtype import lower_index_dtype
from kiln.codegen.lowering.loop_ends import normalize_ends
from kiln.codegen.lowering.memory_access import pm_memory_access
from kiln.codegen.lowering.vector_folding import (
    pm_scalarize_alu,
    pm_scalarize_index_math,
    pm_vector_folding,
    pm_vector_folding_keep_alu,
)
from kiln.codegen.renderer import Renderer
from kiln.codegen.spec import pm_spec_kernel, pm_spec_lowered, pm_spec_lowering
from kiln.uops import (
    GroupOp,
    NodeSlot,
    Ops,
    PatternMatcher,
    SpecError,
    UOp,
    UPat,
    dtypes,
    graph_rewrite,
    knobs,
    pm_spec_alu,
    pm_symbolic,
    tracing_enabled,
    type_verify,
)
from kiln.uops.trace import begin_trace


@dataclass(frozen=True)
class LoweringPass:
    """One named step of the pipeline: `run(sink, renderer) -> sink`. `function`: not a single graph_rewrite named
    `name`, so `run_stage` records its trace."""

    name: str
    run: Callable[[UOp, Renderer], UOp]
    description: str
    function: bool = False


def _alu_types_ok(sink: UOp) -> None:
    for node in sink.toposort():
        if node.op in GroupOp.ALU or node.op in (Ops.CONST, Ops.VCONST):
            verdict, rule = pm_spec_alu.rewrite_with_rule(node)
            if rule is not None and verdict is not True:
                raise SpecError(f"{node.op.name} of dtype {node.dtype!r} fails the ALU spec: {node!r}", node)


def run_stage(name: str, sink: UOp, run: Callable[[UOp], UOp], function: bool = True, spec: bool | None = None) -> UOp:
    """`run(sink)` as pipeline stage `name`: traced under that name when `function` (a graph_rewrite pass traces
    itself) and spec-checked after it when `spec` (default: the SPEC knob is on)."""
    record = begin_trace(name, False, sink) if function and tracing_enabled() else None
    result = run(sink)
    if record is not None:
        record.result = result
    if (knobs.SPEC >= 1 if spec is None else spec) and result.op is Ops.SINK:
        level = stage_spec(name)
        if level is None:
            _alu_types_ok(result)
        else:
            type_verify(result, level)
    return result


def stage_spec(name: str) -> PatternMatcher | None:
    """The spec the result of pipeline stage `name` satisfies (None for a stage outside PIPELINE: ALU typing only)."""
    if name not in PIPELINE or name == "linearize":
        return None
    position = PIPELINE.index(name)
    if position < PIPELINE.index("accumulators"):
        return pm_spec_kernel
    return pm_spec_lowering if position < PIPELINE.index("index dtype") else pm_spec_lowered


def _lanes_to_vectorize(vector: UOp) -> UOp:
    scalar = vector.dtype.scalar()
    return UOp(Ops.VECTORIZE, vector.dtype, tuple(UOp.const(scalar, value) for value in vector.arg))


pm_linear_form = PatternMatcher([(UPat(Ops.VCONST, name="vector"), _lanes_to_vectorize)])
"""Last touches for the linear format: vector constants become VECTORIZEs of CONSTs."""


# Nodes pm_symbolic leaves alone. Its rules are functions of a node's graph alone, so a node none of them changed
# once stays unchanged: later passes (which re-run the index simplifier over the whole kernel) skip it. Kept on the
# node, so the mark dies with it.
_SYMBOLIC_FIXED_POINT: NodeSlot[bool] = NodeSlot(
    "symbolic_fixed_point", __name__, "True on a node that no rule of pm_symbolic changes"
)


def _simplify_index_math(x: UOp) -> UOp | None:
    if _SYMBOLIC_FIXED_POINT.has(x):
        return None
    simplified = pm_symbolic.rewrite(x)
    if simplified is None:
        _SYMBOLIC_FIXED_POINT.set(x, True)
    return simplified


# the symbolic simplifier on integer and bool nodes only: index math needs it, data math does not (and is larger)
pm_index_symbolic = PatternMatcher([(UPat(dtype=(dtypes.index, dtypes.bool), name="x"), _simplify_index_math)])
"""pm_symbolic restricted to dtypes.index and bool uops (scalar or vector)."""

_pm_devectorize = pm_scalarize_alu + pm_vector_folding + pm_index_symbolic
_pm_keep_vectors = pm_scalarize_index_math + pm_vector_folding_keep_alu + pm_index_symbolic


def _devectorize(sink: UOp, renderer: Renderer) -> UOp:
    # a renderer with vector ALU ops keeps them whole (LLVM maps them onto SIMD registers); others get scalars
    pm = _pm_keep_vectors if renderer.vector_alu else _pm_devectorize
    return graph_rewrite(sink, pm, name="devectorize")


_pm_memory = pm_memory_access + pm_vector_folding + pm_index_symbolic
_pm_memory_keep_vectors = pm_memory_access + pm_vector_folding_keep_alu + pm_index_symbolic


def _memory_access(sink: UOp, renderer: Renderer) -> UOp:
    pm = _pm_memory_keep_vectors if renderer.vector_alu else _pm_memory
    return graph_rewrite(sink, pm, ctx=renderer, name="memory access")


def _renderer_passes(sink: UOp, renderer: Renderer) -> UOp:
    for name, pm in renderer.extra_passes:
        sink = graph_rewrite(sink, pm, ctx=renderer, name=name)
    return sink


def _function_pass(name: str, run: Callable[[UOp, Renderer], UOp], description: str) -> LoweringPass:
    return LoweringPass(name, run, description, function=True)


def _rewrite_pass(name: str, pm: PatternMatcher, description: str) -> LoweringPass:
    return LoweringPass(name, lambda sink, renderer: graph_rewrite(sink, pm, name=name), description)


LOWERING_PASSES: tuple[LoweringPass, ...] = (
    _rewrite_pass("simplify", pm_index_symbolic, "symbolic simplification of the index math the opts produced"),
    _rewrite_pass("masked stores", pm_masked_stores, "STORE(i, WHERE(g, x, LOAD(i))) -> STORE(INDEX(.., g), x)"),
    _function_pass("group reduce", lambda sink, renderer: lower_group_reduces(sink), "GROUP_REDUCE -> local memory"),
    LoweringPass(
        "expand",
        lambda sink, renderer: graph_rewrite(sink, pm_expand, ctx=renderer.vector_alu, name="expand"),
        "UPCAST/UNROLL ranges -> vectors (vector-ALU renderers fold unrolled reduce lanes after the loop)",
    ),
    LoweringPass(
        "accumulators",
        lambda sink, renderer: graph_rewrite(
            sink,
            pm_reduce_to_accumulator,
            ctx=RegisterSlots(fuse_multiply_add=renderer.fuse_multiply_add and Ops.MULACC in renderer.native_ops),
            name="accumulators",
        ),
        "REDUCE -> DEFINE_REG accumulators and reduce loops",
    ),
    LoweringPass("hardware dims", map_hardware_dims, "GLOBAL/LOCAL/THREAD ranges -> SPECIAL indices", function=True),
    LoweringPass(
        "devectorize",
        _devectorize,
        "vector ALU -> scalar ALU (unless the renderer has vector ALU); lane algebra folded; indices simplified",
    ),
    LoweringPass(
        "memory access",
        _memory_access,
        "vector-of-pointer loads/stores -> scalar and wide accesses (aligned unless the renderer has vector ALU)",
    ),
    _rewrite_pass("gated loads", pm_gated_loads, "LOAD(INDEX(buf, off, gate)) -> LOAD(INDEX(buf, off), 0, gate)"),
    LoweringPass("index dtype", lambda sink, renderer: lower_index_dtype(sink), "dtypes.index -> int32 or int64"),
    LoweringPass(
        "multiply-add",
        lambda sink, renderer: graph_rewrite(sink, pm_multiply_add, ctx=renderer, name="multiply-add"),
        "MULACC the renderer cannot fuse -> exact ops (float64 round-to-odd)",
    ),
    # last of the passes that build ALU ops, so that no later simplification brings a decomposed op back
    LoweringPass(
        "decompositions",
        lambda sink, renderer: graph_rewrite(sink, decomposition_rewrites(renderer.native_ops), name="decompositions"),
        "ops the renderer lacks -> ops it has (transcendentals included)",
    ),
    # after the decompositions, so that it checks (and emulates) the dtypes of the ops they create too
    _function_pass("dtype emulation", emulate_dtypes, "Renderer.emulated_dtypes -> float32 values, raw-bit memory"),
    LoweringPass("renderer passes", _renderer_passes, "the renderer's own extra_passes, in order", function=True),
    _rewrite_pass("linear form", pm_linear_form, "VCONST -> VECTORIZE"),
    _function_pass("loop ends", lambda sink, renderer: normalize_ends(sink), "one single-range END per RANGE"),
)
"""The lowering passes, in order."""


PIPELINE: tuple[str, ...] = ("optimize", *(p.name for p in LOWERING_PASSES), "linearize")
"""The stage names of the whole kernel pipeline in order (get_program runs them, then renders the LINEAR)."""


def lower(sink: UOp, renderer: Renderer) -> UOp:
    """Run every pass of `LOWERING_PASSES` on an optimized kernel sink (each through `run_stage`)."""
    spec = knobs.SPEC >= 1  # read once: a knob read costs about as much as a small pass's bookkeeping
    for p in LOWERING_PASSES:
        sink = run_stage(p.name, sink, lambda s, run=p.run: run(s, renderer), p.function, spec)  # type: ignore[misc]
    return sink
