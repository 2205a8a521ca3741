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

import copy
from typing import Any, TypeVar

import numba
import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from ev_nav.errors import ModelStateError
from ev_nav.gp.kernels import hop_halo, sub_block
from ev_nav.gp.regional.vecchia import VecchiaPrior

__all__ = ["PrecisionFactor"]


# the kernels release the GIL (nogil): a server's background refit builds a prior while its
# request threads draw and route on their snapshots
@numba.njit(cache=True, nogil=True)
def _spare(colptr):  # noqa: ANN001, ANN202
    """The longest column's length: past every column's local index (a scratch's spare slot)."""
    spare = 0
    for j in range(colptr.size - 1):
        spare = max(spare, colptr[j + 1] - colptr[j])
    return spare


@numba.njit(cache=True, nogil=True)
def _gather_column(colptr, rowidx, src, rptr, rcol, j, mark, acc, dst, sign):  # noqa: ANN001, ANN202
    """``dst[p] += sign · Σ_c src[i, c] · src[j, c]`` for each entry p = (i, j) of column j's
    pattern, over the columns c < j of row j (``rptr``/``rcol``): the left-looking step of a
    product ``L Lᵀ`` or of a Cholesky factorisation on a fixed pattern.

    Column j's sums are gathered in the scratch ``acc`` (local index; ``mark`` holds it while
    this runs and :func:`_spare` otherwise), whose spare slot takes the entries outside the
    pattern: no branch in the inner loop, and the same sums in the same order as adding to
    ``dst`` directly."""
    p0, p1 = colptr[j], colptr[j + 1]
    spare = acc.size - 1
    for p in range(p0, p1):
        mark[rowidx[p]] = p - p0
        acc[p - p0] = dst[p]
    for t in range(rptr[j], rptr[j + 1]):
        c = rcol[t]
        q0, q1 = colptr[c], colptr[c + 1]
        # row j's entry in column c (rows sorted): the rows from it on are ≥ j
        e = q0 + np.searchsorted(rowidx[q0:q1], j)
        v = src[e]
        for q in range(e, q1):
            acc[mark[rowidx[q]]] += sign * src[q] * v
    for p in range(p0, p1):
        mark[rowidx[p]] = spare
        dst[p] = acc[p - p0]


@numba.njit(cache=True, nogil=True)
def _ic0(colptr, rowidx, val, rptr, rcol):  # noqa: ANN001, ANN202
    """In-place zero-fill Cholesky of the lower CSC (diagonal first per column, rows sorted),
    left-looking: column j gathers ``L[:, c] L[j, c]`` from the columns c < j of its row
    (``rptr``/``rcol``), marking its own pattern once (a right-looking form marks a column's
    pattern for every entry that updates it). Bit-identical to that form (the same sums in the
    same order).

    Returns -1, or the first column whose pivot is not positive."""
    n = colptr.size - 1
    spare = _spare(colptr)
    mark = np.full(n, spare, dtype=np.int64)
    acc = np.zeros(spare + 1)
    for j in range(n):
        _gather_column(colptr, rowidx, val, rptr, rcol, j, mark, acc, val, -1.0)
        p0, p1 = colptr[j], colptr[j + 1]
        piv = val[p0]
        if piv <= 0.0:
            return j
        piv = np.sqrt(piv)
        for p in range(p0, p1):
            val[p] /= piv
    return -1


@numba.njit(cache=True, nogil=True)
def _gram_on_pattern(colptr, rowidx, l0, rptr, rcol, out):  # noqa: ANN001, ANN202
    """``out[p] = (L₀L₀ᵀ)[rowidx[p], j]`` for each entry p of each column j of the pattern:
    Q on the pattern from its exact factor, left-looking (column j gathers from the columns
    c ≤ j with ``L₀[j, c] ≠ 0``). Q's entries off the pattern are never formed (as a sparse
    product they are most of its ~1 GB at 100k segments)."""
    n = colptr.size - 1
    spare = _spare(colptr)
    mark = np.full(n, spare, dtype=np.int64)
    acc = np.zeros(spare + 1)
    for j in range(n):
        p0, p1 = colptr[j], colptr[j + 1]
        v = l0[p0]
        for p in range(p0, p1):
            out[p] = l0[p] * v
        _gather_column(colptr, rowidx, l0, rptr, rcol, j, mark, acc, out, 1.0)


