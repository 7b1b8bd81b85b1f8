"""The LLVM compiler's IR pipelines (LLVM_PIPELINE): the short 'kernel' one by default, LLVM's -O2 on request.

Both must build kernels that compute what numpy does, keep a register tile in registers, and key the compile cache
apart (a binary built by one pipeline is never handed out for the other).
"""

from __future__ import annotations

import pickle

import cpu_kernels as kernels
import numpy as np
import pytest

from kiln.codegen import Program, get_program
from kiln.codegen.compiler import _compile_cache
from kiln.codegen.kernel_info import Opt, OptOps
from kiln.renderers import LLVMRenderer
from kiln.renderers.llvm_compiler import KERNEL_PIPELINE_PASSES
from kiln.renderers.toolchain import LLVM_PIPELINE, llvm_options
from kiln.uops import AxisKind, Context, DType, Ops, UOp, dtypes

pytest.importorskip("llvmlite")

PIPELINES = ("kernel", "O2")


def _matmul(size: int) -> UOp:
    return kernels.square_matmul_kernel(size, "pipeline_mm")


def test_the_default_pipeline_is_the_kernel_one() -> None:
    assert LLVM_PIPELINE.default == "kernel"
    assert LLVMRenderer().compiler.pipeline == "kernel"


def test_an_unknown_pipeline_is_refused_naming_the_choices() -> None:
    program = Program(get_program(_matmul(8), LLVMRenderer(), []))
    with pytest.raises(ValueError, match=r"'kernel', 'O2'"), Context(LLVM_PIPELINE="O3"):
        LLVMRenderer().compiler.compile(program.source)


def test_each_pipeline_has_its_own_compile_cache_key() -> None:
    compiler = LLVMRenderer().compiler
    source = "define void @kiln_kernel(ptr %out) {\nentry:\n  store i32 1, ptr %out\n  ret void\n}\n"
    keys, flags = {}, {}
    for pipeline in PIPELINES:
        with Context(LLVM_PIPELINE=pipeline):
            keys[pipeline], flags[pipeline] = compiler.cache_key(source), compiler.flags
    assert keys["kernel"] != keys["O2"]
    assert _compile_cache.path_of(keys["kernel"]) != _compile_cache.path_of(keys["O2"])
    # the passes themselves are in the key: changing the pipeline's passes changes every key
    assert all(name in flags["kernel"][0] for name in KERNEL_PIPELINE_PASSES)
    # -O2's entries are the ones binaries were cached under before the 'kernel' pipeline existed
    assert flags["O2"][:5] == ("-O2", "loop-vectorize", "slp-vectorize", "code-model=large", "reloc=static")
    for pipeline in PIPELINES:
        assert flags[pipeline][5:] == llvm_options(compiler.llvm)


def test_a_compile_under_one_pipeline_is_not_reused_for_the_other(tmp_path: object) -> None:
    compiler = LLVMRenderer().compiler
    program = Program(get_program(_matmul(16), LLVMRenderer()))
    with Context(CACHEDIR=str(tmp_path), DISABLE_COMPILER_CACHE=False):
        with Context(LLVM_PIPELINE="kernel"):
            kernel_binary = compiler.compile_cached(program.source)
        with Context(LLVM_PIPELINE="O2"):
            assert _compile_cache.get(compiler.cache_key(program.source)) is None  # no entry yet for -O2
            o2_binary = compiler.compile_cached(program.source)
            assert _compile_cache.get(compiler.cache_key(program.source)) == o2_binary
        with Context(LLVM_PIPELINE="kernel"):
            assert _compile_cache.get(compiler.cache_key(program.source)) == kernel_binary


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_the_register_tile_stays_in_registers(pipeline: str) -> None:
    # the heuristic's matmul tile accumulates in an alloca the renderer loads and stores whole; both pipelines must
    # promote it (SROA), or every step of the reduction goes through memory
    renderer = LLVMRenderer()
    program = Program(get_program(_matmul(64), renderer))
    assert " alloca " in program.source
    with Context(LLVM_PIPELINE=pipeline):
        optimized = renderer.compiler.optimized_ir(program.source)
    assert " alloca " not in optimized
    assert "phi <" in optimized  # the tile is a vector carried around the reduction loop


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("opts", [None, [], [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 2, 4)]], ids=str)
def test_matmul_matches_numpy_under_each_pipeline(pipeline: str, opts: list[Opt] | None) -> None:
    size = 32
    renderer = LLVMRenderer()
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    out = np.zeros(size * size, np.float32)
    with Context(LLVM_PIPELINE=pipeline, DISABLE_COMPILER_CACHE=True):
        program = Program(get_program(_matmul(size), renderer, opts))
        kernels.run_native(program, renderer.compiler, [out, a.reshape(-1), b.reshape(-1)], {})
    np.testing.assert_allclose(out.reshape(size, size), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_the_kernel_corpus_runs_like_numpy_under_each_pipeline(pipeline: str) -> None:
    corpus = kernels.load_corpus()
    renderer = LLVMRenderer()
    rng = np.random.default_rng(0)
    with Context(LLVM_PIPELINE=pipeline, DISABLE_COMPILER_CACHE=True):
        for case in corpus.CORPUS:
            program = Program(get_program(case.sink, renderer))
            inputs = case.inputs(rng)
            outputs = case.output_buffers()
            stored = [corpus.to_storage(v, d) for v, (d, _) in zip(inputs, case.buffers[case.outputs :], strict=False)]
            kernels.run_native(program, renderer.compiler, [*outputs, *stored], case.var_vals)
            got = [corpus.from_storage(raw, d) for raw, (d, _) in zip(outputs, case.buffers, strict=False)]
            corpus.assert_matches(case, got, case.reference(inputs, case.var_vals), case.exact)


@pytest.mark.parametrize(("dtype", "narrow"), [(dtypes.float16, True), (dtypes.int8, True), (dtypes.float32, False)])
def test_kernels_over_narrow_types_take_o2_under_the_kernel_pipeline(dtype: DType, narrow: bool) -> None:
    # float16 lanes are converted one by one by the renderer; LLVM's SLP vectorizer packs the conversions
    size = 64
    c, a = (UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), arg=slot) for slot in range(2))
    i = UOp.range(size, 0, AxisKind.LOOP)
    sink = UOp(Ops.SINK, dtypes.void, (c.index(i).store(a.index(i).load() + a.index(i).load()).end(i),))
    renderer = LLVMRenderer()
    program = Program(get_program(sink, renderer, [Opt(OptOps.UPCAST, 0, 8)]))
    compiler = renderer.compiler
    assert compiler.pipeline == "kernel"
    assert compiler.pipeline_for(program.source) == ("O2" if narrow else "kernel")
    with Context(LLVM_PIPELINE="O2"):
        assert compiler.pipeline_for(program.source) == "O2"
        o2 = compiler.optimized_ir(program.source)
    if narrow:
        assert compiler.optimized_ir(program.source) == o2


def test_a_compiler_pickles_without_llvmlite_objects_and_compiles_after() -> None:
    # BEAM sends the renderer to its build workers: llvmlite's module and target machine stay behind
    renderer = LLVMRenderer()
    program = Program(get_program(_matmul(8), renderer, []))
    copy = pickle.loads(pickle.dumps(renderer))
    assert copy.compiler.identity == renderer.compiler.identity
    with Context(DISABLE_COMPILER_CACHE=True):
        assert copy.compiler.compile(program.source) == renderer.compiler.compile(program.source)
