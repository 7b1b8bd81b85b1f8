"""Opening an ONNX model: a path, bytes or a ModelProto -> a checked ModelProto with its external data loaded.

onnx does the parsing, checking, function inlining and version conversion; this module turns their failures into
ValueError naming the file, and refuses external data locations that leave the model's folder (absolute paths,
`..`, symlinks pointing out), so a model file can read nothing but the data files beside it. External data stays in
its files until the graph is built: `initializer_array` memory-maps each tensor's range (no copy through protobuf).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.inliner
import onnx.version_converter
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from onnx import external_data_helper, numpy_helper

__all__ = ["MIN_OPSET", "default_opset", "initializer_array", "open_model"]

# Opsets before 7 are first converted to 7 by onnx's version converter.
MIN_OPSET = 7


def _parse(data: bytes, source: str) -> onnx.ModelProto:
    if not data:
        raise ValueError(f"{source}: empty file, expected a serialized ONNX ModelProto")
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise ValueError(f"{source}: not a valid ONNX model (protobuf parse failed: {error})") from error
    if not model.HasField("graph"):
        raise ValueError(f"{source}: not a valid ONNX model (no graph; a truncated or foreign file?)")
    return model


def _external_data_path(base: Path, location: str, tensor_name: str) -> Path:
    """The file an external-data location names, checked to lie inside `base`."""
    if not location:
        raise ValueError(f"initializer {tensor_name!r}: external data without a location")
    relative = Path(location)
    if relative.is_absolute() or location.startswith(("/", "\\")) or ":" in relative.parts[0]:
        raise ValueError(
            f"initializer {tensor_name!r}: external data location {location!r} is absolute; "
            "expected a path relative to the model's folder"
        )
    if ".." in relative.parts or ".." in Path(location.replace("\\", "/")).parts:
        raise ValueError(
            f"initializer {tensor_name!r}: external data location {location!r} leaves the model's folder ('..')"
        )
    resolved = (base / relative).resolve()
    if not resolved.is_relative_to(base.resolve()):
        raise ValueError(
            f"initializer {tensor_name!r}: external data location {location!r} resolves to {resolved}, "
            f"outside the model's folder {base}"
        )
    if not resolved.is_file():
        raise ValueError(f"initializer {tensor_name!r}: external data file {resolved} does not exist")
    return resolved


def _external_range(tensor: onnx.TensorProto, base: Path) -> tuple[Path, int, int | None]:
    """The checked file, offset and length (None: to the end) of a tensor's external data."""
    info = external_data_helper.ExternalDataInfo(tensor)
    path = _external_data_path(base, info.location, tensor.name)
    size = path.stat().st_size
    offset = int(info.offset or 0)
    length = None if info.length is None else int(info.length)
    if offset < 0 or offset > size or (length is not None and offset + length > size):
        raise ValueError(
            f"initializer {tensor.name!r}: external data range offset={offset} length={length} "
            f"does not fit in {path} ({size} bytes)"
        )
    return path, offset, length


# element types stored in external data as plain little-endian numpy arrays (the others go through onnx's reader)
_MAPPABLE = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.INT8,
        onnx.TensorProto.INT16,
        onnx.TensorProto.INT32,
        onnx.TensorProto.INT64,
        onnx.TensorProto.UINT8,
        onnx.TensorProto.UINT16,
        onnx.TensorProto.UINT32,
        onnx.TensorProto.UINT64,
        onnx.TensorProto.BOOL,
    }
)


def initializer_array(tensor: onnx.TensorProto, base: Path | None) -> np.ndarray[Any, Any]:
    """An initializer's values; external data of a plain numeric type is memory-mapped read-only from its file."""
    if not external_data_helper.uses_external_data(tensor):
        return numpy_helper.to_array(tensor)
    if base is None:
        raise ValueError(f"initializer {tensor.name!r}: external data, but the model was not opened from a path")
    path, offset, length = _external_range(tensor, base)
    shape = tuple(int(dim) for dim in tensor.dims)
    if tensor.data_type in _MAPPABLE:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).newbyteorder("<")
        expected = math.prod(shape) * dtype.itemsize
        available = path.stat().st_size - offset if length is None else length
        if available < expected:
            raise ValueError(
                f"initializer {tensor.name!r}: external data holds {available} bytes, its shape {list(shape)} "
                f"needs {expected}"
            )
        if expected == 0:
            return np.zeros(shape, dtype)
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    external_data_helper.load_external_data_for_tensor(copy, str(base))
    return numpy_helper.to_array(copy)


