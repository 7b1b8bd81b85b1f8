"""Records torch's answers for the recurrent and transformer module cases of `module_cases.py` into `modules.npz`.

Run with a Python that has torch (never in CI; the tests read only the .npz):

    PYTHONPATH=packages/tensor/tests python packages/tensor/tests/conformance_nn/record_torch_modules.py

Per case, keys "<case>/..." hold: state/<name> (the torch module's state dict after torch's own initialisation,
keys in torch's order, listed in "<case>/state_keys"), in/<name> (inputs), out/<i> (outputs, flattened in order),
up/<i> (the random upstream gradient of output i), grad_in/<name> (gradients of float inputs) and grad/<name>
(gradients of every parameter), all float32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from conformance_nn.module_cases import CASES, Case, call_arguments

OUTPUT = Path(__file__).resolve().parent / "modules.npz"


def _input(name: str, shape: tuple[int, ...], kind: str, rng: np.random.Generator) -> torch.Tensor:
    if kind == "normal":
        return torch.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
    if kind == "causal":
        return torch.tensor(np.triu(np.full(shape, -np.inf, dtype=np.float32), 1))
    if kind == "causal_bool":
        return torch.tensor(np.triu(np.ones(shape, dtype=bool), 1))
    if kind == "padding":
        mask = np.zeros(shape, dtype=bool)
        mask[0, -1:] = True
        mask[1, -2:] = True
        return torch.tensor(mask)
    raise ValueError(f"unknown input kind {kind!r} for {name}")


def _build(case: Case) -> torch.nn.Module:
    module: torch.nn.Module = getattr(torch.nn, case.cls)(**case.kwargs)
    if case.stack:
        norm = torch.nn.LayerNorm(case.kwargs["d_model"])
        module = (
            getattr(torch.nn, case.stack)(module, case.layers, norm=norm, enable_nested_tensor=False)
            if (case.stack == "TransformerEncoder")
            else getattr(torch.nn, case.stack)(module, case.layers, norm=norm)
        )
    return module.eval() if case.eval else module


def _flatten(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [tensor for item in value for tensor in _flatten(item)]


def record(case: Case, seed: int, arrays: dict[str, np.ndarray]) -> None:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    module = _build(case)
    inputs = {name: _input(name, shape, kind, rng) for name, shape, kind in case.inputs}
    positional, keywords = call_arguments(inputs)
    outputs = _flatten(module(*positional, **keywords))
    upstream = [torch.tensor(rng.standard_normal(tuple(out.shape)).astype(np.float32)) for out in outputs]
    sum(((out * up).sum() for out, up in zip(outputs, upstream)), torch.zeros(())).backward()
    state = module.state_dict()
    arrays[f"{case.name}/state_keys"] = np.array(list(state))
    for key, value in state.items():
        arrays[f"{case.name}/state/{key}"] = value.detach().numpy()
    for name, value in inputs.items():
        arrays[f"{case.name}/in/{name}"] = value.detach().numpy()
        if value.grad is not None:
            arrays[f"{case.name}/grad_in/{name}"] = value.grad.numpy()
    for index, (out, up) in enumerate(zip(outputs, upstream)):
        arrays[f"{case.name}/out/{index}"] = out.detach().numpy()
        arrays[f"{case.name}/up/{index}"] = up.numpy()
    for name, parameter in module.named_parameters():
        if parameter.grad is not None:
            arrays[f"{case.name}/grad/{name}"] = parameter.grad.numpy()


def main() -> None:
    arrays: dict[str, np.ndarray] = {}
    for seed, case in enumerate(CASES):
        record(case, seed, arrays)
    arrays["__torch_version__"] = np.array(torch.__version__)
    np.savez_compressed(OUTPUT, **arrays)
    print(f"recorded {len(CASES)} cases ({len(arrays)} arrays) into {OUTPUT}")


if __name__ == "__main__":
    main()
