"""Tests of the LLVM IR renderer and its llvmlite compiler (skipped without llvmlite).

Every kernel is rendered, compiled in process to an object, linked in process (MCJIT) and run: codegen's corpus
against each case's numpy reference, the coverage kernels against codegen's interpreter bit for bit.
"""

from __future__ import annotations

import builtins
import os
import platform
import struct
import subprocess
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import cpu_kernels as kernels
import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="llvmlite is not installed (pip install 'kiln-renderers[llvm]')")

from kiln.codegen import KernelInfo, Opt, OptOps, Program, get_program, linearize, lower, optimize_kernel
from kiln.renderers import ENTRY_NAME, LLVMCompiler, LLVMRenderer, ToolchainNotFoundError, kernel_parameters
from kiln.renderers.toolchain import llvm_options
from kiln.uops import AxisKind, DType, Ops, UOp, dtypes

CORPUS = kernels.load_corpus().CORPUS
COVERAGE = kernels.coverage_cases()


pytestmark = pytest.mark.usefixtures("compile_every_time")  # the tests are about compiling (conftest.py)


@pytest.fixture(scope="module")
def renderer() -> LLVMRenderer:
    return LLVMRenderer()


@pytest.mark.parametrize("dtype", kernels.MAX_DTYPES, ids=lambda d: d.name)
def test_float_max_of_special_values_is_exec_alus(dtype: DType, renderer: LLVMRenderer) -> None:
    sink, buffers, expected = kernels.max_pairs_case(dtype)
    program = Program(get_program(sink, renderer, []))
    kernels.run_native(program, renderer.compiler, buffers, {})
    kernels.check_max_pairs(buffers[0], expected, dtype, buffers, f"LLVM IR {dtype.name}")


@pytest.mark.parametrize("dtype", kernels.NEGATIVE_CONSTANT_DTYPES, ids=lambda d: d.name)
def test_negative_constants_compile_and_compute(dtype: DType, renderer: LLVMRenderer) -> None:
    sink, buffers, expected = kernels.negative_constants_case(dtype)
    program = Program(get_program(sink, renderer, []))
    kernels.run_native(program, renderer.compiler, buffers, {})
    kernels.check_negative_constants(buffers, expected, dtype, f"LLVM IR {dtype.name}")


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_corpus_runs_like_numpy(case: Any, renderer: LLVMRenderer) -> None:
    kernels.run_corpus_case(case, renderer, np.random.default_rng(1))


@pytest.mark.parametrize(("name", "sink", "opts", "var_vals"), COVERAGE, ids=[case[0] for case in COVERAGE])
def test_coverage_kernel_matches_interpreter(
    name: str, sink: UOp, opts: list[Opt] | None, var_vals: dict[str, int], renderer: LLVMRenderer
) -> None:
    kernels.check_against_reference(sink, renderer, opts, var_vals)


@pytest.mark.parametrize("dtype", kernels.LINEAR_DTYPES, ids=lambda d: d.name)
def test_hand_built_vector_program_matches_interpreter(dtype: DType, renderer: LLVMRenderer) -> None:
    source = kernels.check_linear_program(kernels.vector_program(dtype), renderer)
    assert (
        "load <4 x i8>" in source if dtype in (dtypes.bool, dtypes.fp8e4m3, dtypes.fp8e5m2) else "load <4 x " in source
    )


def test_source_is_vector_ir_with_the_abi(renderer: LLVMRenderer) -> None:
    sink, opts = kernels.wide_copy_kernel()
    source = Program(get_program(sink, renderer, opts)).source
    assert "load <4 x float>, ptr" in source and "store <4 x float>" in source
    program = Program(get_program(kernels.symbolic_kernel(), renderer, [Opt(OptOps.THREAD, 0, 2)]))
    header = next(line for line in program.source.splitlines() if line.startswith("define"))
    assert header == (
        f"define void @{ENTRY_NAME}(ptr noalias %data0, ptr noalias readonly %data1, i32 %var_m, i32 %var_n, "
        "i32 %core_id) nounwind {"
    )
    assert [p.kind for p in kernel_parameters(program.signature)] == [
        "buffer",
        "buffer",
        "variable",
        "variable",
        "core_id",
    ]


