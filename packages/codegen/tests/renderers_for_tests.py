"""Tiny renderers for codegen's tests (no renderer package is imported): a CPU-like and a GPU-like target.

Both have `compiler=None` and render the linear program as readable text (`format_linear`), so the PROGRAM
lifecycle stops at SOURCE and tests can read the uops back through `Program`.
"""

from __future__ import annotations

from kiln.codegen import FragmentLayout, KernelSignature, Renderer, TensorCore, format_linear
from kiln.uops import UOp, dtypes

# A small float32 unit shaped like mma.sync's fragments, scaled down to 8x8x8: lanes 0-1 bits walk columns by 2, 4
# and lane bits 2-4 walk rows by 1, 2, 4 (groupID / threadID_in_group), the register bit walks the fastest column.
TC_8X8X8_FLOAT = TensorCore(
    dims=(8, 8, 8),
    threads=32,
    elements_per_thread=(2, 2, 2),
    dtype_in=dtypes.float32,
    dtype_out=dtypes.float32,
    layouts=(
        FragmentLayout(((0, 2), (0, 4), (1, 0), (2, 0), (4, 0)), ((0, 1),)),  # A: M x K
        FragmentLayout(((2, 0), (4, 0), (0, 1), (0, 2), (0, 4)), ((1, 0),)),  # B: K x N
        FragmentLayout(((0, 2), (0, 4), (1, 0), (2, 0), (4, 0)), ((0, 1),)),  # C/D: M x N
    ),
)

# mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: fragment layouts from the PTX ISA, section "Matrix Fragments
# for mma.m16n8k16 with floating point type" (groupID = lane >> 2, threadID_in_group = lane % 4):
# A a_i: row groupID (+8 for i in 2,3,6,7), column 2*threadID_in_group + (i & 1) (+8 for i >= 4);
# B b_i: row 2*threadID_in_group + (i & 1) (+8 for i >= 2), column groupID;
# C c_i: row groupID (+8 for i >= 2), column 2*threadID_in_group + (i & 1).
TC_M16N8K16_HALF_FLOAT = TensorCore(
    dims=(8, 16, 16),
    threads=32,
    elements_per_thread=(8, 4, 4),
    dtype_in=dtypes.float16,
    dtype_out=dtypes.float32,
    layouts=(
        FragmentLayout(((0, 2), (0, 4), (1, 0), (2, 0), (4, 0)), ((0, 1), (8, 0), (0, 8))),
        FragmentLayout(((2, 0), (4, 0), (0, 1), (0, 2), (0, 4)), ((1, 0), (8, 0))),
        FragmentLayout(((0, 2), (0, 4), (1, 0), (2, 0), (4, 0)), ((0, 1), (8, 0))),
    ),
)


class TextRenderer(Renderer):
    """Renders the linear program as numbered text lines."""

    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        return f"// {self.device} kernel\n{format_linear(uops)}\n"


class CPULikeRenderer(TextRenderer):
    """A CPU: no local threads or shared memory, 4- and 8-wide vectors, up to 8 cores for THREAD."""

    device = "TESTCPU"
    has_threads = True
    thread_max = 8
    vector_widths = (4, 8)


class GPULikeRenderer(TextRenderer):
    """A GPU: blocks of up to 1024 threads with 48 KiB shared memory, 2- and 4-wide vectors."""

    device = "TESTGPU"
    has_local = True
    has_shared = True
    global_max = (2**31 - 1, 65535, 65535)
    local_max = (1024, 1024, 64)
    local_size_max = 1024
    shared_max = 49152
    vector_widths = (2, 4)
    tensor_cores = (TC_8X8X8_FLOAT, TC_M16N8K16_HALF_FLOAT)


class ScalarRenderer(TextRenderer):
    """The plainest target: no threads, no vectors (every load and store is scalar)."""

    device = "TESTSCALAR"


class VectorCPU(CPULikeRenderer):
    """A CPU whose ALU ops stay vectors (like the LLVM IR renderer): 4-, 8- and 16-wide."""

    device = "TESTVECTORCPU"
    vector_alu = True
    vector_widths = (4, 8, 16)
