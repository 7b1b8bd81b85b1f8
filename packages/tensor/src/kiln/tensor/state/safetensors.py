"""The safetensors format: an 8-byte little-endian header length, a JSON header, then the raw tensor bytes.

The header maps each tensor name to {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]} (byte offsets
relative to the first byte after the header) and may hold a "__metadata__" dict of str -> str. The header is padded
with spaces (to a multiple of 8 bytes by the reference writer; kiln pads so the data area starts at a multiple of
64). The tensors' byte ranges tile the data area exactly: no gaps, no overlaps, nothing after the last one. A name
appears once (a JSON object with a repeated key is refused, as the reference implementation does).

Saving is atomic and loading copies (see host_bytes): a loaded tensor never changes when the file does.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterator
from typing import Any

from kiln.tensor.state.host_bytes import read_exactly, tensor_bytes, tensor_from_file
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes
from kiln.uops.files import write_atomically

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
_DATA_ALIGNMENT = 64  # a multiple of the format's 8: every tensor starts aligned to the widest vector access

PathLike = str | os.PathLike[str]


def safe_save(tensors: dict[str, Tensor], path: PathLike, metadata: dict[str, str] | None = None) -> None:
    """Writes `tensors` to a .safetensors file at `path` (realizing them).

    Args:
        tensors: name -> Tensor; any kiln dtype the format has (all but none).
        path: the file to write (replaced if it exists).
        metadata: optional str -> str pairs stored under "__metadata__".

    The file is replaced atomically: the bytes go to a temporary file in the same folder, which is fsynced and renamed
    over `path`. If anything fails part-way (a full disk: OSError ENOSPC) the previous file at `path` is left intact,
    the temporary file is removed, and the error propagates.
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
    offset = 0
    for name in order:
        tensor = tensors[name]
        nbytes = tensor.numel() * tensor.dtype.itemsize
        header[name] = {
            "dtype": _NAME_OF_DTYPE[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-(8 + len(encoded)) % _DATA_ALIGNMENT)  # the data area starts 64-byte aligned

    def chunks() -> Iterator[bytes]:  # one tensor's bytes in memory at a time
        yield struct.pack("<Q", len(encoded)) + encoded
        for name in order:
            data = tensor_bytes(tensors[name])
            if len(data) != header[name]["data_offsets"][1] - header[name]["data_offsets"][0]:
                raise RuntimeError(f"tensor {name!r} produced {len(data)} bytes, not the {header[name]} announced")
            yield data

    write_atomically(path, chunks())


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

    Each tensor's bytes are read once into memory the tensor owns (on CPU straight into its buffer; see host_bytes):
    no mapping of the file is kept, so rewriting, truncating or replacing the file later never changes a loaded
    value nor faults the process. The header is checked against the file size before any tensor is allocated.

    Raises:
        ValueError: a malformed file (truncated, bad or too deeply nested header JSON, a repeated name, unknown
            dtype, offsets that overlap, leave gaps or disagree with the shape), naming the problem.
    """
    where = str(path)
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            raise ValueError(f"{where}: empty file, not a safetensors file (expected an 8-byte header length)")
        length = _header_length(file.read(8), size)
        raw = bytearray(length)
        read_exactly(file, 8, memoryview(raw), where)
        _, entries = _parse_header(bytes(raw), size, where)
        start = 8 + length
        return {
            name: tensor_from_file(file, start + begin, dtype, shape, device, where)
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


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key that appears twice (json.loads would keep the last silently)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKey(f"the key {key!r} appears twice in one JSON object")
        found[key] = value
    return found


def _parse_header(raw: bytes, file_size: int, where: str) -> tuple[dict[str, Any], list[Entry]]:
    """The decoded header and its tensors (name, dtype, shape, begin, end) sorted by offset, checked for consistency."""
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except _DuplicateKey as error:
        raise ValueError(f"{where}: safetensors header: {error}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{where}: safetensors header is not valid JSON: {error}") from None
    except RecursionError:  # the decoder recurses once per nesting level; a header needs three
        raise ValueError(f"{where}: safetensors header JSON is nested too deeply") from None
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
