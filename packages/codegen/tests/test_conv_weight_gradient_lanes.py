"""`conv_tiles.unroll_inner_lanes`: the reduce unroll of a convolution's weight gradient (heuristic step 2r) keeps
the image row's lanes inside the output tile's, and the kernel still computes numpy's weight gradient."""

from __future__ import annotations

import numpy as np
import pytest
from renderers_for_tests import VectorCPU
from sinks_for_tests import conv_weight_gradient

from kiln.codegen import Opt, OptOps, Program, get_program, run_program
from kiln.codegen.kernel_info import KernelOptError
from kiln.codegen.opt.apply import apply_opt, prepare_axes
from kiln.codegen.opt.conv_tiles import unroll_inner_lanes
from kiln.codegen.opt.kernel_axes import axes_of, constant_size
from kiln.codegen.renderer import Renderer
from kiln.uops import AxisKind, UOp

UPCAST, UNROLL, PADTO = OptOps.UPCAST, OptOps.UNROLL, OptOps.PADTO


class _Build:
    """The part of the heuristic's builder `unroll_inner_lanes` uses."""

    def __init__(self, sink: UOp, renderer: Renderer) -> None:
        self.sink, self.renderer, self.opts = prepare_axes(sink, renderer), renderer, list[Opt]()

    def attempt(self, opt: Opt) -> bool:
        try:
            self.sink = apply_opt(self.sink, opt, self.renderer)
        except KernelOptError:  # an illegal opt is not applied, as in the heuristic
            return False
        self.opts.append(opt)
        return True


def _innermost_lanes(sink: UOp) -> UOp:
    return max(axes_of(sink, AxisKind.UPCAST, AxisKind.UNROLL), key=lambda rng: rng.arg.axis)


@pytest.mark.parametrize(
    ("size", "padded", "unrolled"),
    [
        # a 16-wide row: unrolled whole it would keep axis 6, outside the tile's new axes 7 and 8: unrolled by 8
        (16, False, 8),
        # a 32-wide row: the unroll by 16 is a new axis already
        (32, False, 16),
        # a row padded up to the width keeps the whole-width unroll (masked lane loads either way)
        (11, True, 16),
    ],
)
def test_weight_gradient_unroll_keeps_the_row_lanes_inside_and_computes_numpys_gradient(
    size: int, padded: bool, unrolled: int
) -> None:
    batch, inputs, outputs = 2, 4, 8
    renderer = VectorCPU()
    build = _Build(conv_weight_gradient(batch, outputs, inputs, size), renderer)
    # the heuristic's 4 x 4 output tile of step 2r, then the row padded up to the width where it needs it
    assert build.attempt(Opt(UPCAST, 1, 4)) and build.attempt(Opt(UPCAST, 0, 4))
    if padded:
        assert build.attempt(Opt(PADTO, 6, 16))
    assert unroll_inner_lanes(build, 6, 16)
    assert build.opts[-1] == Opt(UNROLL, 6, unrolled)
    innermost = _innermost_lanes(build.sink)
    if not padded:
        assert innermost.arg.kind is AxisKind.UNROLL and constant_size(innermost) == unrolled
    rng = np.random.default_rng(5)
    grad = rng.integers(-4, 4, (batch, outputs, size, size)).astype(np.float32)
    image = rng.integers(-4, 4, (batch, inputs, size, size)).astype(np.float32)
    wide = np.pad(image, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(wide, (size, size), axis=(2, 3))  # (n, c, u, v, y, x)
    expected = np.einsum("noyx,ncuvyx->ocuv", grad, windows)
    program = Program(get_program(conv_weight_gradient(batch, outputs, inputs, size), renderer, build.opts))
    out = np.full(expected.size, np.nan, np.float32)
    run_program(program, [out, grad.reshape(-1), wide.reshape(-1)], {}, *program.launch_dims({}))
    np.testing.assert_array_equal(out.reshape(expected.shape), expected)


def test_without_a_legal_unroll_nothing_is_applied() -> None:
    # a 2-wide row: no unroll of 4 or more fits, and the whole-width one of 16 is illegal
    build = _Build(conv_weight_gradient(1, 2, 2, 2), VectorCPU())
    assert not unroll_inner_lanes(build, 6, 16)
    assert build.opts == []
