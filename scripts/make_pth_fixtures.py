"""Writes the PyTorch checkpoint fixtures of packages/tensor/tests/state/fixtures (run with a Python that has torch).

    /path/to/torch-venv/bin/python scripts/make_pth_fixtures.py

Each `<name>.pth` (zip format) and `<name>_legacy.pth` (torch's pre-1.6 format) comes with `<name>.npz`: every tensor
of the checkpoint under its dotted path ("nested.list.1"), bfloat16 stored as float32, so the tests need no torch.
"""

from __future__ import annotations

import collections
import pathlib
import pickle
import zipfile
from typing import Any

import numpy as np
import torch

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "packages/tensor/tests/state/fixtures"


def dtypes_checkpoint() -> dict[str, Any]:
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(2, 3, generator=generator) * 10
    checkpoint: dict[str, Any] = {
        name: values.to(dtype)
        for name, dtype in {
            "float32": torch.float32,
            "float64": torch.float64,
            "float16": torch.float16,
            "bfloat16": torch.bfloat16,
            "int64": torch.int64,
            "int32": torch.int32,
            "int16": torch.int16,
            "int8": torch.int8,
            "uint8": torch.uint8,
        }.items()
    }
    checkpoint["bool"] = values > 0
    checkpoint["scalar"] = torch.tensor(3.5)
    return checkpoint


def v3_checkpoint() -> dict[str, Any]:
    """dtypes without a legacy storage class: torch pickles them with _rebuild_tensor_v3 and a dtype global."""
    values = torch.tensor([[0.5, -1.25, 3.0], [448.0, -0.0, 0.015625]])
    return {
        "fp8e4m3": values.to(torch.float8_e4m3fn),
        "fp8e5m2": values.to(torch.float8_e5m2),
        "uint16": torch.tensor([[1, 65535], [300, 7]], dtype=torch.uint16).t(),
        "uint32": torch.tensor([4_000_000_000, 5], dtype=torch.uint32),
        "uint64": torch.tensor([2**63 + 1, 2], dtype=torch.uint64),
    }


def views_checkpoint() -> dict[str, Any]:
    base = torch.arange(24, dtype=torch.float32)
    matrix = base.view(4, 6)
    return {
        "base": base,
        "window": base[2:8].view(2, 3),  # offset into the shared storage
        "column": matrix[:, 1],  # strided
        "transposed": matrix.t(),
        "every_other": matrix[1:, ::2],  # offset and two strides
        "nested": {"list": [base[:3], torch.ones(2, dtype=torch.int32)], "tuple": (matrix[0],), "count": 7},
        "name": "views",
    }


def model_checkpoint() -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    return model.state_dict()  # an OrderedDict (with torch's _metadata attribute)


def parameter_checkpoint() -> Any:
    torch.manual_seed(1)
    layer = torch.nn.Linear(2, 2)
    return {"weight": layer.weight, "bias": layer.bias}  # Parameters: pickled with _rebuild_parameter


class _WritesMarker:
    """Unpickling this runs exec(...) creating the file `kiln_pickle_marker` in the working directory."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return exec, ("open('kiln_pickle_marker', 'w').close()",)


def write_malicious() -> None:
    """malicious.pth: a torch-style zip whose data.pkl runs code when unpickled by a plain pickle.load."""
    with zipfile.ZipFile(FIXTURES / "malicious.pth", "w") as archive:
        archive.writestr("malicious/data.pkl", pickle.dumps({"weight": _WritesMarker()}, protocol=2))
        archive.writestr("malicious/byteorder", "little")


def flatten(value: Any, prefix: str, out: dict[str, np.ndarray]) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            tensor = tensor.float()  # numpy has none of these: the expected values as float32
        out[prefix] = tensor.numpy().copy()
    elif isinstance(value, dict):
        for key, item in value.items():
            flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            flatten(item, f"{prefix}.{index}" if prefix else str(index), out)


def main() -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, make in {
        "dtypes": dtypes_checkpoint,
        "views": views_checkpoint,
        "model": model_checkpoint,
        "parameter": parameter_checkpoint,
        "v3": v3_checkpoint,
    }.items():
        checkpoint = make()
        torch.save(checkpoint, FIXTURES / f"{name}.pth")
        if name != "v3":  # the legacy format has no storage class for these dtypes
            torch.save(checkpoint, FIXTURES / f"{name}_legacy.pth", _use_new_zipfile_serialization=False)
        expected: dict[str, np.ndarray] = {}
        flatten(checkpoint, "", expected)
        np.savez(FIXTURES / f"{name}.npz", **expected)
    write_malicious()
    assert isinstance(model_checkpoint(), collections.OrderedDict)


if __name__ == "__main__":
    main()
