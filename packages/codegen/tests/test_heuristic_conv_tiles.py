"""Register tiles of a network's convolutions (heuristic steps 2v and 2s): a fused input, stride 2, tiny images."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import VectorCPU
from sinks_for_tests import buffer, kernel

from kiln.codegen import Opt, OptOps, Program, get_program, hand_coded_optimizations, run_program
from kiln.uops import AxisKind, UOp

UPCAST, THREAD = OptOps.UPCAST, OptOps.THREAD


def _conv(batch: int, inputs: int, outputs: int, size: int, stride: int, fused: bool) -> UOp:
    # out[n, o, y, x] = b_out[o] + sum_{c, u, v} act[n, c, y*s + u - 1, x*s + v - 1] * w[o, c, u, v], padding 1, with
    # act = relu(image + b_in[c]) when `fused` (the previous layer's bias and ReLU, as the scheduler fuses them)
    # else the image itself; axes n, o, y, x (outputs) then c, u, v (reduce)
    out_size = (size - 1) // stride + 1
    out = buffer(0, batch * outputs * out_size * out_size)
    image, weight = buffer(1, batch * inputs * size * size), buffer(2, outputs * inputs * 9)
    bias_in, bias_out = buffer(3, inputs), buffer(4, outputs)
    n, o, y, x = (UOp.range(s, axis) for axis, s in enumerate((batch, outputs, out_size, out_size)))
    c, u, v = (UOp.range(s, axis, AxisKind.REDUCE) for axis, s in ((4, inputs), (5, 3), (6, 3)))
    iy, ix = y * stride + u - 1, x * stride + v - 1
    valid = (iy >= 0) & (iy < size) & (ix >= 0) & (ix < size)
    value = image.index(((n * inputs + c) * size + iy) * size + ix, valid).load()
    if fused:
        value = (value + bias_in.index(c).load()).maximum(0.0)
    product = valid.where(value, 0.0) * weight.index(((o * inputs + c) * 3 + u) * 3 + v).load()
    total = product.reduce(c, u, v) + bias_out.index(o).load()
    target = out.index(((n * outputs + o) * out_size + y) * out_size + x)
    return kernel(target.store(total).end(n, o, y, x))


def _numpy_conv(
    image: np.ndarray, weight: np.ndarray, bias_in: np.ndarray, bias_out: np.ndarray, stride: int, fused: bool
) -> np.ndarray:
    act = np.maximum(image + bias_in[None, :, None, None], 0) if fused else image
    padded = np.pad(act, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncyxuv,ocuv->noyx", windows, weight) + bias_out[None, :, None, None]


@pytest.mark.parametrize(
    ("batch", "inputs", "outputs", "size", "stride", "fused", "tile"),
    [
        # a contiguous output width: step 2v, rows (channels) by 8, columns (width) upcast whole by 16 and swapped
        # inside; fused or not alike (before the fused input counted, the fused convolutions of resnet18.onnx got one
        # upcast axis: 0.3-1 GFLOP/s)
        (2, 4, 16, 16, 1, False, (Opt(UPCAST, 1, 8), Opt(UPCAST, 3, 16), Opt(OptOps.SWAP, 3, 7))),
        (2, 4, 16, 16, 1, True, (Opt(UPCAST, 1, 8), Opt(UPCAST, 3, 16), Opt(OptOps.SWAP, 3, 7))),
        # stride 2: the input walks 2 per output column, nothing is contiguous: step 2s, channels x gathered width
        (2, 4, 16, 16, 2, True, (Opt(UPCAST, 1, 8), Opt(UPCAST, 3, 8))),
        (2, 3, 8, 32, 2, False, (Opt(UPCAST, 1, 8), Opt(UPCAST, 3, 16))),
        # a 2 x 2 image (4 x 4 at stride 2): no output width of 8; the innermost long axis is the channels (the
        # weights walk it): they are the columns, the batch (the input walks it) the rows
        (16, 4, 16, 4, 2, True, (Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 16))),
    ],
)
def test_convolution_gets_a_register_tile_and_computes_what_numpy_computes(
    batch: int, inputs: int, outputs: int, size: int, stride: int, fused: bool, tile: tuple[Opt, ...]
) -> None:
    renderer = VectorCPU()
    sink = _conv(batch, inputs, outputs, size, stride, fused)
    opts = hand_coded_optimizations(sink, renderer)
    assert opts[: len(tile)] == tile and all(opt.op is THREAD for opt in opts[len(tile) :])
    rng = np.random.default_rng(11)
    image = rng.integers(-4, 4, (batch, inputs, size, size)).astype(np.float32)
    weight = rng.integers(-4, 4, (outputs, inputs, 3, 3)).astype(np.float32)
    bias_in, bias_out = (rng.integers(-4, 4, n).astype(np.float32) for n in (inputs, outputs))
    program = Program(get_program(sink, renderer, list(opts)))
    expected = _numpy_conv(image, weight, bias_in, bias_out, stride, fused)
    out = np.full(expected.size, np.nan, np.float32)
    buffers = [out, *(a.reshape(-1) for a in (image, weight, bias_in, bias_out))]
    run_program(program, buffers, {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out.reshape(expected.shape), expected)


def _block_with_shortcut(batch: int, inputs: int, outputs: int, size: int) -> UOp:
    # a residual block's output in one kernel: a 3x3 convolution (padding 1) of act (size x size, `inputs` channels)
    # plus the 1x1 stride-2 downsampling shortcut of x (2 * size wide, `outputs // 2` channels); two reduces:
    # out[n, o, y, x] = sum_{c, u, v} act[n, c, y + u - 1, x + v - 1] w[o, c, u, v] + sum_d x[n, d, 2y, 2x] s[o, d]
    shortcut = outputs // 2
    out = buffer(0, batch * outputs * size * size)
    act, weight = buffer(1, batch * inputs * size * size), buffer(2, outputs * inputs * 9)
    wide, short_weight = buffer(3, batch * shortcut * 4 * size * size), buffer(4, outputs * shortcut)
    n, o, y, x = (UOp.range(s, axis) for axis, s in enumerate((batch, outputs, size, size)))
    c, u, v, d = (UOp.range(s, axis, AxisKind.REDUCE) for axis, s in ((4, inputs), (5, 3), (6, 3), (7, shortcut)))
    iy, ix = y + u - 1, x + v - 1
    valid = (iy >= 0) & (iy < size) & (ix >= 0) & (ix < size)
    value = act.index(((n * inputs + c) * size + iy) * size + ix, valid).load()
    conv = (valid.where(value, 0.0) * weight.index(((o * inputs + c) * 3 + u) * 3 + v).load()).reduce(c, u, v)
    wide_value = wide.index(((n * shortcut + d) * 2 * size + 2 * y) * 2 * size + 2 * x).load()
    short = (wide_value * short_weight.index(o * shortcut + d).load()).reduce(d)
    target = out.index(((n * outputs + o) * size + y) * size + x)
    return kernel(target.store(conv + short).end(n, o, y, x))


def test_convolution_with_a_fused_shortcut_takes_the_tile_of_its_longer_reduce() -> None:
    # the 3x3 reduce (4 * 9 = 36 steps) is longer than the shortcut's (8): its operands pick the tile, channels x
    # the contiguous output width (before, the kernel had no tile: an unroll of the shortcut's reduce)
    batch, inputs, outputs, size = 2, 4, 16, 8
    renderer = VectorCPU()
    sink = _block_with_shortcut(batch, inputs, outputs, size)
    opts = hand_coded_optimizations(sink, renderer)
    assert opts[:2] == (Opt(UPCAST, 1, 8), Opt(UPCAST, 3, 8)) and all(
        opt.op in (THREAD, OptOps.SWAP) for opt in opts[2:]
    )
    rng = np.random.default_rng(12)
    act = rng.integers(-4, 4, (batch, inputs, size, size)).astype(np.float32)
    weight = rng.integers(-4, 4, (outputs, inputs, 3, 3)).astype(np.float32)
    wide = rng.integers(-4, 4, (batch, outputs // 2, 2 * size, 2 * size)).astype(np.float32)
    short_weight = rng.integers(-4, 4, (outputs, outputs // 2)).astype(np.float32)
    zero = np.zeros(inputs, np.float32), np.zeros(outputs, np.float32)
    expected = _numpy_conv(act, weight, *zero, 1, False)
    expected += np.einsum("ndyx,od->noyx", wide[:, :, ::2, ::2], short_weight)
    program = Program(get_program(sink, renderer, list(opts)))
    out = np.full(expected.size, np.nan, np.float32)
    buffers = [out, *(a.reshape(-1) for a in (act, weight, wide, short_weight))]
    run_program(program, buffers, {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out.reshape(expected.shape), expected)
