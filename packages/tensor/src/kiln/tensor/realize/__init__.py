"""Running schedules: the Engine (method cache, launching kernels and copies, capture, the thread's context), DEBUG
output, buffers of BUFFER nodes."""

from kiln.tensor.realize.buffers import attach_buffer, buffer_of, has_buffer
from kiln.tensor.realize.capture import Recording
from kiln.tensor.realize.engine import (
    Engine,
    Method,
    clear_method_cache,
    compiled_program,
    default_engine,
    engines_in_context,
    method_cache_size,
    realize_uops,
    run_kernel_step,
    run_plan,
    use_engine,
)

__all__ = [
    "Engine",
    "Method",
    "Recording",
    "attach_buffer",
    "buffer_of",
    "clear_method_cache",
    "compiled_program",
    "default_engine",
    "engines_in_context",
    "has_buffer",
    "method_cache_size",
    "realize_uops",
    "run_kernel_step",
    "run_plan",
    "use_engine",
]
