"""The Vecchia (sparse inverse-Cholesky) prior of the product term on a regional network.

The product term of the segment kernel (:class:`~ev_nav.gp.kernels.SegmentKernel`) is
``C = a a' s₁ K_G ∘ k_f``: graph Matérn times a Matérn-5/2 feature correlation, scaled by each
segment's amplitude ``a`` (1 for the paper's uniform model). Its inverse is dense, but the
graph factor decays within a few hops, so each segment is predicted well from ``m`` earlier
segments of a coarse-to-fine (approximately max-min) ordering:

    f_i = Σ_{j ∈ N(i)} b_ij f_j + ε_i,   ε_i ~ N(0, d_i),   N(i) ⊂ {earlier segments}

(Vecchia 1988; Katzfuss & Guinness 2021). With ``A = I − B`` this is the prior precision
``Q = Aᵀ D⁻¹ A``, and ``L = Aᵀ D^{-1/2}`` is its exact Cholesky factor in the reversed order:
the posterior precision ``Q + W`` keeps ``L``'s pattern, which :mod:`ev_nav.gp.regional.factor`
factorises without fill.

Only entries of ``K_G`` that matter are computed and kept: each patch of ~``patch`` segments
solves ``(c I + Δ)^ν`` on its ``halo``-hop neighbourhood (entries beyond it are below ``tol`` of
the diagonal), and each segment keeps, from its own column, its entries of *earlier* segments
in the order — all the build reads (``K_G`` is symmetric) — so memory and time grow with the
network, not with its square, and the entries are streamed into their final arrays patch by
patch (no whole-matrix copies: the build's peak is the kept entries themselves).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import sys
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from ev_nav.errors import ConfigError
from ev_nav.gp.kernels import halo_columns, metric_xy, patch_groups, segment_patches
from ev_nav.roads.network import RoadNetwork

#: The coarse-to-fine order, the graph-kernel entries, their diagonal and normaliser
#: (:func:`network_entries`).
Entries = tuple[NDArray[np.int64], sp.csr_matrix, NDArray[np.float64], float]

__all__ = [
    "Entries",
    "SpilledCSR",
    "SpilledEntries",
    "VecchiaPrior",
    "VecchiaSettings",
    "build_vecchia",
    "graph_entries",
    "maxmin_order",
    "network_entries",
    "release_freed_memory",
]


@dataclass(frozen=True)
class VecchiaSettings:
    """How the Vecchia prior is built.

    Attributes
    ----------
    neighbours : int
        ``m``, earlier segments each segment is conditioned on (more: closer to the exact
        prior, cost ∝ m² per trip and m³ per build).
    entry_tol : float
        Graph-kernel entries below this fraction of their column's diagonal are dropped.
    halo : int
        Hops around a patch on which its graph-kernel columns are solved.
    patch : int
        Segments per patch (smaller patches have smaller halos: cheaper per column).
    """

    neighbours: int = 80
    entry_tol: float = 1e-6
    halo: int = 14
    patch: int = 250

    def __post_init__(self) -> None:
        if self.neighbours < 1 or self.halo < 1 or self.patch < 1:
            raise ConfigError("Vecchia neighbours, halo and patch must be positive integers")
        if not 0.0 <= self.entry_tol < 1.0:
            raise ConfigError("entry_tol must lie in [0, 1)")


@dataclass(frozen=True)
class VecchiaPrior:
    """``Q = Aᵀ D⁻¹ A`` in segment numbering.

    Attributes
    ----------
    a_stored : scipy.sparse.csr_matrix or SpilledCSR
        ``A`` (N × N, unit diagonal, ``−b_ij`` at the conditioning set of row i), in memory or
        on disk (:meth:`spilled`); read it as :attr:`a_matrix`.
    d : ndarray
        Conditional variances ``d_i`` [Wh²].
    rank : ndarray of int64
        Each segment's place in the coarse-to-fine order (0 first).
    """

    a_stored: sp.csr_matrix | SpilledCSR
    d: NDArray[np.float64]
    rank: NDArray[np.int64]

    @property
    def a_matrix(self) -> sp.csr_matrix:
        """``A`` (mapped from disk for this use where the prior is :meth:`spilled`)."""
        a = self.a_stored
        return a.load() if isinstance(a, SpilledCSR) else a

    def spilled(self) -> VecchiaPrior:
        """This prior with ``A`` on disk (:class:`SpilledCSR`): A is read where a factor is set
        up and a cache written, not on a trip, and is 0.9 GB at 1M segments."""
        if isinstance(self.a_stored, SpilledCSR):
            return self
        return VecchiaPrior(SpilledCSR(self.a_stored, "ev-nav-prior-"), self.d, self.rank)

    @property
    def n(self) -> int:
        """Number of segments."""
        return int(self.d.size)

    def precision(self) -> sp.csr_matrix:
        """The prior precision ``Q = Aᵀ D⁻¹ A`` [1/Wh²]."""
        a = self.a_matrix
        return (a.T @ sp.diags(1.0 / self.d) @ a).tocsr()

    def covariance(self) -> NDArray[np.float64]:
        """The dense prior covariance ``Q⁻¹`` (N × N): tests and small networks only."""
        a = self.a_matrix.toarray()
        inv_a = np.linalg.solve(a, np.eye(self.n))
        return (inv_a * self.d[None, :]) @ inv_a.T


def maxmin_order(xy: NDArray[np.float64], seed: int = 0) -> NDArray[np.int64]:
    """Approximate max-min (coarse-to-fine) order of points ``xy`` (n × 2) [m].

    A point's level is the first of a sequence of halving grids on which it is the one point
    picked in its cell; points are ordered by level and randomly (from ``seed``) within one.
    Returns the points in order (position → point).
    """
    n = xy.shape[0]
    rng = np.random.default_rng(seed)
    lo = xy.min(0)
    span = float(np.ptp(xy, 0).max()) + 1e-9
    level = np.full(n, -1, dtype=np.int64)
    priority = rng.permutation(n)
    lev = 0
    while (level < 0).any():
        if lev >= 30:  # coincident points (the two directions of one road): last level
            level[level < 0] = lev
            break
        cells = np.floor((xy - lo) / span * 2**lev).astype(np.int64)
        key = cells[:, 0] * (2**lev + 1) + cells[:, 1]
        free = np.flatnonzero(level < 0)
        taken = np.flatnonzero(level >= 0)
        occupied = np.unique(key[taken])
        cand = free[~np.isin(key[free], occupied)]
        cand = cand[np.argsort(priority[cand])]
        _, first = np.unique(key[cand], return_index=True)
        level[cand[first]] = lev
        lev += 1
    return np.lexsort((priority, level)).astype(np.int64)


def _undirected(net: RoadNetwork) -> sp.csr_matrix:
    s = net.line_graph
    return ((s + s.T) > 0).astype(np.int8).tocsr()


def graph_entries(
    laplacian: sp.spmatrix,
    adjacency: sp.csr_matrix,
    xy: NDArray[np.float64],
    shift: float,
    nu: int,
    settings: VecchiaSettings,
    rank: NDArray[np.int64],
) -> tuple[sp.csr_matrix, NDArray[np.float64], float]:
    """The entries of the normalised graph kernel ``K_G = (c I + Δ)^(-ν) / z`` that the Vecchia
    build reads: of each segment, those of earlier segments.

    Parameters
    ----------
    laplacian : sparse matrix
        The incidence Laplacian Δ (:func:`~ev_nav.gp.kernels.incidence_laplacian`).
    adjacency : csr_matrix
        The undirected line graph (hops).
    xy : ndarray
        Segment midpoints [m] (patches are grid cells).
    shift, nu : float, int
        ``c = 2ν/κ²`` and the integer smoothness ν.
    rank : ndarray of int64
        Each segment's place in the coarse-to-fine order.

    Returns
    -------
    kg : csr_matrix
        Row ``i`` holds ``K_G[i, j]`` for the segments ``j`` earlier than ``i`` whose entry is
        ≥ ``entry_tol`` of ``K_G[i, i]``, from ``i``'s own column (``K_G`` is symmetric, so
        the other half is the same numbers up to the halo's truncation); columns sorted,
        32-bit indices, float32 values. No diagonal.
    diag : ndarray
        ``diag(K_G)`` (mean 1).
    z : float
        The normaliser: the mean of ``diag((c I + Δ)^(-ν))``.
    """
    n = laplacian.shape[0]
    prec = (laplacian + shift * sp.identity(n, format="csr")).tocsr()
    prec.sort_indices()
    patch = segment_patches(xy, settings.patch)
    und = adjacency.tocsr()
    adj = (und.indptr.astype(np.int64), und.indices.astype(np.int64))
    scratch = np.full(n, -1, dtype=np.int64)
    order, bounds = patch_groups(patch)
    counts = np.zeros(n, dtype=np.int64)
    chunks: list[tuple[NDArray[np.int64], NDArray[np.int32], NDArray[np.float64]]] = []
    diag_raw = np.empty(n)
    for p in range(bounds.size - 1):
        members = order[bounds[p] : bounds[p + 1]]
        halo, rhs = halo_columns(prec, adj, members, nu, settings.halo, scratch)
        own = rhs[np.searchsorted(halo, members), np.arange(members.size)]
        diag_raw[members] = own
        keep = np.abs(rhs) >= settings.entry_tol * own[None, :]
        keep &= rank[halo][:, None] < rank[members][None, :]
        # member by member, each member's rows in increasing id (the halo is sorted)
        mc, hr = np.nonzero(keep.T)
        counts[members] = np.bincount(mc, minlength=members.size)
        chunks.append((members, halo[hr].astype(np.int32), rhs[hr, mc]))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    # float32 (~1e-7 relative; entries below 1e-6 of the diagonal are dropped anyway): a fitting
    # learner keeps them between fits, 264M entries at 1M segments
    data = np.empty(int(indptr[-1]), dtype=np.float32)
    # each chunk into place, freed as soon as it is copied: the kept entries are the build's
    # memory peak (~0.33 GB at 100k segments), not a multiple of them
    chunks.reverse()
    while chunks:
        members, idx, val = chunks.pop()
        lens = counts[members]
        dest = np.repeat(indptr[members] - np.cumsum(lens) + lens, lens) + np.arange(idx.size)
        indices[dest] = idx
        data[dest] = val
    release_freed_memory()
    z = float(diag_raw.mean())
    data /= z
    kg = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    kg.has_sorted_indices = True
    return kg, diag_raw / z, z


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere).

    The patches' chunks are below glibc's mmap threshold once it has risen (it follows the
    largest block freed), so they come from the heap, and freeing them leaves its pages with
    the process: at 1M segments ~4 GB beyond the 3.2 GB of kept entries, which the N × J
    landmarks built next would sit on top of at the build's peak."""
    if not sys.platform.startswith("linux"):
        return
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return
    trim(0)


