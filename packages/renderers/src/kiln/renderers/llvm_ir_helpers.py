"""The vocabulary of the LLVM IR renderer: LLVM types and literals of dtypes, and the helper functions it calls.

Each helper generator returns one `define internal ... alwaysinline` function; the intrinsics a helper calls are
declared by the renderer (so a declaration appears once per module).
"""

from __future__ import annotations

import math
import struct

from kiln.uops import ConstType, DType, PtrDType, dtypes

LLVM_SCALAR_TYPES: dict[DType, str] = {
    dtypes.bool: "i1",
    dtypes.int8: "i8",
    dtypes.uint8: "i8",
    dtypes.int16: "i16",
    dtypes.uint16: "i16",
    dtypes.int32: "i32",
    dtypes.uint32: "i32",
    dtypes.int64: "i64",
    dtypes.uint64: "i64",
    dtypes.float16: "half",
    dtypes.float32: "float",
    dtypes.float64: "double",
}
"""LLVM type of each scalar dtype (LLVM integers carry no sign: the ops do)."""

INTRINSIC_SUFFIX: dict[DType, str] = {dtypes.float16: "f16", dtypes.float32: "f32", dtypes.float64: "f64"}


def llvm_type(dtype: DType) -> str:
    """The LLVM type of a value of `dtype` (vectors as `<n x T>`, every pointer as `ptr`)."""
    if isinstance(dtype, PtrDType):
        return "ptr"
    scalar = LLVM_SCALAR_TYPES.get(dtype.scalar())
    if scalar is None:
        raise ValueError(f"LLVM IR has no type for {dtype!r} (it is emulated before rendering)")
    return scalar if dtype.count == 1 else f"<{dtype.count} x {scalar}>"


def memory_type(dtype: DType) -> str:
    """The LLVM type a value of `dtype` has in memory: bools are bytes."""
    if dtype.scalar() == dtypes.bool:
        return "i8" if dtype.count == 1 else f"<{dtype.count} x i8>"
    return llvm_type(dtype)


def llvm_constant(value: ConstType, dtype: DType) -> str:
    """An LLVM literal of scalar `value` (floats in the exact hexadecimal forms LLVM reads)."""
    scalar = dtype.scalar()
    if scalar == dtypes.bool:
        return "true" if value else "false"
    if scalar == dtypes.float16:
        return f"0xH{struct.unpack('<H', struct.pack('<e', float(value)))[0]:04X}"
    if dtypes.is_float(scalar):
        return f"0x{struct.unpack('<Q', struct.pack('<d', float(value)))[0]:016X}"
    bits = scalar.itemsize * 8
    number = int(value) & ((1 << bits) - 1)
    return str(number - (1 << bits) if number >> (bits - 1) else number)


_TWO63, _TWO64 = llvm_constant(2.0**63, dtypes.float64), llvm_constant(2.0**64, dtypes.float64)


def float_to_int_helper(target: DType) -> str:
    # truncate toward zero, wrap around modulo 2**64, NaN/inf give the target's minimum (as the interpreter does)
    type_name = llvm_type(target)
    minimum = llvm_constant(dtypes.min(target), target)
    narrow = type_name != "i64"

    def finish(value: str, suffix: str) -> str:
        if not narrow:
            return f"  ret i64 {value}"
        return f"  %narrow{suffix} = trunc i64 {value} to {type_name}\n  ret {type_name} %narrow{suffix}"

    return "\n".join(
        [
            f"define internal {type_name} @kiln_to_{target.name}(double %x) alwaysinline nounwind {{",
            "entry:",
            "  %magnitude = call double @llvm.fabs.f64(double %x)",
            f"  %finite = fcmp one double %magnitude, {llvm_constant(math.inf, dtypes.float64)}",
            "  br i1 %finite, label %finite_value, label %special",
            "special:",
            f"  ret {type_name} {minimum}",
            "finite_value:",
            f"  %small = fcmp olt double %magnitude, {_TWO63}",
            "  br i1 %small, label %direct, label %wrap",
            "direct:",
            "  %whole = fptosi double %x to i64",
            finish("%whole", "0"),
            "wrap:",
            "  %truncated = call double @llvm.trunc.f64(double %x)",
            f"  %remainder = frem double %truncated, {_TWO64}",
            f"  %high = fcmp oge double %remainder, {_TWO63}",
            f"  %lowered = fsub double %remainder, {_TWO64}",
            "  %wrapped_high = select i1 %high, double %lowered, double %remainder",
            f"  %low = fcmp olt double %wrapped_high, {llvm_constant(-(2.0**63), dtypes.float64)}",
            f"  %raised = fadd double %wrapped_high, {_TWO64}",
            "  %wrapped = select i1 %low, double %raised, double %wrapped_high",
            "  %wrapped_whole = fptosi double %wrapped to i64",
            finish("%wrapped_whole", "1"),
            "}",
        ]
    )


def threefry_helper() -> str:
    # Threefry-2x32, 20 rounds (Salmon et al., SC'11; rotation constants from Random123's threefry.h)
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    lines = [
        "define internal i64 @kiln_threefry2x32(i64 %counter, i64 %key) alwaysinline nounwind {",
        "entry:",
        "  %k0 = trunc i64 %key to i32",
        "  %key_high = lshr i64 %key, 32",
        "  %k1 = trunc i64 %key_high to i32",
        "  %k01 = xor i32 %k0, %k1",
        f"  %k2 = xor i32 %k01, {0x1BD11BDA}",
        "  %c0 = trunc i64 %counter to i32",
        "  %counter_high = lshr i64 %counter, 32",
        "  %c1 = trunc i64 %counter_high to i32",
        "  %x0_0 = add i32 %c0, %k0",
        "  %x1_0 = add i32 %c1, %k1",
    ]
    keys = ("%k0", "%k1", "%k2")
    step = 0
    for group in range(5):
        for rotation in rotations[group % 2]:
            x0, x1 = f"%x0_{step}", f"%x1_{step}"
            step += 1
            lines += [
                f"  %x0_{step} = add i32 {x0}, {x1}",
                f"  %rotated_{step} = call i32 @llvm.fshl.i32(i32 {x1}, i32 {x1}, i32 {rotation})",
                f"  %x1_{step} = xor i32 %rotated_{step}, %x0_{step}",
            ]
        x0, x1 = f"%x0_{step}", f"%x1_{step}"
        step += 1
        lines += [
            f"  %x0_{step} = add i32 {x0}, {keys[(group + 1) % 3]}",
            f"  %injected_{step} = add i32 {x1}, {keys[(group + 2) % 3]}",
            f"  %x1_{step} = add i32 %injected_{step}, {group + 1}",
        ]
    lines += [
        f"  %low = zext i32 %x0_{step} to i64",
        f"  %high_word = zext i32 %x1_{step} to i64",
        "  %high = shl i64 %high_word, 32",
        "  %result = or i64 %high, %low",
        "  ret i64 %result",
        "}",
    ]
    return "\n".join(lines)
