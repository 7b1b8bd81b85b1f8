"""PyTorch checkpoints (`torch.save` files) read without torch, through a restricted unpickler.

Two layouts exist:
  * zip (torch >= 1.6): `<archive>/data.pkl` is the pickled object, `<archive>/data/<key>` holds each storage's raw
    bytes, `<archive>/byteorder` says "little" or "big" (absent: little).
  * legacy: five things one after another in one file: a pickled magic number, a pickled protocol version, a
    pickled dict of system info, the pickled object, a pickled list of storage keys; then for each key, an int64
    element count followed by the storage's raw bytes.
In both, a tensor is pickled as `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` where the
storage is a persistent id ("storage", <storage class>, key, location, numel). Several tensors may view one storage.

The unpickler resolves only the globals of `ALLOWED_GLOBALS`; any other (os.system, builtins.eval, subprocess...)
raises pickle.UnpicklingError before anything runs.
"""

from __future__ import annotations

import collections
import io
import math
import mmap
import os
import pickle
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from kiln.tensor.state.host_bytes import tensor_from_bytes
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

__all__ = ["ALLOWED_GLOBALS", "torch_load"]

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001

STORAGE_DTYPES: dict[str, DType] = {
    "DoubleStorage": dtypes.float64,
    "FloatStorage": dtypes.float32,
    "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16,
    "LongStorage": dtypes.int64,
    "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16,
    "CharStorage": dtypes.int8,
    "ByteStorage": dtypes.uint8,
    "BoolStorage": dtypes.bool,
    "UntypedStorage": dtypes.uint8,
}


# torch dtype globals (pickled by _rebuild_tensor_v3, which torch uses for dtypes without a legacy storage class)
TORCH_DTYPES: dict[str, DType] = {
    "float64": dtypes.float64,
    "float32": dtypes.float32,
    "float16": dtypes.float16,
    "bfloat16": dtypes.bfloat16,
    "float8_e4m3fn": dtypes.fp8e4m3,
    "float8_e5m2": dtypes.fp8e5m2,
    "int64": dtypes.int64,
    "int32": dtypes.int32,
    "int16": dtypes.int16,
    "int8": dtypes.int8,
    "uint64": dtypes.uint64,
    "uint32": dtypes.uint32,
    "uint16": dtypes.uint16,
    "uint8": dtypes.uint8,
    "bool": dtypes.bool,
}


@dataclass(frozen=True)
class _TorchDType:
    """What a torch dtype global (torch.float8_e4m3fn, ...) unpickles to."""

    dtype: DType


@dataclass(frozen=True)
class _StorageType:
    """What a storage class global (torch.FloatStorage, ...) unpickles to: the element dtype it stands for."""

    dtype: DType


@dataclass(frozen=True)
class _StorageRef:
    """A storage named by a persistent id: its data is read after unpickling (legacy files store it after)."""

    key: str
    dtype: DType
    numel: int
    view_offset: int = 0  # legacy storage views: an element offset into the root storage `key`


@dataclass
class _TensorRef:
    """A tensor as `_rebuild_tensor_v2` describes it: a strided view of a storage."""

    storage: _StorageRef
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    requires_grad: bool
    dtype: DType  # the element dtype offset and strides count in (an untyped storage's bytes are reinterpreted)


def _rebuild_tensor_v2(
    storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any = False, *unused: Any
) -> _TensorRef:
    if not isinstance(storage, _StorageRef):
        raise pickle.UnpicklingError(f"_rebuild_tensor_v2 expects a storage, got {type(storage).__name__}")
    if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride)):
        raise pickle.UnpicklingError(f"_rebuild_tensor_v2: bad size {size!r} / stride {stride!r}")
    return _TensorRef(storage, int(storage_offset), tuple(size), tuple(stride), bool(requires_grad), storage.dtype)


def _rebuild_tensor_v3(
    storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any, hooks: Any, dtype: Any, *unused: Any
) -> _TensorRef:
    if not isinstance(dtype, _TorchDType):
        raise pickle.UnpicklingError(f"_rebuild_tensor_v3 expects a torch dtype, got {dtype!r}")
    tensor = _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad)
    tensor.dtype = dtype.dtype
    return tensor


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any, *state: Any) -> _TensorRef:
    if not isinstance(data, _TensorRef):
        raise pickle.UnpicklingError(f"_rebuild_parameter expects a tensor, got {type(data).__name__}")
    data.requires_grad = bool(requires_grad)
    return data


ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch.storage", "UntypedStorage"): _StorageType(dtypes.uint8),
    **{("torch", name): _StorageType(dtype) for name, dtype in STORAGE_DTYPES.items()},
    **{("torch", name): _TorchDType(dtype) for name, dtype in TORCH_DTYPES.items()},
}
"""The only globals a checkpoint may name: (module, name) -> what the unpickler hands back for it."""


