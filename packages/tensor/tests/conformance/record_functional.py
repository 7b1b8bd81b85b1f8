"""Records torch's answers for the `kiln.tensor.nn.functional` / `kiln.tensor.nn` module cases into a fixture.

Run under a scratch venv with torch (never a kiln dependency), from the repository root:

    /path/to/torch-venv/bin/python packages/tensor/tests/conformance/record_functional.py

It reads `functional_cases.py` next to it, draws each case's inputs (seeded by the case key), runs torch forward
and backward (gradients of sum(output * upstream) for a random upstream of each floating output) and writes
`functional.npz` next to it: per case key the inputs `in<i>`, outputs `out<i>`, upstreams `up<i>`, input gradients
`grad<i>`, inputs after the call `after<i>` (cases that mutate), and for modules the state-dict names `keys`, values
after the call `state/<name>` and parameter gradients `pgrad/<name>`; and `repr/<i>`, torch's repr of the i-th
module of `REPRS`; `error/<i>/class` and `error/<i>/message` for each refused call of `ERRORS`;
`state_names/<i>` and `state_shapes/<i>` of each module of `STATES`; and `port/...`, the port model's state,
inputs, loss and gradients.
"""

from __future__ import annotations

import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from functional_cases import (  # beside this script (run as a script: its folder)
    CASES,
    ERRORS,
    REPRS,
    STATES,
    Case,
    In,
    Ref,
    build_port_model,
    port_loss,
)
from torch import nn

FOLDER = Path(__file__).resolve().parent


