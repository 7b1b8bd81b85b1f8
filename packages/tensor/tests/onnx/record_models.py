"""Records the real-model fixtures of test_onnx_real_models.py: small PyTorch models exported with torch.onnx.export.

Run with an interpreter that has torch, onnx and onnxruntime (torch is never a dependency of kiln or its tests):

    /work/torchenv/bin/python packages/tensor/tests/onnx/record_models.py

It writes models/*.onnx beside this file: a ResNet-18-shaped CNN, a BERT-style encoder, a GPT-2-style decoder with a
KV cache (past_key_*/past_value_* in, present_key_*/present_value_* out), a MobileNet-style depthwise CNN (inverted
residuals, squeeze-excite, hard-swish), an LSTM, and two int8 models from onnxruntime.quantization: the BERT-style
encoder quantized dynamically (DynamicQuantizeLinear + MatMulInteger) and the ResNet-shaped CNN quantized statically
in QDQ form (QuantizeLinear / DequantizeLinear around every Conv and Gemm); and the BERT and GPT-2 models after
onnxruntime's transformer optimizer (com.microsoft SkipLayerNormalization, BiasGelu, FastGelu). The weights are
seeded random values; the tests compare kiln against onnxruntime on these files, so nothing else is recorded.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

MODELS = Path(__file__).resolve().parent / "models"
OPSET = 17


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18's layout (7x7 stem, max pool, four stages of two basic blocks, average pool, fc) at 1/8 width."""

    def __init__(self, widths: tuple[int, ...] = (8, 16, 32, 64), classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        blocks: list[nn.Module] = []
        previous = widths[0]
        for stage, width in enumerate(widths):
            blocks += [BasicBlock(previous, width, 1 if stage == 0 else 2), BasicBlock(width, width, 1)]
            previous = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(previous, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int, expand: int, excite: bool) -> None:
        super().__init__()
        hidden = inputs * expand
        self.residual = stride == 1 and inputs == outputs
        self.expand = nn.Sequential(nn.Conv2d(inputs, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6())
        self.depthwise = nn.Sequential(
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.Hardswish()
        )
        self.excite = (
            nn.Sequential(
                nn.AdaptiveAvgPool2d(1), nn.Conv2d(hidden, hidden // 4, 1), nn.ReLU(), nn.Conv2d(hidden // 4, hidden, 1)
            )
            if excite
            else None
        )
        self.project = nn.Sequential(nn.Conv2d(hidden, outputs, 1, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise(self.expand(x))
        if self.excite is not None:
            y = y * F.hardsigmoid(self.excite(y))
        y = self.project(y)
        return x + y if self.residual else y


class MobileNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 1, 1, False),
            InvertedResidual(16, 24, 2, 4, False),
            InvertedResidual(24, 24, 1, 3, True),
            InvertedResidual(24, 40, 2, 3, True),
            InvertedResidual(40, 40, 1, 3, True),
        )
        self.head = nn.Sequential(nn.Linear(40, 64), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(self.stem(x))
        return self.head(y.mean((2, 3)))


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads, self.size = heads, width // heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        batch, sequence, _ = x.shape
        return x.view(batch, sequence, self.heads, self.size).transpose(1, 2)

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = (self.split(part) for part in self.qkv(x).chunk(3, dim=-1))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.size) + bias
        mixed = scores.softmax(-1) @ v
        batch, _, sequence, _ = mixed.shape
        return self.out(mixed.transpose(1, 2).reshape(batch, sequence, -1)), k, v


class EncoderLayer(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attention = SelfAttention(width, heads)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.ffn = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x, bias)[0])
        return self.norm2(x + self.ffn(x))


class Bert(nn.Module):
    """BERT's encoder: token + position + segment embeddings, post-norm layers, erf GELU, a pooled tanh head."""

    def __init__(self, vocab: int = 100, width: int = 32, heads: int = 4, layers: int = 2, positions: int = 64) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(positions, width)
        self.segments = nn.Embedding(2, width)
        self.norm = nn.LayerNorm(width)
        self.layers = nn.ModuleList(EncoderLayer(width, heads) for _ in range(layers))
        self.pool = nn.Linear(width, width)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.norm(self.tokens(input_ids) + self.positions(positions) + self.segments(token_type_ids))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return x, torch.tanh(self.pool(x[:, 0]))


class DecoderLayer(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attention = SelfAttention(width, heads)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mixed, k, v = self.attention(self.norm1(x), bias, past)
        x = x + mixed
        return x + self.mlp(self.norm2(x)), k, v


class Gpt2(nn.Module):
    """GPT-2's decoder: pre-norm layers, tanh GELU, a causal mask offset by the cached length, tied output weights."""

    def __init__(self, vocab: int = 100, width: int = 32, heads: int = 4, layers: int = 2, positions: int = 64) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(positions, width)
        self.layers = nn.ModuleList(DecoderLayer(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)

    def forward(self, input_ids: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cached, sequence = past[0].shape[2], input_ids.shape[1]
        query_positions = torch.arange(sequence, device=input_ids.device) + cached
        key_positions = torch.arange(cached + sequence, device=input_ids.device)
        visible = key_positions[None, :] <= query_positions[:, None]
        bias = torch.where(visible, 0.0, -1e9)[None, None]
        x = self.tokens(input_ids) + self.positions(query_positions)[None]
        presents: list[torch.Tensor] = []
        for index, layer in enumerate(self.layers):
            x, k, v = layer(x, bias, (past[2 * index], past[2 * index + 1]))
            presents += [k, v]
        logits = self.norm(x) @ self.tokens.weight.t()
        return (logits, *presents)


class Lstm(nn.Module):
    def __init__(self, features: int = 8, hidden: int = 16, classes: int = 5) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sequence, (hidden, _cell) = self.lstm(x)
        return self.head(sequence), hidden


def _randomize_norms(model: nn.Module) -> None:
    """Batch-norm statistics and affine parameters away from their defaults, so the exported folds are exercised."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d | nn.LayerNorm):
            with torch.no_grad():
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
                if isinstance(module, nn.BatchNorm2d):
                    assert module.running_mean is not None and module.running_var is not None
                    module.running_mean.uniform_(-0.2, 0.2)
                    module.running_var.uniform_(0.5, 1.5)


def _export(
    model: nn.Module,
    name: str,
    args: tuple[torch.Tensor, ...],
    inputs: list[str],
    outputs: list[str],
    dynamic: dict[str, dict[int, str]],
) -> Path:
    model.eval()
    path = MODELS / f"{name}.onnx"
    torch.onnx.export(
        model,
        args,
        str(path),
        input_names=inputs,
        output_names=outputs,
        dynamic_axes=dynamic,
        opset_version=OPSET,
        dynamo=False,
    )
    print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")
    return path


def _quantize(resnet: Path, bert: Path) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    dynamic_path = MODELS / "bert_int8_dynamic.onnx"
    quantize_dynamic(bert, dynamic_path, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
    print(f"{dynamic_path.name}: {dynamic_path.stat().st_size / 1024:.0f} KiB")

    class Images(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(7)
            self.batches = iter([{"x": rng.standard_normal((2, 3, 64, 64)).astype(np.float32)} for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    static_path = MODELS / "resnet18_int8_qdq.onnx"
    quantize_static(
        resnet,
        static_path,
        Images(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )
    print(f"{static_path.name}: {static_path.stat().st_size / 1024:.0f} KiB")


def _fuse(path: Path, kind: str) -> None:
    """The model after onnxruntime's transformer optimizer: SkipLayerNormalization, BiasGelu / FastGelu fused in."""
    from onnxruntime.transformers import optimizer

    fused = optimizer.optimize_model(str(path), model_type=kind, num_heads=4, hidden_size=32, opt_level=0)
    target = MODELS / f"{path.stem}_fused.onnx"
    fused.save_model_to_file(str(target))
    print(f"{target.name}: {target.stat().st_size / 1024:.0f} KiB")


def main() -> None:
    torch.manual_seed(39)
    MODELS.mkdir(exist_ok=True)
    resnet = ResNet18()
    _randomize_norms(resnet)
    resnet_path = _export(
        resnet, "resnet18", (torch.randn(2, 3, 64, 64),), ["x"], ["logits"], {"x": {0: "batch"}, "logits": {0: "batch"}}
    )
    mobilenet = MobileNet()
    _randomize_norms(mobilenet)
    _export(
        mobilenet,
        "mobilenet",
        (torch.randn(2, 3, 64, 64),),
        ["x"],
        ["logits"],
        {"x": {0: "batch"}, "logits": {0: "batch"}},
    )
    bert = Bert()
    _randomize_norms(bert)
    ids = torch.randint(0, 100, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.int64)
    mask[1, 5:] = 0
    tokens = {0: "batch", 1: "sequence"}
    bert_path = _export(
        bert,
        "bert",
        (ids, mask, torch.zeros(2, 7, dtype=torch.int64)),
        ["input_ids", "attention_mask", "token_type_ids"],
        ["hidden", "pooled"],
        {
            "input_ids": tokens,
            "attention_mask": tokens,
            "token_type_ids": tokens,
            "hidden": tokens,
            "pooled": {0: "batch"},
        },
    )
    gpt2 = Gpt2()
    _randomize_norms(gpt2)
    past_names = [f"past_{kind}_{layer}" for layer in range(2) for kind in ("key", "value")]
    present_names = [f"present_{kind}_{layer}" for layer in range(2) for kind in ("key", "value")]
    cache = {0: "batch", 2: "past_sequence"}
    gpt2_path = _export(
        gpt2,
        "gpt2",
        (torch.randint(0, 100, (2, 3)), *[torch.randn(2, 4, 5, 8) for _ in past_names]),
        ["input_ids", *past_names],
        ["logits", *present_names],
        {
            "input_ids": tokens,
            "logits": tokens,
            **{name: cache for name in past_names},
            **{name: {0: "batch", 2: "total_sequence"} for name in present_names},
        },
    )
    _export(
        Lstm(),
        "lstm",
        (torch.randn(2, 6, 8),),
        ["x"],
        ["scores", "hidden"],
        {"x": {0: "batch", 1: "sequence"}, "scores": {0: "batch", 1: "sequence"}, "hidden": {1: "batch"}},
    )
    _quantize(resnet_path, bert_path)
    _fuse(bert_path, "bert")
    _fuse(gpt2_path, "gpt2")


if __name__ == "__main__":
    main()
