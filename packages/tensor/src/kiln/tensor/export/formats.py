"""What both targets share: the weights file (safetensors), each dtype's names in C / numpy / JavaScript, and the
comment header naming the model, the kiln version and the inputs and outputs."""

from __future__ import annotations

import importlib.metadata
import json
import struct
from dataclasses import dataclass

from kiln.tensor.export.plan import Endpoint, ExportPlan, PlannedBuffer
from kiln.tensor.symbolic import format_shape
from kiln.uops import DType, dtypes

__all__ = ["DTYPE_NAMES", "DTypeNames", "header_lines", "kiln_version", "safetensors_bytes"]


@dataclass(frozen=True)
class DTypeNames:
    """A dtype's spellings: safetensors dtype, C element type, numpy descr (.npy files), JavaScript typed array."""

    safetensors: str
    c_type: str
    descr: str
    typed_array: str


DTYPE_NAMES: dict[DType, DTypeNames] = {
    dtypes.float32: DTypeNames("F32", "float", "<f4", "Float32Array"),
    dtypes.float64: DTypeNames("F64", "double", "<f8", "Float64Array"),
    dtypes.float16: DTypeNames("F16", "uint16_t", "<f2", "Uint16Array"),
    dtypes.bfloat16: DTypeNames("BF16", "uint16_t", "<u2", "Uint16Array"),
    dtypes.int8: DTypeNames("I8", "int8_t", "|i1", "Int8Array"),
    dtypes.int16: DTypeNames("I16", "int16_t", "<i2", "Int16Array"),
    dtypes.int32: DTypeNames("I32", "int32_t", "<i4", "Int32Array"),
    dtypes.int64: DTypeNames("I64", "int64_t", "<i8", "BigInt64Array"),
    dtypes.uint8: DTypeNames("U8", "uint8_t", "|u1", "Uint8Array"),
    dtypes.uint16: DTypeNames("U16", "uint16_t", "<u2", "Uint16Array"),
    dtypes.uint32: DTypeNames("U32", "uint32_t", "<u4", "Uint32Array"),
    dtypes.uint64: DTypeNames("U64", "uint64_t", "<u8", "BigUint64Array"),
    dtypes.bool: DTypeNames("BOOL", "uint8_t", "|b1", "Uint8Array"),
}
"""The dtypes an artifact's inputs, outputs and weights may have."""


def names_of(dtype: DType, what: str) -> DTypeNames:
    """The spellings of `dtype`; TypeError naming `what` (a tensor) for a dtype no artifact carries."""
    names = DTYPE_NAMES.get(dtype)
    if names is None:
        raise TypeError(f"export: {what} has dtype {dtype!r}, which exported artifacts do not carry")
    return names


def kiln_version() -> str:
    """The installed kiln-tensor version ("unknown" when it is not installed as a distribution)."""
    try:
        return importlib.metadata.version("kiln-tensor")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def safetensors_bytes(weights: list[PlannedBuffer], metadata: dict[str, str]) -> bytes:
    """A safetensors file of the weight blocks, each a 1-D tensor of its dtype, in plan order."""
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for weight in weights:
        names = names_of(weight.dtype, f"weight {weight.name}")
        count = weight.nbytes // weight.dtype.itemsize
        header[weight.name] = {
            "dtype": names.safetensors,
            "shape": [count],
            "data_offsets": [offset, offset + weight.nbytes],
        }
        offset += weight.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(weight.data or b"" for weight in weights)


def _endpoint_line(endpoint: Endpoint) -> str:
    return f"{endpoint.name}: shape {format_shape(endpoint.shape)}, {endpoint.dtype.name}"


def header_lines(plan: ExportPlan, target: str) -> list[str]:
    """The comment header of every exported source file (lines without comment markers)."""
    lines = [
        f"{plan.name}: exported by kiln {kiln_version()} (kiln.tensor.export, target {target})",
        f"{sum(1 for _ in plan.steps)} steps, {len(plan.weights())} weight tensors "
        f"({sum(weight.nbytes for weight in plan.weights())} bytes)",
    ]
    lines += ["inputs:"] + [f"  {_endpoint_line(endpoint)}" for endpoint in plan.inputs]
    lines += ["outputs:"] + [f"  {_endpoint_line(endpoint)}" for endpoint in plan.outputs]
    if plan.variables:
        lines.append("variables (int arguments of run, checked against their ranges):")
        lines += [f"  {variable.name} in [{variable.low}, {variable.high}]" for variable in plan.variables]
    else:
        lines.append("shapes are fixed at export: run takes exactly these shapes")
    return lines
