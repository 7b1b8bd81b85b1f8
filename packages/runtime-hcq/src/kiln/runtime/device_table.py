"""The one table of device kinds: which renderers each offers, in preference order, and which dtypes it stores.

Devices read it when they open (`find_renderers(kind)`, `supported_dtypes(kind)`); `python -m kiln.runtime` and the
READMEs describe the same rows. Renderers are named by their class name in `kiln.renderers` (looked up when a
device opens, so importing the runtime imports no renderer); a renderer whose optional toolchain module is not
installed (`requires`) is left out of its device's list. A kind missing here (a driver's simulated device, a
plugin) offers no renderers unless its device declares some itself, and stores every dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.uops import DType, dtypes

__all__ = ["DEVICE_TABLE", "DeviceRow", "renderer_names", "supported_dtypes"]

ALL_DTYPES: frozenset[DType] = frozenset(dtypes.all)

WGSL_DTYPES: frozenset[DType] = frozenset(
    {dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int8}
    | {dtypes.uint8, dtypes.int16, dtypes.uint16}
)
"""WEBGPU's row is filled in by the WGSL renderer's owner (branch h-wgpu): 32-bit storage natively, narrower ints
and floats packed into 32-bit words; no 64-bit types."""


@dataclass(frozen=True)
class DeviceRow:
    """One device kind: its renderers (class names in kiln.renderers, best first), its dtypes and why.

    Attributes:
        renderers: renderer class names, the first is the default (`<KIND>_RENDERER` picks another).
        dtypes: the dtypes a buffer of the device may hold (tensor creation refuses others with a TypeError).
        requires: renderer name -> the Python module it needs; without it the renderer is not offered.
        note: one sentence on the dtypes or renderers, shown by `python -m kiln.runtime`.
    """

    renderers: tuple[str, ...]
    dtypes: frozenset[DType] = ALL_DTYPES
    requires: dict[str, str] = field(default_factory=dict)
    note: str = ""


DEVICE_TABLE: dict[str, DeviceRow] = {
    "CPU": DeviceRow(
        ("LLVMRenderer", "CRenderer"),
        requires={"LLVMRenderer": "llvmlite"},
        note="LLVM IR through llvmlite first (compiles in process), then C through gcc or clang",
    ),
    "PYTHON": DeviceRow(("PythonRenderer",), note="the reference interpreter; every dtype"),
    "CUDA": DeviceRow(("CUDARenderer", "PTXRenderer"), note="float16, bfloat16 and fp8 emulated in float32"),
    "CL": DeviceRow(
        ("OpenCLRenderer",),
        note="float16 (no cl_khr_fp16 on PoCL), bfloat16 and fp8 emulated; float64 needs cl_khr_fp64",
    ),
    "WEBGPU": DeviceRow(("WGSLRenderer",), WGSL_DTYPES, note="WGSL has no 64-bit types"),
}


def renderer_names(kind: str) -> tuple[str, ...]:
    """The renderer class names of device kind `kind`, best first (() for a kind not in the table)."""
    row = DEVICE_TABLE.get(kind)
    return row.renderers if row is not None else ()


def supported_dtypes(kind: str) -> frozenset[DType]:
    """The dtypes a buffer of device kind `kind` may hold (every dtype for a kind not in the table)."""
    row = DEVICE_TABLE.get(kind)
    return row.dtypes if row is not None else ALL_DTYPES