# the kernels release the GIL (nogil): a server's background refit builds a prior while its
# request threads draw and route on their snapshots
@numba.njit(cache=True, nogil=True)
def _matern52(x: NDArray, i: int, j: int, ls: NDArray) -> float:
    s = 0.0
    for k in range(x.shape[1]):
        t = (x[i, k] - x[j, k]) / ls[k]
        s += t * t
    s = np.sqrt(5.0 * s)
    return (1.0 + s + s * s / 3.0) * np.exp(-s)


@numba.njit(cache=True, nogil=True)
def _partition_rows(indptr, indices, data, rank):  # noqa: ANN001, ANN202
    """Reorder each row in place: its entries of earlier segments (lower rank) first, each part
    in its former order (a stable partition). Returns each row's count of earlier entries."""
    n = indptr.size - 1
    earlier = np.zeros(n, dtype=np.int64)
    for r in range(n):
        lo, hi = indptr[r], indptr[r + 1]
        ci = indices[lo:hi].copy()
        cd = data[lo:hi].copy()
        k = lo
        for p in range(hi - lo):
            if rank[ci[p]] < rank[r]:
                indices[k] = ci[p]
                data[k] = cd[p]
                k += 1
        earlier[r] = k - lo
        for p in range(hi - lo):
            if rank[ci[p]] >= rank[r]:
                indices[k] = ci[p]
                data[k] = cd[p]
                k += 1
    return earlier