class _RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only ALLOWED_GLOBALS and turns storage persistent ids into _StorageRef."""

    def __init__(self, file: IO[bytes], storage_reader: Callable[[tuple[Any, ...]], _StorageRef] | None) -> None:
        super().__init__(file)
        self._storage_reader = storage_reader

    def find_class(self, module: str, name: str) -> Any:
        found = ALLOWED_GLOBALS.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(
                f"refusing to load global {module}.{name}: a checkpoint may only name tensors, storages, "
                f"collections.OrderedDict and plain containers"
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        if self._storage_reader is None or not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r}; expected a ('storage', ...) tuple")
        return self._storage_reader(pid)


def _storage_ref(pid: tuple[Any, ...]) -> _StorageRef:
    storage_type, key, numel = pid[1], str(pid[2]), pid[4]
    if not isinstance(storage_type, _StorageType):
        raise pickle.UnpicklingError(f"storage {key!r} has type {storage_type!r}; expected a torch storage class")
    view = pid[5] if len(pid) > 5 else None
    if view is not None:  # pre-1.0 storage views: (view key, element offset, element count) of the root `key`
        return _StorageRef(key, storage_type.dtype, int(view[2]), int(view[1]))
    return _StorageRef(key, storage_type.dtype, int(numel))


def torch_load(path: str | os.PathLike[str], device: str | None = None) -> Any:
    """The object a `torch.save` file holds, its tensors turned into kiln Tensors (realized) on `device`.

    Reads both the zip format and the legacy one. Containers (dict, OrderedDict, list, tuple) and plain values
    (numbers, strings) come back as they were pickled.

    Raises:
        pickle.UnpicklingError: the pickle names a global outside ALLOWED_GLOBALS (nothing of it is run).
        ValueError: not a torch checkpoint, a big-endian one, or storages that do not hold the tensors' data.
    """
    if zipfile.is_zipfile(path):
        result, storages = _load_zip(path)
    else:
        result, storages = _load_legacy(path)
    built: list[Tensor] = []
    resolved = _resolve(result, _StorageTensors(storages, device), built)
    if built:
        Tensor.realize_all(*built)
    return resolved


def _load_zip(path: str | os.PathLike[str]) -> tuple[Any, dict[str, tuple[bytes | memoryview, DType]]]:
    # the mapping is not closed explicitly: storage views of it live until their buffers are filled, and it is
    # unmapped when the last one is dropped
    with open(path, "rb") as file:
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    with zipfile.ZipFile(path) as archive:
        pickles = [name for name in archive.namelist() if name.endswith("data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise ValueError(f"{path}: a torch zip checkpoint holds one <archive>/data.pkl, found {pickles}")
        prefix = pickles[0].removesuffix("data.pkl")
        names = set(archive.namelist())
        if f"{prefix}byteorder" in names and archive.read(f"{prefix}byteorder").strip() != b"little":
            raise ValueError(f"{path}: big-endian checkpoints are not supported (byteorder is not 'little')")
        refs: dict[str, _StorageRef] = {}

        def read_storage(pid: tuple[Any, ...]) -> _StorageRef:
            ref = _storage_ref(pid)
            refs[ref.key] = ref
            return ref

        result = _RestrictedUnpickler(io.BytesIO(archive.read(pickles[0])), read_storage).load()
        storages: dict[str, tuple[bytes | memoryview, DType]] = {}
        for key, ref in refs.items():
            member = f"{prefix}data/{key}"
            if member not in names:
                raise ValueError(f"{path}: storage {key!r} is missing (no {member} in the archive)")
            storages[key] = (_member_bytes(archive, member, mapping), ref.dtype)
    return result, storages


def _member_bytes(archive: zipfile.ZipFile, member: str, mapping: mmap.mmap) -> bytes | memoryview:
    """A zip member's bytes: a view of the file mapping when stored uncompressed (torch stores storages so),
    else decompressed into memory."""
    info = archive.getinfo(member)
    header = mapping[info.header_offset : info.header_offset + 30]  # the local file header
    if info.compress_type != zipfile.ZIP_STORED or len(header) != 30 or header[:4] != b"PK\x03\x04":
        return archive.read(member)
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    start = info.header_offset + 30 + name_length + extra_length
    if start + info.file_size > len(mapping):
        raise ValueError(f"{archive.filename}: truncated archive: member {member} runs past the file end")
    return memoryview(mapping)[start : start + info.file_size]


def _load_legacy(path: str | os.PathLike[str]) -> tuple[Any, dict[str, tuple[bytes | memoryview, DType]]]:
    with open(path, "rb") as file:
        try:
            magic = _RestrictedUnpickler(file, None).load()
        except EOFError:
            raise ValueError(
                f"{path}: not a torch checkpoint: empty or truncated before the legacy magic number"
            ) from None
        if magic != _LEGACY_MAGIC:
            raise ValueError(f"{path}: not a torch checkpoint: first pickle is {magic!r}, not the legacy magic number")
        protocol = _RestrictedUnpickler(file, None).load()
        if protocol != _LEGACY_PROTOCOL:
            raise ValueError(f"{path}: legacy checkpoint protocol {protocol!r}; expected {_LEGACY_PROTOCOL}")
        system = _RestrictedUnpickler(file, None).load()
        if isinstance(system, dict) and system.get("little_endian") is False:
            raise ValueError(f"{path}: big-endian checkpoints are not supported")
        refs: dict[str, _StorageRef] = {}

        def read_storage(pid: tuple[Any, ...]) -> _StorageRef:
            ref = _storage_ref(pid)
            refs.setdefault(ref.key, _StorageRef(ref.key, ref.dtype, 0))
            return ref

        result = _RestrictedUnpickler(file, read_storage).load()
        keys = _RestrictedUnpickler(file, None).load()
        if not isinstance(keys, list):
            raise ValueError(f"{path}: the legacy storage key list is a {type(keys).__name__}, not a list")
        storages: dict[str, tuple[bytes | memoryview, DType]] = {}
        for key in keys:
            ref = refs.get(str(key))
            if ref is None:
                raise ValueError(f"{path}: storage {key!r} is listed but no tensor uses it")
            header = file.read(8)
            if len(header) != 8:
                raise ValueError(f"{path}: truncated: storage {key!r} has no element count")
            (count,) = struct.unpack("<q", header)
            data = file.read(count * ref.dtype.itemsize)
            if len(data) != count * ref.dtype.itemsize:
                raise ValueError(f"{path}: truncated: storage {key!r} needs {count * ref.dtype.itemsize} bytes")
            storages[str(key)] = (data, ref.dtype)
    return result, storages


class _StorageTensors:
    """One kiln buffer per (storage, dtype it is read as), made on first use from the storage's bytes."""

    def __init__(self, storages: dict[str, tuple[bytes | memoryview, DType]], device: str | None) -> None:
        self.storages, self.device = storages, device
        self.made: dict[tuple[str, DType], Tensor] = {}

    def get(self, key: str, dtype: DType) -> Tensor:
        if key not in self.storages:
            raise ValueError(f"tensor data refers to storage {key!r}, which the checkpoint does not hold")
        if (key, dtype) not in self.made:
            data = memoryview(self.storages[key][0])
            if data.nbytes % dtype.itemsize:
                raise ValueError(f"storage {key!r} of {data.nbytes} bytes is not a whole number of {dtype!r} items")
            self.made[key, dtype] = tensor_from_bytes(data, dtype, (data.nbytes // dtype.itemsize,), self.device)
        return self.made[key, dtype]


def _resolve(value: Any, storages: _StorageTensors, built: list[Tensor]) -> Any:
    """`value` with every _TensorRef replaced by a kiln Tensor (containers rebuilt, OrderedDict attributes kept)."""
    if isinstance(value, _TensorRef):
        tensor = _strided_view(value, storages)
        built.append(tensor)
        return tensor
    if isinstance(value, dict):
        for key in value:
            value[key] = _resolve(value[key], storages, built)
        return value
    if isinstance(value, list):
        value[:] = [_resolve(item, storages, built) for item in value]
        return value
    if isinstance(value, tuple):
        return type(value)(_resolve(item, storages, built) for item in value)
    return value


def _strided_view(ref: _TensorRef, storages: _StorageTensors) -> Tensor:
    """The tensor of `ref` (storage[offset + sum(index * stride)]): a movement view if one fits, else a gather."""
    storage = storages.get(ref.storage.key, ref.dtype)
    offset, size, stride = ref.storage.view_offset + ref.offset, ref.size, ref.stride
    count = math.prod(size)
    if any(s < 0 for s in stride) or offset < 0:
        raise ValueError(f"negative storage offset {offset} or stride {stride} in a checkpoint tensor")
    if count == 0:
        return Tensor.zeros(*size, dtype=storage.dtype, device=storage.device).contiguous()
    last = offset + sum((s - 1) * st for s, st in zip(size, stride))
    if last >= storage.shape[0]:
        raise ValueError(
            f"a tensor of size {list(size)}, stride {list(stride)} at offset {offset} reads element {last} of a "
            f"storage of {storage.shape[0]} elements"
        )
    tensor = _as_permuted_view(storage, offset, size, stride)
    if tensor is None:  # slices with steps etc.: gather the elements by their computed flat index
        index = np.full(size, offset, dtype=np.int64)
        for dim, (extent, step) in enumerate(zip(size, stride)):
            shape = [1] * len(size)
            shape[dim] = extent
            index = index + (np.arange(extent, dtype=np.int64) * step).reshape(shape)
        tensor = storage[Tensor(index, device=storage.device)]
    tensor = tensor.contiguous()
    if ref.requires_grad and dtypes.is_float(tensor.dtype):
        tensor.requires_grad = True
    return tensor


def _as_permuted_view(storage: Tensor, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> Tensor | None:
    """storage as a movement view (shrink, reshape, permute) when `stride` is a permutation of a dense layout."""
    dims = [dim for dim in range(len(size)) if size[dim] != 1]
    order = sorted(dims, key=lambda dim: -stride[dim])
    expected = 1
    for dim in reversed(order):
        if stride[dim] != expected:
            return None
        expected *= size[dim]
    dense = storage.shrink(((offset, offset + math.prod(size)),)).reshape(tuple(size[dim] for dim in order))
    permuted = dense.permute(tuple(order.index(dim) for dim in dims)) if order else dense
    return permuted.reshape(tuple(size))
