"""`torch.save` files assembled from pickle opcodes (pickletools' names), so tests need no torch.

A tensor is `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, OrderedDict())` with
the storage a persistent id ("storage", torch.<Class>Storage, key, "cpu", numel), as torch writes it. The builders
were checked once by hand against torch 2.x (`torch.load(..., weights_only=True)` reads them).
"""

from __future__ import annotations

import pickle
import struct
import zipfile
from collections.abc import Sequence

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def op_int(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])  # BININT1
    if -(2**31) <= value < 2**31:
        return b"J" + struct.pack("<i", value)  # BININT
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw  # LONG1


def op_str(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE


def op_tuple(items: Sequence[bytes]) -> bytes:
    return b"(" + b"".join(items) + b"t"  # MARK ... TUPLE


def op_global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"  # GLOBAL


def op_tensor(
    key: str,
    numel: int,
    offset: int,
    size: Sequence[int],
    stride: Sequence[int],
    storage: str = "FloatStorage",
    legacy: bool = False,
) -> bytes:
    """The opcodes that push one tensor (a view of storage `key`) on the unpickler's stack; a legacy file's storage
    id has a sixth item (the view, None)."""
    fields = [op_str("storage"), op_global("torch", storage), op_str(key), op_str("cpu"), op_int(numel)]
    pid = op_tuple(fields + [b"N"] * legacy)
    args = [
        pid + b"Q",  # BINPERSID
        op_int(offset),
        op_tuple([op_int(s) for s in size]),
        op_tuple([op_int(s) for s in stride]),
        b"\x89",  # NEWFALSE
        op_global("collections", "OrderedDict") + b")R",  # OrderedDict() (EMPTY_TUPLE, REDUCE)
    ]
    return op_global("torch._utils", "_rebuild_tensor_v2") + op_tuple(args) + b"R"


def op_dict(items: dict[str, bytes]) -> bytes:
    """A dict pickle from already-encoded values, ending with STOP."""
    return b"\x80\x02}(" + b"".join(op_str(k) + v for k, v in items.items()) + b"u."  # EMPTY_DICT MARK .. SETITEMS


def zip_checkpoint(path: str, data_pkl: bytes, storages: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/version", "3\n")
        for key, raw in storages.items():
            archive.writestr(f"archive/data/{key}", raw)


def legacy_checkpoint(path: str, data_pkl: bytes, storages: dict[str, tuple[int, bytes]]) -> None:
    """storages: key -> (element count, raw bytes)."""
    head = pickle.dumps(LEGACY_MAGIC, protocol=2) + pickle.dumps(1001, protocol=2)
    head += pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2) + data_pkl
    head += pickle.dumps(list(storages), protocol=2)
    with open(path, "wb") as file:
        file.write(head)
        for count, raw in storages.values():
            file.write(struct.pack("<q", count) + raw)
