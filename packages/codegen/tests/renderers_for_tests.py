"""Tiny renderers for codegen's tests (no renderer package is imported): a CPU-like and a GPU-like target.

Both have `compiler=None` and render the linear program as readable text (`format_linear`), so the PROGRAM
lifecycle stops at SOURCE and tests can read the uops back through `Program`.
"""

from __future__ import annotations

from kiln.codegen import Renderer, format_linear
from kiln.uops import UOp


class TextRenderer(Renderer):
    """Renders the linear program as numbered text lines."""

    def render(self, uops: list[UOp]) -> str:
        return f"// {self.device} kernel\n{format_linear(uops)}\n"


class CPULikeRenderer(TextRenderer):
    """A CPU: no local threads or shared memory, 4- and 8-wide vectors, up to 8 cores for THREAD."""

    device = "TESTCPU"
    has_threads = True
    thread_max = 8
    vector_widths = (4, 8)


class GPULikeRenderer(TextRenderer):
    """A GPU: blocks of up to 1024 threads with 48 KiB shared memory, 2- and 4-wide vectors."""

    device = "TESTGPU"
    has_local = True
    has_shared = True
    global_max = (2**31 - 1, 65535, 65535)
    local_max = (1024, 1024, 64)
    local_size_max = 1024
    shared_max = 49152
    vector_widths = (2, 4)


class ScalarRenderer(TextRenderer):
    """The plainest target: no threads, no vectors (every load and store is scalar)."""

    device = "TESTSCALAR"
