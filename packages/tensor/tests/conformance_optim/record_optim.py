"""Records torch.optim's trajectories for the cases of `optim_cases.py` into `optim_torch.npz`.

Run from packages/tensor/tests with a Python that has torch (never a kiln dependency):
    /work/torchenv/bin/python -m conformance_optim.record_optim
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from conformance_optim.optim_cases import CASES, SHAPES, STEPS, Case, lambda_factor


def _momentum(group: dict[str, Any]) -> float:
    return float(group["betas"][0]) if "betas" in group else float(group.get("momentum", 0.0))


def record(
    case: Case, start: list[np.ndarray], linear: list[np.ndarray], curvature: list[np.ndarray]
) -> dict[str, Any]:
    params = [torch.tensor(value, requires_grad=True) for value in start]
    groups = [{"params": [params[i] for i in indices], **extra} for indices, extra in case.groups] or params
    optimizer = getattr(torch.optim, case.optimizer)(groups, **case.kwargs)
    scheduler = None
    if case.scheduler == "LambdaLR":
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda_factor)
    elif case.scheduler:
        scheduler = getattr(torch.optim.lr_scheduler, case.scheduler)(optimizer, **case.scheduler_kwargs)
    out: dict[str, Any] = {}
    rates, momenta = [], []
    for step in range(STEPS):
        rates.append([float(g["lr"]) for g in optimizer.param_groups])
        momenta.append([_momentum(g) for g in optimizer.param_groups])
        optimizer.zero_grad()
        loss = sum(
            (p * torch.tensor(c) + p * p * torch.tensor(d) / 2 + p**4 / 4).sum()
            for p, c, d in zip(params, linear, curvature)
        )
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        for index, p in enumerate(params):
            out[f"{case.name}/step{step}/p{index}"] = p.detach().numpy().copy()
    saved = optimizer.state_dict()
    for index, entries in saved["state"].items():
        for name, value in entries.items():
            if value is not None:
                out[f"{case.name}/state/{index}/{name}"] = np.asarray(
                    value.detach().numpy() if torch.is_tensor(value) else value
                )
    out[f"{case.name}/group_keys"] = np.array(sorted({key for group in saved["param_groups"] for key in group}))
    out[f"{case.name}/lr"] = np.array(rates, np.float64)
    out[f"{case.name}/momentum"] = np.array(momenta, np.float64)
    return out


def main() -> None:
    rng = np.random.default_rng(38)
    start = [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]
    linear = [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]
    curvature = [rng.uniform(0.5, 2.0, shape).astype(np.float32) for shape in SHAPES]
    arrays: dict[str, Any] = {}
    for index in range(len(SHAPES)):
        arrays[f"start{index}"], arrays[f"linear{index}"], arrays[f"curvature{index}"] = (
            start[index],
            linear[index],
            curvature[index],
        )
    for case in CASES:
        arrays.update(record(case, start, linear, curvature))
    path = Path(__file__).with_name("optim_torch.npz")
    np.savez_compressed(path, **arrays, torch_version=np.array(torch.__version__))
    print(f"wrote {len(CASES)} cases to {path}")


if __name__ == "__main__":
    main()
