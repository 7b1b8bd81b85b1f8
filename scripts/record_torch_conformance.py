"""Record torch's outputs and input gradients for every case of the conformance table (run under torch, never CI).

    /path/to/torch-venv/bin/python scripts/record_torch_conformance.py          # writes the fixture
    /path/to/torch-venv/bin/python scripts/record_torch_conformance.py --names  # rewrites the torch.Tensor name list

Inputs come from numpy (seeded per case); each case's float outputs get a random cotangent and torch's backward gives
the input gradients. Everything (inputs, cotangents, outputs, gradients) goes into one compressed .npz under
packages/tensor/tests/conformance/, which packages/tensor/tests/conformance/test_conformance.py replays on kiln.
"""

from __future__ import annotations

import argparse
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as functional

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT / "packages" / "tensor" / "tests" / "conformance"
sys.path.insert(0, str(CONFORMANCE))
from cases import CASES, Case, Input  # noqa: E402

FIXTURE = CONFORMANCE / "torch_conformance.npz"

TORCH = SimpleNamespace(
    softsign=functional.softsign,
    solve=torch.linalg.solve,
    cholesky_upper=lambda x: torch.linalg.cholesky(x, upper=True),
    layernorm=lambda x: functional.layer_norm(x, x.shape[-1:]),
    batchnorm=lambda x, w, b, m, s: (
        (x - m.reshape(1, -1, 1)) * w.reshape(1, -1, 1) * s.reshape(1, -1, 1) + b.reshape(1, -1, 1)
    ),
    rearrange_bhwc=lambda x: x.reshape(2, 2, 3, 4).permute(0, 3, 1, 2),
    std_mean=torch.std_mean,
    var_mean=torch.var_mean,
    selu=functional.selu,
    celu=lambda x, alpha: functional.celu(x, alpha),
    logsigmoid=functional.logsigmoid,
    quick_gelu=lambda x: x * torch.sigmoid(1.702 * x),
    hardshrink=lambda x, lambd: functional.hardshrink(x, lambd),
    softshrink=lambda x, lambd: functional.softshrink(x, lambd),
    tanhshrink=functional.tanhshrink,
    gelu=lambda x, approximate="none": functional.gelu(x, approximate=approximate),
    mod=torch.remainder,
    isposinf=torch.isposinf,
    isneginf=torch.isneginf,
    softmin=lambda x, dim: functional.softmin(x, dim),
    normalize=lambda x, p=2.0, dim=1: functional.normalize(x, p=p, dim=dim),
    prelu=functional.prelu,
    cat=torch.cat,
    meshgrid=torch.meshgrid,
    dot=torch.matmul,
    qr=torch.linalg.qr,
    svdvals=torch.linalg.svdvals,
    einsum=torch.einsum,
    float64=torch.float64,
    int32=torch.int32,
)


def make_input(spec: Input, rng: np.random.Generator) -> np.ndarray:
    """The numpy value of one input spec."""
    if spec.values is not None:
        return np.array(spec.values, dtype=spec.dtype)
    if spec.dtype == "bool":
        return rng.random(spec.shape) < 0.5
    if spec.dtype.startswith("int"):
        return rng.integers(int(spec.low), int(spec.high) + 1, spec.shape).astype(spec.dtype)
    return rng.uniform(spec.low, spec.high, spec.shape).astype(spec.dtype)


def outputs_of(result: Any) -> list[Any]:
    """A call's result as a flat list of tensors."""
    if isinstance(result, (tuple, list)):
        return [item for part in result for item in outputs_of(part)]
    return [result]


def record_case(case: Case, arrays: dict[str, np.ndarray]) -> None:
    """Run one case under torch and add its arrays (prefix `case.name/`)."""
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    values = [make_input(spec, rng) for spec in case.inputs]
    tensors = []
    for position, value in enumerate(values):
        arrays[f"{case.name}/in{position}"] = value
        tensor = torch.from_numpy(value.copy())
        if case.grad and tensor.dtype.is_floating_point:
            tensor.requires_grad_(True)
        tensors.append(tensor)
    outputs = outputs_of(case.call(TORCH, *tensors))
    differentiable, cotangents = [], []
    for position, output in enumerate(outputs):
        arrays[f"{case.name}/out{position}"] = output.detach().numpy()
        if case.grad and output.requires_grad and output.numel():
            cotangent = rng.uniform(-1.0, 1.0, tuple(output.shape)).astype(arrays[f"{case.name}/out{position}"].dtype)
            arrays[f"{case.name}/cot{position}"] = cotangent
            differentiable.append(output)
            cotangents.append(torch.from_numpy(cotangent))
    if differentiable:
        torch.autograd.backward(differentiable, cotangents)
        for position, tensor in enumerate(tensors):
            if tensor.requires_grad:
                grad = tensor.grad if tensor.grad is not None else torch.zeros_like(tensor)
                arrays[f"{case.name}/grad{position}"] = grad.numpy()


def write_names() -> None:
    names = sorted(n for n in dir(torch.Tensor) if not n.startswith("_") and not n.endswith("_"))
    header = (
        f"# torch.Tensor's public names (dir(torch.Tensor), torch {torch.__version__}): no dunders, no leading '_',\n"
        "# no in-place methods (a trailing '_'). Regenerate: scripts/record_torch_conformance.py --names (torch).\n"
    )
    (ROOT / "scripts" / "data" / "torch_tensor_methods.txt").write_text(header + "\n".join(names) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", action="store_true", help="rewrite the torch.Tensor name list instead")
    args = parser.parse_args()
    if args.names:
        write_names()
        return 0
    torch.manual_seed(0)
    arrays: dict[str, np.ndarray] = {}
    for case in CASES:
        record_case(case, arrays)
    arrays["__torch_version__"] = np.array(torch.__version__)
    np.savez_compressed(FIXTURE, **arrays)
    print(f"{len(CASES)} cases, {len(arrays)} arrays -> {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
