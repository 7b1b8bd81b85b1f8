"""The PTX renderer and its ptxas-validating compiler.

Every kernel of codegen's corpus and of the coverage set (every op for every dtype, every cast and bit cast, vector
accesses, gates, variables, shared memory and barriers, tensor cores) is rendered and assembled by ptxas for sm_80
and sm_90; the module's interface (parameters, block size, shared memory) is checked against the linear program;
and the PTX, run by a Python model of its instructions (`ptx_model.py`), computes what numpy and codegen's
reference interpreter compute.
"""

from __future__ import annotations

import math
import re

import cpu_kernels
import numpy as np
import pytest
from gpu_kernels import (
    CORPUS,
    alu_kernel,
    cast_kernel,
    coverage_sinks,
    from_storage,
    input_arrays,
    mulacc_extremes_case,
    to_storage,
    undefined_cast_lanes,
    wmma_program,
)
from ptx_model import PTXModel

from kiln.codegen import Program, get_program, run_program
from kiln.renderers import ptx as ptx_module
from kiln.renderers.ptx import PTX_VERSION, PTXAssemblerError, PTXCompiler, PTXRenderer, find_ptxas
from kiln.renderers.ptx_rules import float_literal
from kiln.renderers.tensor_cores import TENSOR_CORES_SM80
from kiln.renderers.toolchain import ToolchainNotFoundError
from kiln.uops import DType, Ops, PtrDType, dtypes
from kiln.uops.knobs import Context

needs_ptxas = pytest.mark.usefixtures("requires_ptxas")  # conftest.py: a failure instead of a skip in CI
ARCHITECTURES = ("sm_80", "sm_90")


def test_float_literals_are_exact_bit_patterns() -> None:
    assert float_literal(1.0, dtypes.float32) == "0f3F800000"
    assert float_literal(-2.5, dtypes.float32) == "0fC0200000"
    assert float_literal(1.0, dtypes.float64) == "0d3FF0000000000000"
    assert float_literal(math.inf, dtypes.float32) == "0f7F800000"
    assert float_literal(2.0**63, dtypes.float64) == "0d43E0000000000000"


def _interface_matches(program: Program, arch: str) -> None:
    source = program.source
    assert source.startswith("// kiln PTXRenderer kernel") and f".version {PTX_VERSION}\n.target {arch}\n" in source
    parameters = re.findall(r"\.param \.(\w+) (\w+)", source)
    expected = [("u64", f"data{slot}") for slot in program.globals]
    expected += [("s32" if v.dtype == dtypes.int32 else "s64", "var_" + v.arg.name) for v in program.variables]
    assert sorted(parameters) == sorted(expected)
    threads = math.prod(program.launch_dims({v.arg.name: v.arg.hi for v in program.variables})[1])
    assert f".maxntid {threads}, 1, 1" in source
    shared = sum(
        u.dtype.size * u.dtype.base.scalar().itemsize
        for u in program.uops
        if u.op is Ops.DEFINE_LOCAL and isinstance(u.dtype, PtrDType)
    )
    declared = sum(int(size) for size in re.findall(r"\.shared \.align 16 \.b8 \w+\[(\d+)\]", source))
    assert declared == shared
    assert source.count("bar.sync 0;") == sum(u.op is Ops.BARRIER for u in program.uops)


@needs_ptxas
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_kernel_assembles(arch: str) -> None:
    renderer = PTXRenderer(arch)
    for name, sink, opts in coverage_sinks():
        program = Program(get_program(sink, renderer, opts))  # the compiler runs ptxas: a rejection raises
        assert program.binary == program.source.encode(), name
        assert renderer.compiler.disassemble(program.binary) == program.source
        _interface_matches(program, arch)


@needs_ptxas
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tensor_cores_assemble(arch: str) -> None:
    renderer = PTXRenderer(arch)
    for core in renderer.tensor_cores:
        source = renderer.render(wmma_program(core, renderer), "wmma")
        inputs = "bf16.bf16" if core.dtype_in == dtypes.bfloat16 else "f16.f16"
        accumulate = "f32" if core.dtype_out == dtypes.float32 else "f16"
        assert source.count(f"mma.sync.aligned.m16n8k16.row.col.{accumulate}.{inputs}.{accumulate}") == 1
        cubin = renderer.compiler.assemble(source)
        assert cubin[:4] == b"\x7fELF" and b"kiln_kernel" in cubin
    with pytest.raises(ValueError, match="no tensor core"):
        PTXRenderer("sm_75").render(wmma_program(TENSOR_CORES_SM80[0], PTXRenderer("sm_80")), "wmma")


@needs_ptxas
def test_ptxas_errors_carry_the_log() -> None:
    bad = f".version {PTX_VERSION}\n.target sm_80\n.address_size 64\n.visible .entry k() {{ not_an_instruction; }}\n"
    with pytest.raises(PTXAssemblerError, match="not_an_instruction"):
        PTXCompiler("sm_80").compile(bad)


def test_without_ptxas_the_text_passes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ptx_module, "find_ptxas", lambda: None)
    text = "// any PTX, validated later by the driver's JIT\n"
    compiler = PTXCompiler("sm_90")
    assert compiler.compile(text) == text.encode()
    assert compiler.identity == f"ptx {PTX_VERSION}"
    with pytest.raises(ToolchainNotFoundError, match="ptxas"):
        compiler.assemble(text)
    assert PTXCompiler("sm_90", validate=False).compile(text) == text.encode()


def test_a_missing_chosen_ptxas_is_named() -> None:
    with Context(PTXAS="/nonexistent/ptxas"), pytest.raises(ToolchainNotFoundError, match="/nonexistent/ptxas"):
        find_ptxas()