def test_multi_core_kernel_with_int64_offsets_widens_the_int32_core_id(renderer: LLVMRenderer) -> None:
    program = kernels.check_threaded_gather(renderer)
    assert "i32 %core_id) nounwind {" in program.source
    assert "sext i32 %core_id to i64" in program.source
    with pytest.raises(ValueError, match=r"core_id is the kernel's i32 parameter, got a SPECIAL of dtypes\.int64"):
        renderer.render(kernels.wide_core_id_program(), "wide_core_id")


def test_an_integer_accumulator_over_a_deep_shared_dag_compiles_in_seconds(renderer: LLVMRenderer) -> None:
    # LLVM 22's CRC recognizer walked this kernel's use-def chains in exponential time (16 rounds: 16 s; 20, the
    # fused Tensor.normal(16, 64, 3).max() of the init-fusion fuzzer: hours) until LLVM_OPTIONS turned it off. In a
    # subprocess, so that a regression fails at the timeout instead of hanging the run.
    script = (
        "import cpu_kernels as kernels\n"
        "from kiln.codegen import Program, get_program\n"
        "from kiln.renderers import LLVMRenderer\n"
        "sink, opts = kernels.threefry_max_case()\n"
        "assert Program(get_program(sink, LLVMRenderer(), opts)).binary is not None\n"
    )
    environment = {**os.environ, "DISABLE_COMPILER_CACHE": "1"}
    # in this folder: `python -c` puts the working directory first on sys.path, so cpu_kernels imports
    subprocess.run([sys.executable, "-c", script], env=environment, timeout=60, check=True, cwd=Path(__file__).parent)
    sink, opts = kernels.threefry_max_case()
    assert renderer.compiler.flags[5:] == llvm_options(renderer.compiler.llvm)  # part of the compile-cache key
    out, key = np.zeros(1, np.float32), np.array([0x9E3779B9], np.uint32)
    kernels.run_native(Program(get_program(sink, renderer, opts)), renderer.compiler, [out, key], {})
    expected = _threefry_max_reference(0x9E3779B9)
    assert out[0] == expected


def _threefry_max_reference(key: int, rounds: int = 20) -> np.float32:
    word0, word1 = np.arange(16 * 64 * 3, dtype=np.uint32), np.full(16 * 64 * 3, key, np.uint32)
    for number in range(rounds):
        bits = np.uint32((13, 15, 26, 6, 17, 29, 16, 24)[number % 8])
        word0 = word0 + word1
        word1 = ((word1 << bits) | (word1 >> (np.uint32(32) - bits))) ^ word0
    return np.float32((word0 >> np.uint32(8)).astype(np.float32).max())


def test_binary_is_a_relocatable_object_and_keys_name_llvm_and_cpu(renderer: LLVMRenderer) -> None:
    program = Program(get_program(kernels.gated_kernel(), renderer))
    assert program.binary is not None and program.binary[:4] == b"\x7fELF"
    assert program.binary[16] == 1  # e_type ET_REL: linked in process, not by the dynamic loader
    key = renderer.compiler.cache_key(program.source)
    assert "LLVM" in key and "cpu=" in key and "-O2" in key


def test_invalid_ir_names_the_problem(renderer: LLVMRenderer) -> None:
    with pytest.raises(RuntimeError, match="LLVM rejected the kernel"):
        renderer.compiler.compile("define void @kiln_kernel() {\nentry:\n  ret i32 0\n}\n")


