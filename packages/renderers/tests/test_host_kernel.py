"""Tests of host_kernel: the CPU calling convention and loading shared objects."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from kiln.codegen import KernelSignature
from kiln.renderers import ENTRY_NAME, HostKernel, KernelParameter, kernel_parameters, load_shared_object
from kiln.uops import Ops, SpecialArg, UOp, VarArg, dtypes


def _parameters_program() -> list[UOp]:
    size = UOp.const(dtypes.int32, 4)
    return [
        UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(4), arg=2),
        UOp(Ops.DEFINE_GLOBAL, dtypes.int8.ptr(4), arg=0),
        UOp(Ops.DEFINE_VAR, dtypes.int64, arg=VarArg("zeta", 0, 2**40)),
        UOp(Ops.DEFINE_VAR, dtypes.int32, arg=VarArg("alpha", 1, 9)),
        size,
        UOp(Ops.SPECIAL, dtypes.int32, (size,), SpecialArg("core_id")),
    ]


def test_parameters_are_buffers_by_slot_then_variables_by_name_then_core_id() -> None:
    assert kernel_parameters(KernelSignature.of(_parameters_program())) == (
        KernelParameter("buffer", "0", ctypes.c_void_p),
        KernelParameter("buffer", "2", ctypes.c_void_p),
        KernelParameter("variable", "alpha", ctypes.c_int32),
        KernelParameter("variable", "zeta", ctypes.c_int64),
        KernelParameter("core_id", "core_id", ctypes.c_int32),
    )


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_a_shared_object_is_loaded_and_called_with_the_convention(tmp_path: Path) -> None:
    source = (
        f"void {ENTRY_NAME}(signed char* out, float* scale, int alpha, long long zeta, int core_id) "
        "{ out[core_id] = (signed char)(alpha + zeta + (long long)scale[0] + core_id); }\n"
    )
    library = tmp_path / "kernel.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(library)], input=source, text=True, check=True)
    before = set(Path(tempfile.gettempdir()).glob("kiln-kernel-*"))
    kernel = load_shared_object(library.read_bytes(), KernelSignature.of(_parameters_program()))
    assert set(Path(tempfile.gettempdir()).glob("kiln-kernel-*")) == before  # the temporary copy is gone
    out, scale = np.zeros(4, np.int8), np.array([10.0], np.float32)
    for core in range(4):
        kernel(out.ctypes.data, scale.ctypes.data, 3, 2**33 + 1, core)
    assert out.tolist() == [14, 15, 16, 17]  # 2**33 wraps away in the int8 store
    with pytest.raises(TypeError, match="takes 5 arguments"):
        kernel(out.ctypes.data)


def test_a_binary_without_the_entry_is_refused(tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    library = tmp_path / "other.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(library)], input="void other(void) {}\n", text=True
    )
    with pytest.raises(RuntimeError, match=f"no function '{ENTRY_NAME}'"):
        load_shared_object(library.read_bytes(), KernelSignature.of([]))
    with pytest.raises(RuntimeError, match="cannot load"):
        load_shared_object(b"not an ELF file", KernelSignature.of([]))
    with pytest.raises(RuntimeError, match="no function"):
        HostKernel(0, (), None)