def test_unsupported_architecture_and_index() -> None:
    with pytest.raises(ValueError, match="sm_70"):
        PTXRenderer("sm_70")
    assert PTXCompiler("sm_80").cache_key("x") != PTXCompiler("sm_90").cache_key("x")


# ---- running the PTX in a model of the instructions ---------------------------------------------------------------


class TextPTXRenderer(PTXRenderer):
    """The PTX renderer without its compiler: get_program stops at the PTX text."""

    compiler = None  # type: ignore[assignment]


def _run_model(program: Program, buffers: list[np.ndarray], var_vals: dict[str, int]) -> None:
    global_size, local_size = program.launch_dims(var_vals)
    PTXModel(program.source).run(buffers, var_vals, global_size, local_size)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_float_max_of_special_values_is_exec_alus(dtype: DType) -> None:
    """The model's `max` returns its first operand on a tie (the ISA leaves +0 / -0 open): the PTX must not care."""
    sink, buffers, expected = cpu_kernels.max_pairs_case(dtype)
    program = Program(get_program(sink, TextPTXRenderer("sm_80"), []))
    _run_model(program, buffers, {})
    cpu_kernels.check_max_pairs(buffers[0], expected, dtype, buffers, f"PTX model {dtype.name}")


@pytest.mark.parametrize("dtype", cpu_kernels.NEGATIVE_CONSTANT_DTYPES, ids=lambda d: d.name)
def test_negative_constants_in_the_model_compute_like_numpy(dtype: DType) -> None:
    # PTX immediates: floats as exact 0f/0d bit patterns, integers as their two's-complement bits (never `--`)
    sink, buffers, expected = cpu_kernels.negative_constants_case(dtype)
    program = Program(get_program(sink, TextPTXRenderer("sm_80"), []))
    assert "--" not in program.source
    _run_model(program, buffers, {})
    cpu_kernels.check_negative_constants(buffers, expected, dtype, f"PTX model {dtype.name}")


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_mulacc_is_fused_at_the_edges_of_the_range(dtype: DType) -> None:
    # MULACC is fma.rn: one rounding, and no overflow inside (codegen's fma emulation gave NaN for 0 * max + c)
    sink, buffers, expected = mulacc_extremes_case(dtype)
    program = Program(get_program(sink, TextPTXRenderer("sm_80"), []))
    assert f"fma.rn.{'f32' if dtype == dtypes.float32 else 'f64'}" in program.source
    _run_model(program, buffers, {})
    np.testing.assert_array_equal(buffers[0], expected)


def test_corpus_in_the_model_matches_numpy() -> None:
    renderer = TextPTXRenderer("sm_80")
    ran = 0
    for case in CORPUS:
        inputs = case.inputs(np.random.default_rng(5))
        expected = case.reference(inputs, case.var_vals)
        for opts in ([], None):
            program = Program(get_program(case.sink, renderer, opts))
            if any(u.op is Ops.BARRIER for u in program.uops):
                continue  # the model runs threads one after another
            stored = [to_storage(values, dtype) for values, (dtype, _) in zip(inputs, case.buffers[case.outputs :])]
            arrays = [*case.output_buffers(), *stored]
            _run_model(program, arrays, case.var_vals)
            got = [from_storage(raw, dtype) for raw, (dtype, _) in zip(arrays, case.buffers)]
            for slot, (values, reference) in enumerate(zip(got, expected)):
                reference = np.asarray(reference).reshape(values.shape)
                message = f"{case.name} opts={opts} output {slot}"
                if case.exact or not dtypes.is_float(case.buffers[slot][0]):
                    np.testing.assert_array_equal(values, reference.astype(values.dtype), err_msg=message)
                else:
                    np.testing.assert_allclose(values, reference, rtol=2e-6, atol=1e-6, err_msg=message)
            ran += 1
    assert ran > len(CORPUS)


@pytest.mark.parametrize("kind", ["alu", "casts"])
def test_ops_and_casts_in_the_model_match_the_interpreter(kind: str) -> None:
    renderer = TextPTXRenderer("sm_80")
    rng = np.random.default_rng(11)
    for dtype in dtypes.all:
        program = Program(get_program(alu_kernel(dtype) if kind == "alu" else cast_kernel(dtype), renderer, []))
        arrays = input_arrays(program, rng, divisor_nonzero=kind == "alu")
        expected = [array.copy() for array in arrays]
        _run_model(program, arrays, {})
        run_program(program, expected, {}, *program.launch_dims({}))
        for slot, (got, want) in enumerate(zip(arrays, expected)):
            element = program.buffer_dtypes[slot].base
            message = f"{program.name} output {slot} ({element})"
            same_bits = got.view(np.uint8).reshape(got.size, -1) == want.view(np.uint8).reshape(want.size, -1)
            same = same_bits.all(axis=1)
            declared = declared_dtypes(program).get(slot, element)  # bfloat16 is stored as uint16 after emulation
            if dtypes.is_float(declared):  # NaN payloads may differ; everything else is bit for bit (signed zeros too)
                if declared == dtypes.float16:  # emulated by codegen: the buffer holds its raw bits
                    got, want = got.view(np.float16), want.view(np.float16)
                same |= np.isnan(from_storage(got, declared)) & np.isnan(from_storage(want, declared))
            if kind == "casts":
                source = declared_dtypes(program)[len(arrays) - 1]
                same |= undefined_cast_lanes(source, slot, arrays[-1])
            assert same.all(), f"{message}: got {got[~same]}, want {want[~same]}"


def declared_dtypes(program: Program) -> dict[int, DType]:
    """Element dtype of each buffer slot as the kernel sink declared it (before dtype emulation)."""
    return {u.arg: u.dtype.base for u in program.sink.toposort() if u.op is Ops.DEFINE_GLOBAL}
