"""Records torch's answers for `test_nn_extra.py` into `nn_extra.npz` beside this script.

Run with a Python that has torch (never a kiln dependency), from the repository root:

    /work/torchenv/bin/python packages/tensor/tests/conformance_nn_extra/record_nn_extra.py

Keys: `act/<name>/in|out` for the in-place activations; `pdist/<p>/in|out|up|grad`; per module case `<case>/in`,
`<case>/out`, `<case>/up`, `<case>/grad` (input gradient of sum(out * up)), `<case>/state/<name>` (the state dict
after the call, loaded into kiln's module before its call), `<case>/pgrad/<name>` (parameter gradients) and
`<case>/names` (the state-dict names in order).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

OUT = Path(__file__).resolve().parent / "nn_extra.npz"
rng = np.random.default_rng(38)
data: dict[str, np.ndarray] = {}


def draw(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


ACTIVATIONS = {
    "relu_": (F.relu_, {}),
    "elu_": (F.elu_, {"alpha": 0.7}),
    "celu_": (F.celu_, {"alpha": 1.3}),
    "selu_": (F.selu_, {}),
    "leaky_relu_": (F.leaky_relu_, {"negative_slope": 0.2}),
    "hardtanh_": (F.hardtanh_, {"min_val": -0.5, "max_val": 0.8}),
    "rrelu_": (F.rrelu_, {"lower": 0.1, "upper": 0.3, "training": False}),
    "threshold_": (F.threshold_, {"threshold": 0.25, "value": -2.0}),
}
for name, (fn, kwargs) in ACTIVATIONS.items():
    x = draw(3, 5) * 2
    t = torch.tensor(x)
    result = fn(t, **kwargs)
    assert result is t
    data[f"act/{name}/in"], data[f"act/{name}/out"] = x, t.numpy()

for p in (2.0, 1.0, 0.0, 3.5, float("inf")):
    x = draw(5, 4)
    t = torch.tensor(x, requires_grad=True)
    out = F.pdist(t, p)
    up = draw(*out.shape)
    (out * torch.tensor(up)).sum().backward()
    data[f"pdist/{p}/in"], data[f"pdist/{p}/out"], data[f"pdist/{p}/up"] = x, out.detach().numpy(), up
    data[f"pdist/{p}/grad"] = t.grad.numpy()

MODULES = {
    "batchnorm3d_train": (lambda: nn.BatchNorm3d(3, momentum=0.3), (2, 3, 2, 3, 2), True),
    "batchnorm3d_eval": (lambda: nn.BatchNorm3d(3), (2, 3, 2, 3, 2), False),
    "convtranspose3d": (
        lambda: nn.ConvTranspose3d(4, 3, (2, 3, 2), stride=2, padding=1, output_padding=1),
        (2, 4, 3, 2, 3),
        True,
    ),
    "convtranspose3d_groups": (
        lambda: nn.ConvTranspose3d(4, 6, 2, groups=2, dilation=2, bias=False),
        (1, 4, 2, 3, 2),
        True,
    ),
    "lazylinear": (lambda: nn.LazyLinear(5), (2, 3, 4), True),
    "lazyconv1d": (lambda: nn.LazyConv1d(4, 3, padding=1), (2, 3, 7), True),
    "lazyconv2d": (lambda: nn.LazyConv2d(6, 3, stride=2, groups=2), (1, 4, 6, 5), True),
    "lazyconv3d": (lambda: nn.LazyConv3d(2, 2), (3, 3, 3, 2), True),  # unbatched,
    "lazyconvtranspose1d": (lambda: nn.LazyConvTranspose1d(3, 3, stride=2), (2, 4, 5), True),
    "lazyconvtranspose2d": (lambda: nn.LazyConvTranspose2d(4, 2, groups=2), (1, 6, 3, 4), True),
    "lazyconvtranspose3d": (lambda: nn.LazyConvTranspose3d(2, 2, bias=False), (1, 3, 2, 2, 2), True),
    "lazybatchnorm1d": (lambda: nn.LazyBatchNorm1d(), (4, 3, 5), True),
    "lazybatchnorm2d": (lambda: nn.LazyBatchNorm2d(momentum=None), (2, 3, 2, 4), True),
    "lazybatchnorm3d": (lambda: nn.LazyBatchNorm3d(affine=False), (2, 2, 2, 2, 3), True),
    "lazyinstancenorm1d": (lambda: nn.LazyInstanceNorm1d(affine=True), (2, 3, 6), True),
    "lazyinstancenorm2d": (lambda: nn.LazyInstanceNorm2d(), (2, 3, 4, 5), True),
    "lazyinstancenorm3d": (lambda: nn.LazyInstanceNorm3d(track_running_stats=True), (2, 2, 3, 2, 2), True),
}
for case, (build, shape, training) in MODULES.items():
    torch.manual_seed(sum(map(ord, case)))
    module = build()
    x = draw(*shape)
    t = torch.tensor(x, requires_grad=True)
    if "lazy" in case:
        with torch.no_grad():  # sizes the module; the state it starts from is recorded below
            module(torch.zeros_like(t))
        if hasattr(module, "running_mean") and module.running_mean is not None:
            module.reset_running_stats()
    before = {k: v.detach().clone().numpy() for k, v in module.state_dict().items()}
    module.train(training)
    out = module(t)
    up = draw(*out.shape)
    (out * torch.tensor(up)).sum().backward()
    data[f"{case}/in"], data[f"{case}/out"], data[f"{case}/up"] = x, out.detach().numpy(), up
    data[f"{case}/grad"] = t.grad.numpy()
    data[f"{case}/names"] = np.array(list(module.state_dict()))
    data[f"{case}/type"] = np.array(type(module).__name__)
    for key, value in before.items():
        data[f"{case}/state/{key}"] = value
    for key, value in module.state_dict().items():
        data[f"{case}/after/{key}"] = value.detach().numpy()
    for key, param in module.named_parameters():
        data[f"{case}/pgrad/{key}"] = param.grad.numpy()

np.savez_compressed(OUT, **data)
print(f"wrote {len(data)} arrays to {OUT}")
