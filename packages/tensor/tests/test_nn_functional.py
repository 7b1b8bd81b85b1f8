"""Replays the recorded torch answers of `conformance/functional_cases.py` on `kiln.tensor.nn.functional` and the
`kiln.tensor.nn` modules: outputs, input gradients, inputs changed in place, and for modules the state-dict names,
the state after the call and the parameter gradients.

torch's numbers (`conformance/functional.npz`) come from `conformance/record_functional.py`, run under a scratch
venv with torch; torch is never imported here.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conformance.functional_cases import CASES, Case, Ref

import kiln.tensor.nn.functional as F
from kiln.tensor import Tensor, nn

FOLDER = Path(__file__).parent / "conformance"

FIXTURE = np.load(FOLDER / "functional.npz")
RECORDED = [str(key) for key in FIXTURE["__recorded__"]]
BY_KEY = {case.key(dtype): case for case in CASES for dtype in case.dtypes}

# (rtol, atol relative to the largest reference magnitude) per dtype
TOLERANCES = {"float32": (2e-4, 2e-5), "float64": (1e-9, 1e-11)}

# differences kept visible: the test fails (strict xfail) once kiln matches
KNOWN = {"gelu[float64]": "Tensor.erf is float32-accurate: float64 gelu differs from torch by ~3e-6 relative"}


def _resolve(call: str) -> Any:
    space, *path = call.split(".")
    target: Any = F if space == "F" else nn
    for part in path:
        target = getattr(target, part)
    return target


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


def _inputs(case: Case, key: str) -> list[Tensor]:
    tensors = []
    for index, spec in enumerate(case.inputs):
        array = FIXTURE[f"{key}/in{index}"]
        tensors.append(Tensor(array, requires_grad=(spec.grad and array.dtype.kind == "f") or None))
    return tensors


def test_every_case_was_recorded() -> None:
    missing = [key for key in BY_KEY if key not in RECORDED]
    assert not missing, f"cases with no torch record (re-run conformance/record_functional.py): {missing}"


def test_fixture_is_small() -> None:
    assert (FOLDER / "functional.npz").stat().st_size < 1_000_000


@pytest.mark.parametrize(
    "key", [pytest.param(key, marks=pytest.mark.xfail(reason=KNOWN[key], strict=True)) if key in KNOWN else key
            for key in RECORDED]
)  # fmt: skip
def test_against_torch(key: str) -> None:
    case = BY_KEY[key]
    dtype = key[key.index("[") + 1 : -1]
    tensors = _inputs(case, key)
    referenced = {value.index for value in [*case.kwargs.values(), *case.init.values()] if isinstance(value, Ref)}
    kwargs = {name: tensors[v.index] if isinstance(v, Ref) else v for name, v in case.kwargs.items()}
    init = {name: tensors[v.index] if isinstance(v, Ref) else v for name, v in case.init.items()}
    positional = [tensor for index, tensor in enumerate(tensors) if index not in referenced]
    module = None
    if case.call.startswith("nn."):
        module = _resolve(case.call)(**init)
        if case.eval:
            module.eval()
        function = module
    else:
        function = _resolve(case.call)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = function(*positional, **kwargs)
    outputs = list(result) if isinstance(result, tuple) else [result]
    for position, output in enumerate(outputs):
        _compare(output.numpy(), FIXTURE[f"{key}/out{position}"], dtype, f"{key} output {position}")
    upstreams = [FIXTURE[f"{key}/up{position}"] for position in range(len(outputs)) if f"{key}/up{position}" in FIXTURE]
    if upstreams:
        total = sum(((output * Tensor(upstream)).sum() for output, upstream in zip(outputs, upstreams)), Tensor(0.0))
        total.backward()
    for index, tensor in enumerate(tensors):
        if f"{key}/grad{index}" in FIXTURE:
            expected = FIXTURE[f"{key}/grad{index}"]
            actual = np.zeros_like(expected) if tensor.grad is None else tensor.grad.numpy()
            _compare(actual, expected, dtype, f"{key} gradient of input {index}")
        if case.mutates:
            _compare(tensor.numpy(), FIXTURE[f"{key}/after{index}"], dtype, f"{key} input {index} after the call")
    if module is not None:
        _check_module(module, key, dtype)


def _check_module(module: nn.Module, key: str, dtype: str) -> None:
    state = module.state_dict()
    assert list(state) == [str(name) for name in FIXTURE[f"{key}/keys"]], f"{key}: state-dict names"
    for name, value in state.items():
        _compare(value.numpy(), FIXTURE[f"{key}/state/{name}"], dtype, f"{key} state {name}")
    for name, parameter in module.named_parameters():
        if f"{key}/pgrad/{name}" in FIXTURE:
            assert parameter.grad is not None, f"{key}: parameter {name} got no gradient"
            _compare(parameter.grad.numpy(), FIXTURE[f"{key}/pgrad/{name}"], dtype, f"{key} gradient of {name}")