@numba.njit(cache=True, nogil=True)
def _forward(colptr, rowidx, val, x, active):  # noqa: ANN001, ANN202
    """``x ← L⁻¹ x`` in place; x is (n, k), of which only the first ``active[j]`` columns can
    be non-zero in rows ≤ j (all k for a dense x; a halo solve's unit right-hand sides, in
    the order of their rows, are zero above them): the work on those zeros is skipped, the
    numbers are the same."""
    n = colptr.size - 1
    for j in range(n):
        a = active[j]
        if a == 0:
            continue
        d = val[colptr[j]]
        for c in range(a):
            x[j, c] /= d
        for q in range(colptr[j] + 1, colptr[j + 1]):
            i = rowidx[q]
            v = val[q]
            for c in range(a):
                x[i, c] -= v * x[j, c]


@numba.njit(cache=True, nogil=True)
def _backward(colptr, rowidx, val, x):  # noqa: ANN001, ANN202
    """``x ← L⁻ᵀ x`` in place; x is (n, k). Columns read from the last entry down, as in
    :func:`_backward1`."""
    n = colptr.size - 1
    for j in range(n - 1, -1, -1):
        for q in range(colptr[j + 1] - 1, colptr[j], -1):
            i = rowidx[q]
            v = val[q]
            for c in range(x.shape[1]):
                x[j, c] -= v * x[i, c]
        d = val[colptr[j]]
        for c in range(x.shape[1]):
            x[j, c] /= d


@numba.njit(cache=True, nogil=True)
def _forward1(colptr, rowidx, val, x):  # noqa: ANN001, ANN202
    """``x ← L⁻¹ x`` in place for one right-hand side (the per-trip sweeps: a 1-D loop with
    32-bit row indices, which moves fewer bytes than the (n, k) form)."""
    n = colptr.size - 1
    for j in range(n):
        xj = x[j] / val[colptr[j]]
        x[j] = xj
        if xj != 0.0:
            for q in range(colptr[j] + 1, colptr[j + 1]):
                x[rowidx[q]] -= val[q] * xj


@numba.njit(cache=True, nogil=True)
def _backward1(colptr, rowidx, val, x):  # noqa: ANN001, ANN202
    """``x ← L⁻ᵀ x`` in place for one right-hand side. Columns are read from the last entry
    down, so that the whole sweep walks memory in one direction: reading each column upwards
    while the columns go downwards took twice as long at 100k segments (19 against 10 ms,
    the hardware prefetcher losing the stream)."""
    n = colptr.size - 1
    for j in range(n - 1, -1, -1):
        acc = x[j]
        for q in range(colptr[j + 1] - 1, colptr[j], -1):
            acc -= val[q] * x[rowidx[q]]
        x[j] = acc / val[colptr[j]]


