"""The CPU device's renderers, best first: the order the runtime's CPU device declares (CPU_RENDERER picks another).

`benchmarks/compile_bench.py` measured the compilers over codegen's corpus (README "Figures"): llvmlite compiles in
process, several times faster than a C compiler process, and every one of them passes, so the LLVM IR renderer
comes first wherever llvmlite is installed, then C (gcc or clang).
"""

from __future__ import annotations

import importlib.util

from kiln.codegen import Renderer
from kiln.renderers.c import CRenderer
from kiln.renderers.llvm_ir import LLVMRenderer


def cpu_renderers() -> tuple[type[Renderer], ...]:
    """Renderer classes for the CPU device, best first; LLVMRenderer only when llvmlite is installed (not imported)."""
    if importlib.util.find_spec("llvmlite") is not None:
        return (LLVMRenderer, CRenderer)
    return (CRenderer,)
