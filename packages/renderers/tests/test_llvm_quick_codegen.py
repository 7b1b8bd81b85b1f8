"""LLVM's quick code generator for kernels of little work (LLVMRenderer.quick_codegen_work, QUICK_CODEGEN_MARK).

The renderer marks a kernel whose work per launch is small; the compiler generates its machine code at -O0 (under
the 'kernel' pipeline). Most corpus and coverage kernels are small, so test_llvm_ir.py runs them through the quick
generator; here the same kernels go through the full one (no kernel marked) against the same oracles (numpy and
codegen's interpreter), and the mark, its bound and the compiler's choice are checked against hand-counted work.
"""

from __future__ import annotations

from typing import Any

import cpu_kernels as kernels
import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="llvmlite is not installed (pip install 'kiln-renderers[llvm]')")

from kiln.codegen import KernelInfo, Opt, Program, get_program
from kiln.renderers import LLVMRenderer
from kiln.renderers.llvm_compiler import QUICK_CODEGEN_MARK
from kiln.renderers.llvm_ir import work_per_launch
from kiln.uops import AxisKind, Context, Ops, UOp, dtypes

CORPUS = kernels.load_corpus().CORPUS
COVERAGE = kernels.coverage_cases()

pytestmark = pytest.mark.usefixtures("compile_every_time")  # the tests are about compiling (conftest.py)


@pytest.fixture(scope="module")
def full_renderer() -> LLVMRenderer:
    renderer = LLVMRenderer()
    renderer.quick_codegen_work = 0  # no kernel marked: every one through LLVM's full code generator
    return renderer


def _scaled_copy(size: int, name: str) -> UOp:
    # out[i] = in[i] * 3 + 1: per element one load, a multiply, an add and a store
    loop = UOp.range(size, 0, AxisKind.LOOP)
    value = kernels.buffer(1, dtypes.float32, size).index(loop).load() * 3.0 + 1.0
    store = kernels.buffer(0, dtypes.float32, size).index(loop).store(value).end(loop)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo(name))


def _source(renderer: LLVMRenderer, sink: UOp) -> str:
    return Program(get_program(sink, renderer, [])).source


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_corpus_runs_like_numpy_through_the_full_code_generator(case: Any, full_renderer: LLVMRenderer) -> None:
    program = kernels.run_corpus_case(case, full_renderer, np.random.default_rng(1))
    assert QUICK_CODEGEN_MARK not in program.source


@pytest.mark.parametrize(("name", "sink", "opts", "var_vals"), COVERAGE, ids=[case[0] for case in COVERAGE])
def test_coverage_kernel_matches_interpreter_through_the_full_code_generator(
    name: str, sink: UOp, opts: list[Opt] | None, var_vals: dict[str, int], full_renderer: LLVMRenderer
) -> None:
    kernels.check_against_reference(sink, full_renderer, opts, var_vals)


def test_work_per_launch_counts_loop_length_times_lanes() -> None:
    renderer = LLVMRenderer()
    program = Program(get_program(_scaled_copy(100, "work_100"), renderer, []))
    # 100 iterations of load, MUL, ADD, store (no opts: scalar lanes); the index math is not an ALU op here
    counted = [uop.op for uop in program.uops if uop.op in (Ops.LOAD, Ops.STORE, Ops.MUL, Ops.ADD)]
    assert sorted(op.name for op in counted) == ["ADD", "LOAD", "MUL", "STORE"]
    assert work_per_launch(program.uops) == 100 * 4


def test_a_loop_of_variable_length_has_no_work_bound() -> None:
    program = kernels.symbolic_kernel()
    uops = Program(get_program(program, LLVMRenderer(), [])).uops
    assert any(uop.op is Ops.RANGE and uop.src[0].op is not Ops.CONST for uop in uops)
    assert work_per_launch(uops) is None


def test_the_renderer_marks_a_kernel_up_to_its_bound_and_not_beyond() -> None:
    renderer = LLVMRenderer()
    renderer.quick_codegen_work = 400
    marked = _source(renderer, _scaled_copy(100, "quick_100")).splitlines()
    assert marked[0] == "; kiln LLVMRenderer kernel quick_100"
    assert marked[1] == QUICK_CODEGEN_MARK
    assert QUICK_CODEGEN_MARK not in _source(renderer, _scaled_copy(101, "full_101"))
    renderer.quick_codegen_work = 0
    assert QUICK_CODEGEN_MARK not in _source(renderer, _scaled_copy(1, "none_1"))


def test_a_marked_kernel_is_generated_at_o0_and_computes_the_same() -> None:
    renderer = LLVMRenderer()
    compiler = renderer.compiler
    sink = _scaled_copy(64, "quick_64")
    program = Program(get_program(sink, renderer, []))
    assert program.source.splitlines()[1] == QUICK_CODEGEN_MARK
    assert compiler.is_quick(program.source)
    unmarked = program.source.replace(QUICK_CODEGEN_MARK + "\n", "", 1)
    assert not compiler.is_quick(unmarked)
    # the same IR passes for both: only the code generator differs
    assert compiler.optimized_ir(unmarked) == compiler.optimized_ir(program.source)
    # the two code generators emit different machine code for the same IR
    assert compiler.compile(program.source) != compiler.compile(unmarked)
    data = np.arange(64, dtype=np.float32) - 20.5
    for source in (program.source, unmarked):
        out = np.zeros(64, np.float32)
        kernel = compiler.load(compiler.compile(source), program.signature)
        kernel(out.ctypes.data, data.ctypes.data)
        np.testing.assert_array_equal(out, data * np.float32(3) + np.float32(1))


def test_the_mark_counts_only_as_the_second_line_and_only_under_the_kernel_pipeline() -> None:
    compiler = LLVMRenderer().compiler
    body = "define void @kiln_kernel() {\nentry:\n  ret void\n}\n"
    assert compiler.is_quick(f"; kiln LLVMRenderer kernel k\n{QUICK_CODEGEN_MARK}\n{body}")
    assert not compiler.is_quick(f"{QUICK_CODEGEN_MARK}\n{body}")
    assert not compiler.is_quick(f"; kiln LLVMRenderer kernel k\n{body}{QUICK_CODEGEN_MARK}\n")
    with Context(LLVM_PIPELINE="O2"):
        assert not compiler.is_quick(f"; kiln LLVMRenderer kernel k\n{QUICK_CODEGEN_MARK}\n{body}")


def test_multi_core_kernels_are_never_marked() -> None:
    renderer = LLVMRenderer()
    renderer.quick_codegen_work = 1 << 60
    program = kernels.check_threaded_gather(renderer)  # runs the kernel on its cores against numpy
    assert "i32 %core_id) nounwind {" in program.source
    assert QUICK_CODEGEN_MARK not in program.source
