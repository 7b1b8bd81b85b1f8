"""ggml block quantization formats decoded by Tensor ops (so the decode runs as a kernel on any device).

A quantized tensor is a sequence of fixed-size blocks, each holding `block_size` elements in `type_size` bytes:
scales as float16 (or float32) fields and packed small integers. Each decoder takes the raw bytes as a uint8 Tensor of
shape (blocks, type_size) and returns a lazy float32 Tensor of shape (blocks, block_size): only elementwise and
movement ops (shrink, reshape, expand, stack), no gathers, so the scheduler can fuse it into whatever consumes it
(its expand rule may still compute costly scales, or a decoded weight read through an expand, in a kernel of their
own). Layouts follow ggml's `block_*` structs (ggml-common.h).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

__all__ = ["GGML_BLOCKS", "RUN_DECODES", "BlockFormat", "GGMLType", "RunDecode", "dequantize"]

QK_K = 256  # elements of a K-quant super-block


class GGMLType(IntEnum):
    """ggml's tensor type numbers (enum ggml_type)."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39


def _f16(raw: Tensor, offset: int) -> Tensor:
    """The little-endian float16 at byte `offset` of every block, as float32 of shape (blocks, 1)."""
    low, high = raw[:, offset : offset + 1].cast(dtypes.uint16), raw[:, offset + 1 : offset + 2].cast(dtypes.uint16)
    return (low | (high << 8)).bitcast(dtypes.float16).cast(dtypes.float32)


def _f32(raw: Tensor, offset: int) -> Tensor:
    """The little-endian float32 at byte `offset` of every block, shape (blocks, 1)."""
    word = raw[:, offset : offset + 1].cast(dtypes.uint32)
    for byte in range(1, 4):
        word = word | (raw[:, offset + byte : offset + byte + 1].cast(dtypes.uint32) << (8 * byte))
    return word.bitcast(dtypes.float32)


def _shifts(count: int, width: int, dim: int, device: str | tuple[str, ...]) -> Tensor:
    """0, width, 2 width, ... (`count` uint32 shift amounts) laid along axis `dim` (negative) of a broadcast shape."""
    shifts = Tensor.arange(count, dtype=dtypes.uint32, device=device) * width
    return shifts.reshape(count, *[1] * (-dim - 1))


def _bits(packed: Tensor, width: int, dim: int) -> Tensor:
    """Each `width`-bit field of the bytes, lowest first, along a new axis `dim` (negative).

    Each byte is broadcast along the new axis and shifted by that lane's own amount: one plain load of the byte per
    value, where stacking the fields (a concatenation) read every byte through a masked load per field and selected
    among them. (A (2048, 768) Q4_K or Q6_K matrix times a vector: 0.18-0.23 ms in the kernel either way on the
    loaded 2-core VM, DEBUG=2 minimum of 200; the per-run scale decode, not the quants, bounds that kernel.)

    The fields come out as uint32: the byte is widened before its shift, since x86 has variable shifts of 16-, 32-
    and 64-bit lanes but none of bytes (a (32000, 768) matrix times a vector, CPU time of two threads, minimum of 25
    on the loaded 2-core VM: Q4_K 4.3 -> 3.4 ms, Q6_K 7.0 -> 6.0; the same values bit for bit)."""
    count = 8 // width
    return (packed.cast(dtypes.uint32).unsqueeze(dim) >> _shifts(count, width, dim, packed.device)) & ((1 << width) - 1)


def _nibbles(packed: Tensor) -> Tensor:
    """(..., n) bytes -> (..., 2, n): the low nibbles, then the high nibbles (ggml's split of 32 values in 16 bytes)."""
    return _bits(packed, 4, dim=-2)


def _float(values: Tensor) -> Tensor:
    return values.cast(dtypes.float32)


def _q4_0(raw: Tensor) -> Tensor:
    quants = _nibbles(raw[:, 2:18]).reshape(-1, 32)
    return _f16(raw, 0) * (_float(quants) - 8)


