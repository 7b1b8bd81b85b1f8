"""GGUF files (llama.cpp's model format): metadata key/values, tensor infos, then aligned tensor data.

Layout (all little-endian): "GGUF", version (u32: 2 or 3), tensor count (u64), key/value count (u64); the key/values
(string key, u32 value type, value); one info per tensor (string name, u32 dim count, u64 dims innermost first,
u32 ggml type, u64 data offset); padding to `general.alignment` (default 32); the data area, each tensor at its
offset. A string is a u64 byte length then UTF-8 bytes; an array is a u32 item type, a u64 count, then the items.

As llama.cpp's reader does, a file is refused (ValueError naming the key, tensor or offset) when a metadata key or a
tensor name appears twice, when two tensors' byte ranges overlap, or when a tensor has more than 4 dims. Arrays may
nest at most `MAX_ARRAY_DEPTH` deep, and every count is checked against the bytes left in the file before anything
is allocated for it.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import struct
from typing import Any

from kiln.tensor.state.host_bytes import tensor_from_file
from kiln.tensor.state.quantization import GGMLType, block_format, dequantize
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["gguf_load"]

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32

# metadata value type number -> struct format of one scalar (8: string and 9: array are read separately)
_SCALAR_FORMATS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
MAX_ARRAY_DEPTH = 8
"""How deeply arrays may nest in metadata (llama.cpp's reader allows none; gguf-py reads any depth)."""
MAX_DIMS = 4  # GGML_MAX_DIMS
# the fewest bytes one item of each kind takes in the file: a scalar its size, a string its length, an array its
# item type and count
_MIN_ITEM_BYTES = {_STRING: 8, _ARRAY: 12} | {kind: struct.calcsize(fmt) for kind, fmt in _SCALAR_FORMATS.items()}


class _Reader:
    """Sequential little-endian reads from the file, with errors that say what ran past the end."""

    def __init__(self, file: io.BufferedIOBase, size: int, where: str) -> None:
        self.file, self.size, self.position, self.where = file, size, 0, where

    def take(self, size: int, what: str) -> bytes:
        if self.position + size > self.size:
            raise ValueError(
                f"{self.where}: truncated GGUF file: {what} needs {size} bytes at offset {self.position}, the file "
                f"has {self.size}"
            )
        chunk = self.file.read(size)
        if len(chunk) != size:
            raise ValueError(f"{self.where}: the file shrank while read: {what} at offset {self.position}")
        self.position += size
        return chunk

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def count(self, what: str, item_bytes: int) -> int:
        """A u64 count of items of at least `item_bytes` each, refused if they cannot fit in the rest of the file."""
        position = self.position
        count: int = self.scalar("<Q", what)
        if count * item_bytes > self.size - self.position:
            raise ValueError(
                f"{self.where}: {what} is {count} (at offset {position}): {count} items of at least {item_bytes} "
                f"bytes do not fit in the {self.size - self.position} bytes left in the file"
            )
        return count

    def string(self, what: str) -> str:
        length = self.count(f"the length of {what}", 1)
        try:
            return self.take(length, what).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{self.where}: {what} is not valid UTF-8: {error}") from None

    def value(self, value_type: int, what: str, depth: int = 0) -> Any:
        if value_type == _STRING:
            return self.string(what)
        if value_type == _ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise ValueError(
                    f"{self.where}: {what} nests arrays deeper than {MAX_ARRAY_DEPTH} (at offset {self.position})"
                )
            item_type = self.scalar("<I", what)
            if item_type not in _MIN_ITEM_BYTES:
                raise ValueError(f"{self.where}: {what} has unknown GGUF array item type {item_type}; expected 0..12")
            count = self.count(f"the item count of {what}", _MIN_ITEM_BYTES[item_type])
            if item_type in _SCALAR_FORMATS:  # one unpack for a whole numeric array (token scores, types...)
                fmt = _SCALAR_FORMATS[item_type]
                return list(struct.unpack(f"<{count}{fmt[1]}", self.take(count * struct.calcsize(fmt), what)))
            return [self.value(item_type, what, depth + 1) for _ in range(count)]
        if value_type not in _SCALAR_FORMATS:
            raise ValueError(f"{self.where}: {what} has unknown GGUF value type {value_type}; expected 0..12")
        return self.scalar(_SCALAR_FORMATS[value_type], what)


def gguf_load(path: str | os.PathLike[str], device: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The metadata and tensors of a GGUF file; quantized tensors are dequantized to float32 by kiln kernels.

    Tensor shapes are row-major (GGUF stores dims innermost first; they are reversed, as gguf-py does). Each tensor's
    bytes are read once into memory it owns (on CPU straight into its buffer; see host_bytes), so later changes to
    the file never reach a loaded tensor; quantized data is decoded there.

    Returns:
        (metadata, tensors): metadata maps each key to a Python value (int, float, bool, str or a list of them);
        tensors maps each name to a realized Tensor (F32 / F16 / BF16 / integer types keep their dtype).

    Raises:
        ValueError: not a GGUF file, an unsupported version, a truncated file, a count that does not fit in the file,
            arrays nested too deeply, an unknown value or tensor type, a repeated key or tensor name, tensors whose
            bytes overlap or bad offsets; the message names the key, tensor or offset.
        NotImplementedError: a ggml tensor type that exists but kiln does not decode (named).
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
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            raise ValueError(f"{where}: empty file, not a GGUF file")
        return _parse(_Reader(file, size, where), decode, device)


def _parse(reader: _Reader, decode: bool, device: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    where = reader.where
    magic = reader.take(4, "the magic number")
    if magic != _MAGIC:
        raise ValueError(f"{where}: not a GGUF file: magic {magic!r}, expected {_MAGIC!r}")
    version = reader.scalar("<I", "the version")
    if version not in (2, 3):
        raise ValueError(f"{where}: GGUF version {version} is not supported; expected 2 or 3")
    tensor_count = reader.count("the tensor count", 8 + 4 + 4 + 8)  # name length, rank, type, offset
    kv_count = reader.count("the key/value count", 8 + 4)  # key length, value type
    metadata: dict[str, Any] = {}
    for index in range(kv_count):
        key = reader.string(f"metadata key #{index}")
        if key in metadata:
            raise ValueError(f"{where}: metadata key {key!r} appears twice (key #{index}, at offset {reader.position})")
        metadata[key] = reader.value(reader.scalar("<I", f"the type of {key!r}"), f"metadata value {key!r}")
    infos: list[tuple[str, tuple[int, ...], int, int]] = []
    names: set[str] = set()
    for index in range(tensor_count):
        name = reader.string(f"tensor name #{index}")
        if name in names:
            raise ValueError(f"{where}: tensor name {name!r} appears twice (tensor #{index})")
        names.add(name)
        rank = reader.scalar("<I", f"the rank of tensor {name!r}")
        if rank > MAX_DIMS:
            raise ValueError(f"{where}: tensor {name!r} has {rank} dims; GGUF allows at most {MAX_DIMS}")
        dims = [reader.scalar("<Q", f"the dims of tensor {name!r}") for _ in range(rank)]
        kind = reader.scalar("<I", f"the type of tensor {name!r}")
        if kind not in GGMLType._value2member_map_:
            raise ValueError(f"{where}: tensor {name!r} has unknown ggml type {kind}")
        infos.append((name, tuple(reversed(dims)), kind, reader.scalar("<Q", f"the offset of tensor {name!r}")))
    alignment = metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"{where}: general.alignment is {alignment!r}; expected a positive power of two")
    start = reader.position + (-reader.position % alignment)
    built: dict[str, Any] = {}
    spans: list[tuple[int, int, str]] = []
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
        if start + offset + size > reader.size:
            raise ValueError(
                f"{where}: truncated GGUF file: tensor {name!r} needs bytes {start + offset}..{start + offset + size} "
                f"of a {reader.size}-byte file"
            )
        spans.append((offset, offset + size, name))
    spans.sort()
    for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
        if begin < end:
            raise ValueError(
                f"{where}: tensors {first!r} and {second!r} overlap: {second!r} starts at data offset {begin}, "
                f"before {first!r} ends at {end}"
            )
    for name, shape, kind, offset in infos:  # every info checked: now allocate
        block = block_format(kind)
        size = math.prod(shape) // block.block_size * block.type_size
        if decode and block.block_size == 1:  # unquantized: the bytes are the values, no kernel needed
            built[name] = tensor_from_file(reader.file, start + offset, block.dtype, shape, device, where)
        else:
            raw = tensor_from_file(reader.file, start + offset, dtypes.uint8, (size,), device, where)
            built[name] = dequantize(raw, kind, shape) if decode else (raw, GGMLType(kind), shape)
    tensors = [value for value in built.values() if isinstance(value, Tensor)]
    if tensors:
        Tensor.realize_all(*tensors)
    return metadata, built
