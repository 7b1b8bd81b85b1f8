"""WGSL text the WGSL renderer emits beside a kernel: helper functions and the narrowing of 8/16-bit integers.

WGSL computes in 32-bit integers only, so int8/int16/uint8/uint16 values live in i32/u32 registers and every op
that can leave their range is narrowed again (sign-extended or masked), which is the IR's wrap-around.
"""

from __future__ import annotations

from kiln.uops import DType, dtypes

__all__ = ["F32_BITS_HELPER", "NARROW_BITS", "POW_HELPER", "float_to_int_helper", "narrow"]

NARROW_BITS: dict[DType, int] = {dtypes.int8: 8, dtypes.uint8: 8, dtypes.int16: 16, dtypes.uint16: 16}
"""The integer dtypes computed in a 32-bit register, by their width."""


def narrow(expression: str, dtype: DType) -> str:
    """`expression` (an i32/u32 value) wrapped into `dtype`'s range; unchanged for 32-bit dtypes."""
    bits = NARROW_BITS.get(dtype)
    if bits is None:
        return expression
    if dtypes.is_unsigned(dtype):
        return f"(({expression}) & {(1 << bits) - 1:#x}u)"
    return f"((({expression}) << {32 - bits}u) >> {32 - bits}u)"  # i32 >> is arithmetic: sign-extends


def float_to_int_helper(name: str, target: DType, kind: str, minimum: str) -> str:
    """f32 -> integer `target` as function `name`: truncate, wrap around, NaN/inf -> the target's minimum."""
    # |x| >= 2**31 is an integer (f32 has 24 significant bits), so x mod 2**32 is computed exactly in f32
    return (
        f"fn {name}(x: f32) -> {kind} {{\n"
        f"  if ((bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u) {{ return {minimum}; }}\n"
        "  var bits: u32;\n"
        "  if (x >= -2147483648.0f && x < 2147483648.0f) { bits = bitcast<u32>(i32(x)); } else {\n"
        "    bits = u32(x - 4294967296.0f * floor(x / 4294967296.0f));\n"
        "  }\n"
        f"  return {narrow(f'bitcast<{kind}>(bits)', target)};\n"
        "}"
    )


F32_BITS_HELPER = "fn kiln_f32_bits(bits: u32) -> f32 { return bitcast<f32>(bits); }"
"""The f32 of `bits` as a run-time value: NaN and the infinities have no WGSL literal, and a bit cast of a literal is a
constant expression that Chromium's Tint evaluates and rejects ("value nan cannot be represented as 'f32'")."""

POW_HELPER = """fn kiln_pow(x: f32, y: f32) -> f32 {
  let infinity = kiln_f32_bits(0x7f800000u);
  if (y == 0.0f || x == 1.0f) { return 1.0f; }
  if ((bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u || (bitcast<u32>(y) & 0x7fffffffu) > 0x7f800000u) {
    return kiln_f32_bits(0x7fc00000u);
  }
  let magnitude = abs(x);
  let y_magnitude = abs(y);
  let y_big = y_magnitude >= 16777216.0f && y_magnitude < infinity;
  let y_integer = y_big || (y_magnitude < infinity && trunc(y) == y);
  let y_odd = !y_big && y_integer && (i32(y) & 1i) != 0i;
  let negate = x < 0.0f && y_odd;
  if (y_magnitude == infinity) {
    if (magnitude == 1.0f) { return 1.0f; }
    return select(0.0f, infinity, (magnitude < 1.0f) != (y > 0.0f));
  }
  if (x < 0.0f && magnitude < infinity && !y_integer) { return kiln_f32_bits(0x7fc00000u); }
  if (magnitude == 0.0f) {
    if (y > 0.0f) { return select(0.0f, x, y_odd); }
    let signed_infinity = select(infinity, -infinity, bitcast<i32>(x) < 0i);
    return select(infinity, signed_infinity, y_odd);
  }
  if (magnitude == infinity) {
    let value = select(0.0f, infinity, y > 0.0f);
    return select(value, -value, negate);
  }
  let value = pow(magnitude, y);
  return select(value, -value, negate);
}"""
"""POW with C99 Annex F's special cases (as codegen's decomposition has them); WGSL's pow is undefined for x < 0."""
