"""Five models ported from PyTorch (`models.py`) train three steps as torch trained their twins (`record_ports.py`,
answers in `ports.npz`): the same initial state dict (the key sets equal torch's), the same inputs, two or three
parameter groups and an LR scheduler; kiln's loss at each step, learning rates, and every parameter and buffer
(BatchNorm running statistics included) after each step must match torch's. A ResNet run checkpointed after three
steps and resumed for three more ends bit for bit where six uninterrupted steps end, and where torch's six ended.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ports import models

import kiln.tensor.nn as nn
import kiln.tensor.nn.functional as F
from kiln.tensor import Tensor, optim
from kiln.tensor.optim import lr_scheduler

FIXTURE = np.load(Path(__file__).with_name("ports.npz"))
STEPS = 3
RTOL, ATOL = 1e-4, 1e-5

Batch = dict[str, Tensor]

# The key projection's bias has no effect on attention (q.(k + b) adds q.b to every score of a row, which softmax
# cancels), so its true gradient is 0 and both frameworks' gradients are float32 rounding noise, which Adam scales
# up to steps of up to about lr each. Those slices are checked against that bound; everything else tightly.
EMBED = 16
KEY_BIAS = {
    "gpt": [f"h.{layer}.attn.c_attn.bias" for layer in range(2)],
    "vit": [f"encoder.layers.{layer}.self_attn.in_proj_bias" for layer in range(2)],
}


@dataclass
class Port:
    model: nn.Module
    loss: Callable[[nn.Module, Batch], Tensor]
    optimizer: optim.Optimizer
    scheduler: lr_scheduler.LRScheduler
    clip: float | None = None
    inputs: Batch = field(default_factory=dict)


def no_decay(name: str, param: Tensor) -> bool:
    return param.ndim < 2 or name.endswith("bias")


def resnet_port() -> Port:
    model = models.ResNet18()
    named = list(model.named_parameters())
    decay = [p for n, p in named if not no_decay(n, p) and not n.startswith("fc.")]
    plain = [p for n, p in named if no_decay(n, p) and not n.startswith("fc.")]
    optimizer = optim.SGD(
        [
            {"params": decay, "weight_decay": 5e-4},
            {"params": plain, "weight_decay": 0.0},
            {"params": list(model.fc.parameters()), "lr": 0.05},
        ],
        lr=0.1,
        momentum=0.9,
        nesterov=True,
    )
    scheduler = lr_scheduler.OneCycleLR(optimizer, max_lr=[0.05, 0.05, 0.02], total_steps=6)
    return Port(model, lambda m, d: F.cross_entropy(m(d["images"]), d["labels"]), optimizer, scheduler)


def gpt_port() -> Port:
    model = models.GPT()
    named = dict(model.named_parameters())
    optimizer = optim.AdamW(
        [
            {"params": [p for p in named.values() if p.ndim >= 2], "weight_decay": 0.1},
            {"params": [p for p in named.values() if p.ndim < 2], "weight_decay": 0.0},
        ],
        lr=3e-3,
        betas=(0.9, 0.95),
    )
    scheduler = lr_scheduler.LinearLR(optimizer, start_factor=0.25, total_iters=2)

    def loss(m: nn.Module, d: Batch) -> Tensor:
        return F.cross_entropy(m(d["tokens"][:, :-1]).reshape(-1, 32), d["tokens"][:, 1:].reshape(-1))

    return Port(model, loss, optimizer, scheduler)


def lstm_port() -> Port:
    model = models.LSTMLanguageModel()
    body = [p for n, p in model.named_parameters() if not n.startswith("decoder.")]
    optimizer = optim.Adam([{"params": body}, {"params": list(model.decoder.parameters()), "lr": 2e-2}], lr=1e-2)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)

    def loss(m: nn.Module, d: Batch) -> Tensor:
        logits = m(d["tokens"][:, :-1])
        return F.cross_entropy(logits.reshape(-1, 20), d["tokens"][:, 1:].reshape(-1))

    return Port(model, loss, optimizer, scheduler, clip=0.5)


def vit_port() -> Port:
    model = models.ViT()
    named = list(model.named_parameters())
    embeddings = ("cls_token", "pos_embed")
    optimizer = optim.AdamW(
        [
            {"params": [p for n, p in named if p.ndim >= 2 and n not in embeddings]},
            {"params": [p for n, p in named if p.ndim < 2 or n in embeddings], "weight_decay": 0.0},
        ],
        lr=2e-3,
        weight_decay=0.05,
    )
    scheduler = lr_scheduler.CosineAnnealingLR(optimizer, T_max=4, eta_min=1e-4)

    def loss(m: nn.Module, d: Batch) -> Tensor:
        return F.cross_entropy(m(d["images"]), d["labels"], label_smoothing=0.1)

    return Port(model, loss, optimizer, scheduler)


def vae_port() -> Port:
    model = models.VAE()
    encoder = [p for n, p in model.named_parameters() if not n.startswith("decoder.")]
    optimizer = optim.Adam(
        [{"params": encoder}, {"params": list(model.decoder.parameters()), "lr": 5e-3, "weight_decay": 1e-4}], lr=1e-2
    )
    scheduler = lr_scheduler.ExponentialLR(optimizer, gamma=0.8)

    def loss(m: nn.Module, d: Batch) -> Tensor:
        logits, mu, logvar = m(d["x"], d["noise"])
        return models.vae_loss(logits, d["x"], mu, logvar)

    return Port(model, loss, optimizer, scheduler)


PORTS: dict[str, Callable[[], Port]] = {
    "resnet": resnet_port,
    "gpt": gpt_port,
    "lstm": lstm_port,
    "vit": vit_port,
    "vae": vae_port,
}


def start(name: str) -> Port:
    """The port built by kiln, loaded with torch's initial state dict and given torch's inputs, in training mode."""
    port = PORTS[name]()
    torch_keys = {str(key) for key in FIXTURE[f"{name}/state_keys"]}
    assert set(port.model.state_dict()) == torch_keys
    port.model.load_state_dict({key: FIXTURE[f"{name}/init/{key}"] for key in torch_keys})
    port.model.train()
    port.inputs = {
        key.removeprefix(f"{name}/in/"): Tensor(FIXTURE[key]) for key in FIXTURE.files if key.startswith(f"{name}/in/")
    }
    return port


def train_step(port: Port) -> float:
    port.optimizer.zero_grad()
    loss = port.loss(port.model, port.inputs)
    loss.backward()
    if port.clip is not None:
        optim.clip_grad_norm_(port.model.parameters(), port.clip)
    port.optimizer.step()
    port.scheduler.step()
    return float(loss.item())


def state_numpy(model: nn.Module) -> dict[str, np.ndarray[Any, Any]]:
    return {key: value.numpy() for key, value in model.state_dict().items()}


@pytest.mark.parametrize("name", list(PORTS))
def test_port_matches_torch_over_three_steps(name: str) -> None:
    port = start(name)
    losses, rates = [], []
    for step in range(STEPS):
        rates.append([float(group["lr"]) for group in port.optimizer.param_groups])
        losses.append(train_step(port))
        expected_losses = FIXTURE[f"{name}/loss"][: step + 1]
        np.testing.assert_allclose(losses, expected_losses, rtol=RTOL, atol=ATOL, err_msg=f"{name} loss, step {step}")
        for key, value in state_numpy(port.model).items():
            expected = FIXTURE[f"{name}/step{step}/{key}"]
            assert value.shape == expected.shape, f"{name} {key}: {value.shape} != torch's {expected.shape}"
            if key in KEY_BIAS.get(name, []):
                bound = 2 * sum(max(group) for group in rates)
                np.testing.assert_allclose(value[EMBED : 2 * EMBED], expected[EMBED : 2 * EMBED], atol=bound)
                keys = slice(EMBED, 2 * EMBED)
                value, expected = np.delete(value, keys), np.delete(expected, keys)
            np.testing.assert_allclose(value, expected, rtol=RTOL, atol=ATOL, err_msg=f"{name} step {step}: {key}")
    np.testing.assert_allclose(rates, FIXTURE[f"{name}/lr"], rtol=1e-12, err_msg=f"{name} learning rates")


def test_resnet_resumed_from_checkpoint_equals_uninterrupted_run(tmp_path: Path) -> None:
    uninterrupted = start("resnet")
    uninterrupted_losses = [train_step(uninterrupted) for _ in range(2 * STEPS)]

    first = start("resnet")
    losses = [train_step(first) for _ in range(STEPS)]
    path = tmp_path / "resnet.safetensors"
    optim.save_training_checkpoint(path, first.model, first.optimizer, first.scheduler)
    resumed = resnet_port()  # built afresh (its own random init), everything else comes from the checkpoint
    resumed.inputs = first.inputs
    optim.load_training_checkpoint(path, resumed.model, resumed.optimizer, resumed.scheduler)
    losses += [train_step(resumed) for _ in range(STEPS)]

    assert losses == uninterrupted_losses
    final, expected = state_numpy(resumed.model), state_numpy(uninterrupted.model)
    assert set(final) == set(expected)
    for key, value in final.items():
        np.testing.assert_array_equal(value, expected[key], err_msg=f"resumed {key}")
    # and both continue torch's six-step run
    np.testing.assert_allclose(losses, FIXTURE["resnet6/loss"], rtol=RTOL, atol=ATOL)
    for key, value in final.items():
        np.testing.assert_allclose(value, FIXTURE[f"resnet6/final/{key}"], rtol=RTOL, atol=ATOL, err_msg=key)
