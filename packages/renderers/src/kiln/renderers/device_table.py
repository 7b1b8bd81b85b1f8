"""The one table of device kinds: which renderers each offers, in preference order, and which dtypes it stores.

Devices read it when they open, through the runtime's `find_renderers(kind)` (`renderers_for` here) and
`find_dtypes(kind)` (`dtypes_for` here); `python -m kiln.runtime` prints it. It lives with the renderers because the
runtime names no renderer class (its devices hold the classes this table gives them). Renderers are named
"module:Class" and imported when a device asks; a renderer whose optional toolchain module is not installed
(`requires`) or whose module is not in this installation (a renderer being built on another branch) is left out.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field

from kiln.codegen import Renderer
from kiln.uops import DType, dtypes

__all__ = ["DEVICE_TABLE", "DeviceRow", "dtypes_for", "table_renderers"]

ALL_DTYPES: frozenset[DType] = frozenset(dtypes.all)

NO_64_BIT: frozenset[DType] = ALL_DTYPES - {dtypes.int64, dtypes.uint64, dtypes.float64}

NO_FLOAT64: frozenset[DType] = ALL_DTYPES - {dtypes.float64}
WGSL_DTYPES: frozenset[DType] = frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32})
"""WGSL's 32-bit scalars (bool buffers packed four bytes to a word): no 64-bit types, no 8/16-bit storage."""


@dataclass(frozen=True)
class DeviceRow:
    """One device kind.

    Attributes:
        renderers: "module:Class" of each renderer, best first (`<KIND>_RENDERER` picks another than the first).
        dtypes: the dtypes a buffer of the device may hold (tensor creation refuses others with a TypeError).
        requires: class name -> the Python module it needs; without that module the renderer is not offered.
        note: one sentence on what the row says about dtypes or renderers.
    """

    renderers: tuple[str, ...]
    dtypes: frozenset[DType] = ALL_DTYPES
    requires: dict[str, str] = field(default_factory=dict)
    note: str = ""


DEVICE_TABLE: dict[str, DeviceRow] = {
    "CPU": DeviceRow(
        ("kiln.renderers.llvm_ir:LLVMRenderer", "kiln.renderers.c:CRenderer"),
        requires={"LLVMRenderer": "llvmlite"},
        note="LLVM IR through llvmlite first (compiles in process, fastest), then C through gcc or clang",
    ),
    "PYTHON": DeviceRow(("kiln.renderers.python:PythonRenderer",), note="the reference interpreter"),
    "CUDA": DeviceRow(
        ("kiln.renderers.cuda:CUDARenderer", "kiln.renderers.ptx:PTXRenderer"),
        note="float16, bfloat16 and fp8 emulated in float32",
    ),
    "CL": DeviceRow(
        ("kiln.renderers.opencl:OpenCLRenderer",),
        note="float16 (PoCL has no cl_khr_fp16), bfloat16 and fp8 emulated; float64 only with cl_khr_fp64",
    ),
    "AMD": DeviceRow(
        ("kiln.renderers.amd:AMDRenderer",),
        note="C through clang's amdgcn target (gfx1100 by default, gfx942); bfloat16 and fp8 emulated; compile-only",
    ),
    "METAL": DeviceRow(
        ("kiln.renderers.metal:MetalRenderer",),
        NO_FLOAT64,
        note="MSL has no double; fp8 (and bfloat16 before MSL 3.1) emulated; compiles only on macOS",
    ),
    "WEBGPU": DeviceRow(
        ("kiln.renderers.wgsl:WGSLRenderer",),
        WGSL_DTYPES,
        note="32-bit scalars only: WGSL has no 64-bit types and no 8/16-bit storage without extensions",
    ),
}


def table_renderers(kind: str) -> tuple[type[Renderer], ...]:
    """The renderer classes of device kind `kind` that this installation has, best first (() for an unknown kind)."""
    row = DEVICE_TABLE.get(kind)
    found: list[type[Renderer]] = []
    for target in row.renderers if row is not None else ():
        module_name, _, class_name = target.partition(":")
        needed = row.requires.get(class_name) if row is not None else None
        if needed is not None and importlib.util.find_spec(needed) is None:
            continue
        if importlib.util.find_spec(module_name) is None:
            continue
        renderer = getattr(importlib.import_module(module_name), class_name, None)
        if isinstance(renderer, type) and issubclass(renderer, Renderer):
            found.append(renderer)
    return tuple(found)


def dtypes_for(kind: str) -> frozenset[DType]:
    """The dtypes a buffer of device kind `kind` may hold (every dtype for a kind not in the table)."""
    row = DEVICE_TABLE.get(kind)
    return row.dtypes if row is not None else ALL_DTYPES
