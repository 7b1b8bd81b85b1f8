"""Replays the recorded torch recurrent and transformer module cases (`module_cases.py`, `modules.npz`) on kiln: the
state-dict keys must equal torch's, and with torch's state dict loaded the outputs and the gradients of the inputs
and of every parameter must match torch's within 1e-5 (torch is never imported here; the recorder is
`record_torch_modules.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conformance_nn.module_cases import CASES, Case, call_arguments

from kiln.tensor import Tensor, nn

FIXTURE = np.load(Path(__file__).parent / "modules.npz")
TOLERANCE = 1e-5


def _build(case: Case) -> nn.Module:
    module: nn.Module = getattr(nn, case.cls)(**case.kwargs)
    if case.stack:
        module = getattr(nn, case.stack)(module, case.layers, norm=nn.LayerNorm(case.kwargs["d_model"]))
    return module.eval() if case.eval else module


def _flatten(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    return [tensor for item in value for tensor in _flatten(item)]


def _close(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != torch's {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=TOLERANCE, atol=TOLERANCE, err_msg=what)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_module_matches_torch(case: Case) -> None:
    prefix = f"{case.name}/"
    module = _build(case)
    torch_keys = [str(key) for key in FIXTURE[prefix + "state_keys"]]
    assert list(module.state_dict()) == torch_keys
    module.load_state_dict({key: FIXTURE[f"{prefix}state/{key}"] for key in torch_keys})
    inputs: dict[str, Tensor] = {}
    for name, _shape, kind in case.inputs:
        value = FIXTURE[f"{prefix}in/{name}"]
        inputs[name] = Tensor(value, requires_grad=True) if kind == "normal" else Tensor(value)
    positional, keywords = call_arguments(inputs)
    outputs = _flatten(module(*positional, **keywords))
    upstream = [Tensor(FIXTURE[f"{prefix}up/{index}"]) for index in range(len(outputs))]
    loss = outputs[0].mul(upstream[0]).sum()
    for out, up in zip(outputs[1:], upstream[1:]):
        loss = loss + out.mul(up).sum()
    loss.backward()
    for index, out in enumerate(outputs):
        _close(out.numpy(), FIXTURE[f"{prefix}out/{index}"], f"output {index}")
    for name, value in inputs.items():
        key = f"{prefix}grad_in/{name}"
        if key in FIXTURE:
            assert value.grad is not None, f"no gradient for input {name}"
            _close(value.grad.numpy(), FIXTURE[key], f"gradient of input {name}")
    for name, parameter in module.named_parameters():
        key = f"{prefix}grad/{name}"
        assert key in FIXTURE, f"torch has no gradient for parameter {name}"
        assert parameter.grad is not None, f"no gradient for parameter {name}"
        _close(parameter.grad.numpy(), FIXTURE[key], f"gradient of {name}")
