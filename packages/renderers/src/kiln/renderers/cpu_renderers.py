"""The CPU device's renderers, best first: the order the runtime's CPU device declares (CPU_RENDERER picks another).

`benchmarks/compile_bench.py` measured the compilers over codegen's corpus (README "Figures"): llvmlite compiles in
process, several times faster than a C compiler process, and every one of them passes, so the LLVM IR renderer
comes first wherever llvmlite is installed, then C (gcc or clang).
"""

from __future__ import annotations

import importlib.util
import os
import sys

from kiln.codegen import Renderer
from kiln.renderers.device_table import table_renderers

_notice_given = False


def cpu_renderers() -> tuple[type[Renderer], ...]:
    """Renderer classes for the CPU device, best first; LLVMRenderer only when llvmlite is installed (not imported).

    Without llvmlite the first call says once, on stderr, that the C renderer is used and how to get the default
    (unless CPU_RENDERER already asks for C).
    """
    global _notice_given
    if importlib.util.find_spec("llvmlite") is not None:
        return table_renderers("CPU")
    asked = os.environ.get("CPU_RENDERER", "").strip().lower().removesuffix("renderer")
    if not _notice_given and asked != "c":
        _notice_given = True
        print(
            "kiln: llvmlite is not installed, so the CPU device renders C and compiles it with a C compiler "
            "(slower to compile) instead of LLVM IR; install it with `pip install llvmlite` "
            "(or `pip install kiln-renderers[llvm]`), or set CPU_RENDERER=c to silence this notice",
            file=sys.stderr,
        )
    return table_renderers("CPU")


def renderers_for(kind: str) -> tuple[type[Renderer], ...]:
    """The renderer classes that target device kind `kind` ("CPU", "PYTHON", "CUDA", "CL" ...), best first, as
    `DEVICE_TABLE` lists them; () for a kind it does not list. Devices ask this when they open, so they hold
    renderer classes, never names."""
    if kind == "CPU":
        return cpu_renderers()
    return table_renderers(kind)
