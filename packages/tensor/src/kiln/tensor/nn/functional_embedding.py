"""The lookup-table functions of `kiln.tensor.nn.functional`: `embedding` (with torch's `padding_idx`, `max_norm`,
`scale_grad_by_freq`), `embedding_bag` (sums, means or maxima of bags of rows) and `one_hot`.

A lookup is a one-hot product `(ids == arange(num_embeddings)) @ weight`, which codegen turns into a gather of the
picked rows; a bag is a 0 / 1 membership matrix (bags x picks) built from `offsets` with tensor comparisons, so
nothing is read back to the host. Import them from `kiln.tensor.nn.functional`.
"""

from __future__ import annotations

from kiln.tensor.grad_mode import no_grad
from kiln.tensor.ops.data_checks import check_index_values
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["embedding", "embedding_bag", "one_hot"]


def embedding(
    input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,
    norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False,
) -> Tensor:  # fmt: skip
    """The rows of `weight` (num_embeddings, dim) picked by integer `input`: shape (*input.shape, dim), like
    `torch.nn.functional.embedding`.

    `padding_idx`'s row gets no gradient; `max_norm` first rescales in place (without gradient) every picked row
    whose `norm_type`-norm exceeds it; `scale_grad_by_freq` divides each row's gradient by how often the row is
    picked. `sparse=True` gives the same values as a dense gradient.

    Example:
        >>> embedding(Tensor([[1]]), Tensor([[0.0, 0.0], [1.0, 2.0]])).tolist()
        [[[1.0, 2.0]]]
    """
    if not isinstance(input, Tensor) or not dtypes.is_int(input.dtype):
        # torch raises RuntimeError here; kiln's Embedding has always raised TypeError, which this keeps
        got = getattr(input, "dtype", type(input).__name__)
        raise TypeError(f"embedding needs an integer index Tensor (Long or Int), got {got!r}")
    if weight.ndim != 2:
        raise RuntimeError(f"'weight' must be 2-D, got shape {list(weight.shape)}")
    count = weight.shape[0]
    if padding_idx is not None:
        if not -count <= padding_idx < count:
            raise ValueError(f"Padding_idx must be within num_embeddings ({count}), got {padding_idx}")
        padding_idx %= count
    # CHECK=1: an index outside [0, num_embeddings) raises IndexError; unchecked it selects a row of zeros
    check_index_values(input, count, "embedding", 0, negative=False)
    # (picks, count): which row each pick takes; codegen turns this one-hot product into a gather of the rows
    positions = Tensor.arange(count, device=input.device).reshape(1, -1)
    picked = (input.reshape(-1, 1) == positions).where(1.0, 0.0)
    if max_norm is not None:
        _renormalize(weight, picked, max_norm, norm_type)
    table = weight
    if padding_idx is not None:
        keep = Tensor.arange(count, device=weight.device).reshape(count, 1) != padding_idx
        table = keep.where(table, table.detach())
    if scale_grad_by_freq:
        frequency = picked.sum(0).maximum(1).reshape(count, 1).cast(weight.dtype)
        scaled = table / frequency.detach()
        # the values of `table`, the gradient of `scaled`: each row's gradient divided by its frequency
        table = scaled + (table - scaled).detach()
    rows = picked.cast(weight.dtype) @ table
    return rows.reshape(*input.shape, weight.shape[1])


def _renormalize(weight: Tensor, picked: Tensor, max_norm: float, norm_type: float) -> None:
    # torch's embedding_renorm_: rows used by the lookup whose norm exceeds max_norm scale to max_norm (+1e-7 slack)
    with no_grad():
        norms = weight.norm(norm_type, dim=1, keepdim=True)
        used = picked.sum(0).reshape(-1, 1) > 0
        scale = (used & (norms > max_norm)).where(max_norm / (norms + 1e-7), 1.0)
        weight.assign((weight * scale)._cast(weight.dtype)).realize()


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """(*shape) integer classes -> (*shape, num_classes) of 0 / 1 (num_classes=-1: max + 1), like
    `torch.nn.functional.one_hot`."""
    return tensor.one_hot(num_classes)


_BAG_MODES = ("sum", "mean", "max")


def embedding_bag(
    input: Tensor, weight: Tensor, offsets: Tensor | None = None, max_norm: float | None = None,
    norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
    per_sample_weights: Tensor | None = None, include_last_offset: bool = False, padding_idx: int | None = None,
) -> Tensor:  # fmt: skip
    """The sum, mean or max of each bag of embedding rows, like `torch.nn.functional.embedding_bag`: a 2-d `input`
    holds one bag per row; a 1-d `input` is cut into bags at `offsets` (the start of each bag; with
    `include_last_offset` the last entry ends the last bag). Entries equal to `padding_idx` are left out of their
    bag; an empty bag gives zeros; `per_sample_weights` scale the rows (mode 'sum' only).

    Example:
        >>> embedding_bag(Tensor([0, 1, 1]), Tensor([[1.0], [3.0]]), Tensor([0, 1]), mode="sum").tolist()
        [[1.0], [6.0]]
    """
    if mode not in _BAG_MODES:
        raise ValueError(f"mode has to be one of sum, mean or max, got {mode!r}")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for mode='sum' "
            f"(got mode='{mode}')."
        )
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(
                "if input is 2D, then offsets has to be None, as input is treated is a mini-batch of fixed length "
                f"sequences. However, found offsets of type {type(offsets).__name__}"
            )
        bags, length = input.shape
        starts = Tensor.arange(bags, device=input.device) * length
        ends = starts + length
    elif input.ndim == 1:
        if offsets is None or offsets.ndim != 1:
            raise ValueError(f"offsets has to be a 1D Tensor but got {None if offsets is None else offsets.shape}")
        starts = offsets[:-1] if include_last_offset else offsets
        ends = offsets[1:] if include_last_offset else offsets[1:].cat(Tensor([input.shape[0]], device=offsets.device))
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    flat = input.reshape(-1)
    rows = embedding(flat, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)
    if per_sample_weights is not None:
        if per_sample_weights.shape != input.shape:
            raise ValueError(
                f"embedding_bag: If per_sample_weights ({list(per_sample_weights.shape)}) is not None, then it must "
                f"have the same shape as the input ({list(input.shape)})"
            )
        rows = rows * per_sample_weights.reshape(-1, 1)
    positions = Tensor.arange(flat.shape[0], device=input.device).reshape(1, -1)
    member = (positions >= starts.reshape(-1, 1)) & (positions < ends.reshape(-1, 1))  # (bags, picks)
    if padding_idx is not None:
        member = member & (flat.reshape(1, -1) != padding_idx % weight.shape[0])
    if mode == "max":
        candidates = member.unsqueeze(-1).where(rows.unsqueeze(0), float("-inf"))
        return member.any(1).unsqueeze(-1).where(candidates.amax(1), 0.0)._cast(rows.dtype)
    totals = member.cast(rows.dtype) @ rows
    if mode == "sum":
        return totals
    counts = member.sum(1, keepdim=True).maximum(1).cast(rows.dtype)
    return totals / counts