def _q4_1(raw: Tensor) -> Tensor:
    quants = _nibbles(raw[:, 4:20]).reshape(-1, 32)
    return _f16(raw, 0) * _float(quants) + _f16(raw, 2)


def _five_bit(raw: Tensor, high_at: int, low_at: int) -> Tensor:
    # bit e of the 32-bit little-endian word at `high_at` is the fifth bit of element e: the word shifted right by
    # each element's own position (a per-lane shift of one broadcast word; stacking the 8 bits of each of the 4 bytes
    # selected among 8 values per element: a (2048, 1024) Q5_0 matrix times a vector took 3.5 ms, now 0.14)
    word = raw[:, high_at : high_at + 1].cast(dtypes.uint32)
    for byte in range(1, 4):
        word = word | (raw[:, high_at + byte : high_at + byte + 1].cast(dtypes.uint32) << (8 * byte))
    positions = Tensor.arange(32, dtype=dtypes.uint32, device=raw.device).reshape(1, 32)
    high = ((word >> positions) & 1).cast(dtypes.uint8)
    low = _nibbles(raw[:, low_at : low_at + 16]).reshape(-1, 32)
    return _float(low | (high << 4))


def _q5_0(raw: Tensor) -> Tensor:
    return _f16(raw, 0) * (_five_bit(raw, 2, 6) - 16)


def _q5_1(raw: Tensor) -> Tensor:
    return _f16(raw, 0) * _five_bit(raw, 4, 8) + _f16(raw, 2)


def _q8_0(raw: Tensor) -> Tensor:
    return _f16(raw, 0) * _float(raw[:, 2:34].bitcast(dtypes.int8))


def _q8_k(raw: Tensor) -> Tensor:
    return _f32(raw, 0) * _float(raw[:, 4:260].bitcast(dtypes.int8))


def _q2_k(raw: Tensor) -> Tensor:
    # element e: 2 bits at shift 2 * ((e % 128) // 32) of byte 32 * (e // 128) + e % 32; 4-bit scale / min of e // 16
    scales = raw[:, 0:16].reshape(-1, 16, 1)
    quants = _bits(raw[:, 16:80].reshape(-1, 2, 32), 2, dim=-2).reshape(-1, 16, 16)
    scaled = _f16(raw, 80).reshape(-1, 1, 1) * _float(scales & 0xF) * _float(quants)
    return (scaled - _f16(raw, 82).reshape(-1, 1, 1) * _float(scales >> 4)).reshape(-1, QK_K)


def _q3_k(raw: Tensor) -> Tensor:
    low = _bits(raw[:, 32:96].reshape(-1, 2, 32), 2, dim=-2)  # (blocks, 2, 4, 32) like Q2_K
    high = _bits(raw[:, 0:32], 1, dim=-2).reshape(-1, 2, 4, 32)  # bit 4 * half + j of hmask[e % 32]
    quants = (_float(low) + 4 * _float(high) - 4).reshape(-1, 16, 16)
    # 16 six-bit scales: low 4 bits from bytes 0..7 (low nibbles first), high 2 bits from bytes 8..11
    packed = raw[:, 96:108]
    scale_low = _nibbles(packed[:, 0:8]).reshape(-1, 16)
    scale_high = _bits(packed[:, 8:12], 2, dim=-2).reshape(-1, 16)
    scales = _float(scale_low | (scale_high << 4)) - 32
    return (_f16(raw, 108).reshape(-1, 1, 1) * scales.reshape(-1, 16, 1) * quants).reshape(-1, QK_K)