@numba.njit(cache=True, nogil=True)
def _earlier_prefix(indptr, indices, rank):  # noqa: ANN001, ANN202
    """Each row's count of leading entries of earlier segments, or -1 for a row whose earlier
    entries are not all leading (not partitioned by :func:`_partition_rows`)."""
    n = indptr.size - 1
    earlier = np.zeros(n, dtype=np.int64)
    for r in range(n):
        k = 0
        done = False
        for p in range(indptr[r], indptr[r + 1]):
            if rank[indices[p]] < rank[r]:
                if done:
                    earlier[r] = -1
                    break
                k += 1
            else:
                done = True
        if earlier[r] == 0:
            earlier[r] = k
    return earlier


@numba.njit(cache=True, nogil=True)
def _select(indptr, indices, data, earlier, kgd, x, ls, m, out, cnt):  # noqa: ANN001, ANN202
    """Per segment, its ≤ m earlier segments of largest product-kernel correlation."""
    n = indptr.size - 1
    for i in range(n):
        lo = indptr[i]
        k = earlier[i]
        buf = np.empty(k)
        cb = np.empty(k, dtype=np.int64)
        for t in range(k):
            c = indices[lo + t]
            buf[t] = -abs(data[lo + t] / np.sqrt(kgd[i] * kgd[c]) * _matern52(x, i, c, ls))
            cb[t] = c
        o = np.argsort(buf, kind="mergesort")
        kk = min(k, m)
        for t in range(kk):
            out[i, t] = cb[o[t]]
        cnt[i] = kk


