"""The `Renderer` interface: what a target can do (capabilities and limits) and how it prints uops as source.

A renderer only prints: every rewrite a target needs runs in codegen's pipeline before linearizing (chosen by the
capabilities below, plus the renderer's own `extra_passes`), so the SOURCE is a printing of the stored LINEAR.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from kiln.codegen.tensor_core import TensorCore as TensorCore  # re-exported: TensorCore used to live here
from kiln.uops import DType, GroupOp, Ops, PatternMatcher, UOp

if TYPE_CHECKING:
    from kiln.codegen.compiler import Compiler
    from kiln.codegen.kernel_signature import KernelSignature


class Renderer(ABC):
    """A code generation target: capability flags and limits that steer lowering, `render`, and its own compiler.

    Concrete renderers (kiln.renderers) set the class attributes below and implement `render`. Lowering reads the
    attributes only; it never asks which concrete renderer it has.
    """

    device: str = "NONE"
    """Device name programs are built for, e.g. "CPU" or "CUDA" (an optional ":n" picks one device of a kind)."""

    has_local: bool = False
    """Threads grouped into blocks: GLOBAL ranges become gidx, LOCAL ranges become lidx."""
    has_shared: bool = False
    """Block-shared memory (DEFINE_LOCAL) and BARRIER; needed by GROUP/GROUPTOP."""
    has_threads: bool = False
    """Kernels may spread a loop over CPU cores (THREAD axes, read as SPECIAL `CORE_ID`)."""
    global_max: tuple[int, ...] | None = None
    """Largest size of each global dimension (the count of dimensions too); None: no global dims."""
    local_max: tuple[int, ...] | None = None
    """Largest size of each local dimension; None: no local dims."""
    local_size_max: int = 1
    """Largest product of the local dimensions (threads per block)."""
    shared_max: int = 0
    """Bytes of shared memory a block may use."""
    thread_max: int = 1
    """Largest THREAD split (CPU cores a kernel may use)."""
    vector_widths: tuple[int, ...] = (1,)
    """Lane counts of the vector loads and stores it renders (1 is always allowed)."""
    vector_alu: bool = False
    """ALU ops may stay vectors of a width in `vector_widths` (otherwise they are split into scalars)."""
    register_tile_lanes: int = 256
    """Most accumulator lanes (rows x columns) of the register tile the heuristic gives a matmul-shaped kernel on a
    vector-ALU CPU: about half the vector register file (AVX-512: 32 registers of 16 float32 lanes)."""
    fuse_multiply_add: bool = False
    """A float32/float64 reduce `acc + a*b` may become MULACC(a, b, acc), rounded once (needs MULACC native)."""
    native_dtypes: frozenset[DType] | None = None
    """Dtypes it computes in directly; None means every dtype. A kernel using a dtype outside it and outside
    `emulated_dtypes` is refused with a ValueError (checked after the decompositions, on every uop it would get)."""
    emulated_dtypes: frozenset[DType] = frozenset()
    """Dtypes codegen's dtype emulation pass rewrites for it (bfloat16, float16, fp8e4m3, fp8e5m2): values computed
    in float32, memory in raw bits, one rounding per op. Takes precedence over `native_dtypes`."""
    native_ops: frozenset[Ops] = GroupOp.ALU - {Ops.MULACC}
    """ALU ops it renders directly; others are decomposed (transcendentals, MULACC, POW ...)."""
    tensor_cores: tuple[TensorCore, ...] = ()
    """Matrix units the TC optimization may target."""
    extra_passes: tuple[tuple[str, PatternMatcher], ...] = ()
    """The renderer's own named rewrite passes, run (traced and spec-checked) after the dtype emulation and before
    linearizing; the renderer's object is their ctx."""

    compiler: Compiler | None = None
    """The compiler that turns `render`'s source into a binary (None: the source is the program)."""

    @abstractmethod
    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        """Source code of kernel `name` from its linearized uops (the linear program format of the README).

        Only prints: it must not rewrite `uops` (no graph_rewrite), so rendering the same LINEAR gives the same text.
        `signature` is the program's KernelSignature, which the kernel's parameter list is printed from (the
        lifecycle passes the PROGRAM's; None: `KernelSignature.of(uops)`, for a caller rendering uops directly).
        """

    @property
    def device_kind(self) -> str:
        """The device name without its ":n" suffix."""
        return self.device.split(":", 1)[0]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} for {self.device}>"
