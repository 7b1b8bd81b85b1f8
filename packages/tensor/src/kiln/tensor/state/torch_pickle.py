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
raises pickle.UnpicklingError before anything runs. It is Python's own pure-Python unpickler (its memo is a dict, so
a hostile memo index cannot make it allocate), reading through a file whose reads stop at the file's end; any
failure inside the pickle (a malformed opcode stream, wrong arguments to an allowed global, an attempt to set state
on a kiln object) is reported as pickle.UnpicklingError. Storage sizes are checked against the file before anything
is allocated for them, and a tensor broadcast by stride 0 (`expand`) loads as an expand of its storage.
"""

from __future__ import annotations

import collections
import io
import math
import os
import pickle
import reprlib
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.tensor.state.host_bytes import read_exactly, tensor_from_bytes, tensor_from_file
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

__all__ = ["ALLOWED_GLOBALS", "torch_load"]

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001
MAX_NESTING = 200
"""How deeply containers may nest in a checkpoint's object (a state dict needs 2 or 3 levels)."""
MAX_ELEMENTS = 1 << 48
"""The most elements one loaded tensor may have (a stride-0 view may declare far more than its storage holds)."""


class _ShortRepr(reprlib.Repr):
    """reprlib's abbreviated repr for error messages: three levels deep, 60 characters per string or object."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 3, 60, 60


_short = _ShortRepr()


class _Refuse:
    """A mixin for the objects the unpickler makes: refuses pickle's BUILD opcode (state set on an instance),
    which would otherwise rewrite their fields, or those of the shared ALLOWED_GLOBALS values."""

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError(f"a checkpoint may not set the state of a {type(self).__name__.lstrip('_')}")


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
class _TorchDType(_Refuse):
    """What a torch dtype global (torch.float8_e4m3fn, ...) unpickles to."""

    dtype: DType


@dataclass(frozen=True)
class _StorageType(_Refuse):
    """What a storage class global (torch.FloatStorage, ...) unpickles to: the element dtype it stands for."""

    dtype: DType


@dataclass(frozen=True)
class _StorageRef(_Refuse):
    """A storage named by a persistent id: its data is read after unpickling (legacy files store it after)."""

    key: str
    dtype: DType
    numel: int
    view_offset: int = 0  # legacy storage views: an element offset into the root storage `key`


@dataclass
class _TensorRef(_Refuse):
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
    if not (
        isinstance(size, tuple)
        and isinstance(stride, tuple)
        and len(size) == len(stride)
        and all(_is_count(item) for item in size + stride)
    ):
        raise pickle.UnpicklingError(
            f"_rebuild_tensor_v2: size {_short.repr(size)} / stride {_short.repr(stride)}; expected two tuples of "
            f"as many ints >= 0"
        )
    if not _is_count(storage_offset):
        raise pickle.UnpicklingError(
            f"_rebuild_tensor_v2: storage offset {_short.repr(storage_offset)}; expected int >= 0"
        )
    return _TensorRef(storage, storage_offset, size, stride, requires_grad is True, storage.dtype)


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


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
    data.requires_grad = requires_grad is True
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


class _BoundedFile:
    """What the unpickler reads from: a file whose reads stop at byte `end`, so a length read from a hostile pickle
    never makes a read allocate more than the file holds."""

    def __init__(self, file: io.BufferedIOBase, end: int) -> None:
        self.file, self.end = file, end

    def read(self, size: int = -1) -> bytes:
        left = max(0, self.end - self.file.tell())
        return self.file.read(left if size < 0 else min(size, left))

    def readline(self) -> bytes:
        return self.file.readline(max(0, self.end - self.file.tell()))

    def readinto(self, buffer: bytearray | memoryview) -> int:
        with memoryview(buffer) as view:
            return self.file.readinto(view[: max(0, self.end - self.file.tell())])


class _RestrictedUnpickler(pickle._Unpickler):
    """An unpickler that resolves only ALLOWED_GLOBALS and turns storage persistent ids into _StorageRef."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file: _BoundedFile, storage_reader: Callable[[tuple[Any, ...]], _StorageRef] | None) -> None:
        super().__init__(file)
        self._storage_reader = storage_reader
        self._size_limit = file.end

    def load_bytearray8(self) -> None:
        (length,) = struct.unpack("<Q", self.read(8))  # type: ignore[attr-defined]
        if length > self._size_limit:  # pickle's own handler allocates the bytearray before reading into it
            raise pickle.UnpicklingError(f"BYTEARRAY8 of {length} bytes in a file of {self._size_limit}")
        data = bytearray(length)
        self.readinto(data)  # type: ignore[attr-defined]
        self.append(data)  # type: ignore[attr-defined]

    dispatch[pickle.BYTEARRAY8[0]] = load_bytearray8  # type: ignore[assignment]

    def load(self) -> Any:
        """The unpickled object; any failure inside the pickle as pickle.UnpicklingError."""
        try:
            return super().load()
        except pickle.UnpicklingError:
            raise
        except EOFError:
            raise pickle.UnpicklingError("truncated pickle: the data ends before its STOP opcode") from None
        except (Exception, RecursionError, MemoryError) as error:
            raise pickle.UnpicklingError(f"malformed pickle: {type(error).__name__}: {_short.repr(error)}") from None

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
            raise pickle.UnpicklingError(
                f"unsupported persistent id {_short.repr(pid)}; expected a ('storage', ...) tuple"
            )
        return self._storage_reader(pid)


