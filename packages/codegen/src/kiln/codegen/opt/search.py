"""BEAM search over opt sequences: time candidate programs with a caller-supplied timer, keep the fastest.

Codegen knows the search space and the algorithm; the layer that owns devices supplies `timer(program) -> seconds`
(ARCHITECTURE.md). Results are cached on disk per kernel, renderer, device and beam width. Each step's candidates are
built in BEAM_WORKERS worker processes (kiln.codegen.opt.beam_workers) and timed here in order, so the search finds
what the serial one does for the same timings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from kiln.codegen.disk_cache import DiskCache
from kiln.codegen.kernel_info import KernelOptError, Opt, OptOps
from kiln.codegen.opt.apply import apply_opt, apply_opts
from kiln.codegen.opt.beam_workers import BuildFailure, beam_worker_count, can_send, shared_pool
from kiln.codegen.opt.kernel_axes import axes_of
from kiln.codegen.opt.tensor_core_opt import ANY_TENSOR_CORE
from kiln.codegen.program import Program
from kiln.codegen.renderer import Renderer
from kiln.uops import AxisKind, UOp, knobs

Timer = Callable[[Program], float]
"""Seconds one run of a program takes (lower is better). May raise RuntimeError for a program that cannot run."""

UPCAST_AMOUNTS = (0, 2, 3, 4, 5, 7, 8)
UNROLL_AMOUNTS = (0, 4, 7)
LOCAL_AMOUNTS = (2, 3, 4, 8, 13, 16, 29)
GROUPTOP_AMOUNTS = (13, 16, 28, 29, 32, 49, 64, 256)
GROUP_AMOUNTS = (0, 4, 8, 16)
THREAD_AMOUNTS = (2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 64)
PAD_AMOUNTS = (32,)
BLOCK_AMOUNTS = (8, 16, 32, 64, 128, 256)
"""Reduce panel sizes BLOCK tries (the inner reduce of each block)."""

_beam_cache = DiskCache("beam")


def candidate_opts(sink: UOp, renderer: Renderer) -> list[Opt]:
    """Every single opt that is legal on `sink` (already optimized so far) for `renderer`, in a fixed order; of
    opts building the same kernel only the first is kept."""
    candidates: list[Opt] = []
    kinds_amounts: tuple[tuple[OptOps, tuple[AxisKind, ...], tuple[int, ...]], ...] = (
        (OptOps.UPCAST, (AxisKind.LOOP, AxisKind.GLOBAL, AxisKind.LOCAL), UPCAST_AMOUNTS),
        (OptOps.UNROLL, (AxisKind.REDUCE,), UNROLL_AMOUNTS),
        (OptOps.LOCAL, (AxisKind.GLOBAL,), LOCAL_AMOUNTS),
        (OptOps.GROUPTOP, (AxisKind.REDUCE,), GROUPTOP_AMOUNTS),
        (OptOps.GROUP, (AxisKind.REDUCE,), GROUP_AMOUNTS),
        (OptOps.THREAD, (AxisKind.LOOP,), tuple(a for a in THREAD_AMOUNTS if a <= renderer.thread_max)),
        (OptOps.PADTO, (AxisKind.LOOP, AxisKind.GLOBAL, AxisKind.REDUCE), PAD_AMOUNTS),
        (OptOps.BLOCK, (AxisKind.REDUCE,), BLOCK_AMOUNTS),
    )
    for op, kinds, amounts in kinds_amounts:
        for rng in axes_of(sink, *kinds):
            candidates.extend(Opt(op, rng.arg.axis, amount) for amount in amounts)
    if renderer.tensor_cores:  # each reduce axis on the first tensor core unit the kernel's dtypes fit
        candidates.extend(Opt(OptOps.TC, rng.arg.axis, ANY_TENSOR_CORE) for rng in axes_of(sink, AxisKind.REDUCE))
    # launch dimensions on GPUs, loop nesting on CPUs, the order of upcast lanes
    for kind in (AxisKind.GLOBAL, AxisKind.LOOP, AxisKind.UPCAST):
        same = axes_of(sink, kind)
        pairs = [(a.arg.axis, b.arg.axis) for a in same for b in same if a.arg.axis < b.arg.axis]
        candidates.extend(Opt(OptOps.SWAP, first, second) for first, second in pairs)
    candidates.append(Opt(OptOps.NOLOCALS))
    legal = []
    shapes: set[UOp] = set()
    for opt in candidates:
        try:
            shape = apply_opt(sink, opt, renderer).replace(arg=None)
        except KernelOptError:
            continue
        if shape not in shapes:  # e.g. UPCAST by 0 and by the whole size build the same kernel
            shapes.add(shape)
            legal.append(opt)
    return legal


def _encode(opts: tuple[Opt, ...]) -> bytes:
    return json.dumps([[o.op.name, o.axis, list(o.arg) if isinstance(o.arg, tuple) else o.arg] for o in opts]).encode()


def _decode(data: bytes) -> tuple[Opt, ...] | None:
    try:
        items = json.loads(data)
        return tuple(Opt(OptOps[op], axis, tuple(arg) if isinstance(arg, list) else arg) for op, axis, arg in items)
    except (ValueError, KeyError, TypeError):
        return None


def beam_cache_key(sink: UOp, renderer: Renderer, width: int) -> str:
    """The disk-cache key of a search: kernel content (not its name), renderer class, device and beam width."""
    kernel = sink.replace(arg=None).key.hex()
    return f"{kernel}|{type(renderer).__module__}.{type(renderer).__qualname__}|{renderer.device}|{width}"


@dataclass(frozen=True)
class _Candidate:
    seconds: float
    opts: tuple[Opt, ...]


def beam_search(
    sink: UOp,
    renderer: Renderer,
    timer: Timer,
    width: int,
    *,
    max_steps: int = 16,
    use_cache: bool = True,
    workers: int | None = None,
) -> tuple[Opt, ...]:
    """The fastest opt sequence found by a beam search of `width` over `candidate_opts`, timed with `timer`.

    Each step extends every sequence of the beam by every legal opt, times the distinct kernels that produces
    and keeps the `width` fastest; the search stops when a step finds nothing faster or after `max_steps`.
    Candidates whose build or timer raises RuntimeError are skipped. The result is cached on disk (see
    `beam_cache_key`). `workers` (default: the BEAM_WORKERS knob) processes build each step's candidates; with more
    than one, a candidate whose build runs past BEAM_TIMEOUT seconds is skipped (its worker is replaced).
    """
    from kiln.codegen.lifecycle import get_program
    from kiln.codegen.opt.optimize import prepare_kernel

    if width < 1:
        raise ValueError(f"beam width must be at least 1, got {width}")
    key = beam_cache_key(sink, renderer, width)
    if use_cache and (cached := _beam_cache.get(key)) is not None and (opts := _decode(cached)) is not None:
        return opts

    sink = prepare_kernel(sink, renderer)  # the kernel the opts will apply to (get_program prepares it the same way)

    count = beam_worker_count() if workers is None else workers
    if count < 1:
        raise ValueError(f"beam_search needs at least one worker, got {count}")
    if count > 1 and not can_send(sink, renderer):
        count = 1  # a renderer that cannot be pickled (it holds a module, a handle ...) builds in this process

    def measure(opts: tuple[Opt, ...], program: UOp | None = None) -> float | None:
        try:
            return timer(Program(program if program is not None else get_program(sink, renderer, opts)))
        except RuntimeError:
            return None

    def measure_all(candidates: list[tuple[Opt, ...]]) -> list[float | None]:
        if count == 1 or len(candidates) < 2:
            return [measure(opts) for opts in candidates]
        built = shared_pool(count).build([(sink, renderer, opts) for opts in candidates], float(knobs.BEAM_TIMEOUT))
        timings: list[float | None] = []
        for opts, result in zip(candidates, built, strict=True):
            if isinstance(result, BuildFailure):
                # skipped like the serial search's RuntimeError; any other error is raised here, as serially
                timings.append(None if result.runtime or result.timed_out else measure(opts))
            else:
                timings.append(measure(opts, result))
        return timings

    baseline = measure(())
    if baseline is None:
        raise RuntimeError("beam_search: the unoptimized kernel cannot be timed")
    best = _Candidate(baseline, ())
    beam = [best]
    seen: set[UOp] = {apply_opts(sink, (), renderer).replace(arg=None)}
    for _ in range(max_steps):
        step: list[tuple[Opt, ...]] = []
        for entry in beam:
            state = apply_opts(sink, entry.opts, renderer)
            for opt in candidate_opts(state, renderer):
                shape = apply_opt(state, opt, renderer).replace(arg=None)
                if shape in seen:
                    continue  # another order of the same opts reaches the same kernel
                seen.add(shape)
                step.append((*entry.opts, opt))
        timed = [
            _Candidate(seconds, opts)
            for opts, seconds in zip(step, measure_all(step), strict=True)
            if seconds is not None
        ]
        if not timed:
            break
        timed.sort(key=lambda candidate: candidate.seconds)
        beam = timed[:width]
        if beam[0].seconds >= best.seconds:
            break
        best = beam[0]
    if use_cache:
        _beam_cache.put(key, _encode(best.opts))
    return best.opts
