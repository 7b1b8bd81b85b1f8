"""Choosing and applying the opts of one kernel: given opts, the sink's own, none (NOOPT) or the heuristic."""

from __future__ import annotations

from collections.abc import Sequence

from kiln.codegen.kernel_info import KernelInfo, Opt
from kiln.codegen.opt.apply import apply_opts
from kiln.codegen.opt.gather import pm_gather
from kiln.codegen.opt.heuristic import hand_coded_optimizations
from kiln.codegen.opt.kernel_axes import kernel_info, kernel_name
from kiln.codegen.opt.row_reuse import reuse_row_values
from kiln.codegen.renderer import Renderer
from kiln.uops import UOp, graph_rewrite, knobs


def choose_opts(ast: UOp, renderer: Renderer, opts: Sequence[Opt] | None = None) -> tuple[Opt, ...]:
    """The opts for `ast`: `opts` if given, else KernelInfo.opts_to_apply, else none under NOOPT, else the heuristic."""
    if opts is not None:
        return tuple(opts)
    given = kernel_info(ast).opts_to_apply
    if given is not None:
        return tuple(given)
    if knobs.NOOPT:
        return ()
    return hand_coded_optimizations(ast, renderer)


def prepare_kernel(ast: UOp, renderer: Renderer) -> UOp:
    """`ast` as the opts see it: one-hot reductions as gathers (`pm_gather`: an embedding lookup reads one row, not
    the table) and, on a serial renderer, a row scaled by a function of its own sum keeping the summed values
    (`reuse_row_values`). Neither adds or removes a range, so opts chosen on `ast` apply to the result."""
    return reuse_row_values(graph_rewrite(ast, pm_gather, name="gather"), renderer)


def optimize_kernel(ast: UOp, renderer: Renderer, opts: Sequence[Opt] | None = None) -> UOp:
    """`ast` prepared (`prepare_kernel`) with its opts applied (see `choose_opts`), named, and with
    KernelInfo.applied_opts filled in."""
    ast = prepare_kernel(ast, renderer)
    chosen = choose_opts(ast, renderer, opts)
    info = kernel_info(ast)
    optimized = apply_opts(ast.replace(arg=KernelInfo(info.name)), chosen, renderer)
    name = info.name or kernel_name(optimized)
    return optimized.replace(arg=KernelInfo(name, None, kernel_info(optimized).applied_opts))