@numba.njit(cache=True, nogil=True)
def _takahashi_column(colptr, rowidx, val, sig, j, mark, vj, tmp, out):  # noqa: ANN001, ANN202
    """Column j of ``Σ = (L Lᵀ)⁻¹`` on L's pattern from the columns after it (Takahashi's
    recursion; entries of Σ outside the pattern taken as 0: exact for a chordal pattern, close
    for the zero-fill one). Written to ``out[: nnz of column j]``.

    Column j's rows are marked once with their local index; each of its rows i then scans
    column i of Σ, whose entries outside column j's pattern meet the spare slot (``mark`` is
    :func:`_spare` there, ``vj[spare] = 0``), so the inner loop has no branch. The sums are
    the same, in the same order, as marking column i for every row (a full pass at 100k
    segments 5.4 → 3.4 s)."""
    p0, p1 = colptr[j], colptr[j + 1]
    ljj = val[p0]
    m = p1 - p0 - 1
    for a in range(m):
        tmp[a] = 0.0
        vj[a] = val[p0 + 1 + a]
        mark[rowidx[p0 + 1 + a]] = a
    for a in range(m):
        i = rowidx[p0 + 1 + a]
        va = vj[a]
        ta = tmp[a] + va * sig[colptr[i]]
        # rows of column i are past i, so the rows of column j they meet have b > a
        for r in range(colptr[i] + 1, colptr[i + 1]):
            b = mark[rowidx[r]]
            v = sig[r]
            ta += vj[b] * v
            tmp[b] += va * v
        tmp[a] = ta
    spare = vj.size - 1
    for a in range(m):
        mark[rowidx[p0 + 1 + a]] = spare
    acc = 0.0
    for a in range(m):
        v = -tmp[a] / ljj
        out[a + 1] = v
        acc += vj[a] * v
    out[0] = 1.0 / (ljj * ljj) - acc / ljj


@numba.njit(cache=True, nogil=True)
def _takahashi(colptr, rowidx, val):  # noqa: ANN001, ANN202
    """``Σ = (L Lᵀ)⁻¹`` on L's pattern (see :func:`_takahashi_column`), all columns."""
    n = colptr.size - 1
    sig = np.zeros(val.size)
    spare = _spare(colptr)
    mark = np.full(n, spare, dtype=np.int64)
    vj = np.zeros(spare + 1)
    tmp = np.zeros(spare + 1)
    out = np.zeros(spare + 1)
    for j in range(n - 1, -1, -1):
        _takahashi_column(colptr, rowidx, val, sig, j, mark, vj, tmp, out)
        for p in range(colptr[j], colptr[j + 1]):
            sig[p] = out[p - colptr[j]]
    return sig


def _delta_workspace(colptr: NDArray[np.int64]) -> tuple[NDArray, ...]:
    """The scratch of :func:`_update_delta`, made once per factor pattern: marks at the spare
    slot, empty lists, and buffers of the pattern's size (only their first entries are touched
    by a trip: a few MB at 100k segments)."""
    n = colptr.size - 1
    nnz = int(colptr[-1])
    spare = int(_spare(colptr))
    return (np.full(n, spare, dtype=np.int64), np.zeros(spare + 1), np.zeros(spare),
            np.empty(nnz), np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64),
            np.full(n, -1, dtype=np.int64), np.empty(nnz, dtype=np.int64),
            np.empty(nnz, dtype=np.int64), np.empty(nnz, dtype=np.int64))


