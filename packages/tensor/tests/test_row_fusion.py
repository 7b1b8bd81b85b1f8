"""Row fusion (schedule/row_fusion.py): reduce -> broadcast back -> reduce / store chains over short rows are one
kernel, and every fused result (values and gradients) matches numpy, computed here from the textbook formulas in
float64.

Runs on the default device (the LLVM CPU renderer), and for values on the PYTHON interpreter device, whose GPU-style
renderer (local threads) does not fuse rows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from engine_graphs import FAST_DEVICE, plan_of

from kiln.runtime import Device
from kiln.tensor import GlobalCounters, Tensor, dtypes
from kiln.tensor.schedule.row_fusion import ROW_FUSION_BYTES, ROW_FUSION_MIN_ELEMENTS, fuses_rows

Op = Callable[[Tensor], Tensor]
EPS = 1e-5


def _softmax(x: np.ndarray) -> np.ndarray:
    shifted = np.exp(x - x.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def _logsumexp(x: np.ndarray) -> np.ndarray:
    peak = x.max(-1, keepdims=True)
    peak = np.where(np.isinf(peak), 0.0, peak)
    return np.log(np.exp(x - peak).sum(-1)) + peak[..., 0]


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    centered = x - x.mean(-1, keepdims=True)
    return centered / np.sqrt((centered**2).mean(-1, keepdims=True) + EPS) * weight + bias


def _rms_norm(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + EPS) * weight


def _parameters(width: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(width)
    return rng.uniform(0.5, 1.5, width).astype(np.float32), rng.standard_normal(width).astype(np.float32)


def _cases(width: int, device: str) -> dict[str, tuple[Op, Callable[[np.ndarray], np.ndarray]]]:
    weight, bias = _parameters(width)
    w, b = Tensor(weight, device=device), Tensor(bias, device=device)
    return {
        "softmax": (lambda x: x.softmax(-1), _softmax),
        "log_softmax": (lambda x: x.log_softmax(-1), lambda x: np.log(_softmax(x))),
        "logsumexp": (lambda x: x.logsumexp(-1), _logsumexp),
        "layer_norm": (lambda x: x.layer_norm(width, w, b, eps=EPS), lambda x: _layer_norm(x, weight, bias)),
        "rms_norm": (lambda x: x.rms_norm(width, w, eps=EPS), lambda x: _rms_norm(x, weight)),
    }


NAMES = ["softmax", "log_softmax", "logsumexp", "layer_norm", "rms_norm"]


def _kernels_run(tensor: Tensor) -> int:
    GlobalCounters.reset()
    tensor.realize()
    return GlobalCounters.kernel_count


# kernels of each op when nothing is fused into one row kernel: today's cuts at every reduce
UNFUSED_KERNELS = {"softmax": 3, "log_softmax": 3, "logsumexp": 2, "layer_norm": 3, "rms_norm": 2}


@pytest.mark.parametrize("name", NAMES)
def test_a_short_row_chain_is_one_kernel(name: str) -> None:
    values = np.random.default_rng(0).standard_normal((6, 1000)).astype(np.float32)
    op, _ = _cases(1000, "CPU")[name]
    result = op(Tensor(values))
    assert plan_of(result).kernel_count == 1
    assert _kernels_run(op(Tensor(values))) == 1


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "width", [ROW_FUSION_MIN_ELEMENTS - 1, ROW_FUSION_BYTES // 4 + 8], ids=["too short", "too long for the cache"]
)
def test_rows_outside_the_bounds_keep_their_cuts(name: str, width: int) -> None:
    values = np.random.default_rng(1).standard_normal((3, width)).astype(np.float32)
    op, reference = _cases(width, "CPU")[name]
    result = op(Tensor(values))
    assert plan_of(result).kernel_count == UNFUSED_KERNELS[name]
    np.testing.assert_allclose(result.numpy(), reference(values.astype(np.float64)), rtol=2e-5, atol=2e-5)


def test_a_reduce_over_columns_is_not_fused() -> None:
    # the column max would be recomputed for every row of the output loop: cut as before
    values = np.random.default_rng(2).standard_normal((40, 50)).astype(np.float32)
    result = Tensor(values).softmax(0)
    assert plan_of(result).kernel_count == 3
    np.testing.assert_allclose(result.numpy(), _softmax(values.T.astype(np.float64)).T, rtol=1e-5, atol=1e-7)


SHAPES = [(3, 1000), (5, 7), (4, 1), (2, 3, 64), (1000,), (1, 40), (7, 33)]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_values_match_numpy(name: str, shape: tuple[int, ...]) -> None:
    values = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 3
    op, reference = _cases(shape[-1], "CPU")[name]
    np.testing.assert_allclose(op(Tensor(values)).numpy(), reference(values.astype(np.float64)), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", NAMES)
def test_values_match_numpy_on_the_interpreter(name: str) -> None:
    # the interpreter's renderer is GPU-style (local threads): rows are not fused there, the reduces keep their cuts
    values = np.random.default_rng(4).standard_normal((3, 40)).astype(np.float32)
    op, reference = _cases(40, FAST_DEVICE)[name]
    result = op(Tensor(values, device=FAST_DEVICE))
    assert plan_of(result).kernel_count > 1
    np.testing.assert_allclose(result.numpy(), reference(values.astype(np.float64)), rtol=2e-5, atol=2e-5)


def test_only_devices_whose_kernels_loop_in_one_thread_fuse_rows() -> None:
    # a GPU-style renderer would run each fused row in one thread of its own (serial, uncoalesced reads)
    assert fuses_rows("CPU") and not Device["CPU"].renderer.has_local
    assert not fuses_rows(FAST_DEVICE) and Device[FAST_DEVICE].renderer.has_local


def test_rows_of_minus_infinity() -> None:
    values = np.random.default_rng(5).standard_normal((4, 64)).astype(np.float32)
    values[1] = -np.inf  # a fully masked row
    values[2, ::3] = -np.inf  # a partly masked row
    x = Tensor(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        exact = values.astype(np.float64)
        np.testing.assert_allclose(x.softmax(-1).numpy(), _softmax(exact), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(x.log_softmax(-1).numpy(), np.log(_softmax(exact)), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(x.logsumexp(-1).numpy(), _logsumexp(exact), rtol=1e-5)
    assert np.isnan(x.softmax(-1).numpy()[1]).all()
    assert x.logsumexp(-1).numpy()[1] == -np.inf


def test_float16_rows() -> None:
    values = np.random.default_rng(6).standard_normal((8, 320)).astype(np.float16)
    x = Tensor(values)
    weight, bias = _parameters(320)
    softmax, normalized = x.softmax(-1), x.layer_norm(320, Tensor(weight).half(), Tensor(bias).half(), eps=EPS)
    assert softmax.dtype == dtypes.float16 and plan_of(softmax).kernel_count == 1
    exact = values.astype(np.float64)
    np.testing.assert_allclose(softmax.numpy().astype(np.float64), _softmax(exact), rtol=2e-3, atol=1e-5)
    expected = _layer_norm(exact, weight.astype(np.float16), bias.astype(np.float16))
    np.testing.assert_allclose(normalized.numpy().astype(np.float64), expected, rtol=5e-3, atol=5e-3)


def test_masked_attention_scores() -> None:
    # a causal mask filled with -inf before the softmax, as attention does
    rng = np.random.default_rng(7)
    scores = rng.standard_normal((2, 48, 48)).astype(np.float32)
    mask = np.triu(np.ones((48, 48), bool), 1)
    result = Tensor(scores).masked_fill(Tensor(mask), -np.inf).softmax(-1)
    assert plan_of(result).kernel_count == 1
    expected = _softmax(np.where(mask, -np.inf, scores.astype(np.float64)))
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-7)


def _gradient(op: Op, values: np.ndarray, cotangent: np.ndarray) -> np.ndarray:
    x = Tensor(values, requires_grad=True)
    (op(x) * Tensor(cotangent)).sum().backward()
    assert x.grad is not None
    return x.grad.numpy()


@pytest.mark.parametrize("shape", [(5, 200), (3, 7)], ids=str)
def test_gradients_match_the_formulas(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(8)
    values = rng.standard_normal(shape).astype(np.float32)
    width = shape[-1]
    cases = _cases(width, "CPU")
    x = values.astype(np.float64)
    weight, _ = (p.astype(np.float64) for p in _parameters(width))
    probabilities = _softmax(x)
    cotangent = rng.standard_normal(shape).astype(np.float32)
    c = cotangent.astype(np.float64)
    row_cotangent = rng.standard_normal(shape[:-1]).astype(np.float32)
    # d/dx of sum(c * f(x)), from the formulas
    expected = {
        "softmax": probabilities * (c - (probabilities * c).sum(-1, keepdims=True)),
        "log_softmax": c - probabilities * c.sum(-1, keepdims=True),
        "logsumexp": probabilities * row_cotangent.astype(np.float64)[..., None],
    }
    centered = x - x.mean(-1, keepdims=True)
    inverse = 1 / np.sqrt((centered**2).mean(-1, keepdims=True) + EPS)
    normalized, scaled = centered * inverse, c * weight
    expected["layer_norm"] = inverse * (
        scaled - scaled.mean(-1, keepdims=True) - normalized * (scaled * normalized).mean(-1, keepdims=True)
    )
    root = 1 / np.sqrt((x**2).mean(-1, keepdims=True) + EPS)
    expected["rms_norm"] = root * scaled - x * root**3 * (scaled * x).mean(-1, keepdims=True)
    for name in NAMES:
        op, _ = cases[name]
        given = row_cotangent if name == "logsumexp" else cotangent
        got = _gradient(op, values, given)
        np.testing.assert_allclose(got, expected[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_cross_entropy_and_its_gradient() -> None:
    rng = np.random.default_rng(9)
    logits = rng.standard_normal((64, 100)).astype(np.float32)
    target = rng.integers(0, 100, 64)
    x = Tensor(logits, requires_grad=True)
    loss = x.cross_entropy(Tensor(target.astype(np.int32)))
    probabilities = _softmax(logits.astype(np.float64))
    expected = -np.log(probabilities[np.arange(64), target]).mean()
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5)
    loss.backward()
    assert x.grad is not None
    one_hot = np.eye(100)[target]
    np.testing.assert_allclose(x.grad.numpy(), (probabilities - one_hot) / 64, rtol=1e-4, atol=1e-7)
