"""A new target is two records and a table: a `Target` (what the device offers), a `CDialect` (how its language spells
a kernel) and a pattern table (the string rules where it prints differently), plus a four-line renderer class.

The target made here is a GPU-shaped one for the host: blocks of threads (no shared memory), its kernel a C function
that takes the block and thread index as two arrays, in a C dialect spelled differently from kiln's own (stdint
types, libm functions, `while` loops instead of `for`). Kernels of codegen's corpus are lowered for it, compiled
by gcc and run once per (block, thread) through ctypes; the outputs must be numpy's (the corpus references).
"""

from __future__ import annotations

import ctypes
import itertools
import shutil
import tempfile
from typing import Any

import cpu_kernels
import numpy as np
import pytest

from kiln.codegen import Program, get_program
from kiln.renderers import CCompiler, CStyleRenderer, CStyleWriter, Target
from kiln.renderers.c_dialect import CDialect
from kiln.uops import Context, GroupOp, Ops, PatternMatcher, UOp, UPat, dtypes

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

# ---- record 1: the device ---------------------------------------------------------------------------------------

EMULATED = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2})

HOST_BLOCKS = Target(
    "HOST_BLOCKS",
    "HOST_BLOCKS",
    global_max=(1024, 1024, 1024),
    local_max=(8, 8, 4),
    local_size_max=32,
    native_dtypes=frozenset(dtypes.all) - EMULATED,
    emulated_dtypes=EMULATED,
)
"""Blocks of at most 32 threads, no block-shared memory (so no barriers); 16-bit and 8-bit floats emulated."""

# ---- record 2: the language -------------------------------------------------------------------------------------

STDINT_TYPES = {
    dtypes.bool: "bool",
    dtypes.int8: "int8_t",
    dtypes.uint8: "uint8_t",
    dtypes.int16: "int16_t",
    dtypes.uint16: "uint16_t",
    dtypes.int32: "int32_t",
    dtypes.uint32: "uint32_t",
    dtypes.int64: "int64_t",
    dtypes.uint64: "uint64_t",
    dtypes.float32: "float",
    dtypes.float64: "double",
}

STDINT_C = CDialect(
    "C with <stdint.h> and libm",
    scalar_types=STDINT_TYPES,
    float_functions={
        (op, dtype): name + ("f" if dtype == dtypes.float32 else "")
        for op, name in ((Ops.SQRT, "sqrt"), (Ops.TRUNC, "trunc"), (Ops.MULACC, "fma"))
        for dtype in (dtypes.float32, dtypes.float64)
    },
    preamble=("#include <math.h>", "#include <stdbool.h>", "#include <stdint.h>"),
    kernel_prefix='__attribute__((visibility("default"))) ',
    helper_prefix="static ",
    restrict_keyword="__restrict",
    extra_parameters=("const int32_t* kiln_group", "const int32_t* kiln_thread"),
    group_index="kiln_group[{dimension}]",
    thread_index="kiln_thread[{dimension}]",
    long_suffix="LL",
    uint32="uint32_t",
    not_finite="!isfinite({x})",
    float_modulo="fmod(trunc({x}), {m})",
)

# ---- the table: loops as `while` --------------------------------------------------------------------------------


def _while(ctx: CStyleWriter, x: UOp) -> str:
    counter = ctx[x]
    return f"{ctx.type_name(x.dtype)} {counter} = 0; while ({counter} < {ctx[x.src[0]]}) {{"


pm_while_loops = PatternMatcher(
    [
        (UPat(Ops.RANGE, name="x"), _while),
        (UPat(Ops.END, name="x"), lambda ctx, x: f"{ctx[x.src[0]]}++; }}"),
    ]
)


class HostBlocksRenderer(CStyleRenderer[CCompiler], target=HOST_BLOCKS):
    dialect = STDINT_C
    extra_rules = pm_while_loops
    vector_widths = (2, 4)
    native_ops = GroupOp.ALU - {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW}

    def make_compiler(self) -> CCompiler:
        return CCompiler("gcc")