@numba.njit(cache=True, nogil=True)
def _update_delta(colptr, rowidx, val, val32, pend, y, py, flag_l, flag_y, tol, toly, j0, ws):  # noqa: ANN001, ANN202, C901, E501
    """Bring the factor and ``y = L⁻¹ b`` up to date after changes to the diagonal and to b.

    Delta form: a column whose values change owes the columns below it the difference of its
    outer-product contribution, added to their pending sums (``pend``, on the pattern) and to
    y's (``py``). A column is rewritten only when that moves it by more than ``tol`` × its
    diagonal (a y entry by more than ``toly``); smaller changes stay pending rather than being
    dropped, so the stored factor never drifts beyond the threshold from the factor of the
    current matrix, however many updates it takes. Caller: ``pend[colptr[j]] += ΔM_jj``,
    ``flag_l[j] = True``; ``py[j] += Δb_j``, ``flag_y[j] = True``. ``val32`` (the values in
    float32, for draws) is rewritten with them.

    A changed column's debts to the columns below are collected when each of those is reached
    (a list per target, in the order the sources changed, so every pending sum adds the same
    terms in the same order as pushing them at once would: bit-identical results). The
    target's pattern is then marked once for all its sources, and its sums gathered in a
    scratch whose spare slot takes the entries outside the pattern, so the inner loop has no
    branch; pushing at once marked the target for every source and branched on each entry
    (69 → 47 ms for the ~3,000 columns a trip rewrites at 100k segments, ~80 entries a
    column). The changed columns' old values are kept, in a buffer, until then.

    ``ws`` is the caller's workspace (:func:`_delta_workspace`), kept between calls: allocated
    afresh each call, its arrays' pages were faulted in anew on every trip. Its marks and lists
    are left as they were found (each target's list is emptied where it is consumed), and its
    buffers are filled from their start, so only their first entries are ever touched.

    Returns the number of columns rewritten, or ``-1 - j`` if column j's pivot is not positive
    (the workspace is then to be made afresh).
    """
    n = colptr.size - 1
    spare = _spare(colptr)  # acc's spare slot
    mark, acc, work, oldv, ostart, head, tail, nxt, src, at = ws
    # oldv: the old values of the columns rewritten, column c's from oldv[ostart[c]] on;
    # each target's debts: a linked list (head, tail, nxt) of (source column, place of the
    # target's row in it)
    used = 0
    oused = 0
    nch = 0
    for j in range(j0, n):
        if not (flag_l[j] or flag_y[j]):
            continue
        p0, p1 = colptr[j], colptr[j + 1]
        colch = False
        if flag_l[j]:
            flag_l[j] = False
            e = head[j]
            if e >= 0:
                # the column's pending sums in a scratch; acc[spare] takes the entries
                # outside its pattern (a branch there, taken at random, cost a third)
                for p in range(p0, p1):
                    mark[rowidx[p]] = p - p0
                    acc[p - p0] = pend[p]
                while e >= 0:
                    c, q = src[e], at[e]
                    ob = ostart[c] - colptr[c]  # the old value of place t: oldv[ob + t]
                    lnq, loq = val[q], oldv[ob + q]
                    for t in range(q, colptr[c + 1]):
                        i = mark[rowidx[t]]
                        acc[i] -= val[t] * lnq - oldv[ob + t] * loq
                    e = nxt[e]
                head[j] = -1
                tail[j] = -1
                for p in range(p0, p1):
                    mark[rowidx[p]] = spare
                    pend[p] = acc[p - p0]
            dold = val[p0]
            c0 = dold * dold + pend[p0]
            if c0 <= 0.0:
                return -1 - j
            piv = np.sqrt(c0)
            dmax = abs(piv - dold)
            work[0] = piv
            for p in range(p0 + 1, p1):
                v = (val[p] * dold + pend[p]) / piv
                work[p - p0] = v
                if abs(v - val[p]) > dmax:
                    dmax = abs(v - val[p])
            if dmax > tol * piv:
                colch = True
                nch += 1
                ostart[j] = oused
                for p in range(p0, p1):
                    oldv[oused + p - p0] = val[p]
                    val[p] = work[p - p0]
                    val32[p] = work[p - p0]
                    pend[p] = 0.0
                oused += p1 - p0
        ych = False
        yold = y[j]
        if flag_y[j] or colch:
            flag_y[j] = False
            ob = ostart[j] - p0
            r = yold * (oldv[ob + p0] if colch else val[p0]) + py[j]
            ynew = r / val[p0]
            if abs(ynew - yold) > toly:
                ych = True
                y[j] = ynew
            py[j] = r - y[j] * val[p0]
        if colch or ych:
            for q in range(p0 + 1, p1):
                i = rowidx[q]
                lo = oldv[ob + q] if colch else val[q]
                py[i] -= val[q] * y[j] - lo * yold
                flag_y[i] = True
        if colch:
            for q in range(p0 + 1, p1):
                i = rowidx[q]
                src[used], at[used], nxt[used] = j, q, -1
                if tail[i] >= 0:
                    nxt[tail[i]] = used
                else:
                    head[i] = used
                tail[i] = used
                used += 1
                flag_l[i] = True
    return nch


