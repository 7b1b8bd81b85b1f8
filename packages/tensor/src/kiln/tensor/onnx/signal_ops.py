"""Signal processing: DFT (forward, inverse, one-sided, inverse one-sided), STFT and the Hann / Hamming / Blackman
windows. A transform of length n along a dim is two matrix products with cos / sin tables built on the host from
the (static) length."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.tensor import dtypes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import operator
from kiln.tensor.onnx.types import dtype_of_element_type
from kiln.tensor.tensor import Tensor

__all__: list[str] = []


def _fit(x: Tensor, length: int) -> Tensor:
    """x's last dim truncated or zero-padded to `length`."""
    size = x.shape[-1]
    if size == length:
        return x
    return x.pad([*[(0, 0)] * (x.ndim - 1), (0, length - size)])


def _table(values: np.ndarray[Any, Any], dtype: Any) -> Tensor:
    return Tensor(values.astype(np.float64)).cast(dtype)


def fourier(
    real: Tensor, imaginary: Tensor | None, length: int, inverse: bool, onesided: bool
) -> tuple[Tensor, Tensor | None]:
    """The DFT of length `length` over the last dim; inverse + onesided is numpy's irfft (a real result).

    Sums run in float64 (and the result is cast back): the reference is numpy's FFT, whose rounding is far below
    what a float32 sum of `length` products leaves in bins that should be zero."""
    result_dtype = real.dtype
    real = real.cast(dtypes.float64)
    imaginary = None if imaginary is None else imaginary.cast(dtypes.float64)
    dtype = dtypes.float64
    out_real, out_imaginary = _fourier(real, imaginary, length, inverse, onesided, dtype)
    return out_real.cast(result_dtype), None if out_imaginary is None else out_imaginary.cast(result_dtype)


def _fourier(
    real: Tensor, imaginary: Tensor | None, length: int, inverse: bool, onesided: bool, dtype: Any
) -> tuple[Tensor, Tensor | None]:
    if inverse and onesided:
        bins = length // 2 + 1
        k = np.arange(bins).reshape(-1, 1)
        t = np.arange(length).reshape(1, -1)
        # Hermitian symmetry: every bin but DC (and Nyquist for even lengths) stands for itself and its mirror
        weight = np.where((k == 0) | ((length % 2 == 0) & (k == length // 2)), 1.0, 2.0) / length
        angle = 2 * np.pi * k * t / length
        result = _fit(real, bins).matmul(_table(weight * np.cos(angle), dtype))
        if imaginary is not None:
            result = result - _fit(imaginary, bins).matmul(_table(weight * np.sin(angle), dtype))
        return result, None
    outputs = length // 2 + 1 if onesided else length
    n = np.arange(length).reshape(-1, 1)
    k = np.arange(outputs).reshape(1, -1)
    angle = 2 * np.pi * n * k / length
    scale = 1.0 / length if inverse else 1.0
    sign = 1.0 if inverse else -1.0
    cosine, sine = _table(np.cos(angle) * scale, dtype), _table(sign * np.sin(angle) * scale, dtype)
    real_in = _fit(real, length)
    # (a + ib)(cos + i sign sin) = a cos - b sign sin + i (b cos + a sign sin)
    out_real, out_imaginary = real_in.matmul(cosine), real_in.matmul(sine)
    if imaginary is not None:
        imaginary_in = _fit(imaginary, length)
        out_real = out_real - imaginary_in.matmul(sine)
        out_imaginary = out_imaginary + imaginary_in.matmul(cosine)
    return out_real, out_imaginary


def _parts(x: Tensor) -> tuple[Tensor, Tensor | None]:
    return x[..., 0], (x[..., 1] if x.shape[-1] == 2 else None)


@operator("DFT", attributes=["axis", "inverse", "onesided"], since=17)
def _dft(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    if call.opset >= 20:
        axis = call.ints(2)[0] if call.has(2) else -2
    else:
        axis = call.attributes.int("axis", 1)
    axis %= x.ndim
    inverse, onesided = bool(call.attributes.int("inverse", 0)), bool(call.attributes.int("onesided", 0))
    length = call.ints(1)[0] if call.has(1) and call.tensor(1).numel() else None
    if length is None:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    real, imaginary = _parts(x)
    real = real.movedim(axis, -1)
    imaginary = None if imaginary is None else imaginary.movedim(axis, -1)
    out_real, out_imaginary = fourier(real, imaginary, length, inverse, onesided)
    if out_imaginary is None:
        return out_real.movedim(-1, axis).unsqueeze(-1)
    return Tensor.stack(out_real.movedim(-1, axis), out_imaginary.movedim(-1, axis), dim=-1)


@operator("STFT", attributes=["onesided"], since=17)
def _stft(call: NodeCall) -> Tensor:
    signal, window = call.tensor(0), call.optional(2)
    step = int(call.scalar(1))
    length = signal.shape[1]
    if call.has(3):
        frame_length = int(call.scalar(3))
    else:
        frame_length = window.shape[0] if window is not None else length
    frames = (length - frame_length) // step + 1
    positions = (np.arange(frames).reshape(-1, 1) * step + np.arange(frame_length).reshape(1, -1)).reshape(-1)
    framed = signal.index_select(1, Tensor(positions.astype(np.int64)))
    framed = framed.reshape(signal.shape[0], frames, frame_length, signal.shape[2])
    if window is not None:
        framed = framed * window.cast(signal.dtype).reshape(1, 1, frame_length, 1)
    real, imaginary = _parts(framed)
    out_real, out_imaginary = fourier(real, imaginary, frame_length, False, bool(call.attributes.int("onesided", 1)))
    assert out_imaginary is not None
    return Tensor.stack(out_real, out_imaginary, dim=-1)


def _window(coefficients: list[float]) -> Any:
    def handler(call: NodeCall) -> Tensor:
        size = int(call.scalar(0))
        periodic = bool(call.attributes.int("periodic", 1))
        period = size if periodic else size - 1
        n = Tensor.arange(size, dtype=dtypes.float64)
        result = Tensor.full((size,), coefficients[0], dtype=dtypes.float64)
        for harmonic, coefficient in enumerate(coefficients[1:], start=1):
            result = result + (n * (2 * np.pi * harmonic / period)).cos() * coefficient
        element_type = call.attributes.int("output_datatype", 1)
        return result.cast(dtype_of_element_type(element_type, f"node {call.name}"))

    return handler


operator("HannWindow", attributes=["output_datatype", "periodic"], since=17)(_window([0.5, -0.5]))
operator("HammingWindow", attributes=["output_datatype", "periodic"], since=17)(_window([25 / 46, -21 / 46]))
operator("BlackmanWindow", attributes=["output_datatype", "periodic"], since=17)(_window([0.42, -0.5, 0.08]))
