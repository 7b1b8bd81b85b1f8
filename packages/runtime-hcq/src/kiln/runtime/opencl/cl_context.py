"""`CLContext`: what the CL allocator and program runner need of their device (the device sits above them)."""

from __future__ import annotations

from typing import Protocol

from kiln.renderers.opencl_library import OpenCLLibrary, OpenCLTarget
from kiln.runtime.opencl.cl_timeline import CLTimeline
from kiln.runtime.program_runner import RunnerDevice

__all__ = ["CLContext"]


class CLContext(RunnerDevice, Protocol):
    """A CL device as its allocator and runners see it: the library, the OpenCL device, its queue and timeline."""

    library: OpenCLLibrary
    target: OpenCLTarget
    queue: int
    timeline: CLTimeline