def _load_external_data(model: onnx.ModelProto, base: Path | None, source: str, load: bool) -> None:
    """Check every external data range; read them into the model only when `load` (for the version converter)."""
    external = [
        tensor
        for tensor in external_data_helper._get_all_tensors(model)
        if external_data_helper.uses_external_data(tensor)
    ]
    if not external:
        return
    if base is None:
        raise ValueError(f"{source}: the model keeps tensors in external data files; open it from its path instead")
    for tensor in external:
        _external_range(tensor, base)
    if not load:
        return
    try:
        external_data_helper.load_external_data_for_model(model, str(base))
    except (OSError, ValueError) as error:
        raise ValueError(f"{source}: reading external data failed: {error}") from error


def default_opset(model: onnx.ModelProto) -> int:
    """The model's opset of the default domain; 0 when it imports none (all its nodes are in other domains)."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 0


def _onnxruntime_extensions(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with the default-domain nodes that only onnxruntime defines moved to com.microsoft, where kiln's rules
    for them live: SimplifiedLayerNormalization (written by onnxruntime's transformer optimizer) and
    LayerNormalization before opset 17 (ONNX gained it then). onnx's checker refuses them in the default domain."""
    opset = default_opset(model)

    def extension(node: onnx.NodeProto) -> bool:
        if node.domain not in ("", "ai.onnx"):
            return False
        return node.op_type == "SimplifiedLayerNormalization" or (node.op_type == "LayerNormalization" and opset < 17)

    if not any(extension(node) for node in model.graph.node):
        return model
    moved = onnx.ModelProto()
    moved.CopyFrom(model)
    for node in moved.graph.node:
        if extension(node):
            node.domain = "com.microsoft"
    if not any(entry.domain == "com.microsoft" for entry in moved.opset_import):
        moved.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    return moved


def _for_checker(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each external tensor replaced by a one-element placeholder in the model itself: onnx's checker
    looks for external files relative to the working directory, and this module checks their ranges itself."""
    external = [
        tensor
        for tensor in external_data_helper._get_all_tensors(model)
        if external_data_helper.uses_external_data(tensor)
    ]
    if not external:
        return model
    placeholder = onnx.ModelProto()
    placeholder.CopyFrom(model)
    for tensor in external_data_helper._get_all_tensors(placeholder):
        if external_data_helper.uses_external_data(tensor):
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
            tensor.ClearField("dims")
            tensor.raw_data = bytes(itemsize)
    return placeholder


def open_model(model: str | os.PathLike[str] | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, Path | None]:
    """A checked ModelProto (external data ranges checked, local functions inlined, opset at least MIN_OPSET) and
    the folder its external data is read from (None for bytes and ModelProto)."""
    base: Path | None = None
    if isinstance(model, onnx.ModelProto):
        proto, source = model, "ModelProto"
    elif isinstance(model, bytes | bytearray | memoryview):
        proto, source = _parse(bytes(model), "bytes"), "bytes"
    elif isinstance(model, str | os.PathLike):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"ONNX model {str(path)!r} does not exist")
        source, base = str(path), path.parent
        proto = _parse(path.read_bytes(), source)
    else:
        raise TypeError(f"OnnxRunner: expected a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    converting = 0 < default_opset(proto) < MIN_OPSET  # onnx's converter needs the data inside the model
    _load_external_data(proto, base, source, load=converting)
    proto = _onnxruntime_extensions(proto)
    try:
        onnx.checker.check_model(_for_checker(proto))
    except onnx.checker.ValidationError as error:
        raise ValueError(f"{source}: the model fails onnx's checker: {error}") from error
    if proto.functions:
        proto = onnx.inliner.inline_local_functions(proto)
    opset = default_opset(proto)
    if 0 < opset < MIN_OPSET:
        try:
            proto = onnx.version_converter.convert_version(proto, MIN_OPSET)
        except Exception as error:  # the converter raises its own C++ error types
            raise NotImplementedError(
                f"{source}: opset {opset} is older than {MIN_OPSET} and onnx's version converter failed: {error}"
            ) from error
    return proto, base
