"""Tests of the C renderer and its compiler (gcc and clang, each skipped when not installed).

Every kernel is rendered, compiled to a shared object, loaded with ctypes and run: codegen's corpus against each
case's numpy reference, the coverage kernels against codegen's interpreter bit for bit (cpu_kernels.py).
"""

from __future__ import annotations

import ctypes
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import cpu_kernels as kernels
import numpy as np
import pytest

from kiln.codegen import (
    KernelInfo,
    KernelSignature,
    Opt,
    OptOps,
    Program,
    get_program,
    linearize,
    lower,
    optimize_kernel,
)
from kiln.renderers import (
    ENTRY_NAME,
    CCompiler,
    CompileError,
    CRenderer,
    ToolchainNotFoundError,
    kernel_parameters,
)
from kiln.renderers.c import C_FLAGS
from kiln.uops import AxisKind, DType, Ops, UOp, dtypes

COMPILERS = [
    pytest.param(name, marks=pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} is not installed"))
    for name in ("gcc", "clang")
]
CORPUS = kernels.load_corpus().CORPUS
COVERAGE = kernels.coverage_cases()


pytestmark = pytest.mark.usefixtures("compile_every_time")  # the tests are about compiling (conftest.py)


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_corpus_runs_like_numpy(case: Any, compiler: str) -> None:
    kernels.run_corpus_case(case, CRenderer(compiler), np.random.default_rng(1))


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize(("name", "sink", "opts", "var_vals"), COVERAGE, ids=[case[0] for case in COVERAGE])
def test_coverage_kernel_matches_interpreter(
    name: str, sink: UOp, opts: list[Opt] | None, var_vals: dict[str, int], compiler: str
) -> None:
    kernels.check_against_reference(sink, CRenderer(compiler), opts, var_vals)


class _EmulatedHalfRenderer(CRenderer):
    """The C renderer as it is for compilers without _Float16 (clang < 15 on most x86 CPUs)."""

    emulated_dtypes = frozenset({dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.float16})


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize(
    "sink",
    [
        kernels.alu_kernel(dtypes.float16),
        kernels.cast_kernel(dtypes.float16),
        kernels.cast_kernel(dtypes.float64),
        kernels.bitcast_kernel(dtypes.float16),
    ],
    ids=["alu", "cast_from", "cast_to", "bitcast"],
)
def test_float16_without_compiler_support_matches_interpreter(sink: UOp, compiler: str) -> None:
    program = kernels.check_against_reference(sink, _EmulatedHalfRenderer(compiler), [])
    assert "_Float16" not in program.source


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("emulated", [False, True], ids=["native", "emulated_half"])
@pytest.mark.parametrize("dtype", kernels.MAX_DTYPES, ids=lambda d: d.name)
def test_float_max_of_special_values_is_exec_alus(dtype: DType, emulated: bool, compiler: str) -> None:
    if emulated and dtype != dtypes.float16:
        pytest.skip("only float16 has an emulated form")
    renderer = _EmulatedHalfRenderer(compiler) if emulated else CRenderer(compiler)
    sink, buffers, expected = kernels.max_pairs_case(dtype)
    program = Program(get_program(sink, renderer, []))
    kernels.run_native(program, renderer.compiler, buffers, {})
    kernels.check_max_pairs(buffers[0], expected, dtype, buffers, f"C ({compiler}) {dtype.name}")


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("dtype", kernels.NEGATIVE_CONSTANT_DTYPES, ids=lambda d: d.name)
def test_negative_constants_compile_and_compute(dtype: DType, compiler: str) -> None:
    # `x - c`, `-c`, MAX(x, c) with c < 0: a bare `x--1.25f` is a decrement to gcc ("lvalue required")
    sink, buffers, expected = kernels.negative_constants_case(dtype)
    renderer = CRenderer(compiler)
    program = Program(get_program(sink, renderer, []))
    assert "--" not in program.source
    kernels.run_native(program, renderer.compiler, buffers, {})
    kernels.check_negative_constants(buffers, expected, dtype, f"C ({compiler}) {dtype.name}")


