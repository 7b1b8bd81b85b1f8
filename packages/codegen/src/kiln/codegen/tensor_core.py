"""Tensor cores: the `TensorCore` description a renderer declares, its register fragment layouts, and `WmmaArg`.

A tensor core computes D = A @ B + C for one tile (A is M x K, B is K x N, C and D are M x N) with the threads of a
warp together: each thread holds a few elements (its fragment) of A, B and C in registers and gets its elements of
D back. `FragmentLayout` says which tile element each register of each thread holds. Layouts are given bit by bit
(the layouts of NVIDIA's mma.sync are of this form): every set bit of the lane id and of the register number adds a
fixed (row, column) offset.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from kiln.uops import DType

WARP_LANE_TAG = "warp lane"
"""The tag of the LOCAL RANGE the TC opt numbers warp lanes with (lowering keeps it in the low thread-id bits)."""


@dataclass(frozen=True)
class FragmentLayout:
    """Where register `element` of warp lane `lane` sits in a tile (rows x columns).

    lane_bits      (row, column) added when bit i of the lane id (0 .. threads-1) is set
    element_bits   (row, column) added when bit j of the register number (0 .. elements-1) is set

    `coordinate(lane, element)` is the sum of the offsets of the set bits; together the lanes and registers cover
    every element of the tile exactly once.
    """

    lane_bits: tuple[tuple[int, int], ...]
    element_bits: tuple[tuple[int, int], ...]

    @property
    def threads(self) -> int:
        """Lanes of the warp (2 ** len(lane_bits))."""
        return 1 << len(self.lane_bits)

    @property
    def elements(self) -> int:
        """Registers per lane (2 ** len(element_bits))."""
        return 1 << len(self.element_bits)

    def coordinate(self, lane: int, element: int) -> tuple[int, int]:
        """(row, column) in the tile of register `element` of lane `lane`."""
        row = column = 0
        for bits, value in ((self.lane_bits, lane), (self.element_bits, element)):
            for bit, (row_offset, column_offset) in enumerate(bits):
                if value >> bit & 1:
                    row += row_offset
                    column += column_offset
        return row, column

    def check(self, rows: int, columns: int, what: str) -> None:
        """Raise ValueError unless the layout maps lanes x registers one-to-one onto a rows x columns tile."""
        seen = {
            self.coordinate(lane, element)
            for lane, element in itertools.product(range(self.threads), range(self.elements))
        }
        expected = {(row, column) for row in range(rows) for column in range(columns)}
        if len(seen) != self.threads * self.elements or seen != expected:
            raise ValueError(f"{what} layout {self} does not cover a {rows}x{columns} tile one-to-one")


@dataclass(frozen=True)
class TensorCore:
    """One matrix-multiply-accumulate unit of a target: D[M][N] = A[M][K] @ B[K][N] + C[M][N] per warp.

    dims                  (N, M, K) of one tile
    threads               threads of a warp that compute one tile together (lanes 0 .. threads-1)
    elements_per_thread   (A, B, C) registers each thread holds of the A, B and accumulator tiles
    dtype_in, dtype_out   element dtypes of A/B and of C/D
    opts                  informational only (kept for compatibility; the TC opt does not read it)
    layouts               (A, B, C) fragment layouts: A is M x K, B is K x N, C (and D) is M x N; without them the
                          unit cannot be targeted by the TC opt
    """

    dims: tuple[int, int, int]
    threads: int
    elements_per_thread: tuple[int, int, int]
    dtype_in: DType
    dtype_out: DType
    opts: tuple[str, ...] = ()
    layouts: tuple[FragmentLayout, FragmentLayout, FragmentLayout] | None = None

    def __post_init__(self) -> None:
        n, m, k = self.dims
        a, b, c = self.elements_per_thread
        if a * self.threads != m * k or b * self.threads != k * n or c * self.threads != m * n:
            raise ValueError(
                f"tensor core {self.dims} with {self.threads} threads cannot hold {self.elements_per_thread}"
            )
        if self.layouts is not None:
            shapes = ((m, k), (k, n), (m, n))
            for name, layout, elements, (rows, columns) in zip("ABC", self.layouts, self.elements_per_thread, shapes):
                if layout.threads != self.threads or layout.elements != elements:
                    raise ValueError(
                        f"{name} layout has {layout.threads} lanes x {layout.elements} registers, the tensor core "
                        f"{self.threads} x {elements}"
                    )
                layout.check(rows, columns, name)

    def __str__(self) -> str:
        n, m, k = self.dims
        return f"WMMA_{n}_{m}_{k}_{self.dtype_in.name}_{self.dtype_out.name}"

    def wmma_arg(self) -> WmmaArg:
        """The payload of the WMMA uops the TC opt builds for this unit (requires `layouts`)."""
        if self.layouts is None:
            raise ValueError(f"tensor core {self} declares no fragment layouts")
        n, m, k = self.dims
        return WmmaArg(str(self), (m, n, k), self.dtype_in, self.dtype_out, self.layouts, self.threads)


@dataclass(frozen=True)
class WmmaArg:
    """The payload of a WMMA uop: `WMMA(a, b, c)` -> d, run by the `threads` lanes of a warp together.

    name                 the tensor core's name (str(TensorCore)), e.g. "WMMA_8_16_16_half_float"
    dims                 (M, N, K) of the tile
    dtype_in, dtype_out  scalar dtypes of a/b and of c/d
    layouts              (A, B, C) fragment layouts; a holds A's registers 0.. of this lane, b B's, c and d C's
    threads              lanes of the warp: the threads whose linear id in the block differ only in the low
                         log2(threads) bits
    """

    name: str
    dims: tuple[int, int, int]
    dtype_in: DType
    dtype_out: DType
    layouts: tuple[FragmentLayout, FragmentLayout, FragmentLayout]
    threads: int
