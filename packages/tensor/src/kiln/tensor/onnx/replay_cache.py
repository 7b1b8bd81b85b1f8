"""Plain `OnnxRunner` calls replayed: a call whose inputs have the shapes, dtypes and devices of an earlier call
replays that call's kernels (`TinyJit`) instead of translating the graph node by node again.

Translating a graph builds every node's kiln expression in Python and schedules the result, about 10 ms for a small
BERT encoder whose kernels run in under 1 ms. Per input signature the first call runs plainly (folding the values
fixed by the input shapes), the second runs under a TinyJit capture, later ones replay it. A graph whose result
depends on input values in Python (a host read such as NonZero's, a Loop's trip count) fails the capture (TinyJit
raises on host reads inside a capture); its signature then stays on the plain path. Replay outputs live in the
capture's buffers, which the next replay overwrites, so each call hands out copies of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from kiln.tensor.jit import TinyJit
from kiln.tensor.realize.engine import default_engine
from kiln.tensor.tensor import Tensor
from kiln.uops.dtype import DType

__all__ = ["ReplayCache"]

# Replays are kept for this many distinct input signatures (least recently used dropped first).
_SIGNATURES = 8

Signature = tuple[tuple[str, tuple[int, ...], DType, str], ...]


class _NotReplayable(Exception):
    """The graph gave an output a replay cannot hand out (a sequence, an optional, a non-Tensor)."""


def signature_of(inputs: Mapping[str, Any]) -> Signature | None:
    """(name, shape, dtype, device) of every input when all are Tensors of int dims, else None (plain path)."""
    entries = []
    for name, value in inputs.items():
        if not isinstance(value, Tensor) or not all(isinstance(size, int) for size in value.shape):
            return None
        entries.append((name, tuple(int(size) for size in value.shape), value.dtype, str(value.device)))
    return tuple(sorted(entries, key=lambda entry: entry[0]))


def _own_copy(tensor: Tensor) -> Tensor:
    """A realized copy of a replay output in memory of its own (the next replay overwrites the captured one)."""
    device = tensor.device
    if isinstance(device, str) and device.split(":")[0] == "CPU" and tensor.dtype.fmt is not None:
        # host memory: two memcpys, without scheduling a copy kernel
        return Tensor(np.array(tensor.numpy()), device=device)
    return tensor.clone().realize()


class _Plan:
    """What one input signature does: replay through its TinyJit, or run plainly (`jit` None)."""

    def __init__(self, jit: TinyJit[dict[str, Tensor]] | None) -> None:
        self.jit = jit


class ReplayCache:
    """Runs `run(inputs) -> {name: value}` plainly, or replays its kernels for an input signature seen before.

    `run` must compute its outputs from the input Tensors and from state it keeps in the same buffers (the graph's
    initializers and folded values): what TinyJit's contract asks of a jitted function."""

    def __init__(self, run: Callable[[Mapping[str, Any]], dict[str, Any]]) -> None:
        self.run = run
        self.plans: dict[Signature, _Plan] = {}

    def __call__(self, inputs: Mapping[str, Tensor]) -> dict[str, Any]:
        signature = signature_of(inputs)
        if signature is None or default_engine().recording is not None:
            # inside a caller's own TinyJit capture its recording holds these kernels: nothing to replay here
            return self.run(inputs)
        plan = self.plans.pop(signature, None)
        if len(self.plans) >= _SIGNATURES:
            del self.plans[next(iter(self.plans))]
        if plan is None:
            outputs = self.run(inputs)
            jit = None
            if all(isinstance(value, Tensor) for value in outputs.values()):
                jit = TinyJit(self._traced)
                jit.calls = 1  # this plain call stands for the TinyJit's first: the next one captures
            self.plans[signature] = _Plan(jit)
            return outputs
        self.plans[signature] = plan  # most recently used last
        if plan.jit is None:
            return self.run(inputs)
        if plan.jit.captured is None:
            try:
                outputs = plan.jit(**inputs)
            except (RuntimeError, ValueError, TypeError, _NotReplayable):
                # a host read inside the capture, or an output a replay cannot give: this signature runs plainly
                # (a genuine error of the model is raised again by the plain run)
                plan.jit = None
                return self.run(inputs)
        else:
            outputs = plan.jit(**inputs)
        return {name: _own_copy(tensor) for name, tensor in outputs.items()}

    def _traced(self, **inputs: Tensor) -> dict[str, Tensor]:
        outputs = self.run(inputs)
        for name, value in outputs.items():
            if not isinstance(value, Tensor):
                raise _NotReplayable(f"output {name!r} is {type(value).__name__}")
        return {name: value.contiguous() for name, value in outputs.items()}
