"""Five models written as their PyTorch originals are (`import kiln.tensor.nn as nn`,
`import kiln.tensor.nn.functional as F`): a ResNet-18-shaped CNN, a GPT block stack with tied embeddings, an LSTM
language model, a ViT and a VAE. The torch twins are in `record_ports.py`; the differences from the torch text are
kiln's spellings of module-level torch functions (`torch.cat` -> `Tensor.cat`, `torch.arange` -> `Tensor.arange`,
`torch.flatten(x, 1)` -> `x.flatten(1)`).
"""

from __future__ import annotations

import kiln.tensor.nn as nn
import kiln.tensor.nn.functional as F
from kiln.tensor import Tensor


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and a residual (a 1x1 convolution when the shape changes)."""

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

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNet18(nn.Module):
    """ResNet-18's layout (stem, max pool, four stages of two BasicBlocks, global average pool, classifier)."""

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

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        out: Tensor = self.fc(self.avgpool(x).flatten(1))
        return out


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention with one fused q/k/v projection, masked causally by F.scaled_dot_product_attention."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: Tensor) -> Tensor:
        batch, time, channels = x.shape
        q, k, v = self.c_attn(x).split(channels, dim=2)
        q = q.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2)
        k = k.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2)
        v = v.view(batch, time, self.n_head, channels // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(batch, time, channels)
        out: Tensor = self.c_proj(y)
        return out


class MLP(nn.Module):
    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.c_proj(self.gelu(self.c_fc(x)))
        return out


class Block(nn.Module):
    """A pre-norm transformer block (GPT-2's)."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        out: Tensor = x + self.mlp(self.ln_2(x))
        return out


class GPT(nn.Module):
    """GPT-2's layout at a small size, the output projection tied to the token embedding."""

    def __init__(
        self, vocab_size: int = 32, block_size: int = 8, n_layer: int = 2, n_head: int = 2, n_embd: int = 16
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: Tensor) -> Tensor:
        positions = Tensor.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        out: Tensor = self.lm_head(self.ln_f(x))
        return out


class LSTMLanguageModel(nn.Module):
    """Embedding, a two-layer LSTM and a linear decoder to next-token logits."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 8, hidden_size: int = 16, num_layers: int = 2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_size, num_layers=num_layers, batch_first=True)
        self.decoder = nn.Linear(hidden_size, vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        output, _ = self.lstm(self.embedding(tokens))
        out: Tensor = self.decoder(output)
        return out


class ViT(nn.Module):
    """A vision transformer: patches embedded by a strided Conv2d, a class token, learned positions, a pre-norm
    nn.TransformerEncoder and a linear head on the class token."""

    def __init__(self, image_size: int = 8, patch_size: int = 4, dim: int = 16, depth: int = 2, heads: int = 2):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch_size, stride=patch_size)
        patches = (image_size // patch_size) ** 2
        self.cls_token = nn.Parameter(Tensor.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(Tensor.randn(1, patches + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 2 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = Tensor.cat(cls, x, dim=1) + self.pos_embed
        x = self.encoder(x)
        out: Tensor = self.head(self.norm(x[:, 0]))
        return out


class VAE(nn.Module):
    """A variational autoencoder over flat features; the reparameterization noise is an input (fixed in the tests)."""

    def __init__(self, features: int = 16, hidden: int = 12, latent: int = 4) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(features, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, features))

    def forward(self, x: Tensor, noise: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        hidden = self.encoder(x)
        mu, logvar = self.mu(hidden), self.logvar(hidden)
        z = mu + noise * (0.5 * logvar).exp()
        return self.decoder(z), mu, logvar


def vae_loss(logits: Tensor, x: Tensor, mu: Tensor, logvar: Tensor) -> Tensor:
    """Bernoulli reconstruction (binary cross-entropy on logits, summed) plus KL(q(z|x) || N(0, I)), per example."""
    reconstruction = F.binary_cross_entropy_with_logits(logits, x, reduction="sum")
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum()
    out: Tensor = (reconstruction + kl) / x.shape[0]
    return out
