"""Device support for tensors: the default device, the renderer of a device, and loading a program to launch.

Devices come from kiln.runtime's `Device` registry. The default device is `Device.DEFAULT` (the environment
variable `DEV`, else the first device kind that opens: CPU before PYTHON) when it can build programs, else PYTHON
(the runtime's interpreter device, which needs no toolchain).
"""

from __future__ import annotations

import functools

from kiln.codegen import Program, Renderer
from kiln.runtime import Device, ProgramRunner

__all__ = ["canonical_device", "default_device", "load", "renderer_for"]

FALLBACK_DEVICE = "PYTHON"


@functools.cache
def _can_build_programs(name: str) -> bool:
    try:
        return isinstance(Device[name].renderer, Renderer)
    except (RuntimeError, ValueError):  # no renderer / toolchain here, or the device does not open
        return False


def default_device() -> str:
    """The device new tensors go to when none is given."""
    try:
        name = Device.DEFAULT
    except RuntimeError:
        return FALLBACK_DEVICE
    return name if _can_build_programs(name) else FALLBACK_DEVICE


def canonical_device(name: str | None) -> str:
    """The canonical device name for `name` (None: the default device); ValueError for an unknown device."""
    if name is None:
        return default_device()
    if not isinstance(name, str):
        raise TypeError(f"a device must be a str such as 'CPU' or 'PYTHON', got {name!r}")
    return Device.canonicalize(name)


def renderer_for(device: str) -> Renderer:
    """The renderer programs for `device` are built with (the device's choice; `<KIND>_RENDERER` overrides)."""
    renderer = Device[device].renderer
    if not isinstance(renderer, Renderer):
        raise RuntimeError(f"device {device!r} has renderer {renderer!r}, which is not a kiln.codegen.Renderer")
    return renderer


def load(program: Program) -> ProgramRunner:
    """`program` loaded on its device, ready to launch: `load(program)(buffers, var_vals, wait=False)`."""
    return Device[program.device].runtime(program)