def test_missing_llvmlite_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def without_llvmlite(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("llvmlite"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_llvmlite)
    renderer = LLVMRenderer()
    sink = kernels.gated_kernel()
    uops = linearize(lower(optimize_kernel(sink, renderer, []), renderer))
    source = renderer.render(uops, "kernel")  # needs no llvmlite
    assert f"@{ENTRY_NAME}" in source
    with pytest.raises(ToolchainNotFoundError, match=r"kiln-renderers\[llvm\]"):
        LLVMCompiler().compile(source)


# ---- vector ALU ops (LLVMRenderer.vector_alu) -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["alu", "cast", "transcendental"])
@pytest.mark.parametrize(
    "dtype", [dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint8, dtypes.int64, dtypes.int16]
)
def test_vector_kernels_match_interpreter(kind: str, dtype: DType, renderer: LLVMRenderer) -> None:
    # every ALU op / cast (WHERE, comparisons, float -> int lane by lane ...) on 16 lanes, bit for bit
    if kind == "transcendental" and not dtypes.is_float(dtype):
        pytest.skip("transcendentals are float ops")
    sink = {"alu": kernels.alu_kernel, "cast": kernels.cast_kernel, "transcendental": kernels.transcendental_kernel}[
        kind
    ](dtype)
    program = kernels.check_against_reference(sink, renderer, [Opt(OptOps.UPCAST, 0, 16)])
    assert any(f"<16 x {t}>" in program.source for t in ("float", "double", "i32", "i8", "i64", "i1"))


def test_matmul_tile_is_fused_vector_code_and_matches_numpy(renderer: LLVMRenderer) -> None:
    size = 64
    program = Program(get_program(kernels.square_matmul_kernel(size), renderer))
    # the heuristic's register tile: rows x 32 columns, accumulated with one fma per 16-lane register
    assert "@llvm.fma.v" in program.source and "load <16 x float>" in program.source
    _check_matmul(program, renderer, size, seed=3)


def _check_matmul(program: Program, renderer: LLVMRenderer, size: int, seed: int) -> None:
    """Runs a `kernels.square_matmul_kernel(size)` program natively on random inputs against numpy."""
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    out = np.zeros(size * size, np.float32)
    kernels.run_native(program, renderer.compiler, [out, a.reshape(-1), b.reshape(-1)], {})
    np.testing.assert_allclose(out.reshape(size, size), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_output_loops_carry_llvms_no_unroll_hint_and_reduction_loops_do_not(renderer: LLVMRenderer) -> None:
    # no opts: two output loops (i, j) around a reduction loop (k), each with its own latch branch
    size = 8
    program = Program(get_program(kernels.square_matmul_kernel(size), renderer, []))
    latches = [line.strip() for line in program.source.splitlines() if "%loop_again" in line and "br i1" in line]
    assert len(latches) == 3
    hinted = [line for line in latches if ", !llvm.loop !" in line]
    assert len(hinted) == 2 and "%loop_again2" not in " ".join(hinted)  # k (the innermost, reduce) is left alone
    nodes = [line.rsplit("!llvm.loop ", 1)[1] for line in hinted]
    assert len(set(nodes)) == 2  # one distinct loop ID per loop (LangRef: loop IDs must not be shared)
    definitions = dict(line.split(" = ", 1) for line in program.source.splitlines() if line.startswith("!"))
    assert definitions["!0"] == '!{!"llvm.loop.unroll.disable"}'
    for node in nodes:
        assert definitions[node] == f"distinct !{{{node}, !0}}"
    # LLVM keeps the hint through its pipeline, and the kernel still computes the matmul
    optimized = renderer.compiler.optimized_ir(program.source)
    assert "llvm.loop.unroll.disable" in optimized
    _check_matmul(program, renderer, size, seed=5)


def test_llvm_does_not_unroll_a_hinted_output_loop(renderer: LLVMRenderer) -> None:
    # out[i] = a[i] * 3 over 32 elements, upcast by 4 (kiln's own vector body; LLVM's loop vectorizer leaves loops of
    # vector code alone): LLVM fully unrolls the loop of eight iterations unless told not to, so the hinted kernel's
    # optimized IR keeps one store in a loop (a phi), where the same source without the hint gets eight stores
    size = 32
    out, a = (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=slot) for slot in range(2))
    i = UOp.range(size, 0, AxisKind.LOOP)
    sink = UOp(Ops.SINK, dtypes.void, (out.index(i).store(a.index(i).load() * 3.0).end(i),), KernelInfo("triple"))
    program = Program(get_program(sink, renderer, [Opt(OptOps.UPCAST, 0, 4)]))
    hinted = renderer.compiler.optimized_ir(program.source)
    unhinted = renderer.compiler.optimized_ir(program.source.replace(", !llvm.loop !1", ""))
    assert hinted.count("store <4 x float>") == 1 and " phi " in hinted
    assert unhinted.count("store <4 x float>") == 8 and " phi " not in unhinted
    values = np.arange(size, dtype=np.float32) - 7.5
    result = np.zeros(size, np.float32)
    kernels.run_native(program, renderer.compiler, [result, values], {})
    np.testing.assert_array_equal(result, values * 3)


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads the CPU flags from Linux's /proc/cpuinfo")
def test_register_tile_lanes_follow_the_host_vector_registers(renderer: LLVMRenderer) -> None:
    # the kernel's own list of CPU flags is the oracle: 32 AVX-512 registers of 16 lanes keep 256 accumulator lanes,
    # 16 AVX2 registers of 8 lanes keep 64
    flags = set(Path("/proc/cpuinfo").read_text().split())
    assert renderer.register_tile_lanes == (256 if "avx512f" in flags else 64)


def test_a_kernel_dropped_on_another_thread_is_disposed_under_the_compile_lock(renderer: LLVMRenderer) -> None:
    # LLVM's global context is not thread-safe: a kernel released on a queue's worker thread (or by the garbage
    # collector running there) must not dispose its engine while the main thread compiles; it is queued instead
    program = Program(get_program(kernels.gated_kernel(), renderer))
    assert program.binary is not None
    compiler = renderer.compiler
    held = [compiler.load(program.binary, program.signature)]
    engine = weakref.ref(held[0].keepalive[0].engine)
    worker = threading.Thread(target=held.clear)
    worker.start()
    worker.join()
    assert not held and engine() is not None  # dropped on the worker, but only queued
    compiler.compile(program.source)
    assert engine() is None  # disposed by the next compile, which holds the lock


def _relocation_types(binary: bytes) -> set[int]:
    """The x86-64 relocation types (ELF64_R_TYPE of every entry of every SHT_RELA section) of an ELF64 object."""
    (section_offset,) = struct.unpack_from("<Q", binary, 0x28)  # e_shoff
    entry_size, count = struct.unpack_from("<HH", binary, 0x3A)  # e_shentsize, e_shnum
    types: set[int] = set()
    for index in range(count):
        header = section_offset + index * entry_size
        (kind,) = struct.unpack_from("<I", binary, header + 4)  # sh_type
        if kind != 4:  # SHT_RELA
            continue
        offset, size = struct.unpack_from("<QQ", binary, header + 0x18)  # sh_offset, sh_size
        for entry in range(offset, offset + size, 24):  # Elf64_Rela: r_offset, r_info, r_addend
            (info,) = struct.unpack_from("<Q", binary, entry + 8)
            types.add(info & 0xFFFFFFFF)
    return types


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 relocation types")
def test_kernels_address_their_constants_with_64_bit_relocations(renderer: LLVMRenderer) -> None:
    # MCJIT places a kernel's sections independently: a 32-bit PC-relative reference from the code to its constant
    # pool overflowed once they landed over 2 GiB apart, and LLVM aborted the process (the lost pytest worker)
    program = Program(get_program(kernels.alu_kernel(dtypes.float32), renderer, []))  # exp2, sin...: constants
    assert program.binary is not None
    types = _relocation_types(program.binary)
    assert types and types <= {1}, f"relocation types {sorted(types)}; only R_X86_64_64 (1) is safe under MCJIT"


def test_loads_ask_llvm_for_the_host_cpu_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # the host CPU's name and features are read once (compiles and loads never ask again)
    program = Program(get_program(kernels.gated_kernel(), LLVMRenderer()))
    assert program.source is not None
    compiler = LLVMCompiler()
    llvm = compiler.llvm
    asked: list[str] = []
    real_features, real_name = llvm.get_host_cpu_features, llvm.get_host_cpu_name
    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: asked.append("features") or real_features())
    monkeypatch.setattr(llvm, "get_host_cpu_name", lambda: asked.append("name") or real_name())
    binary = compiler.compile(program.source)
    loaded = [compiler.load(binary, program.signature) for _ in range(3)]
    assert sorted(asked) == ["features", "name"]
    assert compiler.host_cpu == (real_name(), real_features().flatten())
    assert len({kernel.address for kernel in loaded}) == 3  # three engines, each with its own copy of the code