@numba.njit(cache=True, nogil=True)
def _row_forms(y, m, tol, out):  # noqa: ANN001, ANN202
    """``out[i] = y_i M y_iᵀ`` over the entries of row i above ``tol`` × its largest."""
    n, k = y.shape
    idx = np.empty(k, dtype=np.int64)
    val = np.empty(k)
    for i in range(n):
        big = 0.0
        for j in range(k):
            big = max(big, abs(y[i, j]))
        thr = tol * big
        c = 0
        for j in range(k):
            if abs(y[i, j]) > thr:
                idx[c] = j
                val[c] = y[i, j]
                c += 1
        s = 0.0
        for a in range(c):
            ra = idx[a]
            t = 0.5 * m[ra, ra] * val[a]
            for b in range(a):
                t += m[ra, idx[b]] * val[b]
            s += val[a] * t
        out[i] = 2.0 * s


def halo_row_forms(y: NDArray[np.float64], m: NDArray[np.float64]) -> NDArray[np.float64]:
    """``diag(Y M Yᵀ)`` for a halo solve's ``Y`` (:meth:`PrecisionFactor.local_solve`,
    |halo| × k) and a symmetric k × k ``M`` (its lower triangle is read).

    A halo row's entries decay by ~10× a hop from each reading, so a row is mostly entries
    below its largest by many orders (at 100k segments, 70–90 % of a Bayes-UCB route's
    k = 200–500 columns lie below 1e-14 of it): those are left out, at a relative error
    ≤ 2√k · 1e-14 · cond(M) of each form (rounding level), and the forms cost
    ``Σ_i nnz_i²`` instead of the dense ``|halo| · k²``."""
    out = np.empty(y.shape[0])
    _row_forms(np.ascontiguousarray(y), np.ascontiguousarray(m), 1e-14, out)
    return out


T = TypeVar("T")


def deepcopy_sharing(obj: T, memo: dict[int, Any], fixed: tuple[object, ...]) -> T:
    """``copy.deepcopy`` of ``obj`` (attribute by attribute) in which the ``fixed`` objects —
    never changed after construction — are shared instead of copied."""
    for f in fixed:
        if f is not None:
            memo[id(f)] = f
    new = obj.__class__.__new__(obj.__class__)
    memo[id(obj)] = new
    for name, value in obj.__dict__.items():
        setattr(new, name, copy.deepcopy(value, memo))
    return new


