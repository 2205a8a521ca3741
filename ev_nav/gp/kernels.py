"""Kernels on road segments: the graph Matérn kernel of the line graph and feature kernels.

The graph Matérn kernel (paper App. B.1, spec §5.2) lives on the nodes of the line graph L(G),
i.e. on road segments. Every connection ``c = (e1, e2)`` gets the weight ``W = ℓ̄ / ℓ_{e1}``
(ℓ̄ = mean segment length); the incidence matrix ``B`` has ``B[e1, c] = -W`` and
``B[e2, c] = +W`` and the incidence Laplacian is ``Δ = B Bᵀ``. With ``c = 2ν/κ²``::

    K_G = (c I + Δ)^(-ν) / z,      z = mean(diag((c I + Δ)^(-ν)))

so the mean prior variance of the graph factor is 1; outputscales live in the composite kernel.

Three interchangeable computations of the same object (``mode``):

``"dense"``
    Full eigendecomposition ``Δ = U Λ Uᵀ`` (O(|E|³) once); any ν, κ and ν learnable.
``"sparse"``
    Integer ν only, exact. ``P = c I + Δ`` is sparse and SPD, so ``K_G[:, Z] = P^(-ν) E_Z``
    comes from ν sparse LU solves per column and ``diag(P^(-ν))`` from blocked solves of unit
    vectors (``diag(P^(-k))_e = <P^(-a) e_e, P^(-b) e_e>``, ``a + b = k``). No dense |E|×|E|
    matrix is formed. κ is learnable: derivatives use ``d P^(-ν)/dc = -ν P^(-ν-1)``.
``"truncated"``
    The ``rank`` smallest eigenpairs of Δ (shift-invert Lanczos); any ν, κ and ν learnable.
    The truncated kernel is normalised by its own trace, so its mean prior variance is also 1.

The composite kernel of the paper is :class:`SegmentKernel`,
``k((e,x),(e',x')) = s₁ k_G(e,e') k_f(x,x') + s₂ k'_f(x,x')`` with Matérn-5/2 ARD feature kernels.
GPyTorch inputs are rows ``[segment_id, x_1, …, x_d]`` (see :func:`segment_inputs`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Literal

import gpytorch
import numba
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
from gpytorch.constraints import GreaterThan, Positive
from numpy.typing import NDArray
from torch import Tensor

from ev_nav.errors import ConfigError, UnknownSegmentError
from ev_nav.gp.lapack import potrf, potri, syrk_lower
from ev_nav.gp.numerics import matern52
from ev_nav.roads.network import RoadNetwork

DTYPE = torch.float64
KernelMode = Literal["auto", "dense", "sparse", "truncated"]
KERNEL_MODES: tuple[str, ...] = ("auto", "dense", "sparse", "truncated")

#: ``mode="auto"`` uses the dense eigendecomposition up to this many segments for non-integer ν.
AUTO_DENSE_MAX = 3000
#: Columns per SuperLU solve call: SuperLU's multi-RHS solve degrades badly for wide blocks
#: (cache misses); ~16 columns is the measured sweet spot on road line graphs.
_SOLVE_CHUNK = 16


# ====================================================================== graph structure
def connection_weights(net: RoadNetwork) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray]:
    """Connections ``(e1, e2)`` of the line graph and their weights ``ℓ̄ / ℓ_{e1}``.

    Returns
    -------
    e1, e2 : ndarray of int64, shape (n_connections,)
        Source and target segment of each connection.
    w : ndarray of float64, shape (n_connections,)
        Connection weight [-] (short source segments are strongly coupled to their successors).
    """
    # The physical line graph, not net.routing_graph(): a turn restriction is a traffic rule at
    # a junction; the two segments still touch and share the terrain and traffic that make
    # their energies alike, which is what the kernel's coupling stands for.
    e1 = np.repeat(np.arange(net.n_segments, dtype=np.int64), np.diff(net.lg_indptr))
    e2 = np.asarray(net.lg_indices, dtype=np.int64)
    w = net.length_m.mean() / net.length_m[e1]
    return e1, e2, w


def incidence_laplacian(net: RoadNetwork) -> sp.csr_matrix:
    """Incidence Laplacian ``Δ = B Bᵀ`` of the weighted line graph (App. B.1), sparse symmetric PSD.

    ``B[e1, c] = -W_c`` and ``B[e2, c] = +W_c`` for connection ``c = (e1, e2)``, so
    ``Δ[e, e] = Σ_{c ∋ e} W_c²`` and ``Δ[e1, e2] = -Σ W_c²`` over the connections joining them
    (in either direction).
    """
    n = net.n_segments
    e1, e2, w = connection_weights(net)
    c = np.arange(e1.shape[0])
    b = sp.csr_matrix(
        (np.concatenate([-w, w]), (np.concatenate([e1, e2]), np.concatenate([c, c]))),
        shape=(n, e1.shape[0]),
    )
    lap = (b @ b.T).tocsr()
    lap.sum_duplicates()
    return lap


def segment_inputs(net: RoadNetwork, features: NDArray | None = None) -> Tensor:
    """GPyTorch inputs for all segments: rows ``[segment_id, x_1, …, x_d]`` (float64).

    Parameters
    ----------
    net : RoadNetwork
    features : ndarray, optional
        Context per segment, shape (n_segments, d); defaults to ``net.features``.
    """
    x = net.features if features is None else np.asarray(features, dtype=np.float64)
    ids = np.arange(net.n_segments, dtype=np.float64)[:, None]
    return torch.as_tensor(np.hstack([ids, x]), dtype=DTYPE)


# ====================================================================== sparse precision
# ---------------------------------------------------------------------- local solves
#: Hops around a patch on which its columns of a graph kernel are solved (entries beyond are
#: below ~1e-6 of the diagonal on road line graphs).
LOCAL_HOPS = 14
#: Segments per patch of the local solves (smaller patches have smaller halos).
LOCAL_PATCH = 250
#: From this many segments on, the sparse kernel's diagonal comes from local solves
#: (:func:`local_diagonal`) instead of one global solve per segment.
LOCAL_DIAG_MIN = 20_000


def metric_xy(net: RoadNetwork) -> NDArray[np.float64]:
    """Segment midpoints in metres (local equirectangular projection of lon/lat)."""
    xy = np.asarray(net.segment_midpoints(), dtype=np.float64)
    lat0 = np.deg2rad(xy[:, 1].mean())
    return np.column_stack([xy[:, 0] * 111_320.0 * np.cos(lat0), xy[:, 1] * 110_540.0])


def segment_patches(xy: NDArray[np.float64], size: int) -> NDArray[np.int64]:
    """Each segment's patch: grid cells of ~``size`` segments on average (``xy`` [m])."""
    n = xy.shape[0]
    cell = np.sqrt(max(np.ptp(xy[:, 0]) * np.ptp(xy[:, 1]), 1.0) * size / n)
    key = np.floor((xy - xy.min(0)) / cell).astype(np.int64)
    return np.unique(key[:, 0] * 1_000_003 + key[:, 1], return_inverse=True)[1].ravel()


