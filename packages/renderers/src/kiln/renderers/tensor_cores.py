"""The tensor cores of each GPU target: their shapes, dtypes and register fragment layouts, with the document each
layout is taken from. Data only; the targets (`kiln.renderers.target`) list them and the renderers write the
instructions that run them.
"""

from __future__ import annotations

from kiln.codegen import FragmentLayout, TensorCore
from kiln.uops import DType, dtypes

__all__ = ["TENSOR_CORES_GFX942", "TENSOR_CORES_GFX1100", "TENSOR_CORES_METAL", "TENSOR_CORES_SM80"]


def _cores(
    dims: tuple[int, int, int],
    threads: int,
    elements: tuple[int, int, int],
    layouts: tuple[FragmentLayout, FragmentLayout, FragmentLayout],
    dtype_pairs: tuple[tuple[DType, DType], ...],
) -> tuple[TensorCore, ...]:
    """The tensor cores of one instruction shape: `dims` (N, M, K) run by `threads` lanes holding `elements` of A, B
    and C each in `layouts`, one core per (input dtype, accumulator dtype) of `dtype_pairs`, in that order."""
    return tuple(
        TensorCore(
            dims=dims, threads=threads, elements_per_thread=elements, dtype_in=src, dtype_out=acc, layouts=layouts
        )
        for src, acc in dtype_pairs
    )


_HALF_IN = ((dtypes.float16, dtypes.float32), (dtypes.float16, dtypes.float16))
"""f16 A and B with f32 or f16 accumulators."""

# ---- NVIDIA (CUDA C and PTX) ------------------------------------------------------------------------------------

# Fragment layouts of mma.sync.aligned.m16n8k16 with .f16 A/B (PTX ISA, "Matrix Fragments for mma.m16n8k16 with
# floating point type"), groupID = lane >> 2, threadID_in_group = lane % 4:
#   a_i (A, 16 x 16): row groupID (+8 for i in 2, 3, 6, 7), column 2 * threadID_in_group + (i & 1) (+8 for i >= 4)
#   b_i (B, 16 x 8):  row 2 * threadID_in_group + (i & 1) (+8 for i >= 2), column groupID
#   c_i (C/D, 16 x 8, .f32 and .f16 accumulators alike): row groupID (+8 for i >= 2), column 2 * threadID_in_group +
#   (i & 1)
# Written bit by bit: lane bits 0-1 are threadID_in_group, lane bits 2-4 groupID; element bits are those of i.
_M16N8K16_A = FragmentLayout(((0, 2), (0, 4), (1, 0), (2, 0), (4, 0)), ((0, 1), (8, 0), (0, 8)))
_M16N8K16_B = FragmentLayout(((2, 0), (4, 0), (0, 1), (0, 2), (0, 4)), ((1, 0), (8, 0)))
_M16N8K16_C = FragmentLayout(((0, 2), (0, 4), (1, 0), (2, 0), (4, 0)), ((0, 1), (8, 0)))

TENSOR_CORES_SM80 = _cores(
    (8, 16, 16),
    32,
    (8, 4, 4),
    (_M16N8K16_A, _M16N8K16_B, _M16N8K16_C),
    (*_HALF_IN, (dtypes.bfloat16, dtypes.float32)),
)
"""mma.sync.aligned.m16n8k16.row.col (sm_80+) with f16 inputs and f32 or f16 accumulators, then bf16 inputs with
f32 accumulators (`.f32.bf16.bf16.f32`; the ISA has no bf16 accumulator): per lane 8 A registers (four f16x2 or
bf16x2), 4 B registers (two), 4 accumulators (four f32 or two f16x2). The .bf16 fragments are laid out as the .f16
ones (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" covers both). A WMMA's vector lanes are
the fragment's registers in layout order (A: a0..a7, B: b0..b3, C/D: c0..c3); a register pair 2r, 2r+1 is packed
into one 32-bit register with the even register in the low half (PTX ISA, same section)."""

# ---- AMD ------------------------------------------------------------------------------------------------------

