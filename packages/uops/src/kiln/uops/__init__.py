"""The IR: dtypes, Ops, UOp, UPat/PatternMatcher, graph_rewrite, symbolic math, spec, tracing, knobs."""

from kiln.uops.alu import exec_alu
from kiln.uops.args import AxisKind, RangeArg, SpecialArg, VarArg
from kiln.uops.dtype import ConstType, DType, MemoryScope, PtrDType, dtypes, least_upper_dtype, truncate
from kiln.uops.knobs import Context, Knob, knobs, knobs_markdown, register_knob
from kiln.uops.node_slot import NodeSlot
from kiln.uops.ops import GroupOp, Ops
from kiln.uops.pattern_matcher import PatternMatcher, Rule
from kiln.uops.printing import print_graph, pyrender
from kiln.uops.rewrite import graph_rewrite, graph_rewrite_map
from kiln.uops.spec import SpecError, pm_spec_alu, type_verify
from kiln.uops.symbolic import pm_symbolic, pm_symbolic_simple, sym_infer
from kiln.uops.trace import (
    RewriteStep,
    RewriteTrace,
    TraceGroup,
    enable_tracing,
    save_trace,
    trace_group,
    tracing,
    tracing_enabled,
)
from kiln.uops.uop import UOp, content_arg, live_uop_count
from kiln.uops.upat import ANY_ARG, UPat

__all__ = [
    "ANY_ARG",
    "AxisKind",
    "ConstType",
    "Context",
    "DType",
    "GroupOp",
    "Knob",
    "MemoryScope",
    "NodeSlot",
    "Ops",
    "PatternMatcher",
    "PtrDType",
    "RangeArg",
    "RewriteStep",
    "RewriteTrace",
    "TraceGroup",
    "Rule",
    "SpecError",
    "SpecialArg",
    "UOp",
    "content_arg",
    "UPat",
    "VarArg",
    "dtypes",
    "enable_tracing",
    "exec_alu",
    "graph_rewrite",
    "graph_rewrite_map",
    "knobs",
    "knobs_markdown",
    "least_upper_dtype",
    "live_uop_count",
    "pm_spec_alu",
    "pm_symbolic",
    "pm_symbolic_simple",
    "print_graph",
    "pyrender",
    "register_knob",
    "save_trace",
    "trace_group",
    "sym_infer",
    "tracing",
    "tracing_enabled",
    "truncate",
    "type_verify",
]
