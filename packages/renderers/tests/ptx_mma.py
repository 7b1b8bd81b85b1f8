"""The warp-level PTX instructions of the PTX model (`ptx_model.py`): `mma.sync.aligned.m16n8k16.row.col` with f16 or
bf16 inputs, and the packing conversions that feed it (`cvt.rn.f16x2.f32`, `cvt.rn.bf16x2.f32`, `cvt.f32.f16`).

Written from the PTX ISA, not from kiln's fragment layouts, so that a kernel run through the model checks kiln's
layouts too. "Matrix Fragments for mma.m16n8k16 with floating point type", with groupID = lane >> 2 and
threadID_in_group = lane % 4:

    A (16 x 16) element a_i, i = 0..7: row groupID + 8 for i in {2, 3, 6, 7}, column 2 * threadID_in_group + (i & 1)
                                        + 8 for i >= 4; a lane's four .b32 A registers hold (a0, a1), (a2, a3), ...
    B (16 x 8) element b_i, i = 0..3:   row 2 * threadID_in_group + (i & 1) + 8 for i >= 2, column groupID
    C, D (16 x 8) element c_i:          row groupID + 8 for i >= 2, column 2 * threadID_in_group + (i & 1); four .f32
                                        registers, or two .f16x2 registers holding (c0, c1), (c2, c3)

A packed pair keeps the element with the lower index in the low 16 bits. The inputs are exact (bf16 and f16 values
widen exactly); the model sums each D element's 16 products and its C element exactly and rounds once into the
accumulator's format, which is as precise as the hardware's f32 accumulation can be (tests compare with a
tolerance that covers its intermediate truncation).
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np

WARP = 32


def f32_to_bf16_bits(value: float) -> int:
    """The bfloat16 nearest to float32 `value` (round to nearest, ties to even), as 16 bits; NaN -> 0x7FFF."""
    if math.isnan(value):
        return 0x7FFF
    bits = int.from_bytes(struct.pack("<f", value), "little")
    upper, dropped = divmod(bits, 1 << 16)
    if dropped > 0x8000 or (dropped == 0x8000 and upper & 1):
        upper += 1  # carries into the exponent where it must: the largest finite values round to infinity
    return upper & 0xFFFF


def bf16_bits_to_float(bits: int) -> float:
    return float(struct.unpack("<f", ((bits & 0xFFFF) << 16).to_bytes(4, "little"))[0])


def f32_to_f16_bits(value: float) -> int:
    with np.errstate(over="ignore"):
        return int(np.array([value], np.float32).astype(np.float16).view(np.uint16)[0])


def f16_bits_to_float(bits: int) -> float:
    return float(np.array([bits & 0xFFFF], np.uint16).view(np.float16)[0])


def pack_pair(kind: str, high: float, low: float) -> int:
    """`cvt.rn.{kind}.f32 d, high, low`: two float32 values rounded into f16x2 or bf16x2, `high` in the upper half."""
    convert = f32_to_bf16_bits if kind == "bf16x2" else f32_to_f16_bits
    return (convert(high) << 16) | convert(low)


def _round_to(exact: Fraction, numpy_type: type[np.floating]) -> float:
    """`exact` rounded once to the nearest `numpy_type` value (ties to even)."""
    if exact == 0:
        return 0.0
    try:
        nearest = float(exact)
    except OverflowError:
        return math.inf if exact > 0 else -math.inf
    with np.errstate(over="ignore"):
        guess = numpy_type(nearest)  # the float64 step may be one ulp off after the second rounding
    if not np.isfinite(guess):
        return float(guess)
    candidates = [guess, np.nextafter(guess, numpy_type(np.inf)), np.nextafter(guess, numpy_type(-np.inf))]
    finite = [value for value in candidates if np.isfinite(value)]
    bits_type = np.uint16 if numpy_type is np.float16 else np.uint32
    best = min(finite, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.array([v]).view(bits_type)[0]) & 1))
    return float(best)


def _a_position(lane: int, i: int) -> tuple[int, int]:
    group, thread_in_group = lane >> 2, lane % 4
    return group + 8 * (i in (2, 3, 6, 7)), 2 * thread_in_group + (i & 1) + 8 * (i >= 4)


def _b_position(lane: int, i: int) -> tuple[int, int]:
    group, thread_in_group = lane >> 2, lane % 4
    return 2 * thread_in_group + (i & 1) + 8 * (i >= 2), group


def _c_position(lane: int, i: int) -> tuple[int, int]:
    group, thread_in_group = lane >> 2, lane % 4
    return group + 8 * (i >= 2), 2 * thread_in_group + (i & 1)


def _unpack(registers: list[int], decode: type[float] | object) -> list[float]:
    values = []
    for register in registers:
        values += [decode(register & 0xFFFF), decode(register >> 16)]  # type: ignore[operator]
    return values


def mma_m16n8k16(opcode: str, lanes: list[tuple[list[object], list[object], list[object]]]) -> list[list[object]]:
    """One warp's `mma.sync.aligned.m16n8k16.row.col.<d>.<a>.<b>.<c>`: per lane its (A, B, C) register values in
    operand order; returns each lane's D register values (floats for .f32 D, packed ints for .f16 D)."""
    parts = opcode.split(".")
    assert parts[:6] == ["mma", "sync", "aligned", "m16n8k16", "row", "col"], f"{opcode} is not modelled"
    d_type, a_type, b_type, c_type = parts[6:]
    assert a_type == b_type and a_type in ("f16", "bf16"), f"{opcode}: inputs {a_type}, {b_type} are not modelled"
    assert (d_type, c_type) in (("f32", "f32"), ("f16", "f16")), f"{opcode}: accumulators are not modelled"
    assert d_type == "f32" or a_type == "f16", f"{opcode}: the ISA has no bf16 accumulator"
    assert len(lanes) == WARP, f"mma.sync needs the {WARP} lanes of a warp, got {len(lanes)}"
    decode = bf16_bits_to_float if a_type == "bf16" else f16_bits_to_float
    a = np.zeros((16, 16), dtype=object)
    b = np.zeros((16, 8), dtype=object)
    c = np.zeros((16, 8), dtype=object)
    for lane, (a_registers, b_registers, c_registers) in enumerate(lanes):
        assert len(a_registers) == 4 and len(b_registers) == 2, f"{opcode}: lane {lane} has the wrong operand count"
        for i, value in enumerate(_unpack([int(r) for r in a_registers], decode)):  # type: ignore[call-overload]
            a[_a_position(lane, i)] = value
        for i, value in enumerate(_unpack([int(r) for r in b_registers], decode)):  # type: ignore[call-overload]
            b[_b_position(lane, i)] = value
        if c_type == "f32":
            assert len(c_registers) == 4
            c_values = [float(r) for r in c_registers]  # type: ignore[arg-type]
        else:
            assert len(c_registers) == 2
            c_values = _unpack([int(r) for r in c_registers], f16_bits_to_float)  # type: ignore[call-overload]
        for i, value in enumerate(c_values):
            c[_c_position(lane, i)] = value
    result: list[list[object]] = []
    numpy_type = np.float32 if d_type == "f32" else np.float16
    for lane in range(WARP):
        d_values = []
        for i in range(4):
            row, column = _c_position(lane, i)
            terms = [a[row, k] * b[k, column] for k in range(16)] + [c[row, column]]
            if all(math.isfinite(t) for t in terms):
                d_values.append(_round_to(sum((Fraction(t) for t in terms), Fraction(0)), numpy_type))
            else:
                d_values.append(float(numpy_type(sum(terms))))  # infinities and NaN: plain float rules
        if d_type == "f32":
            result.append(list(d_values))
        else:
            result.append([pack_pair("f16x2", d_values[1], d_values[0]), pack_pair("f16x2", d_values[3], d_values[2])])
    return result
