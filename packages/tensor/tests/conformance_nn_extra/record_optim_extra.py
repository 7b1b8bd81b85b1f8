"""Records torch's answers for `test_optim_extra.py` into `optim_extra.npz` beside this script.

Run with a Python that has torch (never a kiln dependency), from the repository root:

    /work/torchenv/bin/python packages/tensor/tests/conformance_nn_extra/record_optim_extra.py

Per optimizer case (`optim_extra_cases.optimizers`): `<case>/start<i>` the parameters, `<case>/grad<s>/<i>` the
gradient given at step s, `<case>/param<s>/<i>` the parameters after step s, `<case>/state/<i>/<name>` the final
optimizer state. Per scheduler case: `<case>/lr` (steps + 1, groups), `<case>/momentum` the groups' momentum.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from optim_extra_cases import METRICS, SCHEDULE_STEPS, SHAPES, STEPS, optimizers, schedulers

OUT = Path(__file__).resolve().parent / "optim_extra.npz"
rng = np.random.default_rng(3838)
data: dict[str, np.ndarray] = {}
warnings.simplefilter("ignore")

starts = [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]
for case in optimizers(torch.optim, None, None):
    params = [torch.tensor(start, requires_grad=True) for start in starts]
    optimizer = optimizers(torch.optim, *params)[case]()
    for index, start in enumerate(starts):
        data[f"{case}/start{index}"] = start
    for step in range(STEPS):
        for index, param in enumerate(params):
            grad = rng.standard_normal(param.shape).astype(np.float32)
            param.grad = torch.tensor(grad)
            data[f"{case}/grad{step}/{index}"] = grad
        optimizer.step()
        for index, param in enumerate(params):
            data[f"{case}/param{step}/{index}"] = param.detach().numpy().copy()
    for index, entries in optimizer.state_dict()["state"].items():
        for name, value in entries.items():
            data[f"{case}/state/{index}/{name}"] = np.asarray(value)

for case in schedulers(torch.optim, None):
    weights = [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)]
    optimizer = torch.optim.SGD([{"params": [weights[0]]}, {"params": [weights[1]], "lr": 0.05}], lr=0.1, momentum=0.9)
    scheduler = schedulers(torch.optim, optimizer)[case]()
    rates, momenta = [], []
    for step in range(SCHEDULE_STEPS + 1):
        rates.append([group["lr"] for group in optimizer.param_groups])
        momenta.append([group["momentum"] for group in optimizer.param_groups])
        if step < SCHEDULE_STEPS:
            scheduler.step(METRICS[step]) if "plateau" in case else scheduler.step()
    data[f"{case}/lr"], data[f"{case}/momentum"] = np.array(rates), np.array(momenta)

np.savez_compressed(OUT, **data)
print(f"wrote {len(data)} arrays to {OUT}")
