"""KernelSignature: built once when the program is linearized, stored as the PROGRAM's arg, checked by the spec.

Expected values are written out by hand from the kernels below (slots, dtypes, access, ranges, launch sizes).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer
from sinks_for_tests import buffer, kernel

from kiln.codegen import (
    CORE_ID,
    Access,
    BufferParameter,
    Compiler,
    CompilerIdentity,
    KernelSignature,
    Opt,
    OptOps,
    Program,
    VariableParameter,
    get_program,
    pm_spec_program,
)
from kiln.uops import Context, Ops, SpecError, SpecialArg, UOp, VarArg, dtypes, type_verify


class ZlibCompiler(Compiler):
    """A compiler whose binary is the compressed source."""

    identity = "zlib 1 (signature test)"

    def compile(self, source: str) -> bytes:
        return zlib.compress(source.encode())


class CompilingScalar(ScalarRenderer):
    device = "TESTZ"

    def __init__(self) -> None:
        self.compiler = ZlibCompiler()


def _accumulate_kernel() -> UOp:
    """out[i] += scale[0] * a[i] for i < n (slot 2 read and written, slot 0 read, slot 5 read), variable `n` in
    1..64 and an unused-by-loops variable `m` (0..7) only used as an offset."""
    n, m = UOp.variable("n", 1, 64), UOp.variable("m", 0, 7)
    out, scale, a = buffer(2, 72), buffer(0, 1), buffer(5, 72)
    i = UOp.range(n, 0)
    value = out.index(i + m).load() + scale.index(UOp.const(dtypes.index, 0)).load() * a.index(i).load()
    return kernel(out.index(i + m).store(value).end(i), name="accumulate")


def test_the_signature_lists_buffers_by_slot_and_variables_by_name() -> None:
    program = Program(get_program(_accumulate_kernel(), ScalarRenderer()))
    signature = program.signature
    assert signature is program.uop.arg
    assert signature.buffers == (
        BufferParameter(0, dtypes.float32.ptr(1), 1, Access.READ),
        BufferParameter(2, dtypes.float32.ptr(72), 1, Access.READ_WRITE),
        BufferParameter(5, dtypes.float32.ptr(72), 1, Access.READ),
    )
    assert signature.variables == (
        VariableParameter("m", dtypes.int32, 0, 7),
        VariableParameter("n", dtypes.int32, 1, 64),
    )
    assert signature.slots == (0, 2, 5) and signature.slot_count == 6
    assert (signature.core_id, signature.global_size, signature.local_size) == (False, (1, 1, 1), None)
    assert signature.compiler is None  # this renderer has no compiler
    assert signature.slots_with(Access.WRITE) == (2,) and program.outs == (2,) and program.ins == (0, 2, 5)
    assert signature.largest_var_vals() == {"m": 7, "n": 64}
    # the parameter uops are the linear program's own nodes
    linear = set(program.linear)
    assert all(p.uop in linear for p in signature.buffers) and all(v.uop in linear for v in signature.variables)
    with pytest.raises(KeyError, match=r"no buffer slot 1; its slots are \[0, 2, 5\]"):
        signature.buffer(1)


def test_wide_accesses_set_the_alignment_of_their_buffer() -> None:
    out, a = buffer(0, 64), buffer(1, 64)
    i = UOp.range(64, 0)
    sink = kernel(out.index(i).store(a.index(i).load() * 2.0).end(i))
    opts = [Opt(OptOps.UPCAST, 0, 4)]
    signature = Program(get_program(sink, CPULikeRenderer(), opts)).signature
    # 4 float32 lanes per load and store: both buffers must start at a multiple of 16 bytes
    assert [(b.slot, b.alignment, b.access) for b in signature.buffers] == [(0, 16, Access.WRITE), (1, 16, Access.READ)]
    assert Program(get_program(sink, CPULikeRenderer(), [])).signature.buffers[0].alignment == 1


def test_a_thread_kernel_takes_the_core_id_and_launches_its_cores_as_the_global_size() -> None:
    out, a = buffer(0, 64), buffer(1, 64)
    i = UOp.range(64, 0)
    sink = kernel(out.index(i).store(a.index(i).load() + 1.0).end(i))
    program = Program(get_program(sink, CPULikeRenderer(), [Opt(OptOps.THREAD, 0, 4)]))
    assert program.signature.core_id and program.uses_core_id
    assert program.signature.global_size == (4, 1, 1) and program.signature.launch_dims() == ((4, 1, 1), (1, 1, 1))
    assert any(u.op is Ops.SPECIAL and u.arg.name == CORE_ID for u in program.linear)


def test_a_gpu_kernel_has_its_global_and_local_sizes() -> None:
    out, a = buffer(0, 256), buffer(1, 256)
    i = UOp.range(256, 0)
    sink = kernel(out.index(i).store(a.index(i).load() + 1.0).end(i))
    signature = Program(get_program(sink, GPULikeRenderer(), [Opt(OptOps.LOCAL, 0, 32)])).signature
    assert (signature.global_size, signature.local_size) == ((8, 1, 1), (32, 1, 1))
    assert signature.launch_dims() == ((8, 1, 1), (32, 1, 1))


def test_symbolic_launch_sizes_evaluate_with_the_variables() -> None:
    n = UOp.variable("n", 1, 1024)
    out, a = buffer(0, 1024), buffer(1, 1024)
    i = UOp.range(n, 0)
    sink = kernel(out.index(i).store(a.index(i).load() + 1.0).end(i))
    signature = Program(get_program(sink, GPULikeRenderer(), [])).signature
    assert signature.launch_dims({"n": 300}) == ((300, 1, 1), (1, 1, 1))
    assert signature.launch_dims({"n": 7}) == ((7, 1, 1), (1, 1, 1))


def test_of_reads_a_hand_written_linear_program() -> None:
    size = UOp.const(dtypes.int32, 3)
    uops = [
        UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(4), arg=2),
        UOp(Ops.DEFINE_GLOBAL, dtypes.int8.ptr(4), arg=0),
        UOp(Ops.DEFINE_VAR, dtypes.int64, arg=VarArg("zeta", 0, 2**40)),
        UOp(Ops.DEFINE_VAR, dtypes.int32, arg=VarArg("alpha", 1, 9)),
        size,
        UOp(Ops.SPECIAL, dtypes.int32, (size,), SpecialArg(CORE_ID)),
    ]
    signature = KernelSignature.of(uops)
    assert signature.slots == (0, 2) and [b.access for b in signature.buffers] == [Access.NONE, Access.NONE]
    assert [(v.name, v.dtype) for v in signature.variables] == [("alpha", dtypes.int32), ("zeta", dtypes.int64)]
    assert signature.core_id and signature.global_size == (3, 1, 1)
    with pytest.raises(TypeError, match="DEFINE_GLOBAL 1 must have a pointer dtype"):
        KernelSignature.of([UOp(Ops.DEFINE_GLOBAL, dtypes.float32, arg=1)])


def test_the_compile_stage_adds_the_compilers_identity(tmp_path: Path) -> None:
    renderer = CompilingScalar()
    with Context(CACHEDIR=str(tmp_path)):
        program = Program(get_program(_accumulate_kernel(), renderer))
    assert program.signature.compiler == CompilerIdentity(ZlibCompiler, "zlib 1 (signature test)")
    assert program.signature.buffers == Program(get_program(_accumulate_kernel(), ScalarRenderer())).signature.buffers


def test_the_program_spec_requires_the_signature_from_linear_on(tmp_path: Path) -> None:
    with Context(CACHEDIR=str(tmp_path)):
        with_binary = get_program(kernel(_copy_effect()), CompilingScalar())
    signature = with_binary.arg
    assert isinstance(signature, KernelSignature) and signature.compiler is not None
    sink, device, linear, source, binary = with_binary.src
    type_verify([with_binary], pm_spec_program)
    bad = [
        UOp(Ops.PROGRAM, src=(sink, device, linear)),  # linearized without a signature
        UOp(Ops.PROGRAM, src=(sink, device), arg=signature),  # a signature before linearizing
        UOp(Ops.PROGRAM, src=(sink, device, linear, source, binary), arg=KernelSignature.of(linear.src)),  # no compiler
        UOp(Ops.PROGRAM, src=(sink, device, linear, source), arg=signature),  # a compiler without a binary
        UOp(Ops.PROGRAM, src=(sink, device, linear), arg="not a signature"),
    ]
    for program in bad:
        with pytest.raises(SpecError):
            type_verify([program], pm_spec_program)


def _copy_effect() -> UOp:
    out, a = buffer(0, 8), buffer(1, 8)
    i = UOp.range(8, 0)
    return out.index(i).store(a.index(i).load()).end(i)


def test_a_program_without_a_signature_is_refused_by_the_view() -> None:
    program = get_program(kernel(_copy_effect()), ScalarRenderer())
    bare = UOp(Ops.PROGRAM, src=program.src)
    with pytest.raises(ValueError, match="has no KernelSignature"):
        _ = Program(bare).signature
