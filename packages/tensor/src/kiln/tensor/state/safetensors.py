"""The safetensors format: an 8-byte little-endian header length, a JSON header, then the raw tensor bytes.

The header maps each tensor name to {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]} (byte offsets
relative to the first byte after the header) and may hold a "__metadata__" dict of str -> str. The header is padded
with spaces (to a multiple of 8 bytes by the reference writer; kiln pads so the data area starts at a multiple of
64). The tensors' byte ranges
tile the data area exactly: no gaps, no overlaps, nothing after the last one.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from typing import Any

from kiln.tensor.state.host_bytes import tensor_bytes, tensor_from_mapping
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

__all__ = ["safe_load", "safe_load_metadata", "safe_save"]

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool,
    "U8": dtypes.uint8,
    "I8": dtypes.int8,
    "U16": dtypes.uint16,
    "I16": dtypes.int16,
    "U32": dtypes.uint32,
    "I32": dtypes.int32,
    "U64": dtypes.uint64,
    "I64": dtypes.int64,
    "F16": dtypes.float16,
    "BF16": dtypes.bfloat16,
    "F32": dtypes.float32,
    "F64": dtypes.float64,
    "F8_E4M3": dtypes.fp8e4m3,
    "F8_E5M2": dtypes.fp8e5m2,
}
_NAME_OF_DTYPE = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
_HEADER_LIMIT = 100 * 1024 * 1024  # the reference implementation refuses larger headers too
_DATA_ALIGNMENT = 64  # a multiple of the format's 8; lets CPU buffers alias the file (see host_bytes)

PathLike = str | os.PathLike[str]


def safe_save(tensors: dict[str, Tensor], path: PathLike, metadata: dict[str, str] | None = None) -> None:
    """Writes `tensors` to a .safetensors file at `path` (realizing them).

    Args:
        tensors: name -> Tensor; any kiln dtype the format has (all but none).
        path: the file to write (replaced if it exists).
        metadata: optional str -> str pairs stored under "__metadata__".
    """
    if metadata is not None and (
        not isinstance(metadata, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise TypeError(f"metadata must be a dict of str -> str, got {metadata!r}")
    for name, tensor in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"tensor names must be strings other than '__metadata__', got {name!r}")
        if not isinstance(tensor, Tensor):
            raise TypeError(f"tensor {name!r} must be a kiln Tensor, got {type(tensor).__name__}")
        if tensor.dtype not in _NAME_OF_DTYPE:
            raise TypeError(f"tensor {name!r} has dtype {tensor.dtype!r}, which safetensors cannot store")
    # largest items first (then by name), so every tensor stays aligned to its own item size
    order = sorted(tensors, key=lambda name: (-tensors[name].dtype.itemsize, name))
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
    chunks: list[bytes] = []
    offset = 0
    for name in order:
        tensor = tensors[name]
        data = tensor_bytes(tensor)
        header[name] = {
            "dtype": _NAME_OF_DTYPE[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-(8 + len(encoded)) % _DATA_ALIGNMENT)  # the data area starts 64-byte aligned
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(encoded)))
        file.write(encoded)
        for chunk in chunks:
            file.write(chunk)


def safe_load_metadata(path: PathLike) -> dict[str, str]:
    """The "__metadata__" dict of a .safetensors file ({} when it has none); reads only the header."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        prefix = file.read(8)
        header, _ = _parse_header(file.read(_header_length(prefix, size)), size, str(path))
    metadata: dict[str, str] = header.get("__metadata__", {})
    return metadata


def safe_load(path: PathLike, device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a .safetensors file, in file order, each realized on `device`.

    The file is memory-mapped copy-on-write: on a host-memory device (CPU) each tensor's buffer aliases the mapping
    (no copy; in-place writes stay private to the process), elsewhere its bytes are copied once into the buffer.

    Raises:
        ValueError: a malformed file (truncated, bad header JSON, unknown dtype, offsets that overlap, leave gaps or
            disagree with the shape), naming the problem.
    """
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            raise ValueError(f"{path}: empty file, not a safetensors file (expected an 8-byte header length)")
        # not closed here: buffers may alias it; it is unmapped when the last of them is freed
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    length = _header_length(mapping[:8], size)
    _, entries = _parse_header(mapping[8 : 8 + length], size, str(path))
    start = 8 + length
    return {
        name: tensor_from_mapping(mapping, start + begin, dtype, shape, device)
        for name, dtype, shape, begin, _ in entries
    }


def _header_length(prefix: bytes, file_size: int) -> int:
    if len(prefix) < 8:
        raise ValueError(f"truncated safetensors file: {file_size} bytes, shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", prefix)
    if length > _HEADER_LIMIT:
        raise ValueError(f"safetensors header length {length} is over the {_HEADER_LIMIT}-byte limit")
    if 8 + length > file_size:
        raise ValueError(f"truncated safetensors file: header length {length} runs past the file end ({file_size} B)")
    return int(length)


Entry = tuple[str, DType, tuple[int, ...], int, int]


def _parse_header(raw: bytes, file_size: int, where: str) -> tuple[dict[str, Any], list[Entry]]:
    """The decoded header and its tensors (name, dtype, shape, begin, end) sorted by offset, checked for consistency."""
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{where}: safetensors header is not valid JSON: {error}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{where}: safetensors header must be a JSON object, got {type(header).__name__}")
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError(f"{where}: safetensors __metadata__ must map str -> str, got {metadata!r}")
    entries: list[Entry] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(f"{where}: tensor {name!r} needs exactly dtype, shape and data_offsets, got {info!r}")
        dtype = SAFETENSORS_DTYPES.get(info["dtype"]) if isinstance(info["dtype"], str) else None
        if dtype is None:
            raise ValueError(
                f"{where}: tensor {name!r} has unknown dtype {info['dtype']!r}; "
                f"expected one of {sorted(SAFETENSORS_DTYPES)}"
            )
        shape, offsets = info["shape"], info["data_offsets"]
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"{where}: tensor {name!r} has a bad shape {shape!r}; expected a list of ints >= 0")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise ValueError(f"{where}: tensor {name!r} has bad data_offsets {offsets!r}; expected [begin, end]")
        begin, end = offsets
        if end - begin != math.prod(shape) * dtype.itemsize:
            raise ValueError(
                f"{where}: tensor {name!r} data_offsets {offsets} hold {end - begin} bytes but shape {shape} of "
                f"{info['dtype']} needs {math.prod(shape) * dtype.itemsize}"
            )
        entries.append((name, dtype, tuple(shape), begin, end))
    entries.sort(key=lambda entry: (entry[3], entry[4]))
    data_size = file_size - 8 - len(raw)
    position = 0
    for name, _, _, begin, end in entries:
        if begin < position:
            raise ValueError(f"{where}: tensor {name!r} data_offsets [{begin}, {end}] overlap the previous tensor")
        if begin > position:
            raise ValueError(f"{where}: a gap of {begin - position} bytes before tensor {name!r} (offset {begin})")
        position = end
    if position != data_size:
        what = "truncated safetensors file" if position > data_size else "trailing bytes after the last tensor"
        raise ValueError(f"{where}: {what}: the tensors span {position} data bytes, the file holds {data_size}")
    return header, entries