def _k_scales_mins(raw: Tensor) -> tuple[Tensor, Tensor]:
    """The 8 six-bit scales and mins of a Q4_K / Q5_K block from its 12 scale bytes (bytes 4..15: `first`, `second`,
    `third` of 4), each (blocks, 8, 1) float32.

    Scale j < 4 is first[j] & 63, scale 4 + j (third[j] & 15) | (first[j] >> 6) << 4; min j < 4 is second[j] & 63,
    min 4 + j third[j] >> 4 | (second[j] >> 6) << 4. Both halves are read as one (2, 4) view of the bytes (first and
    third for the scales: bytes 4..19 as (2, 8) cut to 4 columns; second and third for the mins) under a per-half
    mask and shift, not concatenated: a concatenation read each byte through a masked load per half."""
    half = Tensor.arange(2, dtype=dtypes.uint8, device=raw.device).reshape(2, 1)
    mask = 63 >> (half * 2)  # 63 for the first four, 15 for the last four (their top bits come from elsewhere)
    first, second = raw[:, 4:8].reshape(-1, 1, 4), raw[:, 8:12].reshape(-1, 1, 4)
    scales = (raw[:, 4:20].reshape(-1, 2, 8)[:, :, 0:4] & mask) | (((first >> 6) << 4) * half)
    mins = ((raw[:, 8:16].reshape(-1, 2, 4) >> (half * 4)) & mask) | (((second >> 6) << 4) * half)
    return _float(scales).reshape(-1, 8, 1), _float(mins).reshape(-1, 8, 1)


def _k_run_scales(raw: Tensor) -> tuple[Tensor, Tensor]:
    """Q4_K / Q5_K: each 32-run's step d * scale and offset dmin * min, float32 (blocks, 8, 1): a value of the run
    decodes as step * q - offset (both products exact in float32: 11-bit d times a 6-bit scale)."""
    scales, mins = _k_scales_mins(raw)
    return _f16(raw, 0).reshape(-1, 1, 1) * scales, _f16(raw, 2).reshape(-1, 1, 1) * mins


def _q4_k_quants(raw: Tensor) -> Tensor:
    """Q4_K's 4-bit quants as float32 (blocks, 8, 32): run 2 p holds the low nibbles of bytes 32 p .. 32 p + 31,
    run 2 p + 1 their high nibbles."""
    return _float(_nibbles(raw[:, 16:144].reshape(-1, 4, 32)).reshape(-1, 8, 32))


def _q5_k_quants(raw: Tensor) -> Tensor:
    """Q5_K's 5-bit quants as float32 (blocks, 8, 32): nibbles like Q4_K's, bit j of qh[l] the fifth bit of run j."""
    high = _bits(raw[:, 16:48], 1, dim=-2)  # (blocks, 8, 32): bit j of qh[l] belongs to sub-block j
    low = _nibbles(raw[:, 48:176].reshape(-1, 4, 32)).reshape(-1, 8, 32)
    return _float(low | (high << 4))


def _q4_k(raw: Tensor) -> Tensor:
    step, offset = _k_run_scales(raw)
    return (step * _q4_k_quants(raw) - offset).reshape(-1, QK_K)


def _q5_k(raw: Tensor) -> Tensor:
    step, offset = _k_run_scales(raw)
    return (step * _q5_k_quants(raw) - offset).reshape(-1, QK_K)


@dataclass(frozen=True)
class RunDecode:
    """A format whose every 32-run decodes as step * quant - offset: `run_scales` gives the float32 step and offset
    of each run of the raw blocks (blocks, runs per block, 1), `quants` the float32 quants (blocks, runs, 32).

    Both are the decoder's own terms, so step * quants - offset is the decoded value bit for bit; a product that
    keeps the (few, read-only) steps and offsets decoded once reads them as two floats per run instead of
    decoding six-bit fields and float16s for every run of every product."""

    run_scales: Callable[[Tensor], tuple[Tensor, Tensor]]
    quants: Callable[[Tensor], Tensor]


RUN_DECODES: dict[GGMLType, RunDecode] = {
    GGMLType.Q4_K: RunDecode(_k_run_scales, _q4_k_quants),
    GGMLType.Q5_K: RunDecode(_k_run_scales, _q5_k_quants),
}
"""The ggml types decoded run by run as step * quant - offset (kiln.tensor.llm.quantized keeps their steps)."""


