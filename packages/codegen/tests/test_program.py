"""The PROGRAM lifecycle (one rule per stage, spec-checked), the Program view, retarget, Estimates and DEBUG output."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer
from sinks_for_tests import buffer, elementwise_add, kernel, matmul, row_sum, symbolic_scale

from kiln.codegen import (
    Compiler,
    KernelInfo,
    Opt,
    OptOps,
    Program,
    get_program,
    optimize_kernel,
    pm_program_lifecycle,
    pm_spec_program,
    retarget,
    run_program,
    verify_linear,
    verify_program,
)
from kiln.uops import AxisKind, Context, Ops, SpecError, UOp, dtypes, type_verify

SCALAR, CPU, GPU = ScalarRenderer(), CPULikeRenderer(), GPULikeRenderer()


class ZlibCompiler(Compiler):
    """A compiler whose binary is the compressed source (its own oracle: decompressing gives the source back)."""

    identity = "zlib test compiler"

    def compile(self, source: str) -> bytes:
        return zlib.compress(source.encode())


class CompilingRenderer(ScalarRenderer):
    device = "TESTZ"

    def __init__(self) -> None:
        self.compiler = ZlibCompiler()


def test_stages_grow_one_rule_at_a_time(tmp_path: Path) -> None:
    renderer = CompilingRenderer()
    sink = optimize_kernel(elementwise_add(8), renderer)
    program = UOp(Ops.PROGRAM, src=(sink, UOp(Ops.DEVICE, arg="TESTZ")))
    stages = [[s.op for s in program.src]]
    with Context(CACHEDIR=str(tmp_path)):
        while (grown := pm_program_lifecycle.rewrite(program, ctx=renderer)) is not None:
            type_verify([grown, *grown.src[1:]], pm_spec_program)
            program = grown
            stages.append([s.op for s in program.src])
    assert stages == [
        [Ops.SINK, Ops.DEVICE],
        [Ops.SINK, Ops.DEVICE, Ops.LINEAR],
        [Ops.SINK, Ops.DEVICE, Ops.LINEAR, Ops.SOURCE],
        [Ops.SINK, Ops.DEVICE, Ops.LINEAR, Ops.SOURCE, Ops.BINARY],
    ]
    verify_program(program)
    assert zlib.decompress(program.src[4].arg).decode() == program.src[3].arg
    assert program.src[3].arg == renderer.render(list(program.src[2].src), Program(program).name)


def test_without_compiler_the_program_stops_at_source() -> None:
    program = get_program(elementwise_add(8), SCALAR)
    assert [s.op for s in program.src] == [Ops.SINK, Ops.DEVICE, Ops.LINEAR, Ops.SOURCE]
    assert Program(program).binary is None


def test_program_spec_rejects_malformed_programs() -> None:
    good = get_program(elementwise_add(8), SCALAR)
    sink, device, linear, source = good.src
    for bad in (
        UOp(Ops.PROGRAM, src=(sink, linear)),
        UOp(Ops.PROGRAM, src=(sink, device, source)),
        UOp(Ops.PROGRAM, src=(sink, device, linear, source, source)),
    ):
        with pytest.raises(SpecError, match="PROGRAM"):
            type_verify([bad], pm_spec_program)
    with pytest.raises(SpecError, match="DEVICE"):
        type_verify([UOp(Ops.DEVICE, arg="")], pm_spec_program)
    with pytest.raises(SpecError, match="BINARY"):
        type_verify([UOp(Ops.BINARY, arg="not bytes")], pm_spec_program)


def test_linear_spec_rejects_index_dtype_and_bad_order() -> None:
    uops = list(Program(get_program(elementwise_add(8), SCALAR)).uops)
    verify_linear(uops)
    with pytest.raises(SpecError, match="not defined before it"):
        verify_linear(uops[1:])
    with pytest.raises(SpecError, match="appears twice"):
        verify_linear([*uops, uops[-1]])
    rng = next(u for u in uops if u.op is Ops.RANGE)
    with pytest.raises(SpecError, match="never closed"):
        verify_linear(uops[: uops.index(rng) + 1])
    with pytest.raises(SpecError, match="spec"):
        verify_linear([UOp.const(dtypes.index, 3)])


def test_kernel_spec_is_checked_before_anything() -> None:
    out, a = buffer(0, 4), buffer(1, 4, dtypes.int32)
    i = UOp.range(4, 0)
    wrong = kernel(UOp(Ops.STORE, src=(out.index(i), a.index(i).load())).end(i))  # int32 value into float32 buffer
    with pytest.raises(SpecError, match="STORE"):
        get_program(wrong, SCALAR)
    with pytest.raises(TypeError, match="get_program needs a kernel SINK"):
        get_program(out, SCALAR)
    with pytest.raises(TypeError, match="get_program needs a Renderer"):
        get_program(elementwise_add(4), "CPU")  # type: ignore[arg-type]


def test_program_view_fields() -> None:
    opts = (Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.LOCAL, 0, 4))
    program = Program(get_program(matmul(8, 6, 5).replace(arg=KernelInfo("mm")), GPU, opts))
    assert program.name == "mm" and program.device == "TESTGPU"
    assert program.applied_opts == opts
    assert program.globals == (0, 1, 2) and program.outs == (0,) and program.ins == (1, 2)
    assert program.buffer_dtypes == {0: dtypes.float32.ptr(48), 1: dtypes.float32.ptr(40), 2: dtypes.float32.ptr(30)}
    # axis 1 (6) -> 3 blocks x 2 lanes on gidx0 (the innermost axis); axis 0 (8) -> 2 blocks (gidx1) of 4 threads
    assert program.global_size == (3, 2, 1) and program.local_size == (4, 1, 1)
    assert program.launch_dims() == ((3, 2, 1), (4, 1, 1))
    assert program.variables == ()
    assert program.uops[0].op is Ops.DEFINE_GLOBAL and program.source.startswith("// TESTGPU kernel")
    assert "Program 'mm' on TESTGPU" in repr(program)


def test_default_names_come_from_the_loop_shape() -> None:
    assert Program(get_program(matmul(8, 6, 5), SCALAR, ())).name == "r_8_6_5"
    assert Program(get_program(elementwise_add(8), SCALAR, ())).name == "E_8"
    assert Program(get_program(symbolic_scale(16), SCALAR, ())).name == "E_n"


def test_symbolic_launch_dims_and_variables() -> None:
    program = Program(get_program(symbolic_scale(64), GPU, ()))
    (variable,) = program.variables
    assert variable.arg.name == "n" and variable.dtype == dtypes.int32
    assert isinstance(program.global_size[0], UOp)
    assert program.launch_dims({"n": 37}) == ((37, 1, 1), (1, 1, 1))
    assert program.local_size is None
    with pytest.raises(ValueError, match="n"):
        program.launch_dims({})


def test_cpu_threads_launch_as_global_dimension_zero() -> None:
    program = Program(get_program(row_sum(16, 4), CPU, (Opt(OptOps.THREAD, 0, 4),)))
    assert program.global_size == (4, 1, 1) and program.local_size is None
    a, out = np.arange(64, dtype=np.float32), np.zeros(16, np.float32)
    run_program(program, [out, a])
    np.testing.assert_array_equal(out, a.reshape(16, 4).sum(1))


def test_retarget_keeps_everything_but_the_device() -> None:
    program = Program(get_program(elementwise_add(8), GPU))
    moved = retarget(program, "TESTGPU:1")
    assert moved.device == "TESTGPU:1" and program.device == "TESTGPU"
    assert moved.uops == program.uops and moved.source == program.source and moved.name == program.name
    assert retarget(moved, "TESTGPU:0").device == "TESTGPU:0"
    with pytest.raises(ValueError, match="can only retarget to a device of kind 'TESTGPU', got 'TESTCPU:1'"):
        retarget(program, "TESTCPU:1")


def test_program_view_needs_a_rendered_program() -> None:
    with pytest.raises(TypeError, match="Program needs a PROGRAM uop"):
        Program(UOp.const(dtypes.int32, 1))
    early = UOp(Ops.PROGRAM, src=(elementwise_add(4), UOp(Ops.DEVICE, arg="X")))
    with pytest.raises(ValueError, match="needs a rendered PROGRAM"):
        Program(early)


def test_estimates_of_a_matmul_count_data_ops_and_bytes() -> None:
    m, n, k = 8, 6, 5
    estimates = Program(get_program(matmul(m, n, k), SCALAR, ())).estimates
    # per (i, j, k): one MUL and one ADD into the accumulator; two float32 loads; one store per (i, j)
    assert estimates.flops == 2 * m * n * k
    assert estimates.global_memory_bytes == 2 * 4 * m * n * k + 4 * m * n
    assert estimates.local_memory_bytes == 0


def test_estimates_count_local_memory_and_threads() -> None:
    # 2 rows x 64: GROUP 16 -> 2 blocks of 16 threads; each thread sums 4 values, stores one partial (local),
    # then sums the 16 partials of its block (local loads); the gated output store counts for every thread
    estimates = Program(get_program(row_sum(2, 64), GPU, (Opt(OptOps.GROUP, 1, 16),))).estimates
    assert estimates.flops == 2 * 16 * 4 + 2 * 16 * 16
    assert estimates.global_memory_bytes == 2 * 64 * 4 + 2 * 16 * 4
    assert estimates.local_memory_bytes == 2 * 16 * 4 + 2 * 16 * 16 * 4


def test_estimates_are_symbolic_over_variables() -> None:
    estimates = Program(get_program(symbolic_scale(64), SCALAR, ())).estimates
    assert isinstance(estimates.flops, UOp)
    assert estimates.evaluate({"n": 37}) == (37, 8 * 37, 0)
    assert (estimates + estimates).evaluate({"n": 5}) == (10, 80, 0)


def test_debug_levels_print_opts_source_sink_and_uops(capsys: pytest.CaptureFixture[str]) -> None:
    vector_cpu = CPULikeRenderer()
    vector_cpu.vector_alu = True  # keeps the heuristic's UPCAST on this elementwise kernel
    with Context(DEBUG=2):
        get_program(elementwise_add(8), vector_cpu)
    assert capsys.readouterr().out == ""
    with Context(DEBUG=3):
        get_program(elementwise_add(8), vector_cpu)
    assert capsys.readouterr().out == "E_8: applied opts [Opt(op=OptOps.UPCAST, axis=0, arg=8)]\n"
    with Context(DEBUG=4):
        program = Program(get_program(elementwise_add(8), vector_cpu))
    assert program.source in capsys.readouterr().out
    with Context(DEBUG=6):
        get_program(elementwise_add(8), CPU)
    printed = capsys.readouterr().out
    assert "DEFINE_GLOBAL float32.ptr(8)" in printed  # the sink (print_graph)
    assert "%0 = DEFINE_GLOBAL float32.ptr(8) 0" in printed  # the linear uops (format_linear)


def test_ranges_kinds_survive_in_the_program_sink() -> None:
    program = Program(get_program(matmul(8, 8, 8), GPU, (Opt(OptOps.LOCAL, 0, 2),)))
    kinds = sorted({n.arg.kind.name for n in program.sink.toposort() if n.op is Ops.RANGE})
    assert kinds == [AxisKind.GLOBAL.name, AxisKind.LOCAL.name, AxisKind.REDUCE.name]


def test_program_facts_the_runtime_reads() -> None:
    from kiln.codegen import Opt, OptOps
    from kiln.renderers import LLVMRenderer

    renderer = LLVMRenderer()
    wide = Program(get_program(elementwise_add(64), renderer, [Opt(OptOps.UPCAST, 0, 4)]))
    # four float32 lanes per access: every buffer is read or written 16 bytes at a time
    assert wide.buffer_alignments == {0: 16, 1: 16, 2: 16}
    assert not wide.uses_core_id and wide.linear == wide.uops and wide.linear[-1].op is not Ops.SINK
    plain = Program(get_program(elementwise_add(64), renderer, []))
    assert plain.buffer_alignments == {}
    threaded = Program(get_program(elementwise_add(64), renderer, [Opt(OptOps.THREAD, 0, 2)]))
    assert threaded.uses_core_id and "core_id" in threaded.source