def test_load_links_the_object_without_running_the_code_generator(renderer: LLVMRenderer) -> None:
    # an MCJIT engine runs the code generator on every IR module it holds when finalized, an empty one too (its
    # module passes, such as the pre-ISel intrinsic lowering, are timed); a load holds none: it only links the object
    program = Program(get_program(kernels.gated_kernel(), renderer))
    assert program.binary is not None
    compiler = renderer.compiler
    llvm = compiler.llvm
    llvm.set_time_passes(True)
    try:
        loaded = [compiler.load(program.binary, program.signature) for _ in range(2)]
        loads_report = llvm.report_and_reset_timings()
        compiler.compile(program.source)
        compile_report = llvm.report_and_reset_timings()
    finally:
        llvm.set_time_passes(False)
    assert "Pre-ISel Intrinsic Lowering" in compile_report  # the timers do see the code generator
    assert "Pre-ISel Intrinsic Lowering" not in loads_report
    assert len({kernel.address for kernel in loaded}) == 2 and all(kernel.address for kernel in loaded)


# ---- exp2's power-of-two scaling as llvm.ldexp (AVX-512 hosts) ----------------------------------------------------


def _exp2_sweep_kernel(size: int) -> UOp:
    out, x = (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=slot) for slot in range(2))
    i = UOp.range(size, 0, AxisKind.LOOP)
    return UOp(Ops.SINK, dtypes.void, (out.index(i).store(x.index(i).load().alu(Ops.EXP2)).end(i),), KernelInfo("e"))


