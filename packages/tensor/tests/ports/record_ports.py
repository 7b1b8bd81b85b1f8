"""Records torch's answers for the five ports (`models.py` is the kiln side): for each model its initial state dict,
fixed inputs / targets / noise, and after each of three optimizer steps (two parameter groups, an LR scheduler) the
loss, every parameter and every buffer, into `ports.npz`. The ResNet also runs six steps uninterrupted, for the
resume test.

Run with a Python that has torch: `/work/torchenv/bin/python packages/tensor/tests/ports/record_ports.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = 3


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, widths: tuple[int, ...] = (4, 8, 16, 32), num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        in_planes = widths[0]
        stages = []
        for index, width in enumerate(widths):
            stride = 1 if index == 0 else 2
            stages.append(nn.Sequential(BasicBlock(in_planes, width, stride), BasicBlock(width, width)))
            in_planes = width
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, channels = x.shape
        q, k, v = self.c_attn(x).split(channels, dim=2)
        q = q.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2)
        k = k.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2)
        v = v.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(batch, time, channels)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int = 32, block_size: int = 8, n_layer: int = 2, n_head: int = 2, n_embd: int = 16):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], dtype=torch.long)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab_size: int = 20, embedding_dim: int = 8, hidden_size: int = 16, num_layers: int = 2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_size, num_layers=num_layers, batch_first=True)
        self.decoder = nn.Linear(hidden_size, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        output, _ = self.lstm(self.embedding(tokens))
        return self.decoder(output)


class ViT(nn.Module):
    def __init__(self, image_size: int = 8, patch_size: int = 4, dim: int = 16, depth: int = 2, heads: int = 2):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch_size, stride=patch_size)
        patches = (image_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, patches + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 2 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


class VAE(nn.Module):
    def __init__(self, features: int = 16, hidden: int = 12, latent: int = 4) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(features, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, features))

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = self.encoder(x)
        mu, logvar = self.mu(hidden), self.logvar(hidden)
        z = mu + noise * torch.exp(0.5 * logvar)
        return self.decoder(z), mu, logvar


def vae_loss(logits: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    reconstruction = F.binary_cross_entropy_with_logits(logits, x, reduction="sum")
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return (reconstruction + kl) / x.shape[0]


def no_decay(name: str, param: torch.Tensor) -> bool:
    return param.ndim < 2 or name.endswith("bias")


# ----- each port: model, data, loss, optimizer + scheduler (the test builds the same with kiln)


def resnet_setup(generator: torch.Generator) -> dict[str, Any]:
    model = ResNet18()
    images = torch.randn(8, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (8,), generator=generator)
    decay = [p for n, p in model.named_parameters() if not no_decay(n, p) and not n.startswith("fc.")]
    plain = [p for n, p in model.named_parameters() if no_decay(n, p) and not n.startswith("fc.")]
    optimizer = torch.optim.SGD(
        [
            {"params": decay, "weight_decay": 5e-4},
            {"params": plain, "weight_decay": 0.0},
            {"params": list(model.fc.parameters()), "lr": 0.05},
        ],
        lr=0.1,
        momentum=0.9,
        nesterov=True,
    )
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[0.05, 0.05, 0.02], total_steps=6)
    return {
        "model": model,
        "inputs": {"images": images, "labels": labels},
        "loss": lambda m, d: F.cross_entropy(m(d["images"]), d["labels"]),
        "optimizer": optimizer,
        "scheduler": scheduler,
    }


def gpt_setup(generator: torch.Generator) -> dict[str, Any]:
    model = GPT()
    tokens = torch.randint(0, 32, (2, 9), generator=generator)
    named = dict(model.named_parameters())
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for n, p in named.items() if p.ndim >= 2], "weight_decay": 0.1},
            {"params": [p for n, p in named.items() if p.ndim < 2], "weight_decay": 0.0},
        ],
        lr=3e-3,
        betas=(0.9, 0.95),
    )
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.25, total_iters=2)
    return {
        "model": model,
        "inputs": {"tokens": tokens},
        "loss": lambda m, d: F.cross_entropy(m(d["tokens"][:, :-1]).reshape(-1, 32), d["tokens"][:, 1:].reshape(-1)),
        "optimizer": optimizer,
        "scheduler": scheduler,
    }


def lstm_setup(generator: torch.Generator) -> dict[str, Any]:
    model = LSTMLanguageModel()
    tokens = torch.randint(0, 20, (3, 7), generator=generator)
    body = [p for n, p in model.named_parameters() if not n.startswith("decoder.")]
    optimizer = torch.optim.Adam([{"params": body}, {"params": list(model.decoder.parameters()), "lr": 2e-2}], lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)

    def loss(m: nn.Module, d: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = m(d["tokens"][:, :-1])
        return F.cross_entropy(logits.reshape(-1, 20), d["tokens"][:, 1:].reshape(-1))

    return {"model": model, "inputs": {"tokens": tokens}, "loss": loss, "optimizer": optimizer,
            "scheduler": scheduler, "clip": 0.5}  # fmt: skip


def vit_setup(generator: torch.Generator) -> dict[str, Any]:
    model = ViT()
    images = torch.randn(3, 3, 8, 8, generator=generator)
    labels = torch.randint(0, 10, (3,), generator=generator)
    named = list(model.named_parameters())
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for n, p in named if p.ndim >= 2 and n not in ("cls_token", "pos_embed")]},
            {"params": [p for n, p in named if p.ndim < 2 or n in ("cls_token", "pos_embed")], "weight_decay": 0.0},
        ],
        lr=2e-3,
        weight_decay=0.05,
    )
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4, eta_min=1e-4)
    return {
        "model": model,
        "inputs": {"images": images, "labels": labels},
        "loss": lambda m, d: F.cross_entropy(m(d["images"]), d["labels"], label_smoothing=0.1),
        "optimizer": optimizer,
        "scheduler": scheduler,
    }


def _reorder(outputs: tuple[torch.Tensor, ...], x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    logits, mu, logvar = outputs
    return logits, x, mu, logvar


def vae_setup(generator: torch.Generator) -> dict[str, Any]:
    model = VAE()
    x = torch.rand(8, 16, generator=generator)
    noise = torch.randn(8, 4, generator=generator)
    encoder = [p for n, p in model.named_parameters() if not n.startswith("decoder.")]
    optimizer = torch.optim.Adam(
        [{"params": encoder}, {"params": list(model.decoder.parameters()), "lr": 5e-3, "weight_decay": 1e-4}], lr=1e-2
    )
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.8)
    return {
        "model": model,
        "inputs": {"x": x, "noise": noise},
        "loss": lambda m, d: vae_loss(*_reorder(m(d["x"], d["noise"]), d["x"])),
        "optimizer": optimizer,
        "scheduler": scheduler,
    }


PORTS: dict[str, Callable[[torch.Generator], dict[str, Any]]] = {
    "resnet": resnet_setup,
    "gpt": gpt_setup,
    "lstm": lstm_setup,
    "vit": vit_setup,
    "vae": vae_setup,
}


def record(name: str, setup: Callable[[torch.Generator], dict[str, Any]], seed: int, steps: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    port = setup(torch.Generator().manual_seed(seed))
    model, optimizer, scheduler = port["model"], port["optimizer"], port["scheduler"]
    model.train()
    out: dict[str, Any] = {f"{name}/state_keys": np.array(list(model.state_dict()))}
    out.update({f"{name}/init/{k}": v.detach().numpy().copy() for k, v in model.state_dict().items()})
    out.update({f"{name}/in/{k}": v.numpy() for k, v in port["inputs"].items()})
    losses, rates = [], []
    for step in range(steps):
        rates.append([group["lr"] for group in optimizer.param_groups])
        optimizer.zero_grad()
        loss = port["loss"](model, port["inputs"])
        loss.backward()
        if "clip" in port:
            nn.utils.clip_grad_norm_(model.parameters(), port["clip"])
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if step < STEPS:
            out.update({f"{name}/step{step}/{k}": v.detach().numpy().copy() for k, v in model.state_dict().items()})
    out[f"{name}/loss"] = np.array(losses, dtype=np.float64)
    out[f"{name}/lr"] = np.array(rates, dtype=np.float64)
    if steps > STEPS:
        out.update({f"{name}/final/{k}": v.detach().numpy().copy() for k, v in model.state_dict().items()})
    return out


# The sizes are chosen so that float32 rounding does not grow past the tests' tolerance in three steps: at 16x16
# images, batch 4 and max_lr 0.2, BatchNorm over layer4's 4 values per channel let a 1e-6 relative change of the
# initial weights move parameters by more than 1e-2 after three steps (in torch itself).


def main() -> None:
    torch.use_deterministic_algorithms(True)
    arrays: dict[str, Any] = {}
    for seed, (name, setup) in enumerate(PORTS.items()):
        arrays.update(record(name, setup, seed, STEPS))
    resumed = record("resnet6", resnet_setup, 0, 2 * STEPS)
    arrays.update({k: v for k, v in resumed.items() if k.startswith(("resnet6/loss", "resnet6/final/"))})
    np.savez_compressed(Path(__file__).with_name("ports.npz"), **arrays)


if __name__ == "__main__":
    main()
