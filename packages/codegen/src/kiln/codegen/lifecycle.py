"""The PROGRAM lifecycle: `get_program` grows PROGRAM(SINK, DEVICE) one stage at a time, one rule per stage.

PROGRAM(SINK, DEVICE)                          optimized kernel sink, target device name
PROGRAM(SINK, DEVICE, LINEAR)                  LINEAR.src = the lowered, linearized uops;
                                               PROGRAM.arg = KernelSignature.of(LINEAR.src)
PROGRAM(SINK, DEVICE, LINEAR, SOURCE)          SOURCE.arg = renderer.render(uops, name, PROGRAM.arg)
PROGRAM(SINK, DEVICE, LINEAR, SOURCE, BINARY)  BINARY.arg = renderer.compiler.compile_cached(source);
                                               PROGRAM.arg gains the compiler's identity

The signature (kiln.codegen.kernel_signature) is worked out here once, when the program is linearized; the renderer
prints its parameter list from it and every layer above reads it through `Program.signature`.

`get_programs` builds several kernels with each compile overlapping the next kernel's lowering: a compiler call
releases the GIL (llvmlite's and a C compiler's process both do), so one compile thread and the caller's Python work
run on two cores. Compiles stay serial (one thread): llvmlite takes one process-wide lock around every LLVM call.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from kiln.codegen.kernel_info import KernelInfo, Opt
from kiln.codegen.kernel_signature import KernelSignature
from kiln.codegen.linearizer import format_linear, linearize
from kiln.codegen.lowering.pipeline import lower, run_stage
from kiln.codegen.opt.optimize import optimize_kernel
from kiln.codegen.renderer import Renderer
from kiln.codegen.spec import pm_spec_kernel, pm_spec_program, verify_linear
from kiln.codegen.trace_info import record_kernel
from kiln.uops import Ops, PatternMatcher, UOp, UPat, knobs, print_graph, trace, type_verify


def _linearize_stage(ctx: Renderer, program: UOp, sink: UOp, device: UOp) -> UOp:
    linear = run_stage("linearize", lower(sink, ctx), lambda lowered: UOp(Ops.LINEAR, src=tuple(linearize(lowered))))
    verify_linear(list(linear.src))
    return program.replace(src=(sink, device, linear), arg=KernelSignature.of(linear.src))


def _render_stage(ctx: Renderer, program: UOp, linear: UOp) -> UOp:
    info = program.src[0].arg
    name = info.name if isinstance(info, KernelInfo) else KernelInfo().name
    source = ctx.render(list(linear.src), name, program.arg)
    if not isinstance(source, str):
        raise TypeError(f"{type(ctx).__name__}.render must return str, got {type(source).__name__}")
    return program.replace(src=(*program.src, UOp(Ops.SOURCE, arg=source)))


def _compile_stage(ctx: Renderer, program: UOp, source: UOp) -> UOp | None:
    if ctx.compiler is None:
        return None
    return _with_binary(program, ctx, ctx.compiler.compile_cached(source.arg))


def _with_binary(program: UOp, renderer: Renderer, binary: bytes) -> UOp:
    # the last stage's result: the rendered PROGRAM with its BINARY, signed by the compiler that made it
    assert renderer.compiler is not None
    compiled = UOp(Ops.BINARY, arg=binary)
    return program.replace(src=(*program.src, compiled), arg=program.arg.compiled_by(renderer.compiler))


_sink_device = (UPat(Ops.SINK), UPat(Ops.DEVICE))
pm_program_lifecycle = PatternMatcher(
    [
        (
            UPat(Ops.PROGRAM, src=(UPat(Ops.SINK, name="sink"), UPat(Ops.DEVICE, name="device")), name="program"),
            _linearize_stage,
        ),
        (UPat(Ops.PROGRAM, src=(*_sink_device, UPat(Ops.LINEAR, name="linear")), name="program"), _render_stage),
        (
            UPat(Ops.PROGRAM, src=(*_sink_device, UPat(Ops.LINEAR), UPat(Ops.SOURCE, name="source")), name="program"),
            _compile_stage,
        ),
    ]
)
"""One rule per stage of the PROGRAM lifecycle (ctx: the Renderer)."""


def _grow(program: UOp, renderer: Renderer, until: Ops | None = None) -> UOp:
    # apply the stage rules to the PROGRAM node only, checking each stage (and stopping once stage `until` is there)
    while program.src[-1].op is not until:
        grown = pm_program_lifecycle.rewrite(program, ctx=renderer)
        if grown is None:
            break
        type_verify([grown, *grown.src[1:]], pm_spec_program)
        program = grown
    return program


def get_programs(asts: Sequence[UOp], renderer: Renderer, opts: Sequence[Opt] | None = None) -> list[UOp]:
    """`get_program(ast, renderer, opts)` of each kernel sink of `asts`, in order; each kernel's compile runs on a
    compile thread while the next kernel is optimized, lowered and rendered here (see the module docstring).

    The first error (a bad sink, a compiler's) is raised after the compiles already queued have finished. With
    tracing on, or a renderer without a compiler, the kernels are built one after the other as `get_program` does.
    """
    compiler = renderer.compiler
    if compiler is None or trace.STATE.enabled or len(asts) < 2:
        return [get_program(ast, renderer, opts) for ast in asts]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln-compile") as compile_thread:
        rendered: list[tuple[UOp, Future[bytes]]] = []
        for ast in asts:
            _check_arguments(ast, renderer)
            program = _build_program(ast, renderer, opts, until=Ops.SOURCE)
            rendered.append((program, compile_thread.submit(compiler.compile_cached, program.src[3].arg)))
    programs = []
    for program, binary in rendered:
        compiled = _with_binary(program, renderer, binary.result())
        type_verify([compiled, *compiled.src[1:]], pm_spec_program)
        programs.append(compiled)
    return programs


def _check_arguments(ast: UOp, renderer: Renderer) -> None:
    if not isinstance(ast, UOp) or ast.op is not Ops.SINK:
        raise TypeError(f"get_program needs a kernel SINK, got {ast!r}")
    if not isinstance(renderer, Renderer):
        raise TypeError(f"get_program needs a Renderer, got {renderer!r}")
    type_verify(ast, pm_spec_kernel)


def get_program(ast: UOp, renderer: Renderer, opts: Sequence[Opt] | None = None) -> UOp:
    """The PROGRAM uop of kernel sink `ast` for `renderer`, optimized with `opts` (see `choose_opts` when None).

    Read the result through `Program(...)`; only codegen builds or indexes PROGRAM uops.
    """
    _check_arguments(ast, renderer)
    if not trace.STATE.enabled:
        return _build_program(ast, renderer, opts)
    with trace.trace_group("kernel") as group:
        program = _build_program(ast, renderer, opts)
        if group is not None:
            record_kernel(group, ast, program, renderer)
    return program


def _build_program(ast: UOp, renderer: Renderer, opts: Sequence[Opt] | None, until: Ops | None = None) -> UOp:
    sink = run_stage("optimize", ast, lambda kernel: optimize_kernel(kernel, renderer, opts))
    if knobs.DEBUG >= 3:
        print(f"{sink.arg.name}: applied opts {list(sink.arg.applied_opts)}")
    if knobs.DEBUG >= 5:
        print(print_graph(sink))
    program = UOp(Ops.PROGRAM, src=(sink, UOp(Ops.DEVICE, arg=renderer.device)))
    type_verify([program, program.src[1]], pm_spec_program)
    program = _grow(program, renderer, until)
    if knobs.DEBUG >= 6:
        print(format_linear(list(program.src[2].src)))
    if knobs.DEBUG >= 4:
        print(program.src[3].arg)
    return program
