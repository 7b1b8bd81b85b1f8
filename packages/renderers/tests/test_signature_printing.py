"""Every renderer family prints its kernel's parameter list from the program's KernelSignature: buffers by slot, then
variables by name, then the core id, each with its dtype's spelling in that language.

The kernel reads its variables in the order n, m (the linear program defines `n` first), so a renderer printing
parameters in program order rather than the signature's (by name, the order runtimes pass values in) fails here; the
PTX renderer did before the signature. Type spellings are written out by hand from each language's rules.
"""

from __future__ import annotations

import re

import pytest

from kiln.codegen import (
    CORE_ID,
    KernelInfo,
    KernelSignature,
    Opt,
    OptOps,
    Program,
    Renderer,
    get_program,
    linearize,
    lower,
    optimize_kernel,
)
from kiln.renderers import (
    AMDRenderer,
    CRenderer,
    CUDARenderer,
    LLVMRenderer,
    MetalRenderer,
    OpenCLRenderer,
    PTXRenderer,
    WGSLRenderer,
)
from kiln.uops import DType, Ops, UOp, dtypes


def _buffer(slot: int, dtype: DType) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(72), (), slot)


def _kernel(threaded: bool = False) -> UOp:
    """out[i] = b[i + m] * float(a[i]) for i < n: slot 0 float32 written, slot 1 int32 read, slot 2 float32 read.
    `threaded`: for i < 64 instead, times float(n) (a THREAD split needs a constant size)."""
    n, m = UOp.variable("n", 1, 64), UOp.variable("m", 0, 7)
    out, a, b = _buffer(0, dtypes.float32), _buffer(1, dtypes.int32), _buffer(2, dtypes.float32)
    i = UOp.range(64 if threaded else n, 0)
    value = b.index(i + m).load() * a.index(i).load().cast(dtypes.float32)
    value = value * n.cast(dtypes.float32) if threaded else value
    return UOp(Ops.SINK, src=(out.index(i).store(value).end(i),), arg=KernelInfo("signature_order"))


def _printed(renderer: Renderer, opts: list[Opt] | None = None) -> tuple[str, KernelSignature, list[UOp]]:
    """The source `renderer` prints for the kernel (no compiler needed), with the signature it printed from."""
    uops = linearize(lower(optimize_kernel(_kernel(threaded=bool(opts)), renderer, opts or []), renderer))
    signature = KernelSignature.of(uops)
    return renderer.render(uops, "signature_order", signature), signature, uops


def _parameter_list(source: str) -> list[str]:
    """The parameters of the entry function `kiln_kernel(...)`, split at top-level commas."""
    start = source.index("kiln_kernel(") + len("kiln_kernel(")
    depth, end = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(source[end], 0)
        end += 1
    return [part.strip() for part in source[start : end - 1].split(",")]


def _expected_names(signature: KernelSignature) -> list[str]:
    names = [f"data{buffer.slot}" for buffer in signature.buffers]
    names += [f"var_{variable.name}" for variable in signature.variables]
    return names + ([CORE_ID] if signature.core_id else [])


def _names(parameters: list[str]) -> list[str]:
    found = []
    for parameter in parameters:
        match = re.search(r"(?<![\w%])%?(data\d+|var_\w+|core_id)\b", parameter)
        if match is not None:
            found.append(match.group(1))
    return found


# language -> (renderer, spelling of each buffer parameter (slot -> text before its name), each variable's type)
C_FAMILY: dict[str, tuple[Renderer, dict[int, str], str]] = {
    "C": (CRenderer(), {0: "float* restrict", 1: "const int* restrict", 2: "const float* restrict"}, "int"),
    "CUDA": (
        CUDARenderer("sm_80"),
        {0: "float* __restrict__", 1: "const int* __restrict__", 2: "const float* __restrict__"},
        "int",
    ),
    "OpenCL": (
        OpenCLRenderer(),
        {0: "__global float* restrict", 1: "__global const int* restrict", 2: "__global const float* restrict"},
        "int",
    ),
    "AMD": (
        AMDRenderer(),
        {
            0: "KILN_GLOBAL float* restrict",
            1: "const KILN_GLOBAL int* restrict",
            2: "const KILN_GLOBAL float* restrict",
        },
        "int",
    ),
    "Metal": (MetalRenderer(), {0: "device float*", 1: "const device int*", 2: "const device float*"}, "constant int&"),
}


