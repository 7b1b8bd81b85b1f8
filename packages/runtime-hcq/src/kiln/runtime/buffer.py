"""`Buffer`: a typed, lazily allocated block of device memory, possibly a view into another buffer."""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Set
from typing import Any, Protocol

import numpy as np

from kiln.runtime.allocator import Allocator, BufferSpec
from kiln.uops import DType, PtrDType, dtypes

__all__ = ["Buffer", "BufferDevice", "DeviceLookup", "copy_between", "install_device_lookup", "numpy_dtype"]


class BufferDevice(Protocol):
    """What a Buffer needs of its device: the allocator and the dtypes it stores (a DeviceBase satisfies it)."""

    @property
    def allocator(self) -> Allocator[Any]: ...

    @property
    def supported_dtypes(self) -> Set[DType]: ...


class DeviceLookup(Protocol):
    """Device names to opened devices (the runtime's `Device` registry satisfies it)."""

    def canonicalize(self, name: str) -> str: ...

    def __getitem__(self, name: str) -> BufferDevice: ...


# Buffers sit below devices (a device's runners take Buffers), yet a Buffer finds its allocator by device name. The
# registry in kiln.runtime.device installs itself here when that module is imported (kiln.runtime imports it), so
# this module never imports the device module and the package's import graph stays a DAG.
class _NoRegistry:
    """The lookup before kiln.runtime.device has installed its registry (reachable only by loading this module
    without its package)."""

    def canonicalize(self, name: str) -> str:
        raise RuntimeError("no device registry installed: import kiln.runtime (it installs kiln.runtime.Device)")

    def __getitem__(self, name: str) -> BufferDevice:
        raise RuntimeError("no device registry installed: import kiln.runtime (it installs kiln.runtime.Device)")


_devices: DeviceLookup = _NoRegistry()


def install_device_lookup(lookup: DeviceLookup) -> None:
    """Make Buffers resolve device names through `lookup` (kiln.runtime.device installs its `Device` registry)."""
    global _devices
    _devices = lookup


def numpy_dtype(dtype: DType) -> np.dtype[Any]:
    """The numpy dtype of one lane of `dtype`; TypeError for dtypes numpy has no type for (bfloat16, fp8)."""
    if dtype.fmt is None:
        raise TypeError(
            f"numpy has no dtype for {dtype!r}; read its raw bits through a view of the same size, "
            f"e.g. buffer.view(buffer.size, dtypes.uint{8 * dtype.itemsize}).numpy()"
        )
    return np.dtype(dtype.fmt)


def _check_dtype(dtype: DType) -> None:
    if not isinstance(dtype, DType):
        raise TypeError(f"a Buffer's dtype must be a DType, got {type(dtype).__name__} {dtype!r}")
    if isinstance(dtype, PtrDType) or dtype.scalar() in (dtypes.void, dtypes.index):
        raise TypeError(f"a Buffer cannot hold {dtype!r}: expected a storable dtype such as dtypes.float32")


_STORABLE = frozenset(dtype for dtype in dtypes.all if dtype not in (dtypes.void, dtypes.index))
"""Scalar dtypes a Buffer accepts without further checks (others, e.g. vectors, go through _check_dtype)."""


def _check_count(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {value}")


def _host_bytes(data: object, what: str, writable: bool = False) -> memoryview:
    """`data` (any buffer-protocol object) as a flat byte view."""
    try:
        view = memoryview(data)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"{what} must support the buffer protocol (bytes, memoryview, numpy array ...), got {type(data).__name__}"
        ) from None
    if not view.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous memory")
    if writable and view.readonly:
        raise ValueError(f"{what} must be writable memory")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