def _storage_ref(pid: tuple[Any, ...]) -> _StorageRef:
    if len(pid) < 5 or not isinstance(pid[2], (str, int)):
        raise pickle.UnpicklingError(
            f"storage persistent id {_short.repr(pid)}; expected ('storage', class, key, location, numel[, view])"
        )
    storage_type, key, numel = pid[1], str(pid[2]), pid[4]
    if not isinstance(storage_type, _StorageType):
        raise pickle.UnpicklingError(
            f"storage {key!r} has type {_short.repr(storage_type)}; expected a torch storage class"
        )
    view = pid[5] if len(pid) > 5 else None
    if view is not None:  # pre-1.0 storage views: (view key, element offset, element count) of the root `key`
        if not (isinstance(view, tuple) and len(view) == 3 and _is_count(view[1]) and _is_count(view[2])):
            raise pickle.UnpicklingError(f"storage {key!r} view {_short.repr(view)}; expected (key, offset, count)")
        return _StorageRef(key, storage_type.dtype, view[2], view[1])
    if not _is_count(numel):
        raise pickle.UnpicklingError(f"storage {key!r} element count {_short.repr(numel)}; expected an int >= 0")
    return _StorageRef(key, storage_type.dtype, numel)


def torch_load(path: str | os.PathLike[str], device: str | None = None) -> Any:
    """The object a `torch.save` file holds, its tensors turned into kiln Tensors (realized) on `device`.

    Reads both the zip format and the legacy one. Containers (dict, OrderedDict, list, tuple) and plain values
    (numbers, strings) come back as they were pickled. Each storage is read once into memory its tensors own.

    Raises:
        pickle.UnpicklingError: the pickle names a global outside ALLOWED_GLOBALS (nothing of it is run), or is
            malformed (bad opcodes, wrong arguments to an allowed global, a bad storage id, state set on a tensor).
        ValueError: not a torch checkpoint, a malformed zip archive, a big-endian one, a truncated file, a storage
            larger than the file, storages that do not hold the tensors' data, or containers nested deeper than
            MAX_NESTING; the message names the storage, member or offset.
    """
    where = str(path)
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if zipfile.is_zipfile(file):
            result, storages = _load_zip(file, size, where)
        else:
            file.seek(0)
            result, storages = _load_legacy(file, size, where)
        built: list[Tensor] = []
        resolved = _resolve(result, _StorageTensors(file, storages, device, where), built, {}, 0)
    if built:
        Tensor.realize_all(*built)
    return resolved


@dataclass(frozen=True)
class _Span:
    """A storage's bytes where they lie in the file (read straight into the tensor's buffer)."""

    offset: int
    nbytes: int


Storages = dict[str, tuple[bytes | _Span, DType]]
# what zipfile raises on a malformed archive, besides ValueError (bad offsets make it seek before the start: OSError)
_ZIP_ERRORS: tuple[type[Exception], ...] = (zipfile.BadZipFile, zipfile.LargeZipFile, struct.error, EOFError)
_ZIP_ERRORS += (
    NotImplementedError,
    RuntimeError,
    OSError,
    KeyError,
    IndexError,
    OverflowError,
    UnicodeError,
    zlib.error,
)


def _load_zip(file: io.BufferedIOBase, size: int, where: str) -> tuple[Any, Storages]:
    try:
        return _read_zip(file, size, where)
    except (ValueError, pickle.UnpicklingError):
        raise
    except _ZIP_ERRORS as error:
        raise ValueError(f"{where}: malformed zip archive: {type(error).__name__}: {_short.repr(error)}") from None


