"""An independent numpy reading of ggml's quantized block layouts (ggml-common.h), element by element: the oracle of
the kiln block decoders. Also random test blocks with finite scale fields."""

from __future__ import annotations

import numpy as np

from kiln.tensor.state import GGML_BLOCKS, GGMLType

# byte offsets of each type's float16 fields (set to finite values: random bytes could spell inf / nan)
HALF_FIELDS = {
    GGMLType.Q4_0: (0,),
    GGMLType.Q4_1: (0, 2),
    GGMLType.Q5_0: (0,),
    GGMLType.Q5_1: (0, 2),
    GGMLType.Q8_0: (0,),
    GGMLType.Q2_K: (80, 82),
    GGMLType.Q3_K: (108,),
    GGMLType.Q4_K: (0, 2),
    GGMLType.Q5_K: (0, 2),
    GGMLType.Q6_K: (208,),
    GGMLType.Q8_K: (),
}


def random_blocks(kind: GGMLType, blocks: int, seed: int) -> np.ndarray:
    """`blocks` blocks of random bytes with finite float16 (and, for Q8_K, float32) scale fields."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (blocks, GGML_BLOCKS[kind].type_size), dtype=np.uint8)
    for offset in HALF_FIELDS[kind]:
        raw[:, offset : offset + 2] = rng.uniform(-2, 2, (blocks, 1)).astype(np.float16).view(np.uint8)
    if kind == GGMLType.Q8_K:
        raw[:, 0:4] = rng.uniform(-2, 2, (blocks, 1)).astype(np.float32).view(np.uint8)
    return raw


def _half(block: np.ndarray, offset: int) -> float:
    return float(block[offset : offset + 2].view(np.float16)[0])


def _scale_min_k4(scales: np.ndarray, j: int) -> tuple[int, int]:
    """ggml's get_scale_min_k4: the j-th 6-bit (scale, min) pair of the 12 packed bytes of a Q4_K / Q5_K block."""
    if j < 4:
        return int(scales[j] & 63), int(scales[j + 4] & 63)
    return int((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4)), int((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))


def reference_block(kind: GGMLType, block: np.ndarray) -> list[float]:
    """One block decoded element by element, straight from the ggml struct descriptions."""
    out: list[float] = []
    if kind in (GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1):
        has_min = kind in (GGMLType.Q4_1, GGMLType.Q5_1)
        five = kind in (GGMLType.Q5_0, GGMLType.Q5_1)
        d, m = _half(block, 0), _half(block, 2) if has_min else 0.0
        qh_at = 4 if has_min else 2
        qh = int.from_bytes(bytes(block[qh_at : qh_at + 4]), "little") if five else 0
        qs = block[qh_at + 4 if five else qh_at :]
        for e in range(32):
            q = int(qs[e % 16] >> (4 * (e // 16))) & 0xF
            q |= ((qh >> e) & 1) << 4
            offset = 0 if has_min else (16 if five else 8)
            out.append(d * (q - offset) + m)
    elif kind == GGMLType.Q8_0:
        out = [_half(block, 0) * int(v) for v in block[2:34].view(np.int8)]
    elif kind == GGMLType.Q8_K:
        d = float(block[0:4].view(np.float32)[0])
        out = [d * int(v) for v in block[4:260].view(np.int8)]
    elif kind == GGMLType.Q2_K:
        d, dmin = _half(block, 80), _half(block, 82)
        for e in range(256):
            q = (int(block[16 + 32 * (e // 128) + e % 32]) >> (2 * ((e % 128) // 32))) & 3
            scale = int(block[e // 16])
            out.append(d * (scale & 0xF) * q - dmin * (scale >> 4))
    elif kind == GGMLType.Q3_K:
        d = _half(block, 108)
        for e in range(256):
            s = e // 16
            low = (int(block[96 + s % 8]) >> (4 * (s // 8))) & 0xF
            high = (int(block[96 + 8 + s % 4]) >> (2 * (s // 4))) & 3
            q = (int(block[32 + 32 * (e // 128) + e % 32]) >> (2 * ((e % 128) // 32))) & 3
            mask_bit = (int(block[e % 32]) >> (4 * (e // 128) + (e % 128) // 32)) & 1
            out.append(d * ((low | (high << 4)) - 32) * (q - (0 if mask_bit else 4)))
    elif kind in (GGMLType.Q4_K, GGMLType.Q5_K):
        d, dmin = _half(block, 0), _half(block, 2)
        qs_at = 16 if kind == GGMLType.Q4_K else 48
        for e in range(256):
            scale, minimum = _scale_min_k4(block[4:16], e // 32)
            q = (int(block[qs_at + 32 * (e // 64) + e % 32]) >> (4 * ((e % 64) // 32))) & 0xF
            if kind == GGMLType.Q5_K:
                q += 16 * ((int(block[16 + e % 32]) >> (e // 32)) & 1)
            out.append(d * scale * q - dmin * minimum)
    elif kind == GGMLType.Q6_K:
        d = _half(block, 208)
        scales = block[192:208].view(np.int8)
        for e in range(256):
            h, k, lane = e // 128, (e % 128) // 32, e % 32
            low = (int(block[64 * h + 32 * (k % 2) + lane]) >> (4 * (k // 2))) & 0xF
            high = (int(block[128 + 32 * h + lane]) >> (2 * k)) & 3
            out.append(d * int(scales[e // 16]) * ((low | (high << 4)) - 32))
    return out