# ---- running a program: one call per (block, thread) ------------------------------------------------------------

CASES = (
    "elementwise_int8",
    "elementwise_uint64",
    "elementwise_float16",
    "elementwise_float64",
    "broadcast_row",
    "sum_axis1",
    "max_int8",
    "matmul",
    "conv2d",
    "casts",
    "symbolic_row_sum",
    "transpose_by_index_math",
)
CORPUS = {case.name: case for case in cpu_kernels.load_corpus().CORPUS}


def run(program: Program, buffers: list[np.ndarray], var_vals: dict[str, int]) -> None:
    """Run `program`'s binary on `buffers` (in place): the kernel once per block and thread of its launch."""
    assert program.binary is not None
    with tempfile.NamedTemporaryFile(suffix=".so") as file:
        file.write(program.binary)
        file.flush()
        kernel = ctypes.CDLL(file.name).kiln_kernel
    variables = sorted((u for u in program.uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg.name)
    arguments: list[Any] = [buffer.ctypes.data_as(ctypes.c_void_p) for buffer in buffers]
    arguments += [ctypes.c_int32(var_vals[v.arg.name]) for v in variables]
    global_size, local_size = program.launch_dims(var_vals)
    group, thread = (ctypes.c_int32 * 3)(), (ctypes.c_int32 * 3)()
    for group[:] in itertools.product(*(range(n) for n in global_size)):
        for thread[:] in itertools.product(*(range(n) for n in local_size)):
            kernel(*arguments, group, thread)


@pytest.mark.parametrize("name", CASES)
def test_corpus_kernel_runs_like_numpy(name: str) -> None:
    case, corpus = CORPUS[name], cpu_kernels.load_corpus()
    with Context(DISABLE_COMPILER_CACHE=True):
        program = Program(get_program(case.sink, HostBlocksRenderer()))
    rng = np.random.default_rng(5)
    inputs = case.inputs(rng)
    outputs = case.output_buffers()
    stored = [corpus.to_storage(values, dtype) for values, (dtype, _) in zip(inputs, case.buffers[case.outputs :])]
    run(program, [*outputs, *stored], case.var_vals)
    got = [corpus.from_storage(raw, dtype) for raw, (dtype, _) in zip(outputs, case.buffers)]
    corpus.assert_matches(case, got, case.reference(inputs, case.var_vals), case.exact)


def test_the_source_is_spelled_by_the_dialect_and_the_table() -> None:
    # the matmul's reduce is a loop; casts need the float -> int helper (its libm spellings) and int8_t
    renderer = HostBlocksRenderer()
    renderer.compiler = None  # type: ignore[assignment]  # the source only
    matmul = Program(get_program(CORPUS["matmul"].sink, renderer)).source
    casts = Program(get_program(CORPUS["casts"].sink, renderer)).source
    assert "for (" not in matmul and "while (ridx0 < " in matmul and "ridx0++; }" in matmul
    assert "#include <stdint.h>" in matmul and "const int32_t* kiln_thread)" in matmul
    assert "static int8_t kiln_to_int8(double x)" in casts and "!isfinite(x)" in casts and "(int64_t)x" in casts
    assert "long" not in casts and "unsigned" not in casts


def test_the_program_uses_blocks_of_threads() -> None:
    # the target's local dims are used (a kernel over 60 elements gets threads per block), within its limits
    program = Program(get_program(CORPUS["elementwise_float64"].sink, HostBlocksRenderer()))
    _, local_size = program.launch_dims({})
    assert int(np.prod(local_size)) > 1 and all(n <= m for n, m in zip(local_size, HOST_BLOCKS.local_max or ()))
    assert int(np.prod(local_size)) <= HOST_BLOCKS.local_size_max
    assert "kiln_thread[0]" in program.source
