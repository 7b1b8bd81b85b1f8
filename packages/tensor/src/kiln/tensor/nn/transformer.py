"""Transformer layers with torch.nn's names, arguments and state-dict keys: `TransformerEncoderLayer`,
`TransformerDecoderLayer`, the stacks `TransformerEncoder` / `TransformerDecoder`, and `Transformer`.

The layers are built on `MultiheadAttention`, `Linear`, `LayerNorm` and `Dropout`, attributes created in torch's
order ("self_attn.in_proj_weight", "linear1.weight", "norm2.bias", ...), so a torch checkpoint loads as is. Masks
follow torch: a bool mask is True where attention is NOT allowed, a float mask is added to the scores; a
`*_key_padding_mask` (N, S) hides keys per batch row; `is_causal` without a mask means the causal mask (torch asks
for the mask as well and treats the flag as a hint). Unlike torch there is no fast path with nested tensors: the
same computation runs in training and evaluation.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, ClassVar

from kiln.tensor.nn import functional as F
from kiln.tensor.nn import init
from kiln.tensor.nn.attention import MultiheadAttention
from kiln.tensor.nn.containers import ModuleList
from kiln.tensor.nn.dropout import Dropout
from kiln.tensor.nn.linear import Linear
from kiln.tensor.nn.module import Module
from kiln.tensor.nn.normalization import LayerNorm
from kiln.tensor.tensor import Tensor

__all__ = [
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]


def _activation(activation: str | Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if callable(activation) and not isinstance(activation, str):
        return activation
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


def clone_module(module: Module) -> Module:
    """A deep copy of `module` whose tensors are new buffers with the same values (and requires_grad), as the stacks
    copy their layer like torch's `copy.deepcopy`."""
    memo: dict[int, Any] = {}

    def clone(value: Any) -> Any:
        if id(value) in memo:
            return memo[id(value)]
        if isinstance(value, Tensor):
            result: Any = init.fresh_buffer(value)
            if value.requires_grad is not None:
                result.requires_grad_(value.requires_grad)
        elif isinstance(value, list):
            result = []
            memo[id(value)] = result
            result.extend(clone(item) for item in value)
        elif isinstance(value, tuple):
            result = tuple(clone(item) for item in value)
        elif isinstance(value, set):
            result = set(value)
        elif isinstance(value, dict):
            result = {}
            memo[id(value)] = result
            result.update((key, clone(item)) for key, item in value.items())
        elif isinstance(value, Module):
            result = copy.copy(value)
            memo[id(value)] = result
            result.__dict__.update({key: clone(item) for key, item in vars(value).items()})
        else:
            result = value
        memo[id(value)] = result
        return result

    cloned: Module = clone(module)
    return cloned


def _layer_input(x: Tensor, d_model: int, what: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} expects a Tensor, got {type(x).__name__}")
    if x.ndim not in (2, 3) or x.shape[-1] != d_model:
        raise ValueError(f"{what} expects inputs of shape (S, N, {d_model}) or (S, {d_model}), got {x.shape}")


def _attended(
    attention: MultiheadAttention, dropout: Dropout, x: Tensor, memory: Tensor, mask: Tensor | None,
    padding: Tensor | None, is_causal: bool,
) -> Tensor:  # fmt: skip
    """dropout(attention of queries `x` over keys and values `memory`): a layer's self- (memory = x) or cross-attention
    block."""
    attended, _ = attention(
        x, memory, memory, attn_mask=mask, key_padding_mask=padding, need_weights=False, is_causal=is_causal
    )
    result: Tensor = dropout(attended)
    return result


