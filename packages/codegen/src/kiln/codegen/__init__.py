"""Kernel sink -> optimized sink -> LINEAR -> PROGRAM lifecycle; Renderer/Compiler interfaces; reference interpreter."""

from typing import TYPE_CHECKING, Any

from kiln.codegen.compiler import Compiler
from kiln.codegen.disk_cache import DiskCache, cache_root
from kiln.codegen.estimates import Estimates
from kiln.codegen.kernel_info import KernelInfo, KernelOptError, Opt, OptOps
from kiln.codegen.kernel_signature import (
    CORE_ID,
    Access,
    BufferParameter,
    CompilerIdentity,
    KernelSignature,
    VariableParameter,
)
from kiln.codegen.lifecycle import get_program, get_programs, pm_program_lifecycle
from kiln.codegen.linearizer import format_linear, linearize
from kiln.codegen.lowering.pipeline import LOWERING_PASSES, LoweringPass, lower
from kiln.codegen.opt import (
    Timer,
    apply_opt,
    apply_opts,
    beam_search,
    candidate_opts,
    choose_opts,
    hand_coded_optimizations,
    optimize_kernel,
)
from kiln.codegen.program import Program, retarget
from kiln.codegen.renderer import Renderer, TensorCore
from kiln.codegen.spec import pm_spec_kernel, pm_spec_linear, pm_spec_program, verify_linear, verify_program
from kiln.codegen.tensor_core import FragmentLayout, WmmaArg
from kiln.codegen.transcendental import pm_transcendental, transcendental_rewrites

if TYPE_CHECKING:
    from kiln.codegen.interpreter import DataRaceError, Interpreter, InterpreterError, run_program

_LAZY = {"DataRaceError", "Interpreter", "InterpreterError", "run_program"}


def __getattr__(name: str) -> Any:
    # the reference interpreter needs numpy: imported on first use, so `import kiln.codegen` stays light
    if name in _LAZY:
        from kiln.codegen import interpreter

        return getattr(interpreter, name)
    raise AttributeError(f"module 'kiln.codegen' has no attribute {name!r}")


__all__ = [
    "CORE_ID",
    "LOWERING_PASSES",
    "Access",
    "BufferParameter",
    "Compiler",
    "CompilerIdentity",
    "DataRaceError",
    "DiskCache",
    "Estimates",
    "FragmentLayout",
    "Interpreter",
    "InterpreterError",
    "KernelInfo",
    "KernelOptError",
    "KernelSignature",
    "LoweringPass",
    "Opt",
    "OptOps",
    "Program",
    "Renderer",
    "TensorCore",
    "VariableParameter",
    "Timer",
    "WmmaArg",
    "apply_opt",
    "apply_opts",
    "beam_search",
    "cache_root",
    "candidate_opts",
    "choose_opts",
    "format_linear",
    "get_program",
    "get_programs",
    "hand_coded_optimizations",
    "linearize",
    "lower",
    "optimize_kernel",
    "pm_program_lifecycle",
    "pm_spec_kernel",
    "pm_spec_linear",
    "pm_spec_program",
    "pm_transcendental",
    "retarget",
    "run_program",
    "transcendental_rewrites",
    "verify_linear",
    "verify_program",
]
