"""Token sampling on the device, inside the jitted decode step: only the chosen token id comes back to the host.

`sample_on_device(logits, params, mode)` draws one token id from a row of logits, as `generate.sample` does on the
host: argmax when greedy, else a draw from softmax(logits / temperature) restricted to the top_k largest and then to
the smallest set whose probability reaches top_p. The sampling parameters and the draw's uniform number arrive as
one float32 tensor `params` = [1 / temperature, top_k, top_p, u] (a replay input of the step, so a new temperature,
top_k, top_p or seed compiles nothing); which restrictions apply is the `SamplingMode`, one jitted step per mode.

Without a sort (kiln sorts by counting, O(vocab**2)), the top-k and top-p cuts are found as thresholds on the scaled
logits by a search of `PASSES` passes, each testing `CANDIDATES` + 1 evenly spaced values at once (one reduction over
the vocabulary per pass):

- top-k: the largest value x with #{s >= x} >= k; kept: s >= x;
- top-p: the largest value x whose mass strictly above it, #{p(s > x)}, still reaches top_p; kept: s > x.

The search narrows the cut to (range of the scaled logits) / CANDIDATES**PASSES, about 6e-8 of the range, so a
token whose scaled logit lies closer than that to the cut (or ties with the last kept one, which the host sampler
splits by position) may be kept or dropped where the host sampler differs. The draw is an inverse CDF in vocabulary
order: the first token whose running weight exceeds u times the total.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["CANDIDATES", "PASSES", "SamplingMode", "sample_on_device", "sampling_params", "sampling_row"]

CANDIDATES = 16
PASSES = 7
_FLOOR = -1e30  # scaled logits are clamped here: a tiny temperature cannot make them -inf (and the search NaN)


@dataclass(frozen=True)
class SamplingMode:
    """Which parts of the sampler run: greedy (argmax), else a draw with optional top-k / top-p cuts."""

    greedy: bool
    top_k: bool = False
    top_p: bool = False

    @classmethod
    def of(cls, temperature: float, top_k: int, top_p: float, vocab: int) -> SamplingMode:
        """The mode of host-side settings (top_k 1 is greedy; a top_k of 0 or >= vocab and top_p 1 cut nothing)."""
        if temperature == 0.0 or top_k == 1:
            return cls(greedy=True)
        return cls(greedy=False, top_k=0 < top_k < vocab, top_p=top_p < 1.0)


def sampling_row(temperature: float, top_k: int, top_p: float, rng: np.random.Generator) -> list[float]:
    """[1 / temperature, top_k, top_p, u], u uniform in [0, 1) from `rng` (one draw per sampled token)."""
    uniform = min(float(rng.random()), 1.0 - 2.0**-23)  # u * total stays below total in float32
    inverse = 1.0 / temperature if temperature > 0 else 1.0
    return [inverse, float(top_k), top_p, uniform]


def sampling_params(temperature: float, top_k: int, top_p: float, rng: np.random.Generator) -> Tensor:
    """The step's `params` input: `sampling_row` as a (4,) float32 Tensor."""
    return Tensor(np.array(sampling_row(temperature, top_k, top_p, rng), np.float32))


def _cut(lo: Tensor, hi: Tensor, reaches: Callable[[Tensor], Tensor]) -> Tensor:
    """The search: the largest candidate in [lo, hi] for which `reaches(candidates)` (a (C+1,) bool, true at lo and
    monotone: true up to the cut, false past it) holds, narrowed PASSES times."""
    steps = Tensor.arange(CANDIDATES + 1).float() / CANDIDATES
    for _ in range(PASSES):
        candidates = lo + (hi - lo) * steps
        ok = reaches(candidates)
        lo, hi = ok.where(candidates, -np.inf).max(), ok.where(np.inf, candidates).min().minimum(hi)
    return lo


def sample_on_device(logits: Tensor, params: Tensor, mode: SamplingMode) -> Tensor:
    """The next token id, a (1,) int32 Tensor, from `logits` (vocab,) (see the module docstring)."""
    vocab = logits.shape[0]
    logits = logits.float().contiguous()  # one buffer: the reductions below would each recompute the lm head
    if mode.greedy:
        return logits.argmax(0).cast(dtypes.int32).reshape(1)
    inverse, top_k, top_p, uniform = params[0], params[1], params[2], params[3]
    scaled = ((logits - logits.max()) * inverse).maximum(_FLOOR)  # <= 0, its max exactly 0
    weights = scaled.exp()
    low = scaled.min()
    if mode.top_k:
        k = top_k.cast(dtypes.int32)
        row = scaled.reshape(1, vocab)

        def enough(candidates: Tensor) -> Tensor:
            counts: Tensor = (row >= candidates.reshape(-1, 1)).cast(dtypes.int32).sum(1)
            return counts.ge(k)

        cut_k = _cut(low, Tensor.zeros(()), enough)
        weights = (scaled >= cut_k).where(weights, 0.0)
    if mode.top_p:
        row, mass = scaled.reshape(1, vocab), weights.reshape(1, vocab)
        target = top_p * weights.sum()

        def heavy(candidates: Tensor) -> Tensor:
            above: Tensor = (row > candidates.reshape(-1, 1)).where(mass, 0.0).sum(1)
            return above.ge(target)

        cut_p = _cut(low * 2.0 - 1.0, Tensor.zeros(()), heavy)  # starts below every value: all its mass above
        weights = (scaled > cut_p).where(weights, 0.0)
    running = weights.cumsum(0)
    drawn: Tensor = (running <= uniform * running[vocab - 1]).cast(dtypes.int32).sum()
    return drawn.minimum(vocab - 1).reshape(1)