def _q6_k(raw: Tensor) -> Tensor:
    # element e = 128 h + 32 k + l: low nibble (shift 4 * (k // 2)) of ql[64 h + 32 (k % 2) + l], 2 high bits
    # (shift 2 k) of qh[32 h + l], signed 8-bit scale of e // 16
    low = _nibbles(raw[:, 0:128].reshape(-1, 2, 64)).reshape(-1, 2, 4, 32)
    high = _bits(raw[:, 128:192].reshape(-1, 2, 32), 2, dim=-2)
    quants = (_float(low | (high << 4)) - 32).reshape(-1, 16, 16)
    scales = _float(raw[:, 192:208].bitcast(dtypes.int8)).reshape(-1, 16, 1)
    return (_f16(raw, 208).reshape(-1, 1, 1) * scales * quants).reshape(-1, QK_K)


# ggml's kvalues_iq4nl: the 16 levels of the non-linear 4-bit codes of IQ4_NL and IQ4_XS
_IQ4NL_LEVELS = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
# ggml's kvalues_mxfp4: FP4 E2M1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives; the block scale
# carries the factor 1/2), code 8 being -0
_MXFP4_LEVELS = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)


def _levels(codes: Tensor, table: Sequence[int]) -> Tensor:
    """table[code] for every 4-bit code, as float32: a tree of selects on the code's bits, lowest first (elementwise,
    so it fuses like the other decoders; a gather would not)."""
    picked: list[Tensor | float] = [float(level) for level in table]
    for bit in range(4):
        chosen = ((codes >> bit) & 1) != 0
        picked = [chosen.where(picked[pair + 1], picked[pair]) for pair in range(0, len(picked), 2)]
    (values,) = picked
    assert isinstance(values, Tensor)
    return values


def _iq4_nl(raw: Tensor) -> Tensor:
    return _f16(raw, 0) * _levels(_nibbles(raw[:, 2:18]).reshape(-1, 32), _IQ4NL_LEVELS)


def _iq4_xs(raw: Tensor) -> Tensor:
    # 8 sub-blocks of 32: six-bit scale of sub-block s = nibble s % 2 of byte s // 2 of scales_l (bytes 4..7), with
    # bits 2 s, 2 s + 1 of the little-endian uint16 scales_h (bytes 2..3) on top, minus 32; codes like IQ4_NL's
    scale_low = _bits(raw[:, 4:8], 4, dim=-1).reshape(-1, 8)
    scale_high = _bits(raw[:, 2:4], 2, dim=-1).reshape(-1, 8)
    scales = _float(scale_low | (scale_high << 4)) - 32
    codes = _nibbles(raw[:, 8:136].reshape(-1, 8, 16)).reshape(-1, 8, 32)
    values = _f16(raw, 0).reshape(-1, 1, 1) * scales.reshape(-1, 8, 1) * _levels(codes, _IQ4NL_LEVELS)
    return values.reshape(-1, QK_K)


def _e8m0_half(raw: Tensor, offset: int) -> Tensor:
    """Half of the E8M0 scale 2 ** (e - 127) in byte `offset` (ggml_e8m0_to_fp32_half), float32 (blocks, 1).

    2 ** (e - 128) has the float32 exponent field e - 1 for e >= 2; e = 0 and 1 give the subnormals 2 ** -128 and
    2 ** -127 (mantissa bit 21 or 22)."""
    exponent = raw[:, offset : offset + 1].cast(dtypes.uint32)
    return (exponent < 2).where((exponent + 1) << 21, (exponent - 1) << 23).bitcast(dtypes.float32)


def _mxfp4(raw: Tensor) -> Tensor:
    return _e8m0_half(raw, 0) * _levels(_nibbles(raw[:, 1:17]).reshape(-1, 32), _MXFP4_LEVELS)


def _tq2_0(raw: Tensor) -> Tensor:
    # element 128 h + 32 k + l: bits 2 k, 2 k + 1 of byte 32 h + l, minus 1 (Q2_K's order); f16 scale last
    codes = _bits(raw[:, 0:64].reshape(-1, 2, 32), 2, dim=-2).reshape(-1, QK_K)
    return _f16(raw, 64) * (_float(codes) - 1)


def _powers_of_3(exponents: Tensor) -> Tensor:
    """3 ** k for each k (0..4) of a uint32 tensor, by selects (elementwise; k of a lane comes from an arange)."""
    power = exponents.ones_like()
    for step in range(1, 5):
        power = (exponents >= step).where(power * 3, power)
    return power


