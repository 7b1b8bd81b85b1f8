"""What codegen tells the viz trace about one kernel: `record_kernel` fills the kernel's `TraceGroup` (tracing on).

The group holds the kernel's AST (its graph in the trace's node table, which links it to the schedule that made it)
and, as JSON values: name, device, renderer, launch sizes, applied opts, estimated work, the linearized uops, the
rendered source and, where the renderer's compiler offers one, the disassembly.
"""

from __future__ import annotations

from typing import Any

from kiln.codegen.estimates import Size
from kiln.codegen.linearizer import format_linear
from kiln.codegen.program import Program
from kiln.codegen.renderer import Renderer
from kiln.uops import TraceGroup, UOp

__all__ = ["record_kernel", "source_language"]

# renderer class name fragment -> the language of its source (for the viewer's highlighting)
_LANGUAGES = (("LLVM", "llvm"), ("PTX", "ptx"), ("Python", "python"), ("WGSL", "wgsl"), ("Metal", "metal"))


def source_language(renderer: Renderer) -> str:
    """The language of `renderer`'s source text: "llvm", "ptx", "python", "wgsl", "metal" or "c" (C-like)."""
    explicit = getattr(renderer, "source_language", None)
    if isinstance(explicit, str):
        return explicit
    name = type(renderer).__name__
    return next((language for fragment, language in _LANGUAGES if fragment in name), "c")


def _size(value: Size) -> int | str:
    return value if isinstance(value, int) else value.render()


def record_kernel(group: TraceGroup, ast: UOp, program_uop: UOp, renderer: Renderer) -> None:
    """Fill `group` with the facts of the kernel built from `ast` into `program_uop` by `renderer`."""
    program = Program(program_uop)
    estimates = program.estimates
    info: dict[str, Any] = {
        "name": program.name,
        "key": program.trace_key,
        "device": program.device,
        "renderer": type(renderer).__name__,
        "language": source_language(renderer),
        "global_size": [_size(size) for size in program.global_size],
        "local_size": None if program.local_size is None else [_size(size) for size in program.local_size],
        "opts": [str(opt) for opt in program.applied_opts],
        "flops": _size(estimates.flops),
        "global_bytes": _size(estimates.global_memory_bytes),
        "local_bytes": _size(estimates.local_memory_bytes),
        "variables": [variable.arg.name for variable in program.variables],
        "linear": format_linear(list(program.linear)),
        "source": program.source,
        "disassembly": None,
    }
    binary = program.binary
    compiler = renderer.compiler
    if binary is not None and compiler is not None:
        try:
            info["disassembly"] = compiler.disassemble(binary)
        except (NotImplementedError, OSError) as missing:
            info["disassembly_note"] = str(missing)
    group.name = program.name
    group.info.update(info)
    group.uops["ast"] = ast