# gfx1100 v_wmma_f32_16x16x16_f16 in wave32 (RDNA3 ISA guide, "Wave Matrix Multiply Accumulate"; the GPUOpen article
# "How to accelerate AI applications on RDNA 3 using WMMA"): lane l holds row l % 16 of A and column l % 16 of B,
# all 16 K values each, and lanes 16-31 repeat lanes 0-15; the f32 accumulator register j of lane l is
# D[2j + l / 16][l % 16]. kiln's layouts map lanes x registers one-to-one, so each lane keeps 8 of its 16 K values
# (lanes 16-31 the upper half) and the WMMA helper fetches the other 8 from lane l ^ 16 with v_permlanex16.
_GFX1100_A = FragmentLayout(((1, 0), (2, 0), (4, 0), (8, 0), (0, 8)), ((0, 1), (0, 2), (0, 4)))
_GFX1100_B = FragmentLayout(((0, 1), (0, 2), (0, 4), (0, 8), (8, 0)), ((1, 0), (2, 0), (4, 0)))
_GFX1100_C = FragmentLayout(((0, 1), (0, 2), (0, 4), (0, 8), (1, 0)), ((2, 0), (4, 0), (8, 0)))

TENSOR_CORES_GFX1100 = _cores((16, 16, 16), 32, (8, 8, 8), (_GFX1100_A, _GFX1100_B, _GFX1100_C), _HALF_IN)
"""v_wmma_f32_16x16x16_f16 and v_wmma_f16_16x16x16_f16 (wave32): f16 A/B, f32 or f16 accumulators; 8 A, 8 B and
8 C registers per lane. An f16 accumulator register j sits in the low half of VGPR j (OPSEL 0), the same rows and
columns as the f32 one (RDNA3 ISA, WMMA "OPSEL"; the GPUOpen WMMA article reads c_frag[2 * ele])."""

# gfx942 v_mfma_f32_16x16x16_f16 in wave64 (AMD Matrix Instruction Calculator for CDNA3, "v_mfma_f32_16x16x16_f16";
# CDNA3 ISA, "Matrix Fused Multiply Add"): A[i][k] is in lane i + 16 * (k / 4), register k % 4; B[k][j] in lane
# j + 16 * (k / 4), register k % 4; D[i][j] in lane j + 16 * (i / 4), register i % 4.
_GFX942_A = FragmentLayout(((1, 0), (2, 0), (4, 0), (8, 0), (0, 4), (0, 8)), ((0, 1), (0, 2)))
_GFX942_B = FragmentLayout(((0, 1), (0, 2), (0, 4), (0, 8), (4, 0), (8, 0)), ((1, 0), (2, 0)))
_GFX942_C = FragmentLayout(((0, 1), (0, 2), (0, 4), (0, 8), (4, 0), (8, 0)), ((1, 0), (2, 0)))

TENSOR_CORES_GFX942 = _cores(
    (16, 16, 16), 64, (4, 4, 4), (_GFX942_A, _GFX942_B, _GFX942_C), ((dtypes.float16, dtypes.float32),)
)
"""v_mfma_f32_16x16x16_f16 (wave64): f16 A/B, f32 accumulators; 4 A, 4 B and 4 C registers per lane."""

# ---- Apple (Metal) ----------------------------------------------------------------------------------------------

# simdgroup_matrix 8x8 in a 32-lane SIMD-group: Apple does not document which thread holds which element. The layout
# below is the one reverse-engineered in philipturner/metal-flash-attention (simdgroup_matrix_storage.h, `offset`):
# lane l holds row (l / 2) % 4 + 4 * (l / 16) and columns 2 * (l % 2) + 4 * ((l / 8) % 2) + {0, 1} (thread_elements
# 0 and 1), the same for A, B and C.
_SIMDGROUP_8X8 = FragmentLayout(((0, 2), (1, 0), (2, 0), (0, 4), (4, 0)), ((0, 1),))

TENSOR_CORES_METAL = _cores(
    (8, 8, 8), 32, (2, 2, 2), (_SIMDGROUP_8X8,) * 3, ((dtypes.float32, dtypes.float32), *_HALF_IN)
)
"""simdgroup_multiply_accumulate on 8x8 tiles: float x float -> float, half x half -> float or half."""