def draw(spec: In, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Input values for `spec` in the case dtype `dtype` (see `In` for the kinds)."""
    shape, kind = spec.shape, spec.kind
    if isinstance(kind, tuple) and kind[0] == "fixed":
        return np.array(kind[1], np.int64)
    if isinstance(kind, tuple) and kind[0] == "index":
        return rng.integers(kind[1], kind[2], size=shape).astype(np.int64)
    if kind == "bool":
        mask = rng.random(shape) < 0.7
        mask[..., 0] = True
        return mask
    if kind == "normal":
        values = rng.standard_normal(shape)
    elif kind == "wide":
        values = 4.0 * rng.standard_normal(shape)
    elif kind == "distinct":
        count = int(np.prod(shape))
        values = (rng.permutation(count) - count / 2).reshape(shape) / 8.0
    elif kind == "prob":
        values = rng.uniform(0.05, 0.95, shape)
    elif kind == "positive":
        values = rng.uniform(0.5, 2.0, shape)
    elif kind == "sign":
        values = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    elif kind == "log_probs":
        raw = rng.standard_normal(shape)
        values = raw - np.log(np.exp(raw).sum(axis=-1, keepdims=True))
    elif kind == "simplex":
        raw = rng.uniform(0.1, 1.0, shape)
        values = raw / raw.sum(axis=1, keepdims=True)
    else:
        raise ValueError(f"unknown input kind {kind!r}")
    return np.asarray(values).astype(spec.dtype or dtype)


def _resolve(call: str) -> Any:
    space, *path = call.split(".")
    target: Any = F if space == "F" else nn
    for part in path:
        target = getattr(target, part)
    return target


def _np_dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def run(case: Case, arrays: list[np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """torch's record of one case (see the module docstring for the names)."""
    tensors = []
    for spec, array in zip(case.inputs, arrays):
        tensor = torch.from_numpy(array.copy())
        if spec.grad and tensor.is_floating_point():
            tensor.requires_grad_(True)
        tensors.append(tensor)
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
    record: dict[str, np.ndarray] = {}
    for position, output in enumerate(outputs):
        record[f"out{position}"] = output.detach().numpy()
    floating = [output for output in outputs if output.is_floating_point() and output.requires_grad]
    upstreams = [torch.from_numpy(rng.standard_normal(output.shape).astype(_np_dtype(output))) for output in floating]
    for position, upstream in enumerate(upstreams):
        record[f"up{position}"] = upstream.numpy()
    if floating:
        sum(((output * upstream).sum() for output, upstream in zip(floating, upstreams)), torch.tensor(0.0)).backward()
    for index, tensor in enumerate(tensors):
        if tensor.requires_grad:
            grad = tensor.grad
            record[f"grad{index}"] = np.zeros(tensor.shape, _np_dtype(tensor)) if grad is None else grad.numpy()
        if case.mutates:
            record[f"after{index}"] = tensor.detach().numpy().copy()
    if module is not None:
        state = module.state_dict()
        record["keys"] = np.array(list(state), dtype=str)
        for name, value in state.items():
            record[f"state/{name}"] = value.detach().numpy().copy()
        for name, parameter in module.named_parameters():
            if parameter.grad is not None:
                record[f"pgrad/{name}"] = parameter.grad.numpy()
    return record


def record_port() -> dict[str, np.ndarray]:
    """The port model's initial state, inputs, loss and parameter gradients (`port/...`)."""
    torch.manual_seed(38)
    rng = np.random.default_rng(38)
    model = build_port_model(nn)
    x = torch.from_numpy(rng.standard_normal((4, 3, 6, 6)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 5, 4))
    aux_target = torch.from_numpy(rng.standard_normal((4, 2)).astype(np.float32))
    loss = port_loss(nn, model, x, labels, aux_target)
    loss.backward()
    record = {"port/x": x.numpy(), "port/labels": labels.numpy(), "port/aux_target": aux_target.numpy()}
    record["port/loss"] = loss.detach().numpy()
    for name, value in model.state_dict().items():
        record[f"port/state/{name}"] = value.numpy()
    for name, parameter in model.named_parameters():
        record[f"port/grad/{name}"] = parameter.grad.numpy()
    return record


def main() -> int:
    torch.manual_seed(0)
    entries: dict[str, np.ndarray] = {}
    recorded: list[str] = []
    for case in CASES:
        for dtype in case.dtypes:
            key = case.key(dtype)
            rng = np.random.default_rng(zlib.crc32(key.encode()))
            arrays = [draw(spec, dtype, rng) for spec in case.inputs]
            record = run(case, arrays, rng)
            recorded.append(key)
            for index, array in enumerate(arrays):
                entries[f"{key}/in{index}"] = array
            for name, array in record.items():
                entries[f"{key}/{name}"] = array
    entries["__recorded__"] = np.array(recorded)
    entries.update(record_port())
    for index, error in enumerate(ERRORS):
        arrays = [draw(spec, "float32", np.random.default_rng(index)) for spec in error.inputs]
        tensors = [torch.from_numpy(array) for array in arrays]
        kwargs = {name: tensors[v.index] if isinstance(v, Ref) else v for name, v in error.kwargs.items()}
        referenced = {v.index for v in error.kwargs.values() if isinstance(v, Ref)}
        try:
            _resolve(error.call)(*[t for i, t in enumerate(tensors) if i not in referenced], **kwargs)
        except Exception as raised:  # any class torch raises is the record
            message = str(raised)
            assert error.names in message, f"error case {index}: {error.names!r} not in torch's {message!r}"
            entries[f"error/{index}/class"] = np.array(type(raised).__name__)
            entries[f"error/{index}/message"] = np.array(message)
        else:
            raise AssertionError(f"error case {index} ({error.call}): torch accepted it")
    for index, (call, init) in enumerate(STATES):
        state = _resolve(call)(**init).state_dict()
        entries[f"state_names/{index}"] = np.array(list(state), dtype=str)
        entries[f"state_shapes/{index}"] = np.array([str(list(value.shape)) for value in state.values()], dtype=str)
    for index, (call, init) in enumerate(REPRS):
        entries[f"repr/{index}"] = np.array(repr(_resolve(call)(**init)))
    path = FOLDER / "functional.npz"
    np.savez_compressed(path, **entries)
    print(f"{len(recorded)} case/dtype pairs, {path.stat().st_size} bytes -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