@pytest.mark.parametrize("language", sorted(C_FAMILY))
def test_c_family_prints_the_signatures_parameters_in_order_with_their_types(language: str) -> None:
    renderer, buffer_types, variable_type = C_FAMILY[language]
    source, signature, _ = _printed(renderer)
    parameters = _parameter_list(source)
    assert _names(parameters) == _expected_names(signature) == ["data0", "data1", "data2", "var_m", "var_n"]
    for buffer, parameter in zip(signature.buffers, parameters, strict=False):
        assert parameter.startswith(f"{buffer_types[buffer.slot]} data{buffer.slot}"), parameter
    for variable, parameter in zip(signature.variables, parameters[len(signature.buffers) :], strict=False):
        assert parameter.startswith(f"{variable_type} var_{variable.name}"), parameter


def test_the_c_renderer_takes_the_core_id_last() -> None:
    source, signature, _ = _printed(CRenderer(), [Opt(OptOps.THREAD, 0, 2)])
    parameters = _parameter_list(source)
    assert signature.core_id and parameters[-1] == f"int {CORE_ID}"
    assert _names(parameters) == _expected_names(signature)


@pytest.mark.parametrize("threads", [0, 2])
def test_llvm_ir_prints_the_signatures_parameters(threads: int) -> None:
    source, signature, _ = _printed(LLVMRenderer(), [Opt(OptOps.THREAD, 0, threads)] if threads else [])
    parameters = _parameter_list(source.replace("@kiln_kernel(", "kiln_kernel("))
    assert _names(parameters) == _expected_names(signature)
    expected = ["ptr noalias %data0", "ptr noalias readonly %data1", "ptr noalias readonly %data2"]
    expected += ["i32 %var_m", "i32 %var_n"] + (["i32 %core_id"] if threads else [])
    assert parameters == expected


def test_ptx_declares_the_parameters_in_the_signatures_order() -> None:
    source, signature, uops = _printed(PTXRenderer("sm_80"))
    defined = [u.arg.name for u in uops if u.op is Ops.DEFINE_VAR]
    assert defined == ["n", "m"]  # the program defines them out of the signature's order
    parameters = _parameter_list(source)
    assert parameters == [
        ".param .u64 data0",
        ".param .u64 data1",
        ".param .u64 data2",
        ".param .s32 var_m",
        ".param .s32 var_n",
    ]
    assert _names(parameters) == _expected_names(signature)


def test_wgsl_binds_the_buffers_by_slot_and_reads_variables_by_their_position() -> None:
    source, signature, _ = _printed(WGSLRenderer())
    bindings = re.findall(r"@binding\((\d+)\) var<storage, [\w_]+> (\w+): array<(\w+)>", source)
    assert bindings == [("0", "data0", "f32"), ("1", "data1", "i32"), ("2", "data2", "f32"), ("3", "kiln_vars", "i32")]
    assert [buffer.slot for buffer in signature.buffers] == [0, 1, 2]
    # m is element 0 of the variables' buffer, n element 1 (names sorted), as the WEBGPU runner fills it
    assert "kiln_vars[0] + " in source and [v.name for v in signature.variables] == ["m", "n"]


def test_the_lifecycle_passes_the_programs_signature_to_the_renderer() -> None:
    seen: list[KernelSignature | None] = []

    class Recording(CRenderer):
        def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
            seen.append(signature)
            return super().render(uops, name, signature)

    program = Program(get_program(_kernel(), Recording(), []))
    assert len(seen) == 1 and seen[0] is not None
    assert seen[0].buffers == program.signature.buffers and seen[0].variables == program.signature.variables
