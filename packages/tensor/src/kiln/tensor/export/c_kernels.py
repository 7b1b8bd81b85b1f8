"""The captured kernels as C11 functions of one translation unit, for a single-threaded host.

Each launch's kernel AST is lowered again by `ExportCRenderer`, the CPU C renderer with the opts kiln applied (so the
loops and their order are kiln's) and the multiply-add fusing of the renderer kiln ran it with. When kiln's CPU
device runs the C renderer (CPU_RENDERER=c) these are kiln's very kernels and the outputs the same bits; under the
LLVM IR renderer (the default with llvmlite) its vector ALU ops sum an unrolled reduction in another order than the
C renderer's scalar ops, a difference of a few float32 ulps (2.4e-7 at most over the export tests' models).

A kernel split over CPU cores (a THREAD axis, the `core_id` parameter) is called once per core index in a loop,
which `#pragma omp parallel for` may spread over threads when the artifact is built with `-DKILN_EXPORT_OPENMP
-fopenmp` (the core slices write disjoint elements). The renderer's typedefs and helpers are
gathered once for the whole file; each kernel becomes a `static` function of its own name.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.codegen import KernelOptError, KernelSignature, Program, get_program
from kiln.renderers import ENTRY_NAME, CRenderer, CStyleWriter
from kiln.uops import DType, UOp, dtypes

__all__ = ["CKernel", "ExportCRenderer", "lower_kernel"]


class ExportCRenderer(CRenderer):
    """The C renderer for exported code: renders without compiling (the artifact's own build compiles), computes
    float16 through float32 everywhere (no dependence on the building compiler's _Float16), and gathers the
    typedefs and helpers of every kernel it renders in `shared`."""

    def __init__(self, fuse_multiply_add: bool) -> None:
        super().__init__()
        self.fuse_multiply_add = fuse_multiply_add
        self.compiler = None  # type: ignore[assignment]  # lifecycle: no compiler, no compile stage
        self.shared: dict[str, None] = {}  # typedefs and helper definitions, in first-use order

    @property
    def emulated_dtypes(self) -> frozenset[DType]:
        """The target's emulated dtypes and float16: exported C must build with any C11 compiler."""
        return self.target.emulated_dtypes | {dtypes.float16}

    @emulated_dtypes.setter
    def emulated_dtypes(self, emulated: frozenset[DType]) -> None:
        raise AttributeError("ExportCRenderer's emulated dtypes are fixed")

    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        """The kernel function alone (named ENTRY_NAME); its typedefs and helpers go to `shared`."""
        signature = signature or KernelSignature.of(uops)
        writer = CStyleWriter(self)
        for uop in uops:
            writer.add(uop)
        parameters = self.parameters(writer, signature)
        for text in (*self.dialect.preamble, *writer.typedefs.values(), *writer.helpers.values()):
            self.shared.setdefault(text, None)
        body = [f"static void {ENTRY_NAME}({', '.join(parameters)}) {{", *writer.lines, "}"]
        return "\n".join(body) + "\n"


@dataclass(frozen=True)
class CKernel:
    """One kernel of the artifact: its C function name, its definition and its signature."""

    function: str
    definition: str
    signature: KernelSignature


def lower_kernel(ast: UOp, program: Program, renderer: ExportCRenderer, function: str) -> CKernel:
    """`ast` lowered by `renderer` with the opts of `program` (kiln's run) as C function `function`; with the
    heuristic's opts when the C renderer refuses those."""
    try:
        lowered = Program(get_program(ast, renderer, program.info.applied_opts))
    except KernelOptError:
        lowered = Program(get_program(ast, renderer))
    definition = lowered.source.replace(f"static void {ENTRY_NAME}(", f"static void {function}(", 1)
    return CKernel(function, f"/* {program.name} */\n{definition}", lowered.signature)
