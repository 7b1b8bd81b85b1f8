"""Kernel optimizations: applying opts, the hand-coded heuristic and BEAM search."""

from kiln.codegen.opt.apply import apply_opt, apply_opts, prepare_axes
from kiln.codegen.opt.heuristic import hand_coded_optimizations
from kiln.codegen.opt.optimize import choose_opts, optimize_kernel
from kiln.codegen.opt.search import Timer, beam_cache_key, beam_search, candidate_opts

__all__ = [
    "Timer",
    "apply_opt",
    "apply_opts",
    "beam_cache_key",
    "beam_search",
    "candidate_opts",
    "choose_opts",
    "hand_coded_optimizations",
    "optimize_kernel",
    "prepare_axes",
]