@numba.njit(cache=True, nogil=True)
def _entry_covariances(indptr, indices, data, earlier, x, ls, a, s1, out):  # noqa: ANN001, ANN202
    """The product term's covariance at every kept graph-kernel entry of an earlier segment,
    in CSR order: each is read by the conditioning sets of ~m² / (entries per row) rows, so it
    is evaluated once here rather than in each of them."""
    n = indptr.size - 1
    for r in range(n):
        for p in range(indptr[r], indptr[r] + earlier[r]):
            cc = indices[p]
            out[p] = s1 * data[p] * _matern52(x, r, cc, ls) * a[r] * a[cc]


@numba.njit(cache=True, nogil=True)
def _gather(indptr, indices, cov, earlier, nb, cnt, i0, i1, var, nug, kcc, kci, pos):  # noqa: ANN001, ANN202, E501
    """Covariance of each row's conditioning set (identity-padded) and with the row itself.

    Of two members of a conditioning set one is the earlier: their entry sits among the later
    one's earlier entries (a row's leading part), so each pair is found once, filled on both
    sides, and only those leading parts are scanned."""
    m = nb.shape[1]
    for i in range(i0, i1):
        b = i - i0
        c = cnt[i]
        for t in range(c):
            pos[nb[i, t]] = t
        for t in range(m):
            kci[b, t] = 0.0
            for u in range(m):
                kcc[b, t, u] = 0.0
        for p in range(indptr[i], indptr[i] + earlier[i]):
            u = pos[indices[p]]
            if u >= 0:
                kci[b, u] = cov[p]
        for t in range(c):
            r = nb[i, t]
            # (the relative jitter keeps each small system definite)
            kcc[b, t, t] = (var[r] + nug[r]) * (1.0 + 1e-10)
            for p in range(indptr[r], indptr[r] + earlier[r]):
                u = pos[indices[p]]
                if u >= 0:
                    kcc[b, t, u] = cov[p]
                    kcc[b, u, t] = cov[p]
        for t in range(c, m):
            kcc[b, t, t] = 1.0
        for t in range(c):
            pos[nb[i, t]] = -1


