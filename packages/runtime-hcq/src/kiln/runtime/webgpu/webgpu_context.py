"""`WebGPUContext`: what the WEBGPU allocator and program runner need of their device (the device sits above them)."""

from __future__ import annotations

from typing import Protocol

from kiln.renderers.webgpu_library import WebGPUTarget
from kiln.runtime.program_runner import RunnerDevice
from kiln.runtime.webgpu.webgpu_timeline import WebGPUTimeline

__all__ = ["WebGPUContext"]


class WebGPUContext(RunnerDevice, Protocol):
    """A WEBGPU device as its allocator and runners see it: the adapter/device pair and the queue's timeline."""

    target: WebGPUTarget
    timeline: WebGPUTimeline
