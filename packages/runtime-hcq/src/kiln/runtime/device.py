"""The device registry: device names, discovery of device kinds, lazy opening, and the device base class.

A device name is `KIND` or `KIND:suffix` ("CPU", "CUDA:1", "AM:sim"). A kind is provided either by the built-in
table of this package or by another distribution through an entry point of group "kiln.devices"
(name = kind, value = "module:Class"); the class is constructed with the canonical device name. The runtime never
imports a driver package, so a driver that is not installed is simply a kind that is not listed.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kiln.codegen import Program, Renderer
from kiln.runtime.allocator import Allocator
from kiln.runtime.buffer import install_device_lookup
from kiln.runtime.fork_hooks import renew_after_fork
from kiln.runtime.knobs import default_device, profiling_enabled, renderer_knob
from kiln.runtime.profile import profiler
from kiln.uops import DType, Knob, UOp, dtypes, register_knob
from kiln.uops.trace import add_exit_writer

if TYPE_CHECKING:
    from kiln.runtime.program_runner import ProgramRunner

__all__ = [
    "BUILTIN_DEVICES",
    "ENTRY_POINT_GROUP",
    "Device",
    "DeviceBase",
    "DeviceKind",
    "DeviceRegistry",
    "DeviceUnavailable",
    "find_dtypes",
    "find_renderers",
]

ENTRY_POINT_GROUP = "kiln.devices"

# The devices this package provides itself: kind -> "module:Class". Order matters: with no DEV set, the default
# device is the first kind (this table first, then entry points by name, then kinds registered at run time) whose
# device opens, so the CPU, which always opens, is the default of a plain installation.
BUILTIN_DEVICES: dict[str, str] = {
    "CPU": "kiln.runtime.cpu_device:CPUDevice",
    "PYTHON": "kiln.runtime.python_device:PythonDevice",
    "CUDA": "kiln.runtime.cuda.cuda_device:CUDADevice",
    "CL": "kiln.runtime.opencl.cl_device:CLDevice",
    "WEBGPU": "kiln.runtime.webgpu.webgpu_device:WebGPUDevice",
}

_KIND_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

DeviceFactory = Callable[[str], "DeviceBase"]


def find_renderers(kind: str) -> tuple[type[Renderer], ...]:
    """The renderer classes kiln.renderers offers for device kind `kind`, best first (`kiln.renderers.renderers_for`).

    Looked up when a device opens, not at import: the renderers are another package, possibly built later. The
    runtime names no renderer class itself; an installed kiln.renderers without the table offers none.
    """
    import kiln.renderers as renderers_module

    table = getattr(renderers_module, "renderers_for", None)
    found = table(kind) if callable(table) else ()
    return tuple(r for r in found if isinstance(r, type) and issubclass(r, Renderer))


def find_dtypes(kind: str) -> frozenset[DType]:
    """The dtypes a buffer of device kind `kind` may hold, from kiln.renderers' device table (`dtypes_for`); every
    dtype when the installed kiln.renderers has no table."""
    import kiln.renderers as renderers_module

    table = getattr(renderers_module, "dtypes_for", None)
    found = table(kind) if callable(table) else None
    return frozenset(found) if found is not None else frozenset(dtypes.all)


class DeviceUnavailable(RuntimeError):
    """A device exists as a kind but cannot be opened here (no hardware, driver missing, broken plugin ...)."""


_SIMULATED_SUFFIX = re.compile(r"sim(\d*)")


def simulated_vram_knob(kind: str) -> Knob[int]:
    """The knob `<KIND>_SIM_VRAM_MIB` of a user-space driver (owner kiln.drivers.<kind>): the VRAM of each of its
    simulated GPUs, in MiB (16 GiB unless set)."""
    return register_knob(
        f"{kind}_SIM_VRAM_MIB",
        int,
        16384,
        f"VRAM of each simulated {kind} GPU ({kind}:sim...), in MiB.",
        owner=f"kiln.drivers.{kind.lower()}",
    )


def require_simulated(name: str, gpus: str, missing: str, knobs: str) -> None:
    """Raises DeviceUnavailable unless `name` names a simulated GPU of a user-space driver ("KIND:sim",
    "KIND:sim<N>"): the driver cannot open real `gpus` yet for want of `missing`; `knobs` configure the simulation."""
    kind, _, suffix = name.partition(":")
    if _SIMULATED_SUFFIX.fullmatch(suffix) is None:
        raise DeviceUnavailable(
            f"{name}: kiln's {kind} driver cannot open real {gpus} yet ({missing}); "
            f"open a simulated one instead, e.g. '{kind}:sim' ({knobs})"
        )


class DeviceBase:
    """What every device is: a name, an allocator, the renderers that target it and the dtypes it stores.

    Devices that run kernels list their renderers, best first; each renderer owns its compiler. The environment
    variable `<KIND>_RENDERER` (e.g. `CPU_RENDERER=llvm`) picks another one of the list by class name.
    Devices that cannot run kernels (simulated drivers) leave `renderers` empty; devices that can override `runtime`.
    """

    renderers: tuple[type[Renderer], ...] = ()
    supported_dtypes: frozenset[DType] = frozenset(dtypes.all)
    renderer_family: str | None = None
    """The device kind kiln.renderers lists this device's renderers under ("CPU", "CUDA", "CL", "WEBGPU"); a device
    with none then says that the installed kiln.renderers offers none for it. None: not a kiln.renderers device."""

    def __init__(self, name: str, allocator: Allocator[Any]) -> None:
        self.name = name
        self.allocator = allocator
        self._renderer: Renderer | None = None
        self._runners: OrderedDict[UOp, ProgramRunner] = OrderedDict()
        self._runners_lock = threading.Lock()
        if type(self).after_fork_in_child is DeviceBase.after_fork_in_child:
            renew_after_fork(self)  # a subclass that renews more registers itself once its own state exists

    def after_fork_in_child(self) -> None:
        """Renews the locks in a child of `os.fork()` (a thread of the parent may have held one at the fork)."""
        self._runners_lock = threading.Lock()

    @property
    def kind(self) -> str:
        """The kind of the device: "CUDA" for "CUDA:1"."""
        return self.name.partition(":")[0]

    def synchronize(self) -> None:
        """Waits until all work queued on the device is done; devices that run work asynchronously override it."""

    @property
    def renderer_class(self) -> type[Renderer]:
        """The renderer class in use: the first of `renderers`, or the one named by `<KIND>_RENDERER`."""
        if not self.renderers:
            if self.renderer_family is not None:
                raise RuntimeError(
                    f"device {self.name!r} has no renderer: the installed kiln.renderers offers none for "
                    f"{self.renderer_family}"
                )
            raise RuntimeError(f"device {self.name!r} has no renderers: it can hold buffers but cannot run kernels")
        knob = renderer_knob(self.kind)
        choice = knob.value().strip()
        if not choice:
            return self.renderers[0]
        wanted = choice.lower().removesuffix("renderer")
        for renderer in self.renderers:
            if renderer.__name__.lower().removesuffix("renderer") == wanted:
                return renderer
        names = ", ".join(renderer.__name__ for renderer in self.renderers)
        raise ValueError(f"{knob.env}={choice!r} names no renderer of device {self.name!r}; expected one of: {names}")

    @property
    def renderer(self) -> Renderer:
        """The renderer instance in use (created on first use by `create_renderer`)."""
        renderer_class = self.renderer_class
        if type(self._renderer) is not renderer_class:
            self._renderer = self.create_renderer(renderer_class)
        assert self._renderer is not None
        return self._renderer

    def create_renderer(self, renderer_class: type[Renderer]) -> Renderer:
        """Builds a renderer of this device; devices whose renderers need arguments (an arch) override it."""
        return renderer_class()

    def runtime(self, program: Program) -> ProgramRunner:
        """The program loaded on this device, ready to launch: `device.runtime(program)(buffers, var_vals)`.

        Loaded once per program (cached on the device by the PROGRAM uop, which is hash-consed); raises RuntimeError
        on a device that cannot run programs and TypeError if `program` is not a codegen `Program`.
        """
        if not isinstance(program, Program):
            raise TypeError(f"runtime() takes a kiln.codegen Program, got {type(program).__name__}")
        with self._runners_lock:
            runner = self._runners.get(program.uop)
            if runner is not None:
                self._runners.move_to_end(program.uop)
                return runner
        runner = self.load_program(program)  # outside the lock: loading may compile or take long
        with self._runners_lock:
            self._runners[program.uop] = runner
            while len(self._runners) > self.runner_cache_size:
                self._runners.popitem(last=False)
        return runner

    runner_cache_size = 4096
    """Programs kept loaded per device (least recently launched ones are dropped first)."""

    def load_program(self, program: Program) -> ProgramRunner:
        """Loads `program` for this device (uncached; `runtime` caches). Devices that run kernels override it."""
        raise RuntimeError(f"device {self.name!r} cannot run programs (it has no program loader); got {program.name!r}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class QueuedTimeline(Protocol):
    """A device queue's completion timeline (OpenCL's events, WebGPU's submissions): `wait()` waits for all so far."""

    def wait(self, value: int | None = None) -> None: ...