def build_vecchia(
    kg: sp.csr_matrix,
    kg_diag: NDArray[np.float64],
    rank: NDArray[np.int64],
    features: NDArray[np.float64],
    lengthscale: NDArray[np.float64],
    outputscale: float,
    amplitude: NDArray[np.float64],
    neighbours: int,
    nugget: NDArray[np.float64] | None = None,
    block: int = 2000,
) -> VecchiaPrior:
    """The Vecchia prior of ``a a' s₁ K_G ∘ k_f`` from the kept entries of ``K_G``.

    Parameters
    ----------
    kg, kg_diag
        :func:`graph_entries`.
    rank : ndarray of int64
        Each segment's place in the order (from :func:`maxmin_order`).
    features : ndarray (N, d)
        Standardised segment context.
    lengthscale : ndarray (d,)
        Product feature kernel's lengthscales.
    outputscale : float
        ``s₁``.
    amplitude : ndarray (N,)
        ``a_e`` (ones for the uniform model).
    nugget : ndarray (N,), optional
        Independent variance added to each segment [Wh²]: what the landmarks leave of the
        feature-only term's diagonal, so that every prior variance is exact. Only for a small
        remainder: a large independent part defeats the screening that Vecchia relies on.
    """
    n = kg.shape[0]
    x = np.ascontiguousarray(features, dtype=np.float64)
    ls = np.ascontiguousarray(lengthscale, dtype=np.float64)
    amp = np.ascontiguousarray(amplitude, dtype=np.float64)
    rank = np.asarray(rank, dtype=np.int64)
    indptr = kg.indptr.astype(np.int64)
    indices = kg.indices  # (as kept, 32-bit: a 64-bit copy would be ~0.4 GB at 100k segments)
    data = kg.data
    earlier = _earlier_prefix(indptr, indices, rank)
    if (earlier < 0).any():  # rows with later entries too (not network_entries'): a copy
        indices, data = indices.copy(), data.copy()
        earlier = _partition_rows(indptr, indices, data, rank)
    m = int(neighbours)
    nb = np.full((n, m), -1, dtype=np.int64)
    cnt = np.zeros(n, dtype=np.int64)
    _select(indptr, indices, data, earlier, kg_diag, x, ls, m, nb, cnt)
    nug = np.zeros(n) if nugget is None else np.ascontiguousarray(nugget, dtype=np.float64)
    # (s₁ · diag · a · a: the very product the entry formula gives on the diagonal, where the
    # feature correlation is 1)
    var0 = float(outputscale) * kg_diag * amp * amp
    var = var0 + nug
    coef = np.zeros((n, m))
    d = np.empty(n)
    cov = np.empty(data.size)
    _entry_covariances(indptr, indices, data, earlier, x, ls, amp, float(outputscale), cov)
    kcc = np.empty((block, m, m))
    kci = np.empty((block, m))
    pos = np.full(n, -1, dtype=np.int64)
    for s0 in range(0, n, block):
        s1 = min(n, s0 + block)
        _gather(indptr, indices, cov, earlier, nb, cnt, s0, s1, var0, nug, kcc, kci, pos)
        b = np.linalg.solve(kcc[: s1 - s0], kci[: s1 - s0, :, None])[:, :, 0]
        d[s0:s1] = var[s0:s1] - (b * kci[: s1 - s0]).sum(1)
        coef[s0:s1] = b
    del cov
    if not np.all(d > 0):
        raise ConfigError("the Vecchia prior is not positive definite (conditional variance ≤ 0)")
    # CSR straight from the (n, m) tables, each row's diagonal first (no COO copies: this runs
    # while the graph-kernel entries are held, at the build's memory peak)
    valid = nb >= 0
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(cnt + 1, out=indptr[1:])
    first = indptr[:-1]
    indices = np.empty(int(indptr[-1]), dtype=np.int32)  # (n < 2³¹: half the bytes)
    data = np.empty(int(indptr[-1]))
    off = np.ones(indices.size, dtype=bool)
    off[first] = False
    indices[first], data[first] = np.arange(n), 1.0
    indices[off], data[off] = nb[valid], -coef[valid]
    del coef, nb, valid, off
    a_matrix = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    a_matrix.sort_indices()
    return VecchiaPrior(a_stored=a_matrix, d=d, rank=np.asarray(rank, dtype=np.int64))