def _trits(packed: Tensor, power: Tensor) -> Tensor:
    """The base-3 digit of weight 3 ** (4 - k) of bytes holding ceil(q * 256 / 243) (q a number of up to 5 trits),
    minus 1, where `power` (broadcast against `packed`) is 3 ** k: the top of (byte * 3 ** k mod 256) * 3 / 256."""
    return _float((((packed.cast(dtypes.uint32) * power) & 0xFF) * 3) >> 8) - 1


def _tq1_0(raw: Tensor) -> Tensor:
    # 48 bytes of 5 trits: bytes 0..31 give elements 32 k + l, bytes 32..47 elements 160 + 16 k + l; 4 bytes of 4
    # trits give elements 240 + 4 k + l; f16 scale at byte 52. Each byte is broadcast over its digits and multiplied
    # by its lane's own 3 ** k (stacking the digits made every value compute them all), the 4 bytes of the last 16
    # values read as one word shifted per lane (not a per-lane byte gather), and the three parts joined as 16 runs of
    # 16 (10 + 5 + 1) so the part is chosen per run, not per value: a (2048, 1024) matrix times a vector took 25 ms
    # in the kernel before these three, now 0.5 to 1 (Q4_0: 0.13 to 0.6; DEBUG=2 on a busy 2-core CPU)
    digits = _powers_of_3(Tensor.arange(5, dtype=dtypes.uint32, device=raw.device).reshape(5, 1))
    lanes = Tensor.arange(16, dtype=dtypes.uint32, device=raw.device).reshape(1, 16)
    word = raw[:, 48:49].cast(dtypes.uint32)
    for byte in range(1, 4):
        word = word | (raw[:, 48 + byte : 49 + byte].cast(dtypes.uint32) << (8 * byte))
    trits = Tensor.cat(
        _trits(raw[:, 0:32].unsqueeze(1), digits).reshape(-1, 10, 16),
        _trits(raw[:, 32:48].unsqueeze(1), digits),
        _trits((word >> ((lanes & 3) << 3)) & 0xFF, _powers_of_3(lanes >> 2)).reshape(-1, 1, 16),
        dim=1,
    )
    return _f16(raw, 52) * trits.reshape(-1, QK_K)


def _plain(dtype: DType) -> Callable[[Tensor], Tensor]:
    """A decoder of unquantized little-endian data: the bytes of each element assembled and reinterpreted."""
    unsigned = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dtype.itemsize]

    def decode(raw: Tensor) -> Tensor:
        parts = raw.reshape(raw.shape[0], -1, dtype.itemsize)
        word = parts[:, :, 0].cast(unsigned)
        for byte in range(1, dtype.itemsize):
            word = word | (parts[:, :, byte].cast(unsigned) << (8 * byte))
        return word.bitcast(dtype)

    return decode


@dataclass(frozen=True)
class BlockFormat:
    """A ggml tensor type: `block_size` elements in `type_size` bytes, decoded by `decode` into `dtype`."""

    block_size: int
    type_size: int
    decode: Callable[[Tensor], Tensor]
    dtype: DType = dtypes.float32