@pytest.mark.parametrize("lanes", [1, 16])
def test_exp2_scaling_as_ldexp_gives_the_bits_of_the_two_factor_scaling(lanes: int, renderer: LLVMRenderer) -> None:
    # exp2's result v * 2**w is built from two normal factors (one rounding); llvm.ldexp rounds the same product
    # once: the bits must be the interpreter's for arguments whose results are normal, subnormal (-126 .. -150),
    # zero, inf and nan, and the program without the ldexp form must give the same bits
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 127.99999, 128.0, -149.0, -149.5, -150.0, -150.5, -126.0]
    sweep = np.concatenate([np.linspace(-160, 160, 4096 - 128 - len(special)), np.linspace(-151, -124, 128), special])
    x = sweep.astype(np.float32)
    opts = [Opt(OptOps.UPCAST, 0, lanes)] if lanes > 1 else []
    results = {}
    for vector_ldexp in (renderer.vector_ldexp, False):
        plain = LLVMRenderer()
        plain.vector_ldexp = vector_ldexp
        program = Program(get_program(_exp2_sweep_kernel(x.size), plain, opts))
        assert ("@llvm.ldexp" in program.source) == vector_ldexp
        out = np.zeros_like(x)
        kernels.run_native(program, plain.compiler, [out, x], {})
        reference = np.zeros_like(x)
        kernels.run_reference(program, [reference, x], {})
        assert kernels.same_bits(dtypes.float32, out, reference).all(), (x[out != reference], out[out != reference])
        results[vector_ldexp] = out
    np.testing.assert_array_equal(results[renderer.vector_ldexp], results[False])
    subnormal = (x > -149) & (x < -126)
    assert (results[False][subnormal] > 0).all() and (results[False][subnormal] < np.finfo(np.float32).tiny).all()


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads the CPU flags from Linux's /proc/cpuinfo")
def test_ldexp_scaling_follows_the_host_avx512(renderer: LLVMRenderer) -> None:
    # without AVX-512F LLVM would call libm's ldexpf lane by lane: the bit-built factors stay
    flags = set(Path("/proc/cpuinfo").read_text().split())
    assert renderer.vector_ldexp == ("avx512f" in flags)
