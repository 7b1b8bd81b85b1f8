"""GGUF files (llama.cpp's model format): metadata key/values, tensor infos, then aligned tensor data.

Layout (all little-endian): "GGUF", version (u32: 2 or 3), tensor count (u64), key/value count (u64); the key/values
(string key, u32 value type, value); one info per tensor (string name, u32 dim count, u64 dims innermost first,
u32 ggml type, u64 data offset); padding to `general.alignment` (default 32); the data area, each tensor at its
offset. A string is a u64 byte length then UTF-8 bytes; an array is a u32 item type, a u64 count, then the items.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from typing import Any

from kiln.tensor.state.host_bytes import tensor_from_mapping
from kiln.tensor.state.quantization import GGMLType, block_format, dequantize
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["gguf_load"]

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32

# metadata value type number -> struct format of one scalar (8: string and 9: array are read separately)
_SCALAR_FORMATS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q"}
_SCALAR_FORMATS |= {11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    """Sequential little-endian reads from the mapped file, with errors that say what ran past the end."""

    def __init__(self, data: mmap.mmap, where: str) -> None:
        self.data, self.position, self.where = data, 0, where

    def take(self, size: int, what: str) -> bytes:
        if self.position + size > len(self.data):
            raise ValueError(
                f"{self.where}: truncated GGUF file: {what} needs {size} bytes at offset {self.position}, the file "
                f"has {len(self.data)}"
            )
        chunk = self.data[self.position : self.position + size]
        self.position += size
        return chunk

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        length = self.scalar("<Q", what)
        try:
            return self.take(length, what).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{self.where}: {what} is not valid UTF-8: {error}") from None

    def value(self, value_type: int, what: str) -> Any:
        if value_type == _STRING:
            return self.string(what)
        if value_type == _ARRAY:
            item_type, count = self.scalar("<I", what), self.scalar("<Q", what)
            if item_type in _SCALAR_FORMATS:  # one unpack for a whole numeric array (token scores, types...)
                fmt = _SCALAR_FORMATS[item_type]
                return list(struct.unpack(f"<{count}{fmt[1]}", self.take(count * struct.calcsize(fmt), what)))
            return [self.value(item_type, what) for _ in range(count)]
        if value_type not in _SCALAR_FORMATS:
            raise ValueError(f"{self.where}: {what} has unknown GGUF value type {value_type}; expected 0..12")
        return self.scalar(_SCALAR_FORMATS[value_type], what)


def gguf_load(path: str | os.PathLike[str], device: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The metadata and tensors of a GGUF file; quantized tensors are dequantized to float32 by kiln kernels.

    Tensor shapes are row-major (GGUF stores dims innermost first; they are reversed, as gguf-py does). The file is
    memory-mapped copy-on-write: on CPU a 64-byte-aligned tensor's buffer aliases the mapping, otherwise its bytes
    are copied once into a device buffer; quantized data is decoded there.

    Returns:
        (metadata, tensors): metadata maps each key to a Python value (int, float, bool, str or a list of them);
        tensors maps each name to a realized Tensor (F32 / F16 / BF16 / integer types keep their dtype).

    Raises:
        ValueError: not a GGUF file, an unsupported version, a truncated file or bad offsets.
        NotImplementedError: a tensor type kiln does not decode (named).
    """
    return _read(path, True, device)


def gguf_load_raw(path: str | os.PathLike[str], device: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Like `gguf_load` but each tensor stays encoded: name -> (uint8 Tensor of its bytes, GGMLType, shape).

    `dequantize(*entry)` decodes one lazily, so a consumer can fuse the decode into its own kernel.
    """
    return _read(path, False, device)


def _read(path: str | os.PathLike[str], decode: bool, device: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    where = str(path)
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            raise ValueError(f"{where}: empty file, not a GGUF file")
        # copy-on-write and not closed here: CPU buffers may alias it; it is unmapped when the last one is freed
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    return _parse(_Reader(mapping, where), decode, device)


def _parse(reader: _Reader, decode: bool, device: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    where = reader.where
    magic = reader.take(4, "the magic number")
    if magic != _MAGIC:
        raise ValueError(f"{where}: not a GGUF file: magic {magic!r}, expected {_MAGIC!r}")
    version = reader.scalar("<I", "the version")
    if version not in (2, 3):
        raise ValueError(f"{where}: GGUF version {version} is not supported; expected 2 or 3")
    tensor_count, kv_count = reader.scalar("<Q", "the tensor count"), reader.scalar("<Q", "the key/value count")
    metadata: dict[str, Any] = {}
    for index in range(kv_count):
        key = reader.string(f"metadata key #{index}")
        metadata[key] = reader.value(reader.scalar("<I", f"the type of {key!r}"), f"metadata value {key!r}")
    infos: list[tuple[str, tuple[int, ...], int, int]] = []
    for index in range(tensor_count):
        name = reader.string(f"tensor name #{index}")
        rank = reader.scalar("<I", f"the rank of tensor {name!r}")
        dims = [reader.scalar("<Q", f"the dims of tensor {name!r}") for _ in range(rank)]
        kind = reader.scalar("<I", f"the type of tensor {name!r}")
        infos.append((name, tuple(reversed(dims)), kind, reader.scalar("<Q", f"the offset of tensor {name!r}")))
    alignment = metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"{where}: general.alignment is {alignment!r}; expected a positive power of two")
    start = reader.position + (-reader.position % alignment)
    built: dict[str, Any] = {}
    for name, shape, kind, offset in infos:
        try:
            block = block_format(kind)
        except NotImplementedError as error:
            raise NotImplementedError(f"{where}: tensor {name!r}: {error}") from None
        count = math.prod(shape)
        if count % block.block_size:
            raise ValueError(f"{where}: tensor {name!r} of shape {shape} is not whole {block.block_size}-blocks")
        if offset % alignment:
            raise ValueError(f"{where}: tensor {name!r} offset {offset} is not a multiple of the alignment {alignment}")
        size = count // block.block_size * block.type_size
        if start + offset + size > len(reader.data):
            raise ValueError(
                f"{where}: truncated GGUF file: tensor {name!r} needs bytes {start + offset}..{start + offset + size} "
                f"of a {len(reader.data)}-byte file"
            )
        if decode and block.block_size == 1:  # unquantized: the bytes are the values, no kernel needed
            built[name] = tensor_from_mapping(reader.data, start + offset, block.dtype, shape, device)
        else:
            raw = tensor_from_mapping(reader.data, start + offset, dtypes.uint8, (size,), device)
            built[name] = dequantize(raw, kind, shape) if decode else (raw, GGMLType(kind), shape)
    tensors = [value for value in built.values() if isinstance(value, Tensor)]
    if tensors:
        Tensor.realize_all(*tensors)
    return metadata, built