def patch_groups(patch: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Segments grouped by patch: ``order[bounds[p]:bounds[p + 1]]`` are patch ``p``'s, in
    increasing id."""
    order = np.argsort(patch, kind="stable")
    return order, np.searchsorted(patch[order], np.arange(int(patch.max()) + 2))


@numba.njit(cache=True, nogil=True)
def hop_halo(indptr, indices, seeds, r, dist):  # noqa: ANN001, ANN202
    """Nodes within ``r`` hops of ``seeds`` in an undirected CSR graph (``dist`` all -1 on entry
    and on return)."""
    n = indptr.size - 1
    out = np.empty(n, dtype=np.int64)
    nout = 0
    for s in seeds:
        if dist[s] < 0:
            dist[s] = 0
            out[nout] = s
            nout += 1
    head = 0
    while head < nout:
        v = out[head]
        head += 1
        dv = dist[v]
        if dv >= r:
            continue
        for p in range(indptr[v], indptr[v + 1]):
            u = indices[p]
            if dist[u] < 0:
                dist[u] = dv + 1
                out[nout] = u
                nout += 1
    nodes = out[:nout].copy()
    for i in range(nout):
        dist[nodes[i]] = -1
    return nodes



@numba.njit(cache=True, nogil=True)
def sub_block(indptr, indices, data, nodes, loc):  # noqa: ANN001, ANN202
    """The block of a compressed sparse matrix (CSR, or CSC read by columns) at sorted
    ``nodes`` (``loc`` all -1 on entry and on return), in the same form with local indices
    and each row's order kept: its cost is the nodes' rows, not the matrix's size."""
    h = nodes.size
    for i in range(h):
        loc[nodes[i]] = i
    cnt = 0
    for i in range(h):
        cnt += indptr[nodes[i] + 1] - indptr[nodes[i]]
    ip = np.empty(h + 1, dtype=np.int64)
    ix = np.empty(cnt, dtype=np.int64)
    dv = np.empty(cnt)
    c = 0
    for i in range(h):
        ip[i] = c
        r = nodes[i]
        for p in range(indptr[r], indptr[r + 1]):
            li = loc[indices[p]]
            if li >= 0:
                ix[c] = li
                dv[c] = data[p]
                c += 1
    ip[h] = c
    for i in range(h):
        loc[nodes[i]] = -1
    return ip, ix[:c], dv[:c]


def halo_columns(
    prec: sp.csr_matrix,
    adj: tuple[NDArray[np.int64], NDArray[np.int64]],
    members: NDArray[np.int64],
    nu: int,
    hops: int,
    scratch: NDArray[np.int64],
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Columns ``members`` of ``prec^(-ν)``, solved on the ``hops``-hop neighbourhood of the
    members (entries beyond it are negligible): the neighbourhood (sorted) and its rows of the
    columns. ``scratch``: n integers, all -1 (and so on return)."""
    halo = np.sort(hop_halo(adj[0], adj[1], members, hops, scratch))
    ip, ix, dv = sub_block(prec.indptr, prec.indices, prec.data, halo, scratch)
    sub = sp.csr_matrix((dv, ix, ip), shape=(halo.size, halo.size)).tocsc()
    lu = spla.splu(sub, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                   options={"SymmetricMode": True})
    rhs = np.zeros((halo.size, members.size), order="F")
    rhs[np.searchsorted(halo, members), np.arange(members.size)] = 1.0
    for _ in range(nu):
        rhs = lu.solve(rhs)
    return halo, rhs


def local_diagonal(
    prec: sp.csr_matrix,
    patch: NDArray[np.int64],
    power: int,
    hops: int = LOCAL_HOPS,
) -> NDArray[np.float64]:
    """``diag(P^(-power))`` of a sparse SPD ``P`` (sorted CSR; its pattern the graph) from each
    patch's columns solved on its ``hops``-hop neighbourhood (:func:`halo_columns`).

    The columns of ``(cI + Δ)^(-ν)`` decay by orders of magnitude per hop on road line graphs,
    more slowly as κ grows: with 14 hops times ``max(1, κ)`` the diagonal agrees with the
    global solves to 1e-8 relative or better (Monaco, κ = 0.7–2.5, tested; a fixed 14 hops
    gave 2.2e-4 at κ = 2.5), at a cost that grows with the network, where one global solve
    per segment took ~100 min at 100k segments.
    """
    n = prec.shape[0]
    adj = (prec.indptr.astype(np.int64), prec.indices.astype(np.int64))
    scratch = np.full(n, -1, dtype=np.int64)
    order, bounds = patch_groups(patch)
    out = np.empty(n)
    for p in range(bounds.size - 1):
        members = order[bounds[p] : bounds[p + 1]]
        halo, rhs = halo_columns(prec, adj, members, power, hops, scratch)
        out[members] = rhs[np.searchsorted(halo, members), np.arange(members.size)]
    return out


class SparsePrecision:
    """``P = c I + Δ`` factorised once (SuperLU, symmetric mode) with chunked multi-RHS solves."""

    def __init__(self, laplacian: sp.spmatrix, shift: float) -> None:
        n = laplacian.shape[0]
        self.shift = float(shift)
        self.n = n
        p = (laplacian + self.shift * sp.identity(n, format="csr")).tocsc()
        # P is SPD: symmetric mode with diagonal pivots keeps the fill of a Cholesky ordering.
        self._lu = spla.splu(
            p,
            permc_spec="MMD_AT_PLUS_A",
            diag_pivot_thresh=0.0,
            options={"SymmetricMode": True},
        )

    def solve(self, rhs: NDArray[np.float64]) -> NDArray[np.float64]:
        """``P⁻¹ rhs`` for a dense (n, k) right-hand side."""
        rhs = np.asarray(rhs, dtype=np.float64)
        if rhs.ndim == 1:
            return self._lu.solve(rhs)
        out = np.empty(rhs.shape, dtype=np.float64, order="F")
        for j in range(0, rhs.shape[1], _SOLVE_CHUNK):
            out[:, j : j + _SOLVE_CHUNK] = self._lu.solve(
                np.asfortranarray(rhs[:, j : j + _SOLVE_CHUNK])
            )
        return out

    def power_solve(self, rhs: NDArray[np.float64], power: int) -> NDArray[np.float64]:
        """``P^(-power) rhs``."""
        out = rhs
        for _ in range(power):
            out = self.solve(out)
        return out

    def unit_columns_padded(self, ids: NDArray[np.int64], power: int) -> NDArray[np.float64]:
        """``P^(-power)[:, ids]`` solved in fixed-width blocks: bits independent of grouping."""
        out = np.empty((self.n, len(ids)), dtype=np.float64, order="F")
        for j in range(0, len(ids), _SOLVE_CHUNK):
            block = ids[j : j + _SOLVE_CHUNK]
            e = np.zeros((self.n, _SOLVE_CHUNK), dtype=np.float64, order="F")
            e[block, np.arange(block.size)] = 1.0
            for _ in range(power):
                e = self._lu.solve(e)
            out[:, j : j + block.size] = e[:, : block.size]
        return out

    def diagonals(self, powers: tuple[int, ...]) -> dict[int, NDArray[np.float64]]:
        """Exact ``diag(P^(-k))`` for each ``k`` in ``powers`` by blocked unit-vector solves.

        ``diag(P^(-k))_e = <P^(-a) e_e, P^(-b) e_e>`` with ``a = k // 2``, ``b = k - a``, so only
        ``ceil(max(powers) / 2)`` solves per segment are needed.
        """
        top = max((k + 1) // 2 for k in powers)
        out = {k: np.empty(self.n) for k in powers}
        # narrow fixed-width blocks: every power of a block is solved while it is in cache
        for start in range(0, self.n, _SOLVE_CHUNK):
            ids = np.arange(start, min(start + _SOLVE_CHUNK, self.n))
            e = np.zeros((self.n, _SOLVE_CHUNK), order="F")
            e[ids, np.arange(len(ids))] = 1.0
            xs = [e]
            for _ in range(top):
                xs.append(self._lu.solve(xs[-1]))
            cols = np.arange(len(ids))
            for k in powers:
                a, b = k // 2, k - k // 2
                if a == 0:
                    out[k][ids] = xs[b][ids, cols]
                else:
                    out[k][ids] = np.einsum("ij,ij->j", xs[a][:, cols], xs[b][:, cols])
        return out


class _SparseState:
    """Per-shift cache of the factorisation, the diagonals and the solved columns."""

    def __init__(
        self,
        laplacian: sp.spmatrix,
        shift: float,
        nu: int,
        diag_grad_probes: int | None,
        spectrum: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
        patch: NDArray[np.int64] | None = None,
    ) -> None:
        self.prec = SparsePrecision(laplacian, shift)
        self.laplacian = laplacian
        #: each segment's patch where the diagonal comes from local solves (large networks)
        self.patch = patch
        self.nu = nu
        self.diag_grad_probes = diag_grad_probes
        # (eigenvalues λ, squared eigenvectors U∘U): diagonals for any shift in O(n²)
        self.spectrum = spectrum
        self._diag: dict[int, NDArray[np.float64]] = {}
        # column cache: slot per segment (-1: not solved) into the columns of ``_cols``
        self._slot = np.full(self.prec.n, -1, dtype=np.int64)
        self._cols = np.empty((self.prec.n, 0), dtype=np.float64, order="F")
        self._owner = np.empty(0, dtype=np.int64)

    def columns(
        self, ids: NDArray[np.int64], rows: NDArray[np.int64] | None = None
    ) -> NDArray[np.float64]:
        """Unnormalised ``P^(-ν)[:, ids]`` (or its ``rows``), cached per column.

        Missing columns are solved in blocks of exactly :data:`_SOLVE_CHUNK` right-hand sides
        (the last block zero-padded). With a fixed block width SuperLU's solve gives every
        column the same bits whatever its position and companions (verified in the tests), so
        a column depends only on (shift, segment): a change of a few inducing segments costs a
        few solves, and a model restored from a checkpoint reproduces posteriors exactly.
        Unpadded blocks of varying width differ in the last bits from one another.
        """
        missing = np.unique(ids[self._slot[ids] < 0])
        if missing.size:
            self._make_room(missing.size, keep=ids)
            start = self._owner.size
            if start + missing.size > self._cols.shape[1]:  # grow by doubling, not per miss
                grown = np.empty(
                    (self.prec.n, max(2 * self._cols.shape[1], start + missing.size)),
                    dtype=np.float64,
                    order="F",
                )
                grown[:, :start] = self._cols[:, :start]
                self._cols = grown
            self._cols[:, start : start + missing.size] = self.prec.unit_columns_padded(
                missing, self.nu
            )
            self._owner = np.concatenate([self._owner, missing])
            self._slot[missing] = np.arange(start, start + missing.size)
        if rows is None:
            return self._cols[:, self._slot[ids]]
        return self._cols[np.ix_(rows, self._slot[ids])]

    def _make_room(self, extra: int, keep: NDArray[np.int64]) -> None:
        """Evict cached columns not in ``keep`` once the cache would exceed its budget."""
        budget = max(2 * (np.unique(keep).size + extra), 256)
        if self._owner.size + extra <= budget:
            return
        held = np.zeros(self.prec.n, dtype=bool)
        held[keep] = True
        stay = held[self._owner]
        self._slot[self._owner] = -1
        self._owner = self._owner[stay]
        self._cols = np.asfortranarray(self._cols[:, : stay.size][:, stay])
        self._slot[self._owner] = np.arange(self._owner.size)

    def diag(self, power: int) -> NDArray[np.float64]:
        """``diag(P^(-power))`` (cached): exact, or from local solves on large networks
        (:func:`local_diagonal`, within 1e-8 relative)."""
        if power not in self._diag:
            if self.spectrum is not None:
                lam, uu = self.spectrum
                self._diag[power] = uu @ (self.prec.shift + lam) ** (-float(power))
            elif self.patch is not None:
                p = (self.laplacian + self.prec.shift * sp.identity(self.prec.n, format="csr"))
                p = p.tocsr()
                p.sort_indices()
                # the columns reach further as κ grows (c = 2ν/κ²): the halo grows with κ
                kappa = math.sqrt(2.0 * self.nu / self.prec.shift)
                hops = math.ceil(LOCAL_HOPS * max(1.0, kappa))
                self._diag[power] = local_diagonal(p, self.patch, power, hops)
            else:
                self._diag[power] = self.prec.diagonals((power,))[power]
        return self._diag[power]

    def weighted_diag_derivative(self, weights: NDArray[np.float64]) -> float:
        """``Σ_e w_e diag(P^(-ν-1))_e``: exact, or a Hutchinson estimate with Rademacher probes.

        The estimate ``mean_j <P⁻¹(w ∘ ξ_j), P^(-ν) ξ_j>`` is unbiased, and it only enters
        stochastic (Adam) gradients; forward values are always exact. Probes come from a
        generator seeded by the shift, so a computation is reproducible.
        """
        if self.diag_grad_probes is None or self.spectrum is not None:
            return float(weights @ self.diag(self.nu + 1))
        seed = int(np.frombuffer(np.float64(self.prec.shift).tobytes(), dtype=np.uint64)[0])
        rng = np.random.default_rng(seed)
        xi = rng.choice(np.array([-1.0, 1.0]), size=(self.prec.n, self.diag_grad_probes))
        left = self.prec.solve(weights[:, None] * xi)
        right = self.prec.power_solve(np.asfortranarray(xi), self.nu)
        return float(np.einsum("ij,ij->", left, right)) / self.diag_grad_probes


class _SparseColumns(torch.autograd.Function):
    """``P(c)^(-ν)[:, ids]`` with the gradient with respect to the shift ``c``."""

    @staticmethod
    def forward(  # noqa: D102
        ctx, shift: Tensor, state: _SparseState, ids: NDArray, rows: NDArray | None
    ) -> Tensor:
        ctx.state, ctx.ids, ctx.rows = state, ids, rows
        return torch.from_numpy(state.columns(ids, rows))

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: D102
        cols = ctx.state.columns(ctx.ids)  # still cached: the shift has not changed
        g_all = grad.detach().numpy()
        if ctx.rows is not None:
            g_all = np.zeros(cols.shape, dtype=np.float64)
            np.add.at(g_all, ctx.rows, grad.detach().numpy())
        # d/dc <G, P^-ν E> = -ν <G, P^-(ν+1) E> = -ν <P^-1 G, P^-ν E>  (P symmetric)
        pg = ctx.state.prec.solve(g_all)
        g = -ctx.state.nu * float(np.einsum("ij,ij->", pg, cols))
        return torch.tensor(g, dtype=DTYPE), None, None, None


class _SparseDiag(torch.autograd.Function):
    """Exact ``diag(P(c)^(-ν))`` with the gradient with respect to the shift ``c``."""

    @staticmethod
    def forward(ctx, shift: Tensor, state: _SparseState) -> Tensor:  # noqa: D102
        ctx.state = state
        return torch.as_tensor(state.diag(state.nu).copy(), dtype=DTYPE)

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: D102
        state = ctx.state
        g = -state.nu * state.weighted_diag_derivative(grad.detach().numpy().astype(np.float64))
        return torch.tensor(g, dtype=DTYPE), None


# ====================================================================== graph Matérn kernel
@dataclass(frozen=True)
class Eigenpairs:
    """(Partial) eigendecomposition of the incidence Laplacian: ``Δ ≈ U diag(λ) Uᵀ``."""

    values: NDArray[np.float64]
    vectors: NDArray[np.float64]


def laplacian_eigenpairs(laplacian: sp.spmatrix, rank: int | None = None) -> Eigenpairs:
    """All eigenpairs (``rank=None``, dense LAPACK) or the ``rank`` smallest (shift-invert).

    The shift-invert Lanczos uses σ = -1, where ``Δ + I`` is nonsingular (Δ itself has the
    constant vector in its null space).
    """
    n = laplacian.shape[0]
    if rank is None or rank >= n - 1:
        vals, vecs = np.linalg.eigh(laplacian.toarray())
    else:
        vals, vecs = spla.eigsh(
            laplacian.tocsc(), k=int(rank), sigma=-1.0, which="LM", v0=np.ones(n)
        )
        order = np.argsort(vals)
        vals, vecs = vals[order], vecs[:, order]
    return Eigenpairs(np.clip(vals, 0.0, None), np.ascontiguousarray(vecs))


#: Spectra for the sparse mode's spectral diagonal, memoised per process and keyed by the
#: Laplacian's content: the runs of an experiment on one network share a worker process, and one
#: dense eigendecomposition of Luxembourg's 5.6k-segment Laplacian takes ~30 s on one core.
_DIAG_SPECTRA: dict[str, tuple[NDArray[np.float64], NDArray[np.float64]]] = {}
_DIAG_SPECTRA_KEEP = 2


def diag_spectrum(laplacian: sp.spmatrix) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Eigenvalues λ ≥ 0 and squared eigenvectors ``U∘U`` of a Laplacian (read-only, memoised).

    ``diag(f(Δ)) = (U∘U) f(λ)`` for any spectral function f, O(n²) per evaluation.
    """
    lap = sp.csr_matrix(laplacian)
    digest = hashlib.blake2b(digest_size=16)
    for part in (lap.indptr, lap.indices, lap.data):
        digest.update(np.ascontiguousarray(part).tobytes())
    key = f"{lap.shape[0]}:{digest.hexdigest()}"
    if key not in _DIAG_SPECTRA:
        if len(_DIAG_SPECTRA) >= _DIAG_SPECTRA_KEEP:
            _DIAG_SPECTRA.clear()
        # torch's LAPACK honours torch.set_num_threads (NumPy's BLAS pool would oversubscribe
        # the cores next to single-threaded simulation workers)
        vals, vecs = torch.linalg.eigh(torch.as_tensor(lap.toarray()))
        lam = np.clip(vals.numpy(), 0.0, None)
        squares = vecs.square_().numpy()
        lam.flags.writeable = False
        squares.flags.writeable = False
        _DIAG_SPECTRA[key] = (lam, squares)
    return _DIAG_SPECTRA[key]


class GraphMaternKernel(gpytorch.kernels.Kernel):
    """Graph Matérn kernel on road segments (normalised to mean prior variance 1).

    Inputs are GPyTorch rows whose first column is the segment id (other columns are ignored).

    Parameters
    ----------
    net : RoadNetwork
        The network whose line graph defines the kernel.
    nu : float
        Smoothness ν (> 0). ``mode="sparse"`` needs an integer ν and keeps it fixed.
    kappa : float
        Initial lengthscale κ (> 0), in graph hops weighted by ℓ̄/ℓ.
    mode : {"auto", "dense", "sparse", "truncated"}
        Computation (see module docstring). ``"auto"``: sparse for integer ν, else dense up to
        :data:`AUTO_DENSE_MAX` segments, else truncated.
    rank : int, optional
        Number of eigenpairs for ``"truncated"`` (default ``min(n - 2, 500)``).
    learn_nu : bool
        Whether ν is a learnable parameter (ignored in sparse mode, where ν is fixed).
    laplacian : scipy sparse matrix, optional
        Precomputed :func:`incidence_laplacian` (saves rebuilding it).
    eigenpairs : Eigenpairs, optional
        Precomputed eigenpairs for dense/truncated mode (e.g. shared between models).
    diag_grad_probes : int, optional
        Sparse mode: ``None`` differentiates the diagonal exactly (one more solve pass over all
        segments); an integer uses that many Hutchinson probes for the derivative of the diagonal
        (values stay exact; only the gradient becomes an unbiased estimate).
    spectral_diag : bool
        Sparse mode: compute the diagonal (and its exact κ-derivative) from a one-off dense
        eigendecomposition, ``diag = (U∘U)(c + λ)^(-ν)``, O(n²) per κ instead of n sparse
        solves. Worth it when κ is learned and the network is small enough for a dense
        eigendecomposition (Monaco: 2.7 s once, then ~5 ms per κ instead of ~110 ms;
        Luxembourg: ~30 s once per process, see :func:`diag_spectrum`, then ~25 ms per κ
        instead of ~0.9 s with the Hutchinson κ-derivative).
    local_diag : bool, optional
        Sparse mode: compute the diagonal from each patch's columns solved on its neighbourhood
        (:func:`local_diagonal`: within 1e-8 relative of the global solves, whose one solve per
        segment took ~100 min at 100k segments). Default: networks of at least
        :data:`LOCAL_DIAG_MIN` segments (without ``spectral_diag``).
    """

    has_lengthscale = False

    def __init__(
        self,
        net: RoadNetwork,
        nu: float = 2.0,
        kappa: float = 1.0,
        mode: KernelMode = "auto",
        rank: int | None = None,
        learn_nu: bool = True,
        laplacian: sp.spmatrix | None = None,
        eigenpairs: Eigenpairs | None = None,
        diag_grad_probes: int | None = None,
        spectral_diag: bool = False,
        local_diag: bool | None = None,
    ) -> None:
        super().__init__()
        self.diag_grad_probes = diag_grad_probes
        self.spectral_diag = bool(spectral_diag)
        self._diag_spectrum: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None
        if mode not in KERNEL_MODES:
            raise ConfigError(f"unknown kernel mode {mode!r}; use one of {', '.join(KERNEL_MODES)}")
        if not (nu > 0 and kappa > 0):
            raise ConfigError(
                f"graph kernel needs nu > 0 and kappa > 0 (got nu={nu}, kappa={kappa})"
            )
        n = net.n_segments
        integer_nu = float(nu).is_integer()
        if mode == "auto":
            mode = "sparse" if integer_nu else ("dense" if n <= AUTO_DENSE_MAX else "truncated")
        if mode == "sparse" and not integer_nu:
            raise ConfigError(
                f"kernel mode 'sparse' needs an integer nu (got {nu}); use 'dense' or 'truncated'"
            )
        self.mode: str = mode
        self.n_segments = n
        self.laplacian = incidence_laplacian(net) if laplacian is None else laplacian
        self.register_parameter("raw_kappa", torch.nn.Parameter(torch.zeros((), dtype=DTYPE)))
        self.register_constraint("raw_kappa", Positive())
        self.kappa = kappa
        self.learn_nu = bool(learn_nu) and mode != "sparse"
        if self.learn_nu:
            self.register_parameter("raw_nu", torch.nn.Parameter(torch.zeros((), dtype=DTYPE)))
            self.register_constraint("raw_nu", GreaterThan(0.05))
            self.nu = nu
        else:
            self.register_buffer("fixed_nu", torch.tensor(float(nu), dtype=DTYPE))
        self._sparse: _SparseState | None = None
        if local_diag is None:
            local_diag = n >= LOCAL_DIAG_MIN and not self.spectral_diag
        #: each segment's patch of the local diagonal (sparse mode with ``local_diag``)
        self._local_patch = (segment_patches(metric_xy(net), LOCAL_PATCH)
                             if local_diag and mode == "sparse" else None)
        self._dense_raw: tuple[float, NDArray[np.float64]] | None = None
        self._eig: tuple[Tensor, Tensor] | None = None
        if mode in ("dense", "truncated"):
            if eigenpairs is None:
                r = None if mode == "dense" else (rank or min(n - 2, 500))
                eigenpairs = laplacian_eigenpairs(self.laplacian, r)
            self.rank = eigenpairs.values.shape[0]
            self._eig = (
                torch.as_tensor(eigenpairs.values, dtype=DTYPE),
                torch.as_tensor(eigenpairs.vectors, dtype=DTYPE),
            )
        else:
            self.rank = n

    # ------------------------------------------------------------------ parameters
    @property
    def kappa(self) -> Tensor:
        return self.raw_kappa_constraint.transform(self.raw_kappa)

    @kappa.setter
    def kappa(self, value: float | Tensor) -> None:
        v = torch.as_tensor(value, dtype=DTYPE)
        self.initialize(raw_kappa=self.raw_kappa_constraint.inverse_transform(v))

    @property
    def nu(self) -> Tensor:
        if self.learn_nu:
            return self.raw_nu_constraint.transform(self.raw_nu)
        return self.fixed_nu

    @nu.setter
    def nu(self, value: float | Tensor) -> None:
        if not self.learn_nu:
            raise ConfigError("nu is fixed in this kernel mode")
        v = torch.as_tensor(value, dtype=DTYPE)
        self.initialize(raw_nu=self.raw_nu_constraint.inverse_transform(v))

    def shift(self) -> Tensor:
        """``c = 2ν / κ²``."""
        return 2.0 * self.nu / self.kappa**2

    # ------------------------------------------------------------------ core computations
    def _sparse_state(self, c: Tensor) -> _SparseState:
        cval = float(c.detach())
        if self._sparse is None or self._sparse.prec.shift != cval:
            if self.spectral_diag and self._diag_spectrum is None:
                self._diag_spectrum = diag_spectrum(self.laplacian)
            self._sparse = _SparseState(
                self.laplacian,
                cval,
                int(round(float(self.fixed_nu))),
                self.diag_grad_probes,
                self._diag_spectrum,
                self._local_patch,
            )
        return self._sparse

    def _spectrum(self) -> tuple[Tensor, Tensor]:
        lam, _ = self._eig  # type: ignore[misc]
        s = (self.shift() + lam) ** (-self.nu)
        return s, s.mean()

    def _check_ids(self, ids: NDArray[np.int64]) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_segments):
            raise UnknownSegmentError(
                f"segment ids must lie in 0..{self.n_segments - 1}; got range "
                f"{ids.min()}..{ids.max()}"
            )

    def graph_diag(self) -> Tensor:
        """Normalised prior variances ``diag(K_G)`` over all segments, shape (n,)."""
        if self.mode == "sparse":
            c = self.shift()
            d = _SparseDiag.apply(c, self._sparse_state(c))
            return d / d.mean()
        s, z = self._spectrum()
        _, u = self._eig  # type: ignore[misc]
        return (u * u) @ s / z

    def graph_columns(
        self, ids: NDArray[np.int64] | Tensor, rows: NDArray[np.int64] | Tensor | None = None
    ) -> Tensor:
        """Normalised columns ``K_G[:, ids]`` (or the block ``K_G[rows, ids]``).

        Shape (n or len(rows), len(ids)); differentiable in κ (and ν where learnable).
        """
        ids = np.asarray(torch.as_tensor(ids).detach().cpu().numpy(), dtype=np.int64).ravel()
        self._check_ids(ids)
        if rows is not None:
            rows = np.asarray(torch.as_tensor(rows).detach().cpu().numpy(), dtype=np.int64)
            rows = rows.ravel()
            self._check_ids(rows)
        if self.mode == "sparse":
            c = self.shift()
            state = self._sparse_state(c)
            cols = _SparseColumns.apply(c, state, ids, rows)
            d = _SparseDiag.apply(c, state)
            return cols / d.mean()
        s, z = self._spectrum()
        _, u = self._eig  # type: ignore[misc]
        left = u if rows is None else u[torch.as_tensor(rows)]
        return (left * (s / z)) @ u[ids].T

    def graph_block(self, rows: NDArray | Tensor, cols: NDArray | Tensor) -> Tensor:
        """Normalised block ``K_G[rows, cols]``."""
        return self.graph_columns(cols, rows)

    def raw_block(
        self, rows: NDArray[np.int64], cols: NDArray[np.int64], kappa: Tensor | None = None
    ) -> Tensor:
        """Unnormalised block ``(c I + Δ)^(-ν)[rows, cols]``, differentiable in κ.

        ``K_G = raw / z`` with ``z`` = :meth:`normaliser`. A marginal-likelihood fit that also
        learns the graph outputscale can work with the raw block and a free scale: the
        normaliser (a mean over *all* segments' prior variances, n sparse solves per κ) is then
        needed once, at the fitted κ, instead of at every evaluation. ``kappa``: a κ tensor to
        evaluate at (and differentiate through) instead of the kernel's own parameter.
        """
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        self._check_ids(rows)
        self._check_ids(cols)
        nu = self.nu
        c = self.shift() if kappa is None else 2.0 * nu / kappa**2
        if self.mode == "sparse":
            return _SparseColumns.apply(c, self._sparse_state(c), cols, rows)
        lam, u = self._eig  # type: ignore[misc]
        s = (c + lam) ** (-nu)
        return (u[torch.as_tensor(rows)] * s) @ u[torch.as_tensor(cols)].T

    def normaliser(self) -> float:
        """``z = mean(diag((c I + Δ)^(-ν)))`` at the current κ, ν (so ``K_G = raw / z``)."""
        with torch.no_grad():
            c = float(self.shift())
            if self._dense_raw is not None and self._dense_raw[0] == c:
                return float(np.diagonal(self._dense_raw[1]).mean())
            if self.mode == "sparse":
                state = self._sparse_state(self.shift())
                return float(state.diag(state.nu).mean())
            return float(self._spectrum()[1])

    def dense_raw(self) -> NDArray[np.float64]:
        """The whole unnormalised ``(c I + Δ)^(-ν)`` (n × n, read-only), integer ν; memoised per κ.

        By dense LAPACK: ``P = LLᵀ`` (n³/3 flops), ``P⁻¹`` from the factor (2n³/3), then powers
        of ``P⁻¹`` (n³ per extra power, a symmetric product). A model that needs every column
        (the exact learner's prior covariance) gets them this way in ~2n³ flops — Luxembourg's
        5.6k segments in ~7 s on one core — instead of n sparse solves per power, which SuperLU
        performs at a few MFlop/s on these line graphs (~9 ms per column there).
        """
        nu = float(self.nu)
        if not nu.is_integer():
            raise ConfigError(f"dense_raw needs an integer nu (got {nu})")
        c = float(self.shift())
        if self._dense_raw is None or self._dense_raw[0] != c:
            self._dense_raw = None  # free the old one before building the new
            # LAPACK through gp.lapack: seconds of work on a city during which a server's
            # request threads keep running (SciPy's wrappers would hold the GIL)
            chol = np.asfortranarray(self.laplacian.toarray())
            chol[np.diag_indices_from(chol)] += c
            info = potrf(chol)
            if info == 0:
                info = potri(chol)  # reads and writes the lower triangle only
            if info != 0:
                raise ConfigError(f"the graph precision is not positive definite (LAPACK {info})")
            inv = np.tril(chol)
            del chol
            inv = inv + np.tril(inv, -1).T  # potri fills one triangle
            if int(nu) == 2:  # P⁻² = P⁻¹(P⁻¹)ᵀ: one SYRK (n³), half a product's flops
                out = syrk_lower(np.zeros(inv.shape, order="F"), inv, 1.0, 0.0, trans=False)
                out = np.tril(out) + np.tril(out, -1).T
            else:
                out = inv
                for _ in range(int(nu) - 1):
                    out = out @ inv
            del inv
            out = 0.5 * (out + out.T)
            out.flags.writeable = False
            self._dense_raw = (c, out)
        return self._dense_raw[1]

    def dense_matrix(self) -> Tensor:
        """The full normalised K_G (n×n). For tests and small graphs only."""
        return self.graph_columns(np.arange(self.n_segments))

    # ------------------------------------------------------------------ gpytorch interface
    def forward(self, x1: Tensor, x2: Tensor, diag: bool = False, **params) -> Tensor:  # noqa: D102
        if x1.dim() != 2 or x2.dim() != 2:
            raise ConfigError("GraphMaternKernel supports un-batched inputs (N, 1 + d) only")
        i1 = x1[:, 0].round().long()
        if diag:
            return self.graph_diag()[i1]
        i2 = x2[:, 0].round().long()
        uniq, inv = torch.unique(i2, return_inverse=True)
        return self.graph_columns(uniq.numpy())[i1][:, inv]


# ====================================================================== feature kernels
class _MaternInner(torch.autograd.Function):
    """``⟨W, m₅/₂(r)⟩`` with ``r² = Σ_j D_j / ℓ_j²``, differentiable in the lengthscales ℓ.

    ``D`` holds the squared coordinate differences (d, R, C) and ``W`` the weights (R, C). The
    derivative ``∂m/∂ℓ_j = (5/3)(1 + √5 r) e^(-√5 r) D_j / ℓ_j³`` has no 1/r, so coincident
    points need no special case (autograd through ``cdist`` is also several times slower).
    """

    @staticmethod
    def forward(ctx, lengthscale: Tensor, w: Tensor, d2: Tensor) -> Tensor:  # noqa: D102
        inv2 = lengthscale.detach().pow(-2)
        s = torch.einsum("j,jrc->rc", inv2, d2).sqrt_().mul_(math.sqrt(5.0))
        e = torch.neg(s).exp_()
        val = (s.div(3.0).add_(1.0).mul_(s).add_(1.0).mul_(e) * w).sum()
        ctx.save_for_backward(lengthscale.detach(), w, d2, s, e)
        return val

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: D102
        ls, w, d2, s, e = ctx.saved_tensors
        weight = s.add_(1.0).mul_(e).mul_(w)  # (1 + √5 r) e^(-√5 r) W; s is not needed again
        g = torch.einsum("rc,jrc->j", weight, d2) * (5.0 / 3.0) / ls**3
        return grad * g, None, None


def _feature_kernel(d: int, lengthscale: float, outputscale: float) -> gpytorch.kernels.ScaleKernel:
    # convert to float64 *before* setting values: the raw (softplus) parameters would otherwise
    # be rounded to float32
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=d)).to(
        DTYPE
    )
    k.base_kernel.lengthscale = torch.full((1, d), float(lengthscale), dtype=DTYPE)
    k.outputscale = torch.tensor(float(outputscale), dtype=DTYPE)
    return k


