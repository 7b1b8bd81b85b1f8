"""Device support for tensors: the default device, the renderer of a device, and loading a program to launch.

Devices come from kiln.runtime's `Device` registry. The default device is `Device.DEFAULT` (the environment
variable `DEV`, else the first device kind that opens: CPU before PYTHON). A device named by `DEV` must open and
build programs, else the first use raises naming the device and why: nothing computes silently somewhere else.
Only when `DEV` is unset and the probed device cannot build programs (a CPU without llvmlite or a C compiler)
is PYTHON (the runtime's interpreter device, which needs no toolchain) chosen, with a notice on stderr, once.
"""

from __future__ import annotations

import functools
import sys
from typing import overload

from kiln.codegen import Program, Renderer
from kiln.runtime import Device, DeviceUnavailable, ProgramRunner
from kiln.uops import knobs

__all__ = ["canonical_device", "default_device", "load", "renderer_for"]

FALLBACK_DEVICE = "PYTHON"

_notices_given: set[str] = set()  # module-state: the fallback notice goes to stderr once per process, as it says


def unusable_reason(name: str) -> str | None:
    """Why device `name` cannot run kernels here (it does not open, or has no renderer), or None when it can.

    A bad `<KIND>_RENDERER` value is not a reason: its ValueError (listing the accepted values) propagates.
    """
    device = Device[name] if Device.is_open(name) else None
    choice = device.renderer_class.__name__ if device is not None and device.renderers else ""
    return _probe(name, choice)


# A true cache, so it stays module-level: a fact about this machine (whether a device opens and has a renderer for
# the renderer chosen), keyed by immutable values whose answer does not change while the process runs; bounded (a
# few devices and renderers) and thread-safe (functools.lru_cache; two threads probing at once get the same answer).
@functools.lru_cache(maxsize=64)
def _probe(name: str, choice: str) -> str | None:
    """Why device `name` with renderer class `choice` cannot run kernels, or None."""
    try:
        renderer = Device[name].renderer
    except DeviceUnavailable as error:
        return str(error)
    except RuntimeError as error:  # opened, but no renderer / toolchain here
        return str(error)
    if isinstance(renderer, Renderer):
        return None
    return f"its renderer {renderer!r} is not a kiln.codegen.Renderer"


def default_device() -> str:
    """The device new tensors go to when none is given.

    Raises DeviceUnavailable (a RuntimeError) naming the device when the one named by `DEV` cannot run kernels.
    """
    requested = knobs.DEVICE.strip()
    name = Device.DEFAULT  # ValueError for an unknown kind in DEV
    reason = unusable_reason(name)
    if reason is None:
        return name
    if requested:
        raise DeviceUnavailable(
            f"DEV={requested!r}: device {name!r} cannot run kernels here: {reason}. "
            "`python -m kiln.runtime` lists the devices that work"
        )
    if name not in _notices_given:
        _notices_given.add(name)
        print(
            f"kiln: the default device {name} cannot run kernels ({reason}); using {FALLBACK_DEVICE} (an interpreter, "
            f"slow) instead. Install the missing part (e.g. `pip install llvmlite`) or set DEV to choose a device.",
            file=sys.stderr,
        )
    return FALLBACK_DEVICE


@overload
def canonical_device(name: str | None) -> str: ...


@overload
def canonical_device(name: tuple[str, ...]) -> tuple[str, ...]: ...


def canonical_device(name: str | tuple[str, ...] | None) -> str | tuple[str, ...]:
    """The canonical device name for `name` (None: the default device); ValueError for an unknown device.

    A tuple of names, the devices of a sharded tensor, gives the tuple of their canonical names (at least one, all
    distinct, else ValueError).
    """
    if name is None:
        return default_device()
    if isinstance(name, tuple):
        names = tuple(canonical_device(each) for each in name)
        if not names:
            raise ValueError("a sharded tensor needs at least one device, got none")
        if len(set(names)) != len(names):
            raise ValueError(f"devices of a sharded tensor must be distinct, got {list(names)}")
        return names
    if not isinstance(name, str):
        raise TypeError(f"a device must be a str such as 'CPU' or 'PYTHON' (sharded: a tuple of them), got {name!r}")
    return Device.canonicalize(name)


def renderer_for(device: str) -> Renderer:
    """The renderer programs for `device` are built with (the device's choice; `<KIND>_RENDERER` overrides)."""
    renderer = Device[device].renderer
    if not isinstance(renderer, Renderer):
        raise RuntimeError(f"device {device!r} has renderer {renderer!r}, which is not a kiln.codegen.Renderer")
    return renderer


def load(program: Program, device: str | None = None) -> ProgramRunner:
    """`program` loaded on `device` (default: the program's own device kind), ready to launch:
    `load(program)(buffers, var_vals, wait=False)`. A program built for "CPU" runs on any "CPU:n": the devices of
    one kind share the renderer, each loads the program onto its own queue."""
    return Device[program.device if device is None else device].runtime(program)