GGML_BLOCKS: dict[GGMLType, BlockFormat] = {
    GGMLType.F32: BlockFormat(1, 4, _plain(dtypes.float32)),
    GGMLType.F16: BlockFormat(1, 2, _plain(dtypes.float16), dtypes.float16),
    GGMLType.BF16: BlockFormat(1, 2, _plain(dtypes.bfloat16), dtypes.bfloat16),
    GGMLType.F64: BlockFormat(1, 8, _plain(dtypes.float64), dtypes.float64),
    GGMLType.I8: BlockFormat(1, 1, _plain(dtypes.int8), dtypes.int8),
    GGMLType.I16: BlockFormat(1, 2, _plain(dtypes.int16), dtypes.int16),
    GGMLType.I32: BlockFormat(1, 4, _plain(dtypes.int32), dtypes.int32),
    GGMLType.I64: BlockFormat(1, 8, _plain(dtypes.int64), dtypes.int64),
    GGMLType.Q4_0: BlockFormat(32, 18, _q4_0),
    GGMLType.Q4_1: BlockFormat(32, 20, _q4_1),
    GGMLType.Q5_0: BlockFormat(32, 22, _q5_0),
    GGMLType.Q5_1: BlockFormat(32, 24, _q5_1),
    GGMLType.Q8_0: BlockFormat(32, 34, _q8_0),
    GGMLType.Q2_K: BlockFormat(QK_K, 84, _q2_k),
    GGMLType.Q3_K: BlockFormat(QK_K, 110, _q3_k),
    GGMLType.Q4_K: BlockFormat(QK_K, 144, _q4_k),
    GGMLType.Q5_K: BlockFormat(QK_K, 176, _q5_k),
    GGMLType.Q6_K: BlockFormat(QK_K, 210, _q6_k),
    GGMLType.Q8_K: BlockFormat(QK_K, 292, _q8_k),
    GGMLType.IQ4_NL: BlockFormat(32, 18, _iq4_nl),
    GGMLType.IQ4_XS: BlockFormat(QK_K, 136, _iq4_xs),
    GGMLType.MXFP4: BlockFormat(32, 17, _mxfp4),
    GGMLType.TQ1_0: BlockFormat(QK_K, 54, _tq1_0),
    GGMLType.TQ2_0: BlockFormat(QK_K, 66, _tq2_0),
}
"""Every ggml type kiln decodes; others (Q8_1, the IQ1/IQ2/IQ3 families) raise NotImplementedError."""


def block_format(ggml_type: int) -> BlockFormat:
    """The BlockFormat of ggml type number `ggml_type`; NotImplementedError naming it if kiln cannot decode it."""
    try:
        found = GGML_BLOCKS.get(GGMLType(ggml_type))
    except ValueError:
        found = None
    if found is None:
        name = GGMLType(ggml_type).name if ggml_type in GGMLType._value2member_map_ else f"#{ggml_type}"
        supported = ", ".join(kind.name for kind in GGML_BLOCKS)
        raise NotImplementedError(f"ggml tensor type {name} is not supported; kiln decodes {supported}")
    return found


def dequantize(raw: Tensor, ggml_type: int, shape: Sequence[int]) -> Tensor:
    """The values of a ggml-encoded tensor as a lazy Tensor of row-major `shape` (float32 for quantized types).

    Args:
        raw: the encoded bytes, a uint8 Tensor of any shape holding exactly the blocks of `shape`'s elements.
        ggml_type: a ggml type number (GGMLType.Q4_K, ...).
        shape: the row-major shape of the decoded tensor; its element count must be a multiple of the block size.

    Example:
        >>> raw = Tensor(np.frombuffer(np.float16(2.0).tobytes() + bytes([0x98] * 16), np.uint8))  # one Q4_0 block
        >>> values = dequantize(raw, GGMLType.Q4_0, (32,)).tolist()  # low nibbles 8 first, then high nibbles 9
        >>> values[0], values[16]  # (q - 8) * d
        (0.0, 2.0)
    """
    if raw.dtype != dtypes.uint8:
        raise TypeError(f"dequantize needs the raw bytes as a uint8 tensor, got {raw.dtype!r}")
    block = block_format(ggml_type)
    count = math.prod(shape)
    if count % block.block_size:
        raise ValueError(
            f"{GGMLType(ggml_type).name} encodes blocks of {block.block_size} elements; shape {tuple(shape)} holds "
            f"{count}"
        )
    blocks = count // block.block_size
    if raw.numel() != blocks * block.type_size:
        raise ValueError(
            f"{GGMLType(ggml_type).name} data of shape {tuple(shape)} takes {blocks * block.type_size} bytes, "
            f"got {raw.numel()}"
        )
    if count == 0:
        return Tensor.zeros(*shape, dtype=block.dtype, device=raw.device)
    return block.decode(raw.reshape(blocks, block.type_size)).reshape(tuple(shape))
