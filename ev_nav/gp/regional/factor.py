"""Cholesky factor of the regional posterior precision ``Q + W`` on the Vecchia pattern.

``Q = Aᵀ D⁻¹ A`` (:mod:`ev_nav.gp.regional.vecchia`) has the exact factor ``L = Aᵀ D^{-1/2}``,
lower triangular once segments are numbered in reversed coarse-to-fine order. Readings add
``W`` (per-segment precisions) to the diagonal; the factor of ``Q + W`` is computed on ``L``'s
pattern without fill (zero-fill incomplete Cholesky): exact for the prior, and off by the
dropped fill once there are readings — measured below 1e-3 of the prior standard deviation on
the posterior (docs/gp.md, "The regional learner").

Everything here works in *positions* (the factor's numbering); :class:`PrecisionFactor` takes
and returns segment-numbered vectors.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from ev_nav.errors import ModelStateError
from ev_nav.gp.regional.vecchia import VecchiaPrior

__all__ = ["PrecisionFactor"]


@numba.njit(cache=True)
def _ic0(colptr, rowidx, val):  # noqa: ANN001, ANN202
    """In-place zero-fill Cholesky of the lower CSC (diagonal first per column), right-looking.

    Returns -1, or the first column whose pivot is not positive."""
    n = colptr.size - 1
    mark = np.full(n, -1, dtype=np.int64)
    for j in range(n):
        p0, p1 = colptr[j], colptr[j + 1]
        piv = val[p0]
        if piv <= 0.0:
            return j
        piv = np.sqrt(piv)
        for p in range(p0, p1):
            val[p] /= piv
        for q in range(p0 + 1, p1):
            k = rowidx[q]
            lk = val[q]
            for r in range(colptr[k], colptr[k + 1]):
                mark[rowidx[r]] = r
            for t in range(q, p1):
                pos = mark[rowidx[t]]
                if pos >= 0:
                    val[pos] -= val[t] * lk
            for r in range(colptr[k], colptr[k + 1]):
                mark[rowidx[r]] = -1
    return -1


@numba.njit(cache=True)
def _forward(colptr, rowidx, val, x):  # noqa: ANN001, ANN202
    """``x ← L⁻¹ x`` in place; x is (n, k)."""
    n = colptr.size - 1
    for j in range(n):
        d = val[colptr[j]]
        for c in range(x.shape[1]):
            x[j, c] /= d
        for q in range(colptr[j] + 1, colptr[j + 1]):
            i = rowidx[q]
            v = val[q]
            for c in range(x.shape[1]):
                x[i, c] -= v * x[j, c]


@numba.njit(cache=True)
def _backward(colptr, rowidx, val, x):  # noqa: ANN001, ANN202
    """``x ← L⁻ᵀ x`` in place; x is (n, k)."""
    n = colptr.size - 1
    for j in range(n - 1, -1, -1):
        for q in range(colptr[j] + 1, colptr[j + 1]):
            i = rowidx[q]
            v = val[q]
            for c in range(x.shape[1]):
                x[j, c] -= v * x[i, c]
        d = val[colptr[j]]
        for c in range(x.shape[1]):
            x[j, c] /= d


@numba.njit(cache=True)
def _takahashi_diag(colptr, rowidx, val):  # noqa: ANN001, ANN202
    """``diag((L Lᵀ)⁻¹)`` by the Takahashi recursion on L's pattern (entries of the inverse
    outside the pattern taken as 0: exact for a chordal pattern, close for the zero-fill one).
    """
    n = colptr.size - 1
    sig = np.zeros(val.size)
    mark = np.full(n, -1, dtype=np.int64)
    tmp = np.zeros(n)
    for j in range(n - 1, -1, -1):
        p0, p1 = colptr[j], colptr[j + 1]
        ljj = val[p0]
        m = p1 - p0 - 1
        for a in range(m):
            tmp[a] = 0.0
        for a in range(m):
            qa = p0 + 1 + a
            i = rowidx[qa]
            tmp[a] += val[qa] * sig[colptr[i]]
            for r in range(colptr[i] + 1, colptr[i + 1]):
                mark[rowidx[r]] = r
            for b in range(a + 1, m):
                qb = p0 + 1 + b
                pos = mark[rowidx[qb]]
                if pos >= 0:
                    s = sig[pos]
                    tmp[a] += val[qb] * s
                    tmp[b] += val[qa] * s
            for r in range(colptr[i] + 1, colptr[i + 1]):
                mark[rowidx[r]] = -1
        acc = 0.0
        for a in range(m):
            v = -tmp[a] / ljj
            sig[p0 + 1 + a] = v
            acc += val[p0 + 1 + a] * v
        sig[p0] = 1.0 / (ljj * ljj) - acc / ljj
    out = np.empty(n)
    for j in range(n):
        out[j] = sig[colptr[j]]
    return out


class PrecisionFactor:
    """``L Lᵀ ≈ Q + diag(w)`` on the Vecchia pattern, with solves, samples and variances.

    Parameters
    ----------
    prior : VecchiaPrior
    """

    def __init__(self, prior: VecchiaPrior) -> None:
        n = prior.n
        self.n = n
        #: position of each segment (reversed coarse-to-fine order), and segment of each position
        self.pos = (n - 1 - prior.rank).astype(np.int64)
        self.seg = np.empty(n, dtype=np.int64)
        self.seg[self.pos] = np.arange(n)
        coo = prior.a_matrix.tocoo()
        # L = Aᵀ D^{-1/2}: A[i, j] sits at row pos[j], column pos[i]
        pattern = sp.csc_matrix(
            (np.ones(coo.nnz), (self.pos[coo.col], self.pos[coo.row])), shape=(n, n)
        )
        pattern.sort_indices()
        self.colptr = pattern.indptr.astype(np.int64)
        self.rowidx = pattern.indices.astype(np.int64)
        if not np.array_equal(self.rowidx[self.colptr[:-1]], np.arange(n)):
            raise ModelStateError("the Vecchia pattern is not lower triangular in its order")
        q = prior.precision()[self.seg][:, self.seg].tocsc()
        cols = np.repeat(np.arange(n), np.diff(self.colptr))
        #: Q's values on the pattern (positions), the prior precision the factor starts from
        self.q_values = np.asarray(q[self.rowidx, cols]).ravel()
        self.values = np.empty_like(self.q_values)
        self.w = np.zeros(n)
        self.factorize(self.w)

    @property
    def nnz(self) -> int:
        """Entries of the factor."""
        return int(self.values.size)

    def factorize(self, w: NDArray[np.float64]) -> None:
        """Factorise ``Q + diag(w)`` (``w``: segment-numbered precisions [1/Wh²], ≥ 0)."""
        val = self.q_values.copy()
        wp = np.asarray(w, dtype=np.float64)[self.seg]
        val[self.colptr[:-1]] += wp
        bad = _ic0(self.colptr, self.rowidx, val)
        if bad >= 0:
            raise ModelStateError(
                f"the incomplete Cholesky factor broke down at segment {int(self.seg[bad])}"
            )
        self.values = val
        self.w = np.asarray(w, dtype=np.float64).copy()

    def _in(self, b: NDArray[np.float64]) -> NDArray[np.float64]:
        b = np.asarray(b, dtype=np.float64)
        x = b[self.seg] if b.ndim == 2 else b[self.seg][:, None]
        return np.ascontiguousarray(x)

    def _out(self, x: NDArray[np.float64], ndim: int) -> NDArray[np.float64]:
        out = x[self.pos]
        return out if ndim == 2 else out[:, 0]

    def solve(self, b: NDArray[np.float64]) -> NDArray[np.float64]:
        """``(L Lᵀ)⁻¹ b`` for b of shape (n,) or (n, k)."""
        x = self._in(b)
        _forward(self.colptr, self.rowidx, self.values, x)
        _backward(self.colptr, self.rowidx, self.values, x)
        return self._out(x, np.ndim(b))

    def half_solve(self, b: NDArray[np.float64]) -> NDArray[np.float64]:
        """``L⁻¹ b`` (positions of L are internal; the result is segment-numbered)."""
        x = self._in(b)
        _forward(self.colptr, self.rowidx, self.values, x)
        return self._out(x, np.ndim(b))

    def half_solve_t(self, b: NDArray[np.float64]) -> NDArray[np.float64]:
        """``L⁻ᵀ b``: with ``b`` standard normal, a draw of ``N(0, (L Lᵀ)⁻¹)``."""
        x = self._in(b)
        _backward(self.colptr, self.rowidx, self.values, x)
        return self._out(x, np.ndim(b))

    def variances(self) -> NDArray[np.float64]:
        """``diag((L Lᵀ)⁻¹)`` per segment [Wh²] (Takahashi on the pattern)."""
        d = _takahashi_diag(self.colptr, self.rowidx, self.values)
        return d[self.pos]