def _saxpy_sink(size: int) -> UOp:
    i = UOp.range(size, 0, AxisKind.LOOP)
    out, x, y = (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=slot) for slot in range(3))
    value = x.index(i).load() * 2.5 + y.index(i).load()
    return UOp(Ops.SINK, src=(out.index(i).store(value).end(i),), arg=KernelInfo("saxpy"))


@pytest.mark.parametrize("compiler", COMPILERS)
def test_threaded_kernel_on_python_threads_matches_numpy(compiler: str) -> None:
    # core_id kernels run concurrently: each core takes its own slice
    size = 4096
    program = Program(get_program(_saxpy_sink(size), CRenderer(compiler), [Opt(OptOps.THREAD, 0, 2)]))
    assert [p.kind for p in kernel_parameters(program.signature)] == ["buffer"] * 3 + ["core_id"]
    assert program.binary is not None
    kernel = CRenderer(compiler).compiler.load(program.binary, program.signature)
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(size).astype(np.float32), rng.standard_normal(size).astype(np.float32)
    out = np.zeros(size, np.float32)
    cores = program.launch_dims()[0][0]
    assert cores == 2
    threads = [
        threading.Thread(target=kernel, args=(out.ctypes.data, x.ctypes.data, y.ctypes.data, core))
        for core in range(cores)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    np.testing.assert_array_equal(out, x * np.float32(2.5) + y)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_multi_core_kernel_with_int64_offsets_widens_the_int_core_id(compiler: str) -> None:
    program = kernels.check_threaded_gather(CRenderer(compiler))
    assert "int core_id)" in program.source and "((long long)core_id)" in program.source
    with pytest.raises(ValueError, match=r"core_id is the kernel's int parameter, got a SPECIAL of dtypes\.int64"):
        CRenderer(compiler).render(kernels.wide_core_id_program(), "wide_core_id")


def _division_sink(dtype: DType) -> UOp:
    i = UOp.range(6, 0, AxisKind.LOOP)
    quotient, remainder, a, b = (UOp(Ops.DEFINE_GLOBAL, dtype.ptr(6), arg=slot) for slot in range(4))
    x, y = a.index(i).load(), b.index(i).load()
    effects = (quotient.index(i).store(x.idiv(y)).end(i), remainder.index(i).store(x.mod(y)).end(i))
    return UOp(Ops.SINK, src=effects, arg=KernelInfo("division"))


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint32])
def test_division_by_zero_and_minus_one_do_not_trap(dtype: DType, compiler: str) -> None:
    # C would trap (SIGFPE) on x / 0 and INT_MIN / -1; the kernel gives 0 and the wrapped quotient instead
    numpy_dtype = np.dtype(f"{'u' if dtypes.is_unsigned(dtype) else ''}int{dtype.itemsize * 8}")
    low = np.iinfo(numpy_dtype).min
    a = np.array([7, -7 if low else 9, low, low, 5, 0], numpy_dtype)
    b = np.array([2, 2, -1 if low else 1, 0, 0, 3], numpy_dtype)
    program = Program(get_program(_division_sink(dtype), CRenderer(compiler), []))
    quotient, remainder = np.zeros(6, numpy_dtype), np.zeros(6, numpy_dtype)
    kernels.run_native(program, CRenderer(compiler).compiler, [quotient, remainder, a, b], {})
    expected_q = [3, -3 if low else 4, low if low else 0, 0, 0, 0]
    expected_r = [1, -1 if low else 1, 0, 0, 0, 0]
    assert quotient.tolist() == expected_q
    assert remainder.tolist() == expected_r