class _TransformerLayer(Module):
    """What the encoder and decoder layers share: self-attention, the feed-forward block and their norms and dropouts,
    built in torch's attribute order (so parameters and state_dict keys line up), plus, for the decoder
    (`attends_to_memory`), attention over the memory with its own norm and dropout."""

    attends_to_memory: ClassVar[bool] = False

    def __init__(
        self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
        norm_first: bool = False, bias: bool = True, device: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__()

        def attention() -> MultiheadAttention:
            return MultiheadAttention(d_model, nhead, dropout, bias=bias, batch_first=batch_first, device=device)

        def norm() -> LayerNorm:
            return LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device)

        self.self_attn = attention()
        if self.attends_to_memory:
            self.multihead_attn = attention()
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, device=device)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, device=device)
        self.norm_first = norm_first
        self.norm1 = norm()
        self.norm2 = norm()
        if self.attends_to_memory:
            self.norm3 = norm()
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        if self.attends_to_memory:
            self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)
        self.d_model = d_model

    def _self_attention(self, x: Tensor, mask: Tensor | None, padding: Tensor | None, is_causal: bool) -> Tensor:
        return _attended(self.self_attn, self.dropout1, x, x, mask, padding, is_causal)

    def _feed_forward(self, x: Tensor, dropout: Dropout) -> Tensor:
        """linear2(dropout(activation(linear1(x)))) through the block's last dropout (`dropout`)."""
        result: Tensor = dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))
        return result


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention then a feed-forward block, each with a residual connection and LayerNorm (after, or before
    with norm_first=True), like `torch.nn.TransformerEncoderLayer`.

    Example:
        >>> layer = TransformerEncoderLayer(8, 2, dim_feedforward=16); layer(Tensor.randn(5, 2, 8)).shape
        (5, 2, 8)
    """

    def forward(
        self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """The layer's output, shaped like `src` ((S, N, E), (N, S, E) with batch_first, or (S, E))."""
        _layer_input(src, self.d_model, type(self).__name__)
        x = src
        if self.norm_first:
            x = x + self._self_attention(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._feed_forward(self.norm2(x), self.dropout2)
        x = self.norm1(x + self._self_attention(x, src_mask, src_key_padding_mask, is_causal))
        result: Tensor = self.norm2(x + self._feed_forward(x, self.dropout2))
        return result


class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention, attention over `memory` (the encoder's output), then a feed-forward block, each with a residual
    connection and LayerNorm (after, or before with norm_first=True), like `torch.nn.TransformerDecoderLayer`.

    Example:
        >>> layer = TransformerDecoderLayer(8, 2, dim_feedforward=16)
        >>> layer(Tensor.randn(4, 2, 8), Tensor.randn(5, 2, 8)).shape
        (4, 2, 8)
    """

    attends_to_memory = True

    def forward(
        self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False, memory_is_causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """The layer's output, shaped like `tgt`."""
        _layer_input(tgt, self.d_model, type(self).__name__)
        _layer_input(memory, self.d_model, type(self).__name__)
        x = tgt
        if self.norm_first:
            x = x + self._self_attention(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._cross_attention(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._feed_forward(self.norm3(x), self.dropout3)
        x = self.norm1(x + self._self_attention(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._cross_attention(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        result: Tensor = self.norm3(x + self._feed_forward(x, self.dropout3))
        return result

    def _cross_attention(
        self, x: Tensor, memory: Tensor, mask: Tensor | None, padding: Tensor | None, is_causal: bool
    ) -> Tensor:
        return _attended(self.multihead_attn, self.dropout2, x, memory, mask, padding, is_causal)


def _layer_copies(layer: object, num_layers: object, what: str, argument: str) -> ModuleList:
    """`num_layers` clones of `layer` for the stack `what` (TypeError unless `layer`, its `argument`, is a Module;
    ValueError unless num_layers is an int >= 0)."""
    if not isinstance(layer, Module):
        raise TypeError(f"{what} needs a Module as {argument}, got {type(layer).__name__}")
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
        raise ValueError(f"{what} num_layers must be an int >= 0, got {num_layers!r}")
    return ModuleList([clone_module(layer) for _ in range(num_layers)])


class TransformerEncoder(Module):
    """`num_layers` copies of `encoder_layer` applied in turn (each starting with the layer's values, as torch's deep
    copies), then the optional `norm`, like `torch.nn.TransformerEncoder` ("layers.0.self_attn.in_proj_weight", ...).

    Example:
        >>> stack = TransformerEncoder(TransformerEncoderLayer(8, 2, 16), num_layers=2)
        >>> stack(Tensor.randn(5, 2, 8)).shape
        (5, 2, 8)
    """

    def __init__(
        self, encoder_layer: Module, num_layers: int, norm: Module | None = None, enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        self.layers = _layer_copies(encoder_layer, num_layers, "TransformerEncoder", "encoder_layer")
        self.num_layers = num_layers
        self.norm = norm
        # kept for torch's signature: kiln has no nested-tensor fast path
        self.enable_nested_tensor, self.mask_check = enable_nested_tensor, mask_check

    def forward(
        self, src: Tensor, mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:  # fmt: skip
        """`src` through every layer (with the same masks), then `norm`."""
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """`num_layers` copies of `decoder_layer` applied in turn over the same `memory`, then the optional `norm`, like
    `torch.nn.TransformerDecoder`.

    Example:
        >>> stack = TransformerDecoder(TransformerDecoderLayer(8, 2, 16), num_layers=2)
        >>> stack(Tensor.randn(4, 2, 8), Tensor.randn(5, 2, 8)).shape
        (4, 2, 8)
    """

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _layer_copies(decoder_layer, num_layers, "TransformerDecoder", "decoder_layer")
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None, memory_is_causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """`tgt` through every layer, each attending over `memory`, then `norm`."""
        x = tgt
        for layer in self.layers:
            x = layer(
                x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=bool(tgt_is_causal),
                memory_is_causal=memory_is_causal,
            )  # fmt: skip
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """An encoder-decoder transformer, like `torch.nn.Transformer`: `encoder` (a TransformerEncoder with a final
    LayerNorm) reads `src`, `decoder` reads `tgt` attending over the encoder's output; every parameter with more than
    one dim is re-drawn xavier-uniform, as torch does.

    Example:
        >>> model = Transformer(8, 2, 1, 1, dim_feedforward=16)
        >>> model(Tensor.randn(5, 2, 8), Tensor.randn(4, 2, 8)).shape
        (4, 2, 8)
    """

    def __init__(
        self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
        dim_feedforward: int = 2048, dropout: float = 0.1, activation: str | Callable[[Tensor], Tensor] = "relu",
        custom_encoder: Module | None = None, custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5,
        batch_first: bool = False, norm_first: bool = False, bias: bool = True, device: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        options: dict[str, Any] = {
            "dim_feedforward": dim_feedforward,
            "dropout": dropout,
            "activation": activation,
            "layer_norm_eps": layer_norm_eps,
            "batch_first": batch_first,
            "norm_first": norm_first,
            "bias": bias,
            "device": device,
        }
        norm_options: dict[str, Any] = {"eps": layer_norm_eps, "bias": bias, "device": device}
        if custom_encoder is not None:
            self.encoder: Module = custom_encoder
        else:
            encoder_layer = TransformerEncoderLayer(d_model, nhead, **options)
            self.encoder = TransformerEncoder(encoder_layer, num_encoder_layers, LayerNorm(d_model, **norm_options))
        if custom_decoder is not None:
            self.decoder: Module = custom_decoder
        else:
            decoder_layer = TransformerDecoderLayer(d_model, nhead, **options)
            self.decoder = TransformerDecoder(decoder_layer, num_decoder_layers, LayerNorm(d_model, **norm_options))
        for parameter in self.parameters():
            if parameter.ndim > 1:
                parameter.assign(init.xavier_uniform(parameter.shape, device=parameter.device).detach()).realize()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(
        self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None, tgt_is_causal: bool | None = None, memory_is_causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """The decoder's output for `tgt` (shaped like `tgt`) given the encoded `src`."""
        batch_dim = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        result: Tensor = self.decoder(
            tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )  # fmt: skip
        return result

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: str | None = None) -> Tensor:
        """The (sz, sz) float causal mask: 0 on and below the diagonal, -inf above, like torch's."""
        if isinstance(sz, bool) or not isinstance(sz, int) or sz < 0:
            raise ValueError(f"generate_square_subsequent_mask needs a size >= 0, got {sz!r}")
        return Tensor.full((sz, sz), float("-inf"), device=device).triu(1)