class PrecisionFactor:
    """``L Lᵀ ≈ Q + diag(w)`` on the Vecchia pattern, with solves, samples and variances.

    Parameters
    ----------
    prior : VecchiaPrior
    tol : float
        Relative change below which an update leaves a column pending (:meth:`add`).
    q_values : ndarray, optional
        :attr:`q_values` computed before (a state's cache), else computed when first needed.
    """

    def __init__(
        self, prior: VecchiaPrior, tol: float = 1e-8, q_values: NDArray[np.float64] | None = None
    ) -> None:
        n = prior.n
        #: relative change below which the per-update factor leaves a column pending
        self.tol = float(tol)
        self.n = n
        #: position of each segment (reversed coarse-to-fine order), and segment of each position
        self.pos = (n - 1 - prior.rank).astype(np.int64)
        self.seg = np.empty(n, dtype=np.int64)
        self.seg[self.pos] = np.arange(n)
        self._prior = prior
        l0 = self._prior_factor()
        self.colptr = l0.indptr.astype(np.int64)
        # 32-bit row indices only: every kernel reads them (fewer bytes for the memory-bound
        # sweeps, Takahashi and IC0), and a 64-bit copy would be ~0.6 GB at 1M segments
        self.rowidx = l0.indices.astype(np.int32)
        if not np.array_equal(self.rowidx[self.colptr[:-1]], np.arange(n)):
            raise ModelStateError("the Vecchia pattern is not lower triangular in its order")
        #: the prior's factor's values, until Q's values are known (see :meth:`_l0_values`)
        self._l0: NDArray[np.float64] | None = np.asarray(l0.data, dtype=np.float64)
        del l0
        if q_values is not None and np.shape(q_values) != self._l0.shape:
            raise ModelStateError("the cached prior precision does not fit the Vecchia pattern")
        self._q_values = q_values
        # each row's strictly-lower entries: the columns c < j of row j that a left-looking
        # column j gathers from (IC0, Q on the pattern)
        rows = self.rowidx
        cols = np.repeat(np.arange(n), np.diff(self.colptr))
        below = rows != cols
        order = np.argsort(rows[below], kind="stable")
        self._rcol = cols[below][order].astype(np.int32)
        self._rptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[below], minlength=n), out=self._rptr[1:])
        del cols, below, order
        self.factorize(np.zeros(n))
        if q_values is not None:
            self._l0 = None
        self._dist = np.full(n, -1, dtype=np.int64)
        self._loc = np.full(n, -1, dtype=np.int64)

    def __deepcopy__(self, memo: dict[int, Any]) -> PrecisionFactor:
        """An independent copy sharing the pattern and the prior's values, which never change
        (~300 MB at 100k segments: the server copies the model for every snapshot)."""
        _ = self.q_values  # computed once, then shared by every copy
        if self._ws is not None:  # the update's scratch is not state: the copy makes its own
            memo[id(self._ws)] = None
        return deepcopy_sharing(self, memo, (
            self._prior, self.pos, self.seg, self.colptr, self.rowidx, self._q_values,
            self._rcol, self._rptr))

    def _prior_factor(self) -> sp.csc_matrix:
        """The prior's exact factor ``L₀ = Aᵀ D^{-1/2}`` in the factor's order: ``A[i, j]``
        sits at row ``pos[j]``, column ``pos[i]``. It is Q's exact factor, so the prior's
        factor needs no factorisation (and the pattern holds no fill)."""
        n, prior = self.n, self._prior
        coo = prior.a_matrix.tocoo()
        l0 = sp.csc_matrix(
            (coo.data / np.sqrt(prior.d[coo.row]), (self.pos[coo.col], self.pos[coo.row])),
            shape=(n, n),
        )
        l0.sort_indices()
        return l0

    def _l0_values(self) -> NDArray[np.float64]:
        """The prior's factor's values: kept until Q's values are computed from them, then let
        go (~0.6 GB at 1M segments) and made again from the prior where a factorisation
        without readings needs them (the very same numbers)."""
        if self._l0 is not None:
            return self._l0
        return np.asarray(self._prior_factor().data, dtype=np.float64)

    @property
    def q_values(self) -> NDArray[np.float64]:
        """Q's values on the pattern (positions): what a factorisation with readings starts
        from (computed when first needed: the prior alone has its factor in closed form)."""
        if self._q_values is None:
            l0 = self._l0_values()
            q = np.empty(l0.size)
            _gram_on_pattern(self.colptr, self.rowidx, l0, self._rptr, self._rcol, q)
            self._q_values = q
            self._l0 = None
        return self._q_values

    @property
    def nnz(self) -> int:
        """Entries of the factor."""
        return int(self.values.size)

    def factorize(self, w: NDArray[np.float64], b: NDArray[np.float64] | None = None) -> None:
        """Factorise ``Q + diag(w)`` (``w``: segment-numbered precisions [1/Wh²], ≥ 0) and
        keep ``L⁻¹ b`` (``b`` [Wh/Wh²]; default zeros) for :meth:`mean_solve`."""
        wp = np.asarray(w, dtype=np.float64)[self.seg]
        if not wp.any():
            val = self._l0_values().copy()  # the prior's exact factor
        else:
            val = self.q_values.copy()
            val[self.colptr[:-1]] += wp
            bad = _ic0(self.colptr, self.rowidx, val, self._rptr, self._rcol)
            if bad >= 0:
                raise ModelStateError(
                    f"the incomplete Cholesky factor broke down at segment {int(self.seg[bad])}"
                )
        self.values = val
        #: the values in float32, kept with them, for a draw's sweeps: 8 bytes an entry read
        #: instead of 12 (the sweeps are bound by memory bandwidth; ~1e-6 of a posterior sd)
        self._v32 = val.astype(np.float32)
        self.w = np.asarray(w, dtype=np.float64).copy()
        self.b = np.zeros(self.n) if b is None else np.asarray(b, dtype=np.float64).copy()
        self._y = self.b[self.seg]
        _forward1(self.colptr, self.rowidx, self.values, self._y)
        self._pend = np.zeros_like(self.values)
        self._py = np.zeros(self.n)
        #: :func:`_update_delta`'s scratch, made at the first update
        self._ws: tuple[NDArray, ...] | None = None

    def add(self, ids: NDArray[np.int64], dw: NDArray[np.float64],
            db: NDArray[np.float64]) -> int:
        """Add ``dw`` to ``w`` and ``db`` to ``b`` at the distinct segments ``ids``, updating the
        factor and ``L⁻¹ b`` in place (only the columns the change reaches, see
        :func:`_update_delta`). Returns the number of factor columns rewritten."""
        ids = np.asarray(ids, dtype=np.int64)
        p = self.pos[ids]
        flag_l = np.zeros(self.n, dtype=np.bool_)
        flag_y = np.zeros(self.n, dtype=np.bool_)
        self._pend[self.colptr[p]] += dw
        self._py[p] += db
        flag_l[p] = dw != 0.0
        flag_y[p] = True
        self.w[ids] += dw
        self.b[ids] += db
        if self._ws is None:
            self._ws = _delta_workspace(self.colptr)
        out = _update_delta(self.colptr, self.rowidx, self.values, self._v32, self._pend,
                            self._y, self._py, flag_l, flag_y, self.tol, 1e-12, int(p.min()),
                            self._ws)
        if out < 0:
            self._ws = None  # left mid-update
            raise ModelStateError(
                f"the incomplete Cholesky factor broke down at segment {int(self.seg[-1 - out])}"
            )
        return int(out)

    def mean_solve(self) -> NDArray[np.float64]:
        """``(L Lᵀ)⁻¹ b`` from the kept ``L⁻¹ b``: one sweep."""
        x = self._y.copy()
        _backward1(self.colptr, self.rowidx, self.values, x)
        return x[self.pos]

    def local_solve(
        self, ids: NDArray[np.int64], adjacency: tuple[NDArray[np.int64], NDArray[np.int64]],
        hops: int, min_size: int = 0,
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """``(L Lᵀ)⁻¹ E_ids`` restricted to the ``hops``-hop halo of ``ids``, widened hop by hop
        until it holds ``min_size`` segments (or the component ends), using the factor's block
        on the halo (the inverse's columns decay by ~10× per hop on road networks; docs/gp.md).

        Returns the halo's segments and the solution on them (|halo| × len(ids)).
        """
        ids = np.asarray(ids, dtype=np.int64)
        nodes = hop_halo(adjacency[0], adjacency[1], ids, hops, self._dist)
        while nodes.size < min_size:
            hops += 1
            wider = hop_halo(adjacency[0], adjacency[1], ids, hops, self._dist)
            if wider.size == nodes.size:
                break
            nodes = wider
        pos = np.sort(self.pos[nodes])
        # (each column's diagonal first: pos is sorted, so it stays first in the block)
        cp, ri, vv = sub_block(self.colptr, self.rowidx, self.values, pos, self._loc)
        seg = self.seg[pos]
        # right-hand side c is zero above its own row lp[c] until the forward sweep reaches
        # it: with the columns in the order of lp, row j of the sweep works on the first
        # active[j] columns only (about half the forward sweep's work)
        lp = np.searchsorted(pos, self.pos[ids])
        order = np.argsort(lp, kind="stable")
        x = np.zeros((seg.size, ids.size))
        x[lp[order], np.arange(ids.size)] = 1.0
        active = np.searchsorted(lp[order], np.arange(seg.size), side="right")
        _forward(cp, ri, vv, x, active)
        _backward(cp, ri, vv, x)
        if np.any(order != np.arange(ids.size)):  # (ids in the factor's order need no copy)
            x = x[:, np.argsort(order)]
        return seg, x

    def _in(self, b: NDArray[np.float64]) -> NDArray[np.float64]:
        b = np.asarray(b, dtype=np.float64)
        x = b[self.seg] if b.ndim == 2 else b[self.seg][:, None]
        return np.ascontiguousarray(x)

    def _out(self, x: NDArray[np.float64], ndim: int) -> NDArray[np.float64]:
        out = x[self.pos]
        return out if ndim == 2 else out[:, 0]

    def solve(self, b: NDArray[np.float64]) -> NDArray[np.float64]:
        """``(L Lᵀ)⁻¹ b`` for b of shape (n,) or (n, k)."""
        if np.ndim(b) == 1 or np.shape(b)[1] == 1:
            x1 = np.asarray(b, dtype=np.float64).reshape(-1)[self.seg]
            _forward1(self.colptr, self.rowidx, self.values, x1)
            _backward1(self.colptr, self.rowidx, self.values, x1)
            return x1[self.pos] if np.ndim(b) == 1 else x1[self.pos, None]
        x = self._in(b)
        _forward(self.colptr, self.rowidx, self.values, x, np.full(self.n, x.shape[1]))
        _backward(self.colptr, self.rowidx, self.values, x)
        return self._out(x, np.ndim(b))

    def draw_solve(self, eps: NDArray[np.float64],
                   b: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
        """``L⁻ᵀ(L⁻¹b + ε)``, segment-numbered (b: segment-numbered; default the kept one, whose
        ``L⁻¹b`` is kept: one sweep). With ε standard normal, a draw of
        ``N((L Lᵀ)⁻¹b, (L Lᵀ)⁻¹)``; ε is read in the factor's numbering (i.i.d. normals in
        any order are one draw), so the sweeps need no renumbering between them. The sweeps
        read the float32 copy of the values (accumulating in float64): 15 instead of 19 ms at
        100k segments, within ~1e-6 of a posterior sd of the float64 draw."""
        if b is None:
            x = self._y + eps
        else:
            x = np.asarray(b, dtype=np.float64)[self.seg]
            _forward1(self.colptr, self.rowidx, self._v32, x)
            x += eps
        _backward1(self.colptr, self.rowidx, self._v32, x)
        return x[self.pos]

    def sweep(self, x: NDArray[np.float64], transpose: bool = False) -> None:
        """``x ← L⁻¹ x`` (or ``L⁻ᵀ x``) in place, for a C-contiguous ``x`` (n × k) in the
        factor's positions (row p is segment ``seg[p]``): for N × k blocks that should not be
        copied between numberings (the landmarks' solves, ~0.4 GB each at 100k segments)."""
        if not (x.ndim == 2 and x.flags.c_contiguous and x.dtype == np.float64):
            raise ValueError("sweep needs a C-contiguous float64 (n, k) array")
        if transpose:
            _backward(self.colptr, self.rowidx, self.values, x)
        else:
            _forward(self.colptr, self.rowidx, self.values, x, np.full(self.n, x.shape[1]))

    def variances(self) -> NDArray[np.float64]:
        """``diag((L Lᵀ)⁻¹)`` per segment [Wh²], by Takahashi's recursion on the whole
        pattern (~2.5 s at 100k segments; the learner keeps them between trips itself, see
        ``RegionalGP._factor_variances``)."""
        # 32-bit row indices: fewer bytes for the memory-bound scans (~13 % at 100k)
        sig = _takahashi(self.colptr, self.rowidx, self.values)
        return sig[self.colptr[:-1]][self.pos]
