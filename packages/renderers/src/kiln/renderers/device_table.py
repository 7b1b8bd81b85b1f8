"""The one table of device kinds: each kind's `Target` (limits, the dtypes it stores) and the renderers it offers, in
preference order.

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
from kiln.renderers.target import AMD, CPU, METAL, NVIDIA, OPENCL, PYTHON, WEBGPU, Target
from kiln.uops import DType, dtypes

__all__ = ["DEVICE_TABLE", "DeviceRow", "dtypes_for", "table_renderers"]


@dataclass(frozen=True)
class DeviceRow:
    """One device kind.

    Attributes:
        target: the device (`kiln.renderers.target`): its limits, the dtypes it computes in and those it stores.
        renderers: "module:Class" of each renderer, best first (`<KIND>_RENDERER` picks another than the first).
        requires: class name -> the Python module it needs; without that module the renderer is not offered.
        note: one sentence on what the row says about dtypes or renderers.
    """

    target: Target
    renderers: tuple[str, ...]
    requires: dict[str, str] = field(default_factory=dict)
    note: str = ""

    @property
    def dtypes(self) -> frozenset[DType]:
        """The dtypes a buffer of the device may hold (tensor creation refuses others with a TypeError)."""
        return self.target.storage_dtypes


DEVICE_TABLE: dict[str, DeviceRow] = {
    "CPU": DeviceRow(
        CPU,
        ("kiln.renderers.llvm_ir:LLVMRenderer", "kiln.renderers.c:CRenderer"),
        requires={"LLVMRenderer": "llvmlite"},
        note="LLVM IR through llvmlite first (compiles in process, fastest), then C through gcc or clang",
    ),
    "PYTHON": DeviceRow(PYTHON, ("kiln.renderers.python:PythonRenderer",), note="the reference interpreter"),
    "CUDA": DeviceRow(
        NVIDIA,
        ("kiln.renderers.cuda:CUDARenderer", "kiln.renderers.ptx:PTXRenderer"),
        note="float16, bfloat16 and fp8 emulated in float32",
    ),
    "CL": DeviceRow(
        OPENCL,
        ("kiln.renderers.opencl:OpenCLRenderer",),
        note="float16 (PoCL has no cl_khr_fp16), bfloat16 and fp8 emulated; float64 only with cl_khr_fp64",
    ),
    "AMD": DeviceRow(
        AMD,
        ("kiln.renderers.amd:AMDRenderer",),
        note="C through clang's amdgcn target (gfx1100 by default, gfx942); bfloat16 and fp8 emulated; compile-only",
    ),
    "METAL": DeviceRow(
        METAL,
        ("kiln.renderers.metal:MetalRenderer",),
        note="MSL has no double; fp8 (and bfloat16 before MSL 3.1) emulated; compiles only on macOS",
    ),
    "WEBGPU": DeviceRow(
        WEBGPU,
        ("kiln.renderers.wgsl:WGSLRenderer",),
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
    return row.dtypes if row is not None else frozenset(dtypes.all)
