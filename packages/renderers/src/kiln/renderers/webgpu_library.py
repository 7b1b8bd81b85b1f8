"""The `wgpu` Python package (wgpu-native underneath): one adapter and one logical device per process.

Shared by the WGSL renderer's compiler (it validates a shader by building its module and compute pipeline) and the
runtime's WEBGPU device (buffers, queue, dispatches), so a program the compiler accepted is built by the same
device that runs it. `wgpu` is an optional dependency (`pip install 'kiln-renderers[webgpu]'`); it is imported on
first use, never when kiln.renderers is imported, and a missing package or a machine without any adapter (no
Vulkan, Metal or D3D12 driver; Mesa's lavapipe is a software one) raises `WebGPUNotFoundError` saying why.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kiln.renderers.process_once import ProcessOnce
from kiln.renderers.toolchain import ToolchainNotFoundError

__all__ = [
    "RAISED_LIMITS",
    "WebGPUNotFoundError",
    "WebGPUTarget",
    "load_wgpu",
    "webgpu_available",
    "webgpu_target",
]

INSTALL_HINT = (
    "install the wgpu package (pip install 'kiln-runtime-hcq[webgpu]') and a Vulkan driver "
    "(e.g. apt install mesa-vulkan-drivers for the software lavapipe adapter)"
)

RAISED_LIMITS: tuple[str, ...] = (
    "max-storage-buffers-per-shader-stage",
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-compute-workgroup-storage-size",
)
"""Limits the device is requested with at the adapter's own maximum rather than WebGPU's defaults (8 storage
buffers per stage, 128 MiB bindings, 16 KiB of workgroup memory): kernels fusing many inputs need more buffers."""


class WebGPUNotFoundError(ToolchainNotFoundError):
    """No `wgpu` package, or no WebGPU adapter behind it; the message says what is missing."""


@functools.cache
def load_wgpu() -> ModuleType:
    """The imported `wgpu` module (WebGPUNotFoundError naming what to install when it is not installed)."""
    try:
        return importlib.import_module("wgpu")
    except ImportError as error:
        raise WebGPUNotFoundError(f"the wgpu package is not installed ({error}); {INSTALL_HINT}") from error


@dataclass(frozen=True)
class WebGPUTarget:
    """The process's WebGPU adapter and the device requested from it.

    Attributes:
        adapter: the wgpu GPUAdapter; device: the GPUDevice (with `RAISED_LIMITS` at the adapter's maximum).
        adapter_name: what the adapter calls itself (e.g. "llvmpipe (LLVM 15.0.6, 256 bits)").
        backend: the native API under wgpu ("Vulkan", "Metal" ...); adapter_type: "CPU", "DiscreteGPU" ...
        limits: the device's limits by WebGPU name.
    """

    adapter: Any
    device: Any
    adapter_name: str
    backend: str
    adapter_type: str
    driver: str
    limits: dict[str, int]

    @property
    def identity(self) -> str:
        """Adapter, backend and driver: what a validated shader is specific to (part of the compile-cache key)."""
        return f"{self.adapter_name} / {self.backend} / {self.driver}"

    @property
    def max_storage_buffers(self) -> int:
        """Storage buffers one kernel may bind (the adapter's maximum)."""
        return int(self.limits.get("max-storage-buffers-per-shader-stage", 8))


@ProcessOnce
def webgpu_target() -> WebGPUTarget:
    """The process's WebGPU adapter and device, requested once (WebGPUNotFoundError when there is none)."""
    wgpu = load_wgpu()
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as error:  # wgpu-native raises plain RuntimeErrors when no backend loads
        raise WebGPUNotFoundError(f"no WebGPU adapter: {type(error).__name__}: {error}; {INSTALL_HINT}") from error
    if adapter is None:
        raise WebGPUNotFoundError(f"no WebGPU adapter: wgpu found no Vulkan/Metal/D3D12 device; {INSTALL_HINT}")
    adapter_limits = dict(adapter.limits)
    wanted = {name: adapter_limits[name] for name in RAISED_LIMITS if name in adapter_limits}
    device = adapter.request_device_sync(label="kiln", required_limits=wanted)
    info = adapter.info
    return WebGPUTarget(
        adapter,
        device,
        str(info.get("device") or info.get("description") or "unknown adapter"),
        str(info.get("backend_type", "")),
        str(info.get("adapter_type", "")),
        str(info.get("description", "")),
        {name: int(value) for name, value in dict(device.limits).items()},
    )


def webgpu_available() -> bool:
    """Whether wgpu is installed and finds an adapter here (never raises)."""
    try:
        webgpu_target()
    except Exception:  # any failure to open means "not available" for test skips and listings
        return False
    return True
