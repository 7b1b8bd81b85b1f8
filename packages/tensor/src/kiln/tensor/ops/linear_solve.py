"""`LinearSolveMixin`: determinants, linear solves, inverses, Cholesky and the pseudo-inverse of small matrices,
composed from the Householder QR (decompositions.py) and Python loops over rows (batched over leading dims).

- det = det(Q) * prod(diag(R)), det(Q) = (-1) ** (reflections applied); slogdet / logdet from it;
- solve(A, B): back substitution of R X = Q^T B, one row at a time; inverse = solve(A, I);
- cholesky: column by column, L[:, j] = (A[:, j] - L[:, :j] @ L[j, :j]) / L[j, j];
- pinverse: V diag(1 / s) U^T from the SVD, singular values below rcond * max(s) dropped.
No pivoting beyond the QR's: meant for well-conditioned small systems (the ones torch would solve exactly).
"""

from __future__ import annotations

from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops.creation import iota
from kiln.tensor.ops.decompositions import householder

__all__ = ["LinearSolveMixin"]


def _square(x: TensorT, what: str) -> TensorT:
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{what} needs square matrices (..., n, n), got shape {x.shape}")
    return x._floating()


def _back_substitute(r: TensorT, y: TensorT) -> TensorT:
    """X with R X = Y for upper-triangular R (..., n, n) and Y (..., n, k)."""
    size = r.shape[-1]
    solved: list[TensorT] = [y[..., :1, :]] * size
    for i in range(size - 1, -1, -1):
        row = y[..., i : i + 1, :]
        for j in range(i + 1, size):
            row = row - r[..., i : i + 1, j : j + 1] * solved[j]
        solved[i] = row / r[..., i : i + 1, i : i + 1]
    return solved[0].cat(*solved[1:], dim=-2)


class LinearSolveMixin(TensorCore):
    """Determinants, solves, inverses, Cholesky and the pseudo-inverse."""

    def det(self) -> Self:
        """The determinant of square matrices (batched).

        Example:
            >>> round(Tensor([[1.0, 2.0], [3.0, 4.0]]).det().item(), 5)
            -2.0
        """
        a = _square(self, "det")
        _, r, flips = householder(a)
        diagonal = r.diagonal(0, -2, -1)
        return diagonal.prod(-1) * flips.reshape(flips.shape[:-2])

    def slogdet(self) -> tuple[Self, Self]:
        """(sign, log|det|) of square matrices.

        Example:
            >>> sign, value = Tensor([[2.0, 0.0], [0.0, -3.0]]).slogdet(); sign.item(), round(value.item(), 5)
            (-1.0, 1.79176)
        """
        a = _square(self, "slogdet")
        _, r, flips = householder(a)
        diagonal = r.diagonal(0, -2, -1)
        sign = diagonal.sign().prod(-1) * flips.reshape(flips.shape[:-2])
        return sign, diagonal.abs().log().sum(-1)

    def logdet(self) -> Self:
        """log(det) (NaN for a negative determinant, -inf for 0), like `torch.logdet`.

        Example:
            >>> round(Tensor([[2.0, 0.0], [0.0, 3.0]]).logdet().item(), 5)
            1.79176
        """
        sign, value = self.slogdet()
        return (sign < 0).where(float("nan"), sign.eq(0).where(float("-inf"), value))

    def solve(self, other: Self) -> Self:
        """X with self @ X = other (other (..., n) or (..., n, k)), like `torch.linalg.solve(self, other)`.

        Example:
            >>> Tensor([[2.0, 0.0], [0.0, 4.0]]).solve(Tensor([2.0, 2.0])).tolist()
            [1.0, 0.5]
        """
        a = _square(self, "solve")
        vector = other.ndim == a.ndim - 1
        rhs = other._floating().unsqueeze(-1) if vector else other._floating()
        if rhs.shape[-2] != a.shape[-1]:
            raise ValueError(f"solve: right-hand side {other.shape} does not match matrices {self.shape}")
        q, r, _ = householder(a)
        solution = _back_substitute(r, q.mT.matmul(rhs))
        return solution.squeeze(-1) if vector else solution

    def inverse(self) -> Self:
        """The inverse of square matrices.

        Example:
            >>> Tensor([[2.0, 0.0], [0.0, 4.0]]).inverse().tolist()
            [[0.5, 0.0], [0.0, 0.25]]
        """
        a = _square(self, "inverse")
        size = a.shape[-1]
        identity = a.eye(size, dtype=a.dtype, device=a.device)._broadcast_to(a.shape)
        return a.solve(identity)

    def cholesky(self, upper: bool = False) -> Self:
        """L with self = L @ L^T for symmetric positive-definite matrices (L^T when `upper`).

        Example:
            >>> Tensor([[4.0, 2.0], [2.0, 5.0]]).cholesky().tolist()
            [[2.0, 0.0], [1.0, 2.0]]
        """
        # the input is symmetric: reading (A + A^T) / 2 gives the same values and torch's symmetric gradient
        square = _square(self, "cholesky")
        a = (square + square.mT) * 0.5
        size = a.shape[-1]
        columns: list[Self] = []
        rows = iota(type(a), size, a.device).reshape(size, 1)
        for j in range(size):
            column = a[..., :, j : j + 1]
            if columns:
                done = columns[0].cat(*columns[1:], dim=-1)  # (..., n, j)
                column = column - done.matmul(done[..., j : j + 1, :].mT)
            pivot = column[..., j : j + 1, :].sqrt()
            columns.append((rows >= j).where(column / pivot, 0.0))
        lower = columns[0].cat(*columns[1:], dim=-1)
        return lower.mT if upper else lower

    def pinverse(self, rcond: float = 1e-15) -> Self:
        """The Moore-Penrose pseudo-inverse of a matrix from its SVD.

        Example:
            >>> Tensor([[2.0, 0.0], [0.0, 0.0]]).pinverse().tolist()
            [[0.5, 0.0], [0.0, 0.0]]
        """
        if self.ndim != 2:
            raise ValueError(f"pinverse needs a matrix, got shape {self.shape}")
        u, s, v = self._floating().svd()
        if s.shape[0] == 0:
            return self._floating().mT
        kept = s > s.amax() * rcond
        inverse_values = kept.where(kept.where(s, 1.0).reciprocal(), 0.0)
        return (v * inverse_values.reshape(1, -1)).matmul(u.mT)
