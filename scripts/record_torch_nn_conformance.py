"""Records torch's outputs and input gradients for the nn conformance cases into a committed fixture.

Run under a scratch venv with torch (never a kiln dependency):

    /path/to/torch-venv/bin/python scripts/record_torch_nn_conformance.py

It reads the case table `packages/tensor/tests/conformance_nn/nn_conformance_cases.py`, draws each case's inputs
(seeded by the case name), runs torch forward and backward (the gradients of sum(output * upstream) for a random
upstream of each floating output) and writes `nn_conformance.npz` next to the table. A dtype torch rejects for a
case is left out and reported; the replay test fails for a case with no recorded dtype.
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

FOLDER = Path(__file__).resolve().parent.parent / "packages" / "tensor" / "tests" / "conformance_nn"
sys.path.insert(0, str(FOLDER))

from nn_conformance_cases import CASES, Case, In, Ref  # noqa: E402


def draw(spec: In, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Input values for `spec` in the case dtype `dtype` (see `In` for the kinds)."""
    shape = spec.shape
    target = spec.dtype or dtype
    kind = spec.kind
    if isinstance(kind, tuple) and kind[0] == "index":
        return rng.integers(kind[1], kind[2], size=shape).astype(spec.dtype or np.int64)
    if kind in ("bool", "bool_blocked"):
        values = rng.random(shape) < 0.7
        values[..., 0] = True
        if kind == "bool_blocked":
            values[..., 1, :] = False
        return values
    if kind == "blocked":
        values = rng.standard_normal(shape)
        values[..., 1, :] = -np.inf
        return values.astype(target)
    if kind == "normal":
        values = rng.standard_normal(shape)
    elif kind == "distinct":
        count = int(np.prod(shape))
        values = (rng.permutation(count) - count / 2).reshape(shape) / 8.0
    elif kind == "ties":
        values = rng.integers(0, 3, size=shape).astype(np.float64)
    elif kind == "prob":
        values = rng.uniform(0.05, 0.95, shape)
    elif kind == "positive":
        values = rng.uniform(0.5, 2.0, shape)
    elif kind == "sign":
        values = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    else:
        raise ValueError(f"unknown input kind {kind!r}")
    return np.asarray(values).astype(target)


def _pool_padded(x: torch.Tensor, kind: str, kernel_size: int, padding: tuple[int, ...], **options: Any) -> Any:
    spatial = len(padding) // 2
    if kind == "max":
        padded = F.pad(x, padding, value=-float("inf"))
        return getattr(F, f"max_pool{spatial}d")(padded, kernel_size, **options)
    pool = getattr(F, f"avg_pool{spatial}d")
    totals = pool(F.pad(x, padding), kernel_size, **options, divisor_override=1)
    if kind == "avg":
        # the padding counts toward the divisor: the padded plane of ones
        return totals / pool(F.pad(torch.ones_like(x), padding, value=1.0), kernel_size, **options, divisor_override=1)
    # only the input's cells count: ones inside, zeros in the padding
    return totals / pool(F.pad(torch.ones_like(x), padding), kernel_size, **options, divisor_override=1)


def _conv_padded(x: torch.Tensor, weight: torch.Tensor, padding: tuple[int, ...], **options: Any) -> Any:
    return getattr(F, f"conv{weight.ndim - 2}d")(F.pad(x, padding), weight, **options)


def _conv_transpose_padded(x: torch.Tensor, weight: torch.Tensor, padding: tuple[int, ...], **options: Any) -> Any:
    full = getattr(F, f"conv_transpose{weight.ndim - 2}d")(x, weight, **options)
    spatial = weight.ndim - 2
    pairs = [(padding[2 * k], padding[2 * k + 1]) for k in reversed(range(spatial))]
    bounds = tuple(slice(before, size - after) for (before, after), size in zip(pairs, full.shape[2:]))
    return full[(slice(None), slice(None), *bounds)]


def _unpool_roundtrip(
    x: torch.Tensor, spatial: int, kernel_size: int, stride: Any = None, padding: int = 0, output_size: Any = None
) -> Any:
    values, indices = getattr(F, f"max_pool{spatial}d")(x, kernel_size, stride, padding, return_indices=True)
    unpool = getattr(F, f"max_unpool{spatial}d")
    return unpool(values, indices, kernel_size, stride, padding, output_size)