class Buffer:
    """`size` elements of `dtype` on `device`, allocated on first use.

    A buffer built with `base=` is a view: it aliases `base`'s memory from byte `offset` on and never owns memory.

    Args:
        device: a device name ("CPU", "CUDA:1"); canonicalized.
        size: number of elements.
        dtype: element dtype (vector dtypes allowed; not void, index or pointers).
        base: the buffer this one is a view of (views of views are views of the root).
        offset: byte offset of the view inside `base`.
        options: allocation options (views take their base's).
    """

    def __init__(
        self,
        device: str,
        size: int,
        dtype: DType,
        *,
        base: Buffer | None = None,
        offset: int = 0,
        options: BufferSpec | None = None,
    ) -> None:
        if type(size) is not int or size < 0:  # exact-type test first: buffers are made on every realize
            _check_count("Buffer size", size)
        if type(offset) is not int or offset < 0:
            _check_count("Buffer offset", offset)
        if type(dtype) is not DType or dtype not in _STORABLE:
            _check_dtype(dtype)
        self.device = _devices.canonicalize(device)
        self.size = size
        self.dtype = dtype
        self._nbytes = size * dtype.nbytes  # read by every allocation and free
        self._opaque: Any = None
        self._allocator: Allocator[Any] | None = None
        self._views: weakref.WeakSet[Buffer] | None = None  # allocated views of a base, made with the first one
        if base is None:
            if offset:
                raise ValueError(f"offset={offset} given without a base buffer; only views have an offset")
            self._base: Buffer | None = None
            self.offset = 0
            self.options = options
            return
        if not isinstance(base, Buffer):
            raise TypeError(f"base must be a Buffer, got {type(base).__name__}")
        if base.device != self.device:
            raise ValueError(f"a view must be on its base's device: view on {self.device!r}, base on {base.device!r}")
        if options is not None and options != base.options:
            raise ValueError(f"a view takes its base's options {base.options!r}; got {options!r}")
        if offset + self.nbytes > base.nbytes:
            raise ValueError(
                f"a view of {self.nbytes} bytes ({size} x {dtype!r}) at byte offset {offset} does not fit in "
                f"the base buffer of {base.nbytes} bytes"
            )
        self._base = base.base
        self.offset = base.offset + offset
        self.options = base.options

    @classmethod
    def allocated_like(cls, other: Buffer) -> Buffer:
        """A new base buffer of `other`'s device, size, dtype and options, allocated by `other`'s allocator (an
        allocated buffer): the constructor's checks and device lookup are skipped, `other` passed them (the eager
        lane makes each output like the previous one)."""
        allocator = other._allocator
        if allocator is None:
            raise RuntimeError(f"allocated_like needs an allocated buffer, got {other!r}")
        buffer = cls.__new__(cls)
        buffer.device, buffer.size, buffer.dtype, buffer.options = other.device, other.size, other.dtype, other.options
        nbytes = buffer._nbytes = other._nbytes
        buffer._views = None
        buffer._base = None
        buffer.offset = 0
        buffer._allocator = None  # (set once the memory is there: a failed allocation leaves nothing to free)
        buffer._opaque = allocator.alloc(nbytes or 1, other.options)
        buffer._allocator = allocator
        return buffer

    # -- properties --------------------------------------------------------------------------------------------------
    @property
    def base(self) -> Buffer:
        """The buffer that owns the memory: the root of a view, or the buffer itself."""
        return self if self._base is None else self._base

    @property
    def nbytes(self) -> int:
        """Size in bytes: elements times the bytes of one (possibly vector) element."""
        return self._nbytes

    @property
    def is_allocated(self) -> bool:
        """Whether device memory is attached."""
        return self._allocator is not None

    @property
    def allocator(self) -> Allocator[Any]:
        """The allocator of this buffer's device (opens the device)."""
        return _devices[self.device].allocator

    @property
    def opaque(self) -> Any:
        """The allocator's handle of this buffer's memory (allocates the buffer if needed)."""
        self.allocate()
        return self._opaque

    def __repr__(self) -> str:
        where = f" view of {self.base.nbytes}B base at {self.offset}" if self._base is not None else ""
        state = "allocated" if self.is_allocated else "unallocated"
        return f"<Buffer {self.device} {self.size} x {self.dtype!r} ({state}{where})>"

    # -- allocation --------------------------------------------------------------------------------------------------
    def allocate(self) -> Buffer:
        """Attaches device memory (for a view: allocates its base and takes a slice of it). Idempotent."""
        if self._allocator is not None:
            return self
        device = _devices[self.device]
        supported = device.supported_dtypes
        if self.dtype not in supported and (scalar := self.dtype.scalar()) not in supported:  # scalars: one test
            names = ", ".join(sorted(dtype.name for dtype in device.supported_dtypes))
            raise TypeError(f"device {self.device!r} cannot store {scalar!r}; it supports: {names}")
        allocator = device.allocator
        if self._base is None:
            # A zero-element buffer still takes one byte, so every allocated buffer has real memory behind it.
            self._opaque = allocator.alloc(self._nbytes or 1, self.options)
        else:
            if not allocator.supports_offset:
                raise RuntimeError(f"the allocator of device {self.device!r} does not support views into buffers")
            base = self._base
            base.allocate()
            self._opaque = allocator._offset(base._opaque, self.nbytes, self.offset)
            if base._views is None:
                base._views = weakref.WeakSet()
            base._views.add(self)
        self._allocator = allocator
        return self

    def attach(self, opaque: Any) -> Buffer:
        """Makes memory obtained outside `allocate` (`HostAllocator.adopt`) this unallocated base buffer's memory."""
        if self._allocator is not None or self._base is not None:
            raise RuntimeError(f"attach needs an unallocated buffer that is not a view, got {self!r}")
        device = _devices[self.device]
        if self.dtype.scalar() not in device.supported_dtypes:
            raise TypeError(f"device {self.device!r} cannot store {self.dtype.scalar()!r}")
        allocator = device.allocator
        size = getattr(opaque, "size", None)
        if not getattr(opaque, "external", False) or not isinstance(size, int) or size < self.nbytes:
            raise ValueError(f"attach needs adopted memory of at least {self.nbytes} bytes, got {opaque!r}")
        self._opaque, self._allocator = opaque, allocator
        return self

    def deallocate(self) -> None:
        """Gives the memory back (to the allocator's cache); a base with allocated views cannot be deallocated."""
        if self._allocator is None:
            return
        if self._base is None:
            if live := [view for view in self._views or () if view.is_allocated]:
                raise RuntimeError(f"cannot deallocate {self!r}: {len(live)} allocated view(s) still use its memory")
            self._allocator.free(self._opaque, self._nbytes or 1, self.options)
        elif self._base._views is not None:
            self._base._views.discard(self)
        self._opaque = None
        self._allocator = None

    def __del__(self) -> None:
        # Views keep their base alive, so a base is only collected once no view of it exists.
        allocator = getattr(self, "_allocator", None)
        if allocator is not None and self._base is None:
            allocator.free(self._opaque, self._nbytes or 1, self.options)

    # -- views -------------------------------------------------------------------------------------------------------
    def view(self, size: int, dtype: DType, offset: int = 0) -> Buffer:
        """A buffer of `size` x `dtype` aliasing this one's memory from byte `offset` (relative to this buffer)."""
        _check_count("view offset", offset)
        _check_count("view size", size)
        if offset + size * dtype.nbytes > self.nbytes:
            raise ValueError(
                f"a view of {size} x {dtype!r} ({size * dtype.nbytes} bytes) at byte offset {offset} does not fit "
                f"in {self!r} of {self.nbytes} bytes"
            )
        return Buffer(self.device, size, dtype, base=self.base, offset=self.offset + offset)

    # -- copies ------------------------------------------------------------------------------------------------------
    def copyin(self, data: object) -> Buffer:
        """Copies host memory `data` (any C-contiguous buffer-protocol object of exactly `nbytes`) into the buffer."""
        source = _host_bytes(data, "copyin source")
        if source.nbytes != self.nbytes:
            raise ValueError(f"copyin of {source.nbytes} bytes into {self!r}, which holds {self.nbytes} bytes")
        self.allocate()
        if self.nbytes:
            self.allocator_in_use._copyin(self._opaque, source)
        return self

    def copyout(self, dest: object) -> memoryview:
        """Copies the buffer into writable host memory `dest` of exactly `nbytes`; returns `dest` as bytes."""
        target = _host_bytes(dest, "copyout destination", writable=True)
        if target.nbytes != self.nbytes:
            raise ValueError(f"copyout of {self!r} ({self.nbytes} bytes) into {target.nbytes} bytes of memory")
        self._require_data("copyout from")
        if self.nbytes:
            self.allocator_in_use._copyout(target, self._opaque)
        return target

    def _require_data(self, action: str) -> None:
        # A view of an allocated base holds data even before its own handle exists.
        if self._allocator is None and (self._base is None or self._base._allocator is None):
            raise RuntimeError(f"{action} {self!r}: it was never allocated, so it holds no data")
        self.allocate()

    @property
    def allocator_in_use(self) -> Allocator[Any]:
        """The allocator holding this buffer's memory; RuntimeError if it is not allocated."""
        if self._allocator is None:
            raise RuntimeError(f"{self!r} is not allocated")
        return self._allocator

    def host_view(self) -> memoryview:
        """A zero-copy host memoryview of the buffer's bytes (allocates it); RuntimeError if the device has none."""
        self.allocate()
        allocator = self.allocator_in_use
        if not allocator.supports_as_buffer:
            raise RuntimeError(f"device {self.device!r} has no host view of its memory; use copyout()")
        return allocator._as_buffer(self._opaque)[: self.nbytes]

    def numpy(self) -> np.ndarray[Any, Any]:
        """The buffer as a numpy array of shape (size,) or (size, lanes) for vector dtypes.

        Zero-copy when the device memory is host-visible: the array aliases the buffer and keeps it alive.
        Otherwise a copy. Raises TypeError for dtypes numpy cannot represent (bfloat16, fp8).
        """
        element = numpy_dtype(self.dtype)
        shape = (self.size,) if self.dtype.count == 1 else (self.size, self.dtype.count)
        self._require_data("numpy() of")
        if not self.allocator_in_use.supports_as_buffer:
            result = np.empty(shape, dtype=element)
            self.copyout(result)
            return result
        view = self.host_view()
        if view.readonly:
            return np.frombuffer(view, dtype=element).reshape(shape)
        # A ctypes array over the memory carries a reference to this buffer, so the array keeps the memory alive.
        holder = (ctypes.c_uint8 * self.nbytes).from_buffer(view)
        holder._kiln_buffer = self  # type: ignore[attr-defined]
        return np.frombuffer(memoryview(holder), dtype=element).reshape(shape)


def copy_between(dest: Buffer, src: Buffer) -> None:
    """Copies `src` into `dest` (same byte size, any devices).

    Uses the destination allocator's direct transfer when it can read the source's memory, else goes through host
    memory: a zero-copy host view of either side when one exists, else a staging copy.
    """
    if dest.nbytes != src.nbytes:
        raise ValueError(
            f"copy between buffers of different sizes: {src!r} ({src.nbytes} bytes) into {dest!r} ({dest.nbytes} bytes)"
        )
    src._require_data("copy from")
    dest.allocate()
    if dest.nbytes == 0:
        return
    dest_allocator, src_allocator = dest.allocator_in_use, src.allocator_in_use
    if dest_allocator.supports_transfer_from(src_allocator):
        dest_allocator._transfer(dest._opaque, src._opaque, dest.nbytes, src_allocator)
    elif src_allocator.supports_as_buffer:
        dest.copyin(src.host_view())
    elif dest_allocator.supports_as_buffer:
        src.copyout(dest.host_view())
    else:
        staging = bytearray(src.nbytes)
        src.copyout(staging)
        dest.copyin(staging)