class SegmentKernel(gpytorch.kernels.Kernel):
    """Composite kernel ``s₁ k_G(e,e') k_f(x,x') + s₂ k'_f(x,x')`` on (segment, context) pairs.

    ``k_f``/``k'_f`` are Matérn-5/2 ARD kernels with their own lengthscales; ``s₁``/``s₂`` are the
    outputscales of ``product`` and ``features``. Since ``K_G`` is normalised to mean diagonal 1
    and Matérn kernels have unit diagonal, the mean prior variance is ``s₁ + s₂``.

    Besides the GPyTorch ``forward`` (rows ``[id, x]``), :meth:`cross` and :meth:`diag_ids` take
    segment ids and look the context up in ``features``: the fast path of the SVGP learner.

    Parameters
    ----------
    graph : GraphMaternKernel
    features : ndarray, shape (n_segments, d)
        Context per segment (standardised).
    lengthscale : float
        Initial lengthscale of both feature kernels (all dimensions).
    product_scale, feature_scale : float
        Initial outputscales s₁, s₂.
    """

    def __init__(
        self,
        graph: GraphMaternKernel,
        features: NDArray[np.float64],
        lengthscale: float = 1.0,
        product_scale: float = 0.5,
        feature_scale: float = 0.5,
    ) -> None:
        super().__init__()
        feats = torch.as_tensor(np.asarray(features, dtype=np.float64), dtype=DTYPE)
        if feats.shape[0] != graph.n_segments:
            raise ConfigError("features must have one row per segment")
        self.graph = graph
        self.register_buffer("features", feats)
        d = feats.shape[1]
        self.k_f = _feature_kernel(d, lengthscale, product_scale)
        self.k_f2 = _feature_kernel(d, lengthscale, feature_scale)

    def _feat(self, k: gpytorch.kernels.ScaleKernel, x1: Tensor, x2: Tensor) -> Tensor:
        corr = matern52(x1, x2, k.base_kernel.lengthscale.reshape(-1))
        if torch.is_grad_enabled():
            return k.outputscale * corr
        return corr.mul_(k.outputscale)

    def cross(self, rows: NDArray | Tensor, cols: NDArray | Tensor) -> Tensor:
        """``K[rows, cols]`` between segments (ids), shape (len(rows), len(cols))."""
        rows_t = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        cols_t = torch.as_tensor(np.asarray(cols, dtype=np.int64))
        xr, xc = self.features[rows_t], self.features[cols_t]
        kg = self.graph.graph_columns(cols_t, rows_t)
        return self._combine(kg, xr, xc)

    def _combine(self, kg: Tensor, xr: Tensor, xc: Tensor) -> Tensor:
        """``kg ∘ s₁k_f(xr, xc) + s₂k'_f(xr, xc)``, in place when no gradient is needed."""
        if torch.is_grad_enabled():
            return kg * self._feat(self.k_f, xr, xc) + self._feat(self.k_f2, xr, xc)
        out = kg.mul_(self._feat(self.k_f, xr, xc))
        return out.add_(self._feat(self.k_f2, xr, xc))

    def pullback(self, rows: NDArray, cols: NDArray, weights: Tensor) -> Tensor:
        """Scalar whose gradient in the hyperparameters is ``Σ weights ∘ ∂K[rows, cols]``.

        Used to pull a precomputed adjoint of the kernel block back to the hyperparameters
        (the value itself is meaningless). Parameters with ``requires_grad=False`` (e.g. a
        frozen κ) are skipped.
        """
        rows_t = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        cols_t = torch.as_tensor(np.asarray(cols, dtype=np.int64))
        xr, xc = self.features[rows_t], self.features[cols_t]
        d2 = (xr.T[:, :, None] - xc.T[:, None, :]).square_()  # (d, R, C)
        w = weights.detach()
        with torch.no_grad():
            kg = self.graph.graph_columns(cols_t, rows_t)
        s1 = self.k_f.outputscale
        out = s1 * _MaternInner.apply(self.k_f.base_kernel.lengthscale.reshape(-1), w * kg, d2)
        out = out + self.k_f2.outputscale * _MaternInner.apply(
            self.k_f2.base_kernel.lengthscale.reshape(-1), w, d2
        )
        if self.graph.raw_kappa.requires_grad or self.graph.learn_nu:
            with torch.no_grad():
                m1 = self._feat(self.k_f, xr, xc)  # s₁ k_f, in place
            out = out + (self.graph.graph_columns(cols_t, rows_t) * (w * m1)).sum()
        return out

    def cross_all(self, cols: NDArray | Tensor) -> Tensor:
        """``K[:, cols]`` for all segments, shape (n, len(cols))."""
        cols_t = torch.as_tensor(np.asarray(cols, dtype=np.int64))
        xc = self.features[cols_t]
        return self._combine(self.graph.graph_columns(cols_t), self.features, xc)

    def full(self) -> NDArray[np.float64]:
        """``K`` over all segments (n × n, column-major, a fresh array), no gradient.

        The graph factor comes from :meth:`GraphMaternKernel.dense_raw` (dense LAPACK, memoised
        per κ) when ν is an integer, else from the columns of the kernel's mode.
        """
        with torch.no_grad():
            n = self.graph.n_segments
            if float(self.graph.nu).is_integer():
                raw = self.graph.dense_raw()
                kg = torch.from_numpy(raw / self.graph.normaliser())
            else:
                kg = self.graph.graph_columns(np.arange(n))
            k = self._combine(kg, self.features, self.features)
            return np.asfortranarray(k.numpy())

    def diag_all(self) -> Tensor:
        """Prior variances ``k((e,x_e),(e,x_e))`` of all segments, shape (n,)."""
        return self.graph.graph_diag() * self.k_f.outputscale + self.k_f2.outputscale

    def diag_ids(self, ids: NDArray | Tensor) -> Tensor:
        """Prior variances of the given segments."""
        return self.diag_all()[torch.as_tensor(np.asarray(ids, dtype=np.int64))]

    def forward(self, x1: Tensor, x2: Tensor, diag: bool = False, **params) -> Tensor:  # noqa: D102
        f1, f2 = x1[..., 1:], x2[..., 1:]
        if diag:
            kg = self.graph.forward(x1, x2, diag=True)
            return kg * self.k_f.outputscale + self.k_f2.outputscale
        kg = self.graph.forward(x1, x2)
        return kg * self._feat(self.k_f, f1, f2) + self._feat(self.k_f2, f1, f2)