def network_entries(
    net: RoadNetwork,
    laplacian: sp.spmatrix,
    shift: float,
    nu: int,
    settings: VecchiaSettings,
    seed: int = 0,
) -> Entries:
    """The coarse-to-fine order and the graph-kernel entries of ``net``: what
    :func:`build_vecchia` needs besides the feature kernel.

    Returns
    -------
    rank : ndarray of int64
        Each segment's place in the order.
    kg, kg_diag, z
        :func:`graph_entries`: each row's entries of earlier segments.
    """
    xy = metric_xy(net)
    order = maxmin_order(xy, seed)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    kg, kg_diag, z = graph_entries(laplacian, _undirected(net), xy, shift, nu, settings, rank)
    return rank, kg, kg_diag, z


class SpilledCSR:
    """A CSR matrix whose column indices and values are kept on disk between uses.

    They are written once to a private temporary folder and memory-mapped, read-only, for
    each use (:meth:`load`): the pages count towards the process only while a use holds the
    mapping, and the page cache keeps re-reading cheap. The folder is removed when the last
    holder lets the object go (copies of a learner share it). It is made in the system's
    temporary folder (``TMPDIR``): where that is memory-backed (a tmpfs), point ``TMPDIR`` at a
    disk to gain the memory.
    """

    def __init__(self, matrix: sp.csr_matrix, prefix: str) -> None:
        self.shape = matrix.shape
        self.indptr = np.asarray(matrix.indptr)
        self.sorted = bool(matrix.has_sorted_indices)
        self.folder = Path(tempfile.mkdtemp(prefix=prefix))
        self._remove = weakref.finalize(self, shutil.rmtree, str(self.folder), True)
        np.save(self.folder / "indices.npy", np.asarray(matrix.indices), allow_pickle=False)
        np.save(self.folder / "data.npy", np.asarray(matrix.data), allow_pickle=False)

    def load(self) -> sp.csr_matrix:
        """The matrix, its indices and values mapped from the folder (read-only)."""
        indices = np.load(self.folder / "indices.npy", mmap_mode="r", allow_pickle=False)
        data = np.load(self.folder / "data.npy", mmap_mode="r", allow_pickle=False)
        out = sp.csr_matrix((data, indices, self.indptr), shape=self.shape, copy=False)
        out.has_sorted_indices = self.sorted
        return out


class SpilledEntries:
    """Graph-kernel entries (:func:`network_entries`) kept on disk between uses
    (:class:`SpilledCSR`).

    A learner that fits its hyperparameters reads the entries at every fit (κ is not fitted,
    so they do not change), once per 100 trips at steady state; held in memory they would be
    2.1 GB at 1M segments.
    """

    def __init__(self, entries: Entries) -> None:
        rank, kg, diag, z = entries
        self.rank, self.diag, self.z = rank, diag, float(z)
        self.kg = SpilledCSR(kg, "ev-nav-entries-")

    @property
    def folder(self) -> Path:
        """Where the entries' indices and values lie."""
        return self.kg.folder

    def load(self) -> Entries:
        """The entries, their indices and values mapped from the folder (read-only)."""
        return self.rank, self.kg.load(), self.diag, self.z