def test_source_follows_the_abi() -> None:
    # buffers by slot (const when only read), variables sorted by name, core_id last; restrict everywhere
    sink = kernels.symbolic_kernel()
    program = Program(get_program(sink, CRenderer(), [Opt(OptOps.THREAD, 0, 2)]))
    signature = re.search(rf"void {ENTRY_NAME}\((.*)\) {{", program.source)
    assert signature is not None
    assert signature.group(1).split(", ") == [
        "long long* restrict data0",
        "const long long* restrict data1",
        "int var_m",
        "int var_n",
        "int core_id",
    ]
    assert [(p.kind, p.name) for p in kernel_parameters(program.signature)] == [
        ("buffer", "0"),
        ("buffer", "1"),
        ("variable", "m"),
        ("variable", "n"),
        ("core_id", "core_id"),
    ]


def test_wide_accesses_use_vector_types() -> None:
    sink, opts = kernels.wide_copy_kernel()
    source = Program(get_program(sink, CRenderer(), opts)).source
    assert "typedef float float32x4 __attribute__((vector_size(16), aligned(4), may_alias));" in source
    assert "*((float32x4*)(data" in source


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("dtype", kernels.LINEAR_DTYPES, ids=lambda d: d.name)
def test_hand_built_vector_program_matches_interpreter(dtype: DType, compiler: str) -> None:
    # wide and gated wide loads, lanes, vectors and wide stores of every dtype (bool included, as bytes)
    source = kernels.check_linear_program(kernels.vector_program(dtype), CRenderer(compiler))
    if dtype == dtypes.bool:
        assert "typedef unsigned char boolx4" in source  # GCC has no vectors of _Bool


def test_flags_keep_numerics() -> None:
    compiler = CCompiler()
    assert "-ffp-contract=off" in compiler.flags and "-fwrapv" in compiler.flags
    assert not any("fast-math" in flag or "Ofast" in flag or "finite-math" in flag for flag in compiler.flags)
    assert C_FLAGS[0] == "-O2"


@pytest.mark.parametrize("compiler", COMPILERS)
def test_cache_key_names_compiler_version_flags_and_cpu(compiler: str) -> None:
    c_compiler = CCompiler(compiler)
    key = c_compiler.cache_key("int x;")
    assert c_compiler.toolchain.version in key and "-march=native" in key and "cpu=" in key
    other = CCompiler("clang" if compiler == "gcc" else "gcc")
    if shutil.which(other.choice or "") is not None:
        assert other.cache_key("int x;") != key


@pytest.mark.parametrize("compiler", COMPILERS)
def test_compile_errors_name_the_problem_and_leave_no_files(
    compiler: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    c_compiler = CCompiler(compiler)
    with pytest.raises(CompileError, match=r"undeclared|undefined"):
        c_compiler.compile("void kiln_kernel(void) { missing_name = 1; }")
    binary = c_compiler.compile("void kiln_kernel(int* restrict out) { *out = 42; }")
    assert binary.startswith(b"\x7fELF")
    assert list(tmp_path.iterdir()) == []
    kernel = c_compiler.load(binary, KernelSignature.of([UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(1), arg=0)]))
    value = ctypes.c_int32(0)
    kernel(ctypes.addressof(value))
    assert value.value == 42
    assert list(tmp_path.iterdir()) == []


def test_missing_compiler_names_what_to_install() -> None:
    renderer = CRenderer("kiln-no-such-compiler")
    uops = linearize(lower(optimize_kernel(_saxpy_sink(8), renderer, []), renderer))
    source = renderer.render(uops, "kernel")  # rendering needs no compiler
    assert ENTRY_NAME in source
    with pytest.raises(ToolchainNotFoundError, match="apt-get install"):
        renderer.compiler.compile(source)


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump is not installed")
def test_disassembly_shows_the_kernel() -> None:
    program = Program(get_program(_saxpy_sink(64), CRenderer()))
    assert program.binary is not None
    assert f"<{ENTRY_NAME}>:" in CCompiler().disassemble(program.binary)
