"""Running schedules: the method cache, launching kernels and copies, DEBUG output, buffers of BUFFER nodes."""

from kiln.tensor.realize.buffers import attach_buffer, buffer_of, has_buffer
from kiln.tensor.realize.engine import (
    Engine,
    Method,
    clear_method_cache,
    compiled_program,
    default_engine,
    method_cache_size,
    realize_uops,
    run_kernel_step,
    run_plan,
    use_engine,
)

__all__ = [
    "Engine",
    "Method",
    "attach_buffer",
    "buffer_of",
    "clear_method_cache",
    "compiled_program",
    "default_engine",
    "has_buffer",
    "method_cache_size",
    "realize_uops",
    "run_kernel_step",
    "run_plan",
    "use_engine",
]
