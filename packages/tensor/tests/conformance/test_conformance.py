"""Replays the conformance table (cases.py) on kiln against torch's recorded outputs and input gradients.

The fixture torch_conformance.npz is written by scripts/record_torch_conformance.py under torch (never imported
here). Each case: the recorded inputs become kiln Tensors (float ones requiring grad), the case runs, every output
must match torch's (values; integer index outputs compare by value since kiln gives dtypes.default_int), then the
recorded cotangents are back-propagated and each input gradient must match torch's. Tolerances are per dtype.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conformance.cases import CASES, Case

from kiln.tensor import Tensor
from kiln.uops import dtypes

FIXTURE = np.load(Path(__file__).parent / "torch_conformance.npz")

# (rtol, atol) by the numpy dtype of the compared values
TOLERANCES = {"float16": (3e-3, 3e-3), "float32": (2e-5, 2e-5), "float64": (1e-6, 1e-6)}

KILN = SimpleNamespace(
    softsign=Tensor.softsign,
    solve=Tensor.solve,
    cholesky_upper=lambda x: x.cholesky(upper=True),
    layernorm=Tensor.layernorm,
    batchnorm=Tensor.batchnorm,
    rearrange_bhwc=lambda x: x.rearrange("b (h w) c -> b c h w", h=2),
    std_mean=lambda x, dim, **kwargs: x.std_mean(dim, **kwargs),
    var_mean=lambda x, dim, **kwargs: x.var_mean(dim, **kwargs),
    selu=Tensor.selu,
    celu=Tensor.celu,
    logsigmoid=Tensor.logsigmoid,
    quick_gelu=Tensor.quick_gelu,
    hardshrink=Tensor.hardshrink,
    softshrink=Tensor.softshrink,
    tanhshrink=Tensor.tanhshrink,
    gelu=Tensor.gelu,
    mod=Tensor.mod,
    isposinf=Tensor.isposinf,
    isneginf=Tensor.isneginf,
    softmin=Tensor.softmin,
    normalize=Tensor.normalize,
    prelu=Tensor.prelu,
    cat=Tensor.cat,
    meshgrid=Tensor.meshgrid,
    dot=Tensor.dot,
    qr=Tensor.qr,
    svdvals=lambda x: x.svd()[1],
    einsum=Tensor.einsum,
    float64=dtypes.float64,
    int32=dtypes.int32,
)


def _outputs(result: Any) -> list[Any]:
    if isinstance(result, (tuple, list)):
        return [item for part in result for item in _outputs(part)]
    return [result]


def _tolerance(case: Case, values: np.ndarray) -> tuple[float, float]:
    rtol, atol = TOLERANCES.get(values.dtype.name, (0.0, 0.0))
    return (case.rtol if case.rtol is not None else rtol), (case.atol if case.atol is not None else max(atol, 0.0))


def _compare(got: np.ndarray, expected: np.ndarray, case: Case, what: str) -> None:
    assert got.shape == expected.shape, f"{case.name} {what}: shape {got.shape}, torch {expected.shape}"
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(got.astype(expected.dtype), expected, err_msg=f"{case.name} {what}")
        return
    assert got.dtype == expected.dtype, f"{case.name} {what}: dtype {got.dtype}, torch {expected.dtype}"
    rtol, atol = _tolerance(case, expected)
    wide_got, wide_expected = got.astype(np.float64), expected.astype(np.float64)
    np.testing.assert_allclose(wide_got, wide_expected, rtol=rtol, atol=atol, err_msg=f"{case.name} {what}")


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_matches_torch(case: Case) -> None:
    inputs = [FIXTURE[f"{case.name}/in{position}"] for position in range(len(case.inputs))]
    tensors = []
    for value in inputs:
        differentiable = case.grad and value.dtype.kind == "f"
        tensors.append(Tensor(value, requires_grad=True if differentiable else None))
    outputs = _outputs(case.call(KILN, *tensors))
    for position, output in enumerate(outputs):
        _compare(output.numpy(), FIXTURE[f"{case.name}/out{position}"], case, f"output {position}")
    cotangent_keys = [f"{case.name}/cot{position}" for position in range(len(outputs))]
    pairs = [(output, FIXTURE[key]) for output, key in zip(outputs, cotangent_keys) if key in FIXTURE]
    if not pairs:
        return
    loss = None
    for output, cotangent in pairs:
        term = (output * Tensor(cotangent)).sum()
        loss = term if loss is None else loss + term
    assert loss is not None
    loss.backward()
    for position, tensor in enumerate(tensors):
        key = f"{case.name}/grad{position}"
        if key not in FIXTURE:
            continue
        expected = FIXTURE[key]
        got = tensor.grad.numpy() if tensor.grad is not None else np.zeros_like(expected)
        _compare(got, expected, case, f"gradient of input {position}")


def test_fixture_is_small_and_complete() -> None:
    assert (Path(__file__).parent / "torch_conformance.npz").stat().st_size < 2_000_000
    recorded = {key.split("/")[0] for key in FIXTURE.files if "/" in key}
    assert recorded == {case.name for case in CASES}, "re-run scripts/record_torch_conformance.py under torch"
