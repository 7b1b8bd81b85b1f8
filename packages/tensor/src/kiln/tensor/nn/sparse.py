"""Lookup-table layers: `Embedding` with torch's full constructor (`padding_idx`, `max_norm`, `norm_type`,
`scale_grad_by_freq`, `sparse`, `_weight`, `_freeze`) and `from_pretrained`, computed by `F.embedding`; and
`EmbeddingBag` (sums, means or maxima of bags of rows, `F.embedding_bag`).
"""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn import init
from kiln.tensor.nn.linear import check_size
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["Embedding", "EmbeddingBag"]


def _pretrained_size(embeddings: Tensor) -> tuple[int, int]:
    """The (rows, columns) of the table a `from_pretrained` copies; ValueError unless it is a 2-d Tensor."""
    if not isinstance(embeddings, Tensor) or embeddings.ndim != 2:
        raise ValueError(
            f"Embeddings parameter is expected to be 2-dimensional, got {getattr(embeddings, 'shape', embeddings)}"
        )
    rows, columns = embeddings.shape
    return rows, columns


def _norm_options(max_norm: float | None, norm_type: float, scale_grad_by_freq: bool) -> str:
    """The part of torch's repr that names the lookup options left at other values than their defaults."""
    text = ""
    if max_norm is not None:
        text += f", max_norm={max_norm}"
    if norm_type != 2:
        text += f", norm_type={norm_type}"
    if scale_grad_by_freq:
        text += f", scale_grad_by_freq={scale_grad_by_freq}"
    return text


class Embedding(Module):
    """A lookup table: row i of weight (num_embeddings, embedding_dim) for index i, like `torch.nn.Embedding`:
    weight drawn from N(0, 1) with the `padding_idx` row zeroed (that row also gets no gradient).

    Example:
        >>> Embedding(10, 4, padding_idx=0)(Tensor([[0, 2]]))[0, 0].tolist()
        [0.0, 0.0, 0.0, 0.0]
    """

    def __init__(
        self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, max_norm: float | None = None,
        norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False, _weight: Tensor | None = None,
        _freeze: bool = False, device: str | tuple[str, ...] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.num_embeddings = check_size(num_embeddings, "Embedding num_embeddings")
        self.embedding_dim = check_size(embedding_dim, "Embedding embedding_dim")
        self.weight = init.normal((num_embeddings, embedding_dim), device=device)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Padding_idx must be within num_embeddings ({num_embeddings}), got {padding_idx}")
            padding_idx %= num_embeddings
        self.padding_idx, self.max_norm, self.norm_type = padding_idx, max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is not None:
            if _weight.shape != (num_embeddings, embedding_dim):
                raise ValueError(
                    f"Shape of weight {list(_weight.shape)} does not match num_embeddings and embedding_dim "
                    f"[{num_embeddings}, {embedding_dim}]"
                )
            self.weight = init.fresh_buffer(_weight).requires_grad_(not _freeze)
        elif padding_idx is not None:
            keep = Tensor.arange(num_embeddings, device=self.weight.device).reshape(-1, 1) != padding_idx
            self.weight = init.parameter(keep.where(self.weight.detach(), 0.0))

    def forward(self, indices: Tensor) -> Tensor:
        """F.embedding(indices, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)."""
        return F.embedding(
            indices, self.weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse
        )

    def extra_repr(self) -> str:
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx}"
        text += _norm_options(self.max_norm, self.norm_type, self.scale_grad_by_freq)
        if self.sparse:
            text += ", sparse=True"
        return text

    @classmethod
    def from_pretrained(
        cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None, max_norm: float | None = None,
        norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False,
    ) -> Embedding:  # fmt: skip
        """An Embedding whose weight is a copy of the 2-d `embeddings` (trainable unless `freeze`), like
        `torch.nn.Embedding.from_pretrained`."""
        rows, columns = _pretrained_size(embeddings)
        return cls(
            rows, columns, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse, embeddings, freeze,
            embeddings.device,
        )  # fmt: skip


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embedding rows, like `torch.nn.EmbeddingBag` (weight from N(0, 1), the
    `padding_idx` row zeroed).

    Example:
        >>> EmbeddingBag(10, 3, mode="sum")(Tensor([1, 2, 4]), Tensor([0, 2])).shape
        (2, 3)
    """

    def __init__(
        self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None, norm_type: float = 2.0,
        scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False, _weight: Tensor | None = None,
        include_last_offset: bool = False, padding_idx: int | None = None, device: str | tuple[str, ...] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode has to be one of sum, mean or max, got {mode!r}")
        table = Embedding(num_embeddings, embedding_dim, padding_idx, _weight=_weight, device=device)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.mode, self.sparse, self.include_last_offset = mode, sparse, include_last_offset
        self.padding_idx = table.padding_idx
        self.weight = table.weight

    def forward(self, input: Tensor, offsets: Tensor | None = None, per_sample_weights: Tensor | None = None) -> Tensor:
        """F.embedding_bag(input, weight, offsets, ..., mode, per_sample_weights, include_last_offset, padding_idx)."""
        return F.embedding_bag(
            input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq, self.mode,
            self.sparse, per_sample_weights, self.include_last_offset, self.padding_idx,
        )  # fmt: skip

    def extra_repr(self) -> str:
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        text += _norm_options(self.max_norm, self.norm_type, self.scale_grad_by_freq)
        text += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx}"
        return text

    @classmethod
    def from_pretrained(
        cls, embeddings: Tensor, freeze: bool = True, max_norm: float | None = None, norm_type: float = 2.0,
        scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False, include_last_offset: bool = False,
        padding_idx: int | None = None,
    ) -> EmbeddingBag:  # fmt: skip
        """An EmbeddingBag whose weight is a copy of the 2-d `embeddings` (trainable unless `freeze`), like
        `torch.nn.EmbeddingBag.from_pretrained`."""
        rows, columns = _pretrained_size(embeddings)
        bag = cls(
            rows, columns, max_norm, norm_type, scale_grad_by_freq, mode, sparse, embeddings, include_last_offset,
            padding_idx, embeddings.device,
        )  # fmt: skip
        bag.weight.requires_grad_(not freeze)
        return bag