def _read_zip(file: io.BufferedIOBase, size: int, where: str) -> tuple[Any, Storages]:
    with zipfile.ZipFile(file) as archive:
        pickles = [name for name in archive.namelist() if name.endswith("data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise ValueError(f"{where}: a torch zip checkpoint holds one <archive>/data.pkl, found {pickles[:4]}")
        prefix = pickles[0].removesuffix("data.pkl")
        names = set(archive.namelist())
        if f"{prefix}byteorder" in names and _member(archive, f"{prefix}byteorder", 64, where).strip() != b"little":
            raise ValueError(f"{where}: big-endian checkpoints are not supported (byteorder is not 'little')")
        refs: dict[str, _StorageRef] = {}

        def read_storage(pid: tuple[Any, ...]) -> _StorageRef:
            ref = _storage_ref(pid)
            refs.setdefault(ref.key, ref)
            return ref

        data = _member(archive, pickles[0], size, where)
        result = _RestrictedUnpickler(_BoundedFile(io.BytesIO(data), len(data)), read_storage).load()
        storages: Storages = {}
        for key, ref in refs.items():
            member = f"{prefix}data/{key}"
            if member not in names:
                raise ValueError(f"{where}: storage {key!r} is missing (no {member} in the archive)")
            storages[key] = (_storage_bytes(archive, member, ref, file, size, where), ref.dtype)
    return result, storages


def _member(archive: zipfile.ZipFile, member: str, limit: int, where: str) -> bytes:
    """A member's bytes, refused before decompressing when it declares more than `limit` bytes."""
    declared = archive.getinfo(member).file_size
    if declared > limit:
        raise ValueError(f"{where}: zip member {member} declares {declared} bytes, over the {limit}-byte limit")
    return archive.read(member)


def _storage_bytes(
    archive: zipfile.ZipFile, member: str, ref: _StorageRef, file: io.BufferedIOBase, size: int, where: str
) -> bytes | _Span:
    """A storage member: its span of the file when stored uncompressed (torch stores storages so), else its bytes
    decompressed; its size must be the storage's (numel x item size) either way."""
    info = archive.getinfo(member)
    needed = ref.numel * ref.dtype.itemsize
    if info.file_size != needed:
        raise ValueError(
            f"{where}: zip member {member} holds {info.file_size} bytes; storage {ref.key!r} of {ref.numel} "
            f"elements of {ref.dtype!r} needs {needed}"
        )
    if info.compress_type != zipfile.ZIP_STORED:
        return archive.read(member)
    header = bytearray(30)  # the local file header
    read_exactly(file, info.header_offset, memoryview(header), where)
    if header[:4] != b"PK\x03\x04":
        raise ValueError(f"{where}: zip member {member} has no local file header at offset {info.header_offset}")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    start = info.header_offset + 30 + name_length + extra_length
    if start + info.file_size > size:
        raise ValueError(f"{where}: truncated archive: member {member} runs past the file end (offset {start})")
    return _Span(start, info.file_size)


def _load_legacy(file: io.BufferedIOBase, size: int, where: str) -> tuple[Any, Storages]:
    bounded = _BoundedFile(file, size)
    if size == 0:
        raise ValueError(f"{where}: not a torch checkpoint: empty or truncated before the legacy magic number")
    magic = _RestrictedUnpickler(bounded, None).load()
    if magic != _LEGACY_MAGIC:
        raise ValueError(
            f"{where}: not a torch checkpoint: first pickle is {_short.repr(magic)}, not the legacy magic number"
        )
    refs: dict[str, _StorageRef] = {}

    def read_storage(pid: tuple[Any, ...]) -> _StorageRef:
        ref = _storage_ref(pid)
        refs.setdefault(ref.key, ref)
        return ref

    protocol = _RestrictedUnpickler(bounded, None).load()
    if protocol != _LEGACY_PROTOCOL:
        raise ValueError(f"{where}: legacy checkpoint protocol {_short.repr(protocol)}; expected {_LEGACY_PROTOCOL}")
    system = _RestrictedUnpickler(bounded, None).load()
    if isinstance(system, dict) and system.get("little_endian") is False:
        raise ValueError(f"{where}: big-endian checkpoints are not supported")
    result = _RestrictedUnpickler(bounded, read_storage).load()
    keys = _RestrictedUnpickler(bounded, None).load()
    if not isinstance(keys, list):
        raise ValueError(f"{where}: the legacy storage key list is a {type(keys).__name__}, not a list")
    storages: Storages = {}
    for key in keys:
        ref = refs.get(str(key)) if isinstance(key, (str, int)) else None
        if ref is None:
            raise ValueError(f"{where}: storage {_short.repr(key)} is listed but no tensor uses it")
        position = file.tell()
        header = file.read(8)
        if len(header) != 8:
            raise ValueError(f"{where}: truncated: storage {ref.key!r} has no element count (offset {position})")
        (count,) = struct.unpack("<q", header)
        left = size - position - 8
        if count < 0 or count * ref.dtype.itemsize > left:
            raise ValueError(
                f"{where}: truncated: storage {ref.key!r} needs {count} x {ref.dtype.itemsize} bytes at offset "
                f"{position + 8}; the file has {left} left"
            )
        storages[ref.key] = (_Span(position + 8, count * ref.dtype.itemsize), ref.dtype)
        file.seek(position + 8 + count * ref.dtype.itemsize)
    return result, storages


class _StorageTensors:
    """One kiln buffer per (storage, dtype it is read as), made on first use from the storage's bytes."""

    def __init__(self, file: io.BufferedIOBase, storages: Storages, device: str | None, where: str) -> None:
        self.file, self.storages, self.device, self.where = file, storages, device, where
        self.made: dict[tuple[str, DType], Tensor] = {}

    def get(self, key: str, dtype: DType) -> Tensor:
        if key not in self.storages:
            raise ValueError(f"{self.where}: tensor data refers to storage {key!r}, which the checkpoint does not hold")
        if (key, dtype) not in self.made:
            source = self.storages[key][0]
            nbytes = source.nbytes if isinstance(source, _Span) else len(source)
            if nbytes % dtype.itemsize:
                raise ValueError(
                    f"{self.where}: storage {key!r} of {nbytes} bytes is not a whole number of {dtype!r} items"
                )
            shape = (nbytes // dtype.itemsize,)
            if isinstance(source, _Span):
                tensor = tensor_from_file(self.file, source.offset, dtype, shape, self.device, self.where)
            else:
                tensor = tensor_from_bytes(memoryview(source), dtype, shape, self.device)
            self.made[key, dtype] = tensor
        return self.made[key, dtype]


def _resolve(value: Any, storages: _StorageTensors, built: list[Tensor], done: dict[int, Any], depth: int) -> Any:
    """`value` with every _TensorRef replaced by a kiln Tensor (containers rebuilt, OrderedDict attributes kept).

    `done` maps the id of each value already resolved to its result: a shared or self-containing value is visited
    once. Nesting is bounded by MAX_NESTING."""
    if id(value) in done:
        return done[id(value)]
    if depth > MAX_NESTING:
        raise ValueError(f"{storages.where}: containers nest deeper than {MAX_NESTING} levels")
    if isinstance(value, _TensorRef):
        tensor, realized = _strided_view(value, storages)
        if not realized:
            built.append(tensor)
        done[id(value)] = tensor
        return tensor
    if isinstance(value, dict):
        done[id(value)] = value
        for key in value:
            value[key] = _resolve(value[key], storages, built, done, depth + 1)
        return value
    if isinstance(value, list):
        done[id(value)] = value
        value[:] = [_resolve(item, storages, built, done, depth + 1) for item in value]
        return value
    if isinstance(value, tuple):
        result = tuple(_resolve(item, storages, built, done, depth + 1) for item in value)
        done[id(value)] = result
        return result
    return value


def _strided_view(ref: _TensorRef, storages: _StorageTensors) -> tuple[Tensor, bool]:
    """The tensor of `ref` (storage[offset + sum(index * stride)]): a movement view if one fits, else a gather.

    A dim of stride 0 (what `expand` makes) repeats one element: only the other dims are read from the storage and
    the result is expanded, a view of them, so `tensor([2.5]).expand(10**8)` costs one element of memory.
    Returns the tensor and whether it is realized already (an expand must not be realized again: that would write
    out every repeated element)."""
    where = storages.where
    storage = storages.get(ref.storage.key, ref.dtype)
    offset, size, stride = ref.storage.view_offset + ref.offset, ref.size, ref.stride
    count = math.prod(size)
    if count > MAX_ELEMENTS:
        raise ValueError(f"{where}: a tensor of size {list(size)} has {count} elements, over {MAX_ELEMENTS}")
    if count == 0:
        return Tensor.zeros(*size, dtype=storage.dtype, device=storage.device).contiguous(), False
    last = offset + sum((s - 1) * st for s, st in zip(size, stride))
    if last >= storage.shape[0]:
        raise ValueError(
            f"{where}: a tensor of size {list(size)}, stride {list(stride)} at offset {offset} reads element {last} "
            f"of a storage of {storage.shape[0]} elements"
        )
    read = tuple(extent if step else 1 for extent, step in zip(size, stride))
    tensor = _as_permuted_view(storage, offset, read, stride)
    if tensor is None:  # slices with steps etc.: gather the elements by their computed flat index
        index = np.full(read, offset, dtype=np.int64)
        for dim, (extent, step) in enumerate(zip(read, stride)):
            shape = [1] * len(read)
            shape[dim] = extent
            index = index + (np.arange(extent, dtype=np.int64) * step).reshape(shape)
        tensor = storage[Tensor(index, device=storage.device)]
    tensor = tensor.contiguous()
    if read != size:  # the repeated part realized now, then a view of it
        tensor = tensor.realize().expand(size)
    if ref.requires_grad and dtypes.is_float(tensor.dtype):
        tensor.requires_grad = True
    return tensor, read != size


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