class QueuedDevice(DeviceBase):
    """A device whose work runs in order on one queue with a timeline, named by a one-line `description`."""

    timeline: QueuedTimeline

    @property
    def description(self) -> str:
        """What the device is (platform, adapter, version), shown by `python -m kiln.runtime` and in its repr."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} ({self.description})>"

    def synchronize(self) -> None:
        """Waits for everything enqueued so far (the timeline's last value)."""
        self.timeline.wait()


@dataclass(frozen=True)
class DeviceKind:
    """One known device kind and where it comes from.

    Attributes:
        kind: the canonical kind, upper case ("CPU", "AM").
        target: "module:Class" of the device class, or a description for devices registered at run time.
        origin: "built-in", "entry point <name> of <distribution>", or "registered".
        factory: the device constructor when already known (registered at run time), else None (imported lazily).
        problem: why the kind cannot be loaded at all (provided twice, invalid name), reported when it is opened.
    """

    kind: str
    target: str
    origin: str
    factory: DeviceFactory | None = None
    problem: str | None = None

    def load(self) -> DeviceFactory:
        """Imports and returns the device class; raises DeviceUnavailable naming the entry point if that fails."""
        if self.problem is not None:
            raise DeviceUnavailable(f"device kind {self.kind!r} ({self.origin}, {self.target!r}): {self.problem}")
        if self.factory is not None:
            return self.factory
        module_name, _, attribute = self.target.partition(":")
        try:
            loaded: Any = importlib.import_module(module_name)
            for part in attribute.split(".") if attribute else ():
                loaded = getattr(loaded, part)
        except Exception as error:
            raise DeviceUnavailable(
                f"device kind {self.kind!r} ({self.origin}, {self.target!r}) could not be loaded: "
                f"{type(error).__name__}: {error}"
            ) from error
        if not callable(loaded) or not attribute:
            raise DeviceUnavailable(
                f"device kind {self.kind!r} ({self.origin}) names {self.target!r}, which is not a device class"
            )
        factory: DeviceFactory = loaded
        return factory


def _split_name(name: str) -> tuple[str, str]:
    if not isinstance(name, str):
        raise TypeError(f"a device name must be a str, got {type(name).__name__} {name!r}")
    kind, colon, suffix = name.strip().partition(":")
    if not _KIND_PATTERN.fullmatch(kind) or (colon and not suffix.strip()):
        raise ValueError(f"bad device name {name!r}: expected KIND or KIND:suffix, e.g. 'CPU', 'CUDA:1', 'AM:sim'")
    # KIND:0 is the same device as KIND (the first of its kind).
    if suffix.isdigit() and int(suffix) == 0:
        suffix = ""
    return kind.upper(), suffix.strip()


class DeviceRegistry:
    """Finds device kinds, opens devices on first use and caches them per canonical name.

    `Device["CPU"]` returns the opened device; `Device.DEFAULT` the default device name; `Device.kinds()` every
    known kind. A separate registry can be built for tests (`DeviceRegistry(builtins={...})`).
    """

    def __init__(self, builtins: Mapping[str, str] | None = None, entry_point_group: str = ENTRY_POINT_GROUP) -> None:
        self._builtins = dict(BUILTIN_DEVICES if builtins is None else builtins)
        self._group = entry_point_group
        self._registered: dict[str, DeviceKind] = {}
        self._known: dict[str, DeviceKind] | None = None
        self._opened: dict[str, DeviceBase] = {}
        self._canonical: dict[str, str] = {}
        self._default: str | None = None
        self._probed_default: str | None = None
        self._lock = threading.RLock()
        renew_after_fork(self)

    def after_fork_in_child(self) -> None:
        """Renews the lock in a child of `os.fork()` (a thread of the parent may have been opening a device)."""
        self._lock = threading.RLock()

    # -- discovery ---------------------------------------------------------------------------------------------------
    def _discover(self) -> dict[str, DeviceKind]:
        if self._known is not None:
            return self._known
        known: dict[str, DeviceKind] = {}
        for kind, target in self._builtins.items():
            known[kind.upper()] = DeviceKind(kind.upper(), target, "built-in")
        discovered: dict[str, list[DeviceKind]] = {}
        import importlib.metadata  # lazily: ~60 ms of imports, needed only when the first device is looked up

        for entry_point in importlib.metadata.entry_points(group=self._group):
            distribution = entry_point.dist.name if entry_point.dist is not None else "an unknown distribution"
            kind = entry_point.name.upper()
            origin = f"entry point {entry_point.name!r} of {distribution}"
            discovered.setdefault(kind, []).append(DeviceKind(kind, entry_point.value, origin))
        for kind in sorted(discovered):
            first, *others = discovered[kind]
            if kind in known:
                continue  # a built-in kind cannot be replaced by a plugin
            problem = None
            if others:
                also = ", ".join(f"{other.origin} ({other.target!r})" for other in others)
                problem = f"provided twice, also by {also}; uninstall one of them"
            elif not _KIND_PATTERN.fullmatch(kind):
                problem = "not a valid kind name (letters, digits and '_', starting with a letter)"
            known[kind] = DeviceKind(kind, first.target, first.origin, problem=problem)
        known.update(self._registered)
        self._known = known
        return known

    def refresh(self) -> None:
        """Forgets discovered kinds (not opened devices) so newly installed entry points are seen."""
        with self._lock:
            self._known = None
            self._canonical.clear()
            self._probed_default = None

    def register(self, kind: str, factory: DeviceFactory, description: str = "") -> None:
        """Adds (or replaces) a device kind at run time; `factory(device_name)` builds the device."""
        canonical_kind, suffix = _split_name(kind)
        if suffix:
            raise ValueError(f"register() takes a device kind without a suffix, got {kind!r}")
        target = description or getattr(factory, "__qualname__", repr(factory))
        with self._lock:
            self._registered[canonical_kind] = DeviceKind(canonical_kind, target, "registered", factory)
            self.refresh()

    def unregister(self, kind: str) -> None:
        """Removes a kind added by `register`, closing (after synchronizing) every opened device of that kind.

        Raises ValueError for a kind that was not registered at run time (built-in and entry-point kinds stay)."""
        canonical_kind, suffix = _split_name(kind)
        if suffix:
            raise ValueError(f"unregister() takes a device kind without a suffix, got {kind!r}")
        with self._lock:
            if canonical_kind not in self._registered:
                listing = ", ".join(self._registered) or "none"
                raise ValueError(f"{canonical_kind!r} was not registered at run time; registered kinds: {listing}")
            opened = [name for name in self._opened if name.partition(":")[0] == canonical_kind]
            devices = [self._opened.pop(name) for name in opened]
            del self._registered[canonical_kind]
            self.refresh()
        for device in devices:
            device.synchronize()

    def kinds(self) -> list[str]:
        """Every known device kind: built-ins in table order, then entry points by name, then registered kinds."""
        with self._lock:
            return list(self._discover())

    def kind_infos(self) -> list[DeviceKind]:
        """Every known kind with its origin, in `kinds()` order (including kinds that cannot be loaded)."""
        with self._lock:
            return list(self._discover().values())

    def kind_info(self, kind: str) -> DeviceKind:
        """Where a kind comes from; raises ValueError naming the known kinds if it is unknown."""
        return self._lookup(_split_name(kind)[0], kind)

    def _lookup(self, canonical_kind: str, name: str) -> DeviceKind:
        with self._lock:
            known = self._discover()
        if canonical_kind not in known:
            listing = ", ".join(known) or "none (no device package is installed)"
            raise ValueError(f"unknown device kind {canonical_kind!r} (from {name!r}); known kinds: {listing}")
        return known[canonical_kind]

    # -- names -------------------------------------------------------------------------------------------------------
    def canonicalize(self, name: str) -> str:
        """The canonical form of a device name: "cpu" -> "CPU", "CPU:0" -> "CPU", "am:sim" -> "AM:sim".

        Raises ValueError for a malformed name or an unknown kind (naming the known kinds).
        """
        cached = self._canonical.get(name) if isinstance(name, str) else None
        if cached is not None:
            return cached
        kind, suffix = _split_name(name)
        self._lookup(kind, name)
        canonical = f"{kind}:{suffix}" if suffix else kind
        self._canonical[name] = canonical
        return canonical

    # -- opening -----------------------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> DeviceBase:
        """The opened device `name` (opened on first use); raises DeviceUnavailable if it cannot be opened."""
        # the names of opened devices are canonical: a canonical name (a Buffer's, on every allocation) is found as is
        opened = self._opened.get(name) if type(name) is str else None
        if opened is not None:
            return opened
        canonical = self.canonicalize(name)
        opened = self._opened.get(canonical)
        if opened is not None:
            return opened
        with self._lock:
            opened = self._opened.get(canonical)
            if opened is None:
                factory = self.kind_info(canonical).load()
                device = factory(canonical)
                if not isinstance(device, DeviceBase):
                    raise TypeError(
                        f"device kind {canonical.partition(':')[0]!r} built {type(device).__name__}, "
                        "which is not a DeviceBase"
                    )
                self._opened[canonical] = opened = device
        return opened

    def is_open(self, name: str) -> bool:
        """Whether the device has been opened already (without opening it)."""
        return self.canonicalize(name) in self._opened

    def forget(self, name: str) -> None:
        """Drops an opened device from the cache (after synchronizing it); the next lookup opens it again."""
        device = self._opened.pop(self.canonicalize(name), None)
        if device is not None:
            device.synchronize()

    # -- the default device ----------------------------------------------------------------------------------------
    @property
    def DEFAULT(self) -> str:
        """The default device: set explicitly, else env var DEV, else the first known kind whose device opens."""
        if self._default is not None:
            return self._default
        requested = default_device()
        if requested:
            return self.canonicalize(requested)
        with self._lock:
            if self._probed_default is None:
                self._probed_default = self._probe_default()
            return self._probed_default

    @DEFAULT.setter
    def DEFAULT(self, name: str | None) -> None:
        self._default = None if name is None else self.canonicalize(name)

    def _probe_default(self) -> str:
        reasons = []
        for kind in self.kinds():
            try:
                self[kind]
            except DeviceUnavailable as error:
                reasons.append(f"{kind}: {error}")
                continue
            return kind
        listing = "; ".join(reasons) or "no device kinds are known"
        raise DeviceUnavailable(f"no device could be opened ({listing}); set DEV to choose one")


Device = DeviceRegistry()
install_device_lookup(Device)  # Buffers resolve their device names through this registry


PROFILE_FILE_NAME = "profile.json"


def write_profile(directory: str) -> str | None:
    """With PROFILE on: wait for the opened devices (so their last events are collected) and write the profile as a
    Chrome trace (`profile.json`, which Perfetto and kiln.viz open) into `directory`; its path, or None when off."""
    if not profiling_enabled():
        return None
    for device in list(Device._opened.values()):
        try:
            device.synchronize()
        except Exception as error:  # at exit: one broken device must not lose the others' events
            print(f"kiln: could not synchronize {device.name} for the profile: {error}", file=sys.stderr)
    return str(profiler.save(os.path.join(directory, PROFILE_FILE_NAME)))


add_exit_writer(write_profile)