def _sparse_cce(x: torch.Tensor, target: torch.Tensor, ignore_index: int = -1, **options: Any) -> Any:
    return F.cross_entropy(x.movedim(-1, 1), target, ignore_index=ignore_index, **options)


SPECIAL = {
    "conv_padded": _conv_padded,
    "conv2d_nd": lambda x, weight, **options: getattr(F, f"conv{weight.ndim - 2}d")(x, weight, **options),
    "conv_transpose2d": lambda x, weight, **options: getattr(F, f"conv_transpose{weight.ndim - 2}d")(
        x, weight, **options
    ),
    "pool_padded": _pool_padded,
    "conv_transpose_padded": _conv_transpose_padded,
    "unpool_roundtrip": _unpool_roundtrip,
    "binary_crossentropy": F.binary_cross_entropy,
    "binary_crossentropy_logits": F.binary_cross_entropy_with_logits,
    "sparse_categorical_crossentropy": _sparse_cce,
    "pad": lambda x, pad, **options: F.pad(x, pad, **options),
}


def run(case: Case, arrays: list[np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """torch's outputs, upstreams and input gradients for one case."""
    tensors = []
    for spec, array in zip(case.inputs, arrays):
        tensor = torch.from_numpy(array.copy())
        if spec.grad and tensor.is_floating_point():
            tensor.requires_grad_(True)
        tensors.append(tensor)
    kwargs = {name: tensors[value.index] if isinstance(value, Ref) else value for name, value in case.kwargs.items()}
    positional = [tensor for index, tensor in enumerate(tensors) if index not in _referenced(case)]
    function = SPECIAL.get(case.op) or getattr(F, case.op)
    result = function(*positional, **kwargs)
    outputs = list(result) if isinstance(result, tuple) else [result]
    record: dict[str, np.ndarray] = {}
    grad_indices = [index for index, tensor in enumerate(tensors) if tensor.requires_grad]
    grads_for = [tensors[index] for index in grad_indices]
    floating = [output for output in outputs if output.is_floating_point()]
    upstreams = [torch.from_numpy(rng.standard_normal(output.shape).astype(_np_dtype(output))) for output in floating]
    for position, output in enumerate(outputs):
        record[f"out{position}"] = output.detach().numpy()
    for position, upstream in enumerate(upstreams):
        record[f"up{position}"] = upstream.numpy()
    if grads_for and floating and any(output.requires_grad for output in floating):
        pairs = [(output, upstream) for output, upstream in zip(floating, upstreams) if output.requires_grad]
        grads = torch.autograd.grad(
            [output for output, _ in pairs], grads_for, [upstream for _, upstream in pairs], allow_unused=True
        )
        for index, gradient in zip(grad_indices, grads):
            tensor = tensors[index]
            record[f"grad{index}"] = np.zeros(tensor.shape, _np_dtype(tensor)) if gradient is None else gradient.numpy()
    return record


def _np_dtype(tensor: torch.Tensor) -> Any:
    return str(tensor.dtype).removeprefix("torch.")


def _referenced(case: Case) -> set[int]:
    return {value.index for value in case.kwargs.values() if isinstance(value, Ref)}


def main() -> int:
    torch.manual_seed(0)
    entries: dict[str, np.ndarray] = {}
    recorded: list[str] = []
    for case in CASES:
        for dtype in case.dtypes:
            rng = np.random.default_rng(zlib.crc32(case.key(dtype).encode()))
            arrays = [draw(spec, dtype, rng) for spec in case.inputs]
            try:
                record = run(case, arrays, rng)
            except (RuntimeError, NotImplementedError) as error:
                print(f"skipped {case.key(dtype)}: torch rejects it ({str(error).splitlines()[0]})")
                continue
            recorded.append(case.key(dtype))
            for index, array in enumerate(arrays):
                entries[f"{case.key(dtype)}/in{index}"] = array
            for name, array in record.items():
                entries[f"{case.key(dtype)}/{name}"] = array
    entries["__recorded__"] = np.array(recorded)
    path = FOLDER / "nn_conformance.npz"
    np.savez_compressed(path, **entries)
    print(f"{len(recorded)} case/dtype pairs, {path.stat().st_size} bytes -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
