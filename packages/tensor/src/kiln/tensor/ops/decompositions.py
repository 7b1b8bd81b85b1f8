"""`DecompositionMixin`: matrix products beyond matmul (mm, bmm, mv, outer, kron, addmm, ...), trace, and the
QR and SVD decompositions composed from Tensor ops (meant for small matrices: Python loops over columns).

- QR: Householder reflections H = I - 2 v v^T / (v^T v), each applied as a matmul; the reflection of column k maps
  it to -sign(x_k) ||x|| e_k, LAPACK's convention, so Q and R match torch.linalg.qr. Batched over leading dims.
- SVD: one-sided Jacobi: column pairs of A are rotated until orthogonal (fixed sweeps); the singular values are the
  column norms (sorted descending), U the normalized columns, V the accumulated rotations. Gradients flow through
  the rotations (exact for the singular values; U and V gradients as accurate as the converged iteration). Batched
  over leading dims; `svd(some=...)` gives torch.Tensor.svd's (U, S, V), `svd(full_matrices=...)` tinygrad's and
  torch.linalg.svd's (U, S, Vh).
"""

from __future__ import annotations

from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int
from kiln.tensor.ops.creation import iota
from kiln.uops import ConstType

__all__ = ["DecompositionMixin", "householder"]

_JACOBI_SWEEPS = 12  # one-sided Jacobi converges quadratically; 12 sweeps reach float64 precision for n <= 16


def _require_matrix(x: TensorCore, what: str, ndim: int | None = None) -> None:
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{what} needs a {ndim}-D tensor, got shape {x.shape}")
    if ndim is None and x.ndim < 2:
        raise ValueError(f"{what} needs a matrix (at least 2 dims), got shape {x.shape}")


def _unit(size: int, position: int, x: TensorT) -> TensorT:
    """The one-hot column vector e_position of length `size` in x's float dtype, shaped (size, 1)."""
    return iota(type(x), size, x.device).eq(position)._cast(x.dtype).reshape(size, 1)


def householder(a: TensorT) -> tuple[TensorT, TensorT, TensorT]:
    """(Q, R before zeroing below the diagonal, det(Q)) of float matrices `a` (..., m, n) by Householder reflections;
    det(Q) is (-1) ** (the number of reflections applied), shaped (..., 1, 1)."""
    rows, columns = a.shape[-2:]
    batch = a.shape[:-2]
    identity = a.eye(rows, dtype=a.dtype, device=a.device)
    q = identity._broadcast_to((*batch, rows, rows))
    r = a
    flips = a._const(1.0, (*batch, 1, 1), a.dtype, a.device)
    row_index = iota(type(a), rows, a.device).reshape(rows, 1)
    for k in range(min(rows - 1, columns) if rows > 1 else 0):
        column = (row_index >= k).where(r[..., :, k : k + 1], 0.0)  # (..., rows, 1), zeros above k
        head = column[..., k : k + 1, :]
        norm = column.square().sum(-2, keepdim=True).sqrt()
        sign = (head < 0).where(-1.0, 1.0)
        v = column + sign * norm * _unit(rows, k, a)
        length = v.square().sum(-2, keepdim=True)
        skip = length.eq(0)  # a zero column: no reflection
        scale = skip.where(0.0, 2.0 / skip.where(1.0, length))
        reflection = identity - scale * v.matmul(v.mT)
        r = reflection.matmul(r)
        q = q.matmul(reflection)
        flips = skip.where(flips, -flips)
    return q, r, flips


