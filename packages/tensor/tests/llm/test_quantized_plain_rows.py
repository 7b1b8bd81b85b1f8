"""`linear` on a plain matrix (float16, bfloat16, float32; realized or decoded lazily from GGUF bytes) for a decode
step's few rows, a prompt's many and a symbolic count, against numpy in float64 on the same values."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.jit import TinyJit, Variable
from kiln.tensor.llm.quantized import BATCHED_ROWS, linear
from kiln.tensor.ops._checks import ShapeError
from kiln.tensor.state.quantization import GGMLType, dequantize
from kiln.tensor.symbolic import as_size
from kiln.uops import dtypes

ROWS, COLS = 48, 96


def _values(seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((ROWS, COLS)) * 0.5).astype(np.float16)


def _weight(form: str, values: np.ndarray) -> Tensor:
    """`values` as a kiln weight: GGUF F16 / F32 bytes decoded lazily, or a realized float16 / bfloat16 Tensor."""
    if form == "gguf_f16":
        return dequantize(Tensor(values.view(np.uint8).reshape(-1)), GGMLType.F16, values.shape)
    if form == "gguf_f32":
        wide = values.astype(np.float32)
        return dequantize(Tensor(wide.view(np.uint8).reshape(-1)), GGMLType.F32, values.shape)
    if form == "bf16":  # float16 values with a short mantissa are exact in bfloat16 too
        return Tensor(values.astype(np.float32)).cast(dtypes.bfloat16).realize()
    return Tensor(values).realize()


def _bf16_exact(values: np.ndarray) -> np.ndarray:
    """`values` rounded to 7 mantissa bits (exact in bfloat16 and float16)."""
    wide = values.astype(np.float32)
    return (np.round(wide * 64) / 64).astype(np.float16)


def _assert_product(got: np.ndarray, x: np.ndarray, values: np.ndarray) -> None:
    expected = x.astype(np.float64) @ values.astype(np.float64).T
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.sqrt(COLS))


@pytest.mark.parametrize("form", ["gguf_f16", "gguf_f32", "f16", "bf16"])
@pytest.mark.parametrize("tokens", [1, BATCHED_ROWS - 1, BATCHED_ROWS, 37])
def test_few_and_many_rows_match_numpy(form: str, tokens: int) -> None:
    values = _bf16_exact(_values(tokens)) if form == "bf16" else _values(tokens)
    x = np.random.default_rng(tokens + 1).standard_normal((1, tokens, COLS)).astype(np.float32)
    got = linear(Tensor(x), _weight(form, values)).numpy()
    assert got.shape == (1, tokens, ROWS)
    _assert_product(got, x, values)


@pytest.mark.parametrize("form", ["gguf_f16", "gguf_f32", "f16", "f32"])
def test_many_rows_read_the_matrix_inside_the_product(form: str) -> None:
    # one kernel: the float16 / float32 values (or the GGUF bytes they are decoded from) are read by the product itself
    values = _values(3)
    weight = Tensor(values.astype(np.float32)).realize() if form == "f32" else _weight(form, values)
    x = np.random.default_rng(4).standard_normal((2, 20, COLS)).astype(np.float32)
    inputs = Tensor(x).realize()
    GlobalCounters.reset()
    got = linear(inputs, weight).numpy()
    _assert_product(got, x, values)
    assert GlobalCounters.kernel_count == 1


def test_symbolic_row_count() -> None:
    values = _values(5)
    weight = _weight("gguf_f16", values)
    x = np.random.default_rng(6).standard_normal((1, 12, COLS)).astype(np.float32)
    length = Variable("rows", 1, 12)
    step = TinyJit(lambda inputs, count: linear(inputs[:, : as_size(count, "rows")], weight).realize())
    for rows in (3, 12, 5):
        got = step(Tensor(x), length.bind(rows)).numpy()
        _assert_product(got[:, :rows], x[:, :rows], values)


@pytest.mark.parametrize("tokens", [2, 20])
def test_a_wrong_column_count_is_named_in_both_forms(tokens: int) -> None:
    with pytest.raises(ShapeError, match=rf"shapes \({tokens}, 32\) and \(96, 48\) do not line up"):
        linear(Tensor.ones(tokens, 32), _weight("gguf_f16", _values(7)))
