"""Replays the recorded torch nn conformance cases on kiln: outputs and input gradients, per-dtype tolerances.

The cases are in `nn_conformance_cases.py`; torch's numbers in `nn_conformance.npz` come from
`scripts/record_torch_nn_conformance.py` (run under a scratch venv with torch; torch is never imported here).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conformance_nn.nn_conformance_cases import CASES, Case, Ref

from kiln.tensor import Tensor

FIXTURE = np.load(Path(__file__).parent / "nn_conformance.npz")
RECORDED = [str(key) for key in FIXTURE["__recorded__"]]
BY_KEY = {case.key(dtype): case for case in CASES for dtype in case.dtypes}

# (rtol, atol relative to the largest reference magnitude) per dtype
TOLERANCES = {"float16": (2e-2, 1e-2), "float32": (2e-4, 2e-5), "float64": (1e-9, 1e-11)}


def _conv_padded(x: Tensor, weight: Tensor, **options: Any) -> Any:
    return getattr(x, f"conv{weight.ndim - 2}d")(weight, **options)


def _pool_padded(x: Tensor, kind: str, kernel_size: int, padding: tuple[int, ...], **options: Any) -> Any:
    spatial = len(padding) // 2
    if kind == "max":
        return getattr(x, f"max_pool{spatial}d")(kernel_size, padding=padding, **options)
    include = kind == "avg"
    return getattr(x, f"avg_pool{spatial}d")(kernel_size, padding=padding, count_include_pad=include, **options)


def _unpool_roundtrip(
    x: Tensor, spatial: int, kernel_size: int, stride: Any = None, padding: int = 0, output_size: Any = None
) -> Any:
    values, indices = getattr(x, f"max_pool{spatial}d")(kernel_size, stride, padding, return_indices=True)
    return getattr(values, f"max_unpool{spatial}d")(indices, kernel_size, stride, padding, output_size)


SPECIAL: dict[str, Callable[..., Any]] = {
    "conv_padded": _conv_padded,
    "conv2d_nd": lambda x, weight, **options: x.conv2d(weight, **options),
    "conv_transpose_padded": lambda x, weight, **options: getattr(x, f"conv_transpose{weight.ndim - 2}d")(
        weight, **options
    ),
    "pool_padded": _pool_padded,
    "unpool_roundtrip": _unpool_roundtrip,
    "pad": lambda x, pad, **options: x.pad(pad, **options),
}


def _run(case: Case, key: str) -> tuple[list[Tensor], list[Tensor]]:
    """(kiln outputs, kiln inputs) of one case with the recorded inputs; gradients accumulate into the inputs."""
    tensors = []
    for index, spec in enumerate(case.inputs):
        array = FIXTURE[f"{key}/in{index}"]
        wants_grad = spec.grad and array.dtype.kind == "f"
        tensors.append(Tensor(array, requires_grad=wants_grad or None))
    referenced = {value.index for value in case.kwargs.values() if isinstance(value, Ref)}
    kwargs = {name: tensors[value.index] if isinstance(value, Ref) else value for name, value in case.kwargs.items()}
    positional = [tensor for index, tensor in enumerate(tensors) if index not in referenced]
    special = SPECIAL.get(case.op)
    result = special(*positional, **kwargs) if special else getattr(positional[0], case.op)(*positional[1:], **kwargs)
    return (list(result) if isinstance(result, tuple) else [result]), tensors


def _compare(actual: np.ndarray, expected: np.ndarray, dtype: str, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != torch's {expected.shape}"
    if expected.dtype.kind in "iub":
        np.testing.assert_array_equal(actual.astype(np.int64), expected.astype(np.int64), err_msg=what)
        return
    rtol, atol = TOLERANCES[dtype]
    scale = float(np.nanmax(np.abs(expected.astype(np.float64)), initial=1.0))
    np.testing.assert_allclose(
        actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol * scale, err_msg=what
    )


def test_every_case_was_recorded() -> None:
    missing = [key for key in BY_KEY if key not in RECORDED]
    assert not missing, f"cases with no torch record (re-run scripts/record_torch_nn_conformance.py): {missing}"


@pytest.mark.parametrize("key", RECORDED)
def test_conformance(key: str) -> None:
    case = BY_KEY[key]
    dtype = key[key.index("[") + 1 : -1]
    outputs, inputs = _run(case, key)
    floating = []
    for position, output in enumerate(outputs):
        expected = FIXTURE[f"{key}/out{position}"]
        _compare(output.numpy(), expected, dtype, f"{key} output {position}")
        if expected.dtype.kind == "f":
            floating.append(output)
    grads = [index for index in range(len(inputs)) if f"{key}/grad{index}" in FIXTURE]
    if not grads:
        return
    total: Tensor | None = None
    for position, output in enumerate(floating):
        # float16 upstreams are summed in float32, so the scalar does not round
        upstream = Tensor(FIXTURE[f"{key}/up{position}"].astype(np.float64 if dtype == "float64" else np.float32))
        term = (output.cast(upstream.dtype) * upstream).sum()
        total = term if total is None else total + term
    assert total is not None
    total.backward()
    for index in grads:
        gradient = inputs[index].grad
        expected = FIXTURE[f"{key}/grad{index}"]
        actual = np.zeros(expected.shape, expected.dtype) if gradient is None else gradient.numpy()
        _compare(actual, expected, dtype, f"{key} gradient of input {index}")