class DecompositionMixin(TensorCore):
    """Matrix products, trace, QR and SVD."""

    # ------------------------------------------------------------------------------------------------------------
    # products
    # ------------------------------------------------------------------------------------------------------------

    def mm(self, mat2: Self) -> Self:
        """The product of two matrices.

        Example:
            >>> Tensor([[1, 2]]).mm(Tensor([[3], [4]])).tolist()
            [[11]]
        """
        _require_matrix(self, "mm", 2)
        _require_matrix(mat2, "mm mat2", 2)
        return self.matmul(mat2)

    def bmm(self, mat2: Self) -> Self:
        """Batched matrix product of (b, n, m) and (b, m, p) tensors."""
        _require_matrix(self, "bmm", 3)
        _require_matrix(mat2, "bmm mat2", 3)
        if self.shape[0] != mat2.shape[0]:
            raise ValueError(f"bmm batch sizes differ: {self.shape} and {mat2.shape}")
        return self.matmul(mat2)

    def mv(self, vec: Self) -> Self:
        """The product of a matrix and a vector."""
        _require_matrix(self, "mv", 2)
        _require_matrix(vec, "mv vec", 1)
        return self.matmul(vec)

    def outer(self, vec2: Self) -> Self:
        """The outer product of two vectors.

        Example:
            >>> Tensor([1, 2]).outer(Tensor([3, 4])).tolist()
            [[3, 4], [6, 8]]
        """
        _require_matrix(self, "outer", 1)
        _require_matrix(vec2, "outer vec2", 1)
        return self.reshape(-1, 1) * vec2.reshape(1, -1)

    def ger(self, vec2: Self) -> Self:
        """Alias of `outer`."""
        return self.outer(vec2)

    def inner(self, other: Self) -> Self:
        """Sum over the last dims of both (a scalar operand multiplies).

        Example:
            >>> Tensor([[1, 2], [3, 4]]).inner(Tensor([1, 1])).tolist()
            [3, 7]
        """
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        if self.shape[-1] != other.shape[-1]:
            raise ValueError(f"inner: last dims differ, shapes {self.shape} and {other.shape}")
        # result dims: self's leading dims, then other's leading dims
        left = self.reshape(*self.shape[:-1], *([1] * (other.ndim - 1)), self.shape[-1])
        right = other.reshape(*([1] * (self.ndim - 1)), *other.shape)
        return (left * right).sum(-1)

    def vdot(self, other: Self) -> Self:
        """The dot product of two 1-D tensors (no conjugation: kiln has no complex dtypes)."""
        _require_matrix(self, "vdot", 1)
        return self.dot(other)

    def kron(self, other: Self) -> Self:
        """The Kronecker product (the shorter shape padded with leading 1s).

        Example:
            >>> Tensor([1, 2]).kron(Tensor([1, 10])).tolist()
            [1, 10, 2, 20]
        """
        ndim = max(self.ndim, other.ndim)
        a = self.reshape((1,) * (ndim - self.ndim) + self.shape)
        b = other.reshape((1,) * (ndim - other.ndim) + other.shape)
        interleaved_a = a.reshape([size for length in a.shape for size in (length, 1)])
        interleaved_b = b.reshape([size for length in b.shape for size in (1, length)])
        return (interleaved_a * interleaved_b).reshape([x * y for x, y in zip(a.shape, b.shape)])

    def addmm(self, mat1: Self, mat2: Self, *, beta: ConstType = 1, alpha: ConstType = 1) -> Self:
        """beta * self + alpha * (mat1 @ mat2).

        Example:
            >>> Tensor([[1.0]]).addmm(Tensor([[2.0]]), Tensor([[3.0]])).tolist()
            [[7.0]]
        """
        return self._scaled_sum(mat1.mm(mat2), beta, alpha)

    def addmv(self, mat: Self, vec: Self, *, beta: ConstType = 1, alpha: ConstType = 1) -> Self:
        """beta * self + alpha * (mat @ vec)."""
        return self._scaled_sum(mat.mv(vec), beta, alpha)

    def addr(self, vec1: Self, vec2: Self, *, beta: ConstType = 1, alpha: ConstType = 1) -> Self:
        """beta * self + alpha * outer(vec1, vec2)."""
        return self._scaled_sum(vec1.outer(vec2), beta, alpha)

    def baddbmm(self, batch1: Self, batch2: Self, *, beta: ConstType = 1, alpha: ConstType = 1) -> Self:
        """beta * self + alpha * bmm(batch1, batch2)."""
        return self._scaled_sum(batch1.bmm(batch2), beta, alpha)

    def addbmm(self, batch1: Self, batch2: Self, *, beta: ConstType = 1, alpha: ConstType = 1) -> Self:
        """beta * self + alpha * (the sum over the batch of bmm(batch1, batch2))."""
        return self._scaled_sum(batch1.bmm(batch2).sum(0), beta, alpha)

    def _scaled_sum(self, product: Self, beta: ConstType, alpha: ConstType) -> Self:
        scaled = product if alpha == 1 else product * alpha
        if beta == 0:  # torch ignores self (even NaN / inf in it) when beta is 0: only its shape broadcasts
            return scaled + self._const(0, self.shape, self.dtype, self.device)
        return (self if beta == 1 else self * beta) + scaled

    def trace(self) -> Self:
        """The sum of the main diagonal of a matrix.

        Example:
            >>> Tensor([[1, 2], [3, 4]]).trace().item()
            5
        """
        _require_matrix(self, "trace", 2)
        return self.diagonal().sum()

    def matrix_power(self, n: int) -> Self:
        """The matrix to the power `n` by repeated squaring (n = 0: the identity; n < 0: of the inverse).

        Example:
            >>> Tensor([[1, 1], [0, 1]]).matrix_power(3).tolist()
            [[1, 3], [0, 1]]
        """
        _require_matrix(self, "matrix_power")
        power = check_int(n, "matrix_power n")
        if self.shape[-1] != self.shape[-2]:
            raise ValueError(f"matrix_power needs square matrices, got shape {self.shape}")
        if power < 0:
            return self.inverse().matrix_power(-power)
        size = self.shape[-1]
        result = self.eye(size, dtype=self.dtype, device=self.device)._broadcast_to(self.shape)
        base = self
        while power:
            if power & 1:
                result = result.matmul(base)
            power >>= 1
            if power:
                base = base.matmul(base)
        return result

    def newton_schulz(self, steps: int, params: tuple[float, ...], eps: float = 1.0e-7) -> Self:
        """`steps` Newton-Schulz iterations X <- sum_i params[i] * X (X^T X)^i on the normalized matrix (the
        orthogonalization of the Muon optimizer, as tinygrad defines it).

        Example:
            >>> Tensor([[2.0, 0.0], [0.0, 2.0]]).newton_schulz(5, (1.5, -0.5)).round().tolist()
            [[1.0, 0.0], [0.0, 1.0]]
        """
        _require_matrix(self, "newton_schulz")
        tall = self.shape[-2] > self.shape[-1]
        x = self.mT if tall else self
        x = x / (x.square().sum((-2, -1), keepdim=True).sqrt() + eps)
        for _ in range(check_int(steps, "newton_schulz steps")):
            gram = x.matmul(x.mT)
            term = x
            total = term * params[0]
            for coefficient in params[1:]:
                term = gram.matmul(term)
                total = total + term * coefficient
            x = total
        return x.mT if tall else x

    # ------------------------------------------------------------------------------------------------------------
    # decompositions
    # ------------------------------------------------------------------------------------------------------------

    def qr(self, mode: str = "reduced") -> tuple[Self, Self]:
        """(Q, R) with self = Q @ R, Q orthonormal columns and R upper triangular ('reduced': k = min(m, n) columns;
        'complete': Q is m x m), matching torch.linalg.qr's signs. Batched over leading dims.

        Example:
            >>> q, r = Tensor([[3.0, 0.0], [4.0, 5.0]]).qr(); [round(v, 4) for v in r.reshape(-1).tolist()]
            [-5.0, -4.0, 0.0, 3.0]
        """
        if mode not in ("reduced", "complete"):
            raise ValueError(f"qr mode must be 'reduced' or 'complete', got {mode!r}")
        _require_matrix(self, "qr")
        a = self._floating()
        rows, columns = a.shape[-2:]
        q, r, _ = householder(a)
        upper = iota(type(a), rows, a.device).reshape(rows, 1) <= iota(type(a), columns, a.device).reshape(1, columns)
        r = upper.where(r, 0.0)
        if mode == "complete" or rows <= columns:
            return q, r
        return q[..., :, :columns], r[..., :columns, :]

    def svd(self, full_matrices: bool | None = None, some: bool | None = None) -> tuple[Self, Self, Self]:
        """The singular value decomposition self = U @ diag(S) @ V^T, batched over leading dims, singular values
        descending. Two spellings, two results:

        - torch.Tensor.svd's (`x.svd()`, `x.svd(some=False)`): (U, S, V) with V itself (not transposed); reduced
          (U (..., m, k), V (..., n, k), k = min(m, n)) unless some=False (U (..., m, m), V (..., n, n)).
        - tinygrad's and torch.linalg.svd's (`x.svd(full_matrices=...)`): (U, S, Vh) with Vh = V^T; full
          (U (..., m, m), Vh (..., n, n)) when full_matrices=True, else reduced (U (..., m, k), Vh (..., k, n)).

        One-sided Jacobi (fixed sweeps): meant for small matrices. The columns completing U or V to a square
        orthonormal basis (full forms) come from a complete QR of the reduced factor.

        Example:
            >>> u, s, v = Tensor([[3.0, 0.0], [0.0, -2.0]]).svd(); [round(x, 5) for x in s.tolist()]
            [3.0, 2.0]
        """
        if full_matrices is not None and some is not None:
            raise ValueError(
                "svd takes full_matrices (tinygrad's / torch.linalg.svd's spelling: returns Vh) or some "
                "(torch.Tensor.svd's: returns V), not both"
            )
        _require_matrix(self, "svd")
        full = bool(full_matrices) if full_matrices is not None else some is False
        u, singular, v = self._floating()._jacobi_svd(full)
        return (u, singular, v.mT) if full_matrices is not None else (u, singular, v)

    def _jacobi_svd(self, full: bool) -> tuple[Self, Self, Self]:
        """(U, S, V) of float matrices (..., m, n), reduced or (full) with square U and V."""
        a = self
        rows, columns = a.shape[-2:]
        if rows < columns:
            u, s, v = a.mT._jacobi_svd(full)
            return v, s, u
        batch = a.shape[:-2]
        if columns == 0:
            u = a.eye(rows, dtype=a.dtype, device=a.device)._broadcast_to((*batch, rows, rows)) if full else a
            empty = a._const(0, (*batch, 0), a.dtype, a.device)
            return u, empty, a._const(0, (*batch, 0, 0), a.dtype, a.device)
        v = a.eye(columns, dtype=a.dtype, device=a.device)._broadcast_to((*batch, columns, columns))
        work = a
        for _ in range(_JACOBI_SWEEPS):
            for p in range(columns - 1):
                for q in range(p + 1, columns):
                    left, right = work[..., :, p : p + 1], work[..., :, q : q + 1]  # (..., rows, 1)
                    alpha = left.square().sum(-2, keepdim=True)
                    beta = right.square().sum(-2, keepdim=True)
                    gamma = left.mul(right).sum(-2, keepdim=True)
                    settled = gamma.abs() <= 1e-30
                    zeta = (beta - alpha) / (settled.where(1.0, gamma) * 2.0)
                    tangent = (zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (zeta * zeta + 1.0).sqrt())
                    tangent = settled.where(0.0, tangent)
                    cosine = (tangent * tangent + 1.0).rsqrt()
                    sine = cosine * tangent
                    ep, eq = _unit(columns, p, a), _unit(columns, q, a)
                    rotation = (
                        a.eye(columns, dtype=a.dtype, device=a.device)
                        + (cosine - 1.0) * (ep.matmul(ep.mT) + eq.matmul(eq.mT))
                        + sine * (ep.matmul(eq.mT) - eq.matmul(ep.mT))
                    )
                    work = work.matmul(rotation)
                    v = v.matmul(rotation)
            # without gradients each sweep runs at once (small graphs); with them the sweeps stay one lazy graph,
            # differentiated through: exact for the singular values, slow to schedule beyond ~4 columns
            if work.requires_grad is True:
                work, v = work.contiguous(), v.contiguous()
            else:
                work, v = work.realize(), v.realize()
        norms = work.square().sum(-2).sqrt()  # (..., columns)
        order = norms.argsort(dim=-1, descending=True)
        singular = norms.gather(-1, order)
        columns_order = order.unsqueeze(-2)
        u = work.gather(-1, columns_order.expand(*batch, rows, columns))
        u = u / singular.eq(0).where(1.0, singular).unsqueeze(-2)
        v = v.gather(-1, columns_order.expand(*batch, columns, columns))
        if full and rows > columns:
            # the first columns of a complete QR of U span U's columns; the rest complete the basis
            complement = u.qr("complete")[0][..., :, columns:]
            u = u.cat(complement, dim=-1)
        return u, singular, v
