"""Online sparse variational GP over road segments (paper Algorithm 3, spec §5.2).

Model: ``f(e) = E_det(e) + g(e)``, ``g ~ GP(0, k_{G·f+f})`` (the composite
:class:`~ev_nav.gp.kernels.SegmentKernel`), observations ``y = f(e) + N(0, ς²)``. Inducing
variables ``u = g(Z)`` at M segments, whitened as
``u = L v`` with ``L Lᵀ = K_ZZ``; ``q(v) = N(m, S)`` is stored by its natural parameters
``(Λ = S⁻¹, h = Λ m)``.

Per trip (:meth:`SVGPModel.update`):

1. append the observations to the history and count visits;
2. inducing set = the M most visited segments (ties keep current members, then lowest id), filled
   with a spatially spread set while fewer than M segments were visited **[decision]**; if the set
   changed, q is re-initialised to the current posterior at the new points (nothing learned is
   lost);
3. G times: draw B observations from the history (without replacement); one natural-gradient
   step (lr ``ngd_lr``) on q and one Adam step (lr ``adam_lr``) on the hyperparameters, both from
   the batch ELBO at the current parameters.

For a Gaussian likelihood the natural gradient of the ELBO is available in closed form: the NGD
step is ``θ ← (1-ρ) θ + ρ θ*`` with ``Λ* = I + (N/B) Aᵀ diag(n_u/ς²) A``, ``h* = (N/B) Aᵀ r/ς²``
(``A = K_{UZ} L⁻ᵀ`` over the batch's distinct segments, ``r`` their summed residuals), which is
what ``gpytorch.optim.NGD`` computes via autograd — here without the autograd pass. Repeated
segments in a batch are aggregated (their context is static), so the cost depends on the number
of *distinct* segments, not on B. ``exact_refresh=True`` replaces the NGD step by the exact
optimum on all data (ρ = 1, B = N).

The Adam gradient is the exact gradient of the batch expected log-likelihood, computed from
closed-form adjoints of the whitened loadings (see :meth:`SVGPModel._adam_step`) instead of
autograd through the Cholesky factor and triangular solves; only the elementwise kernel
evaluation is differentiated. The whitened loadings of the batch are shared with the NGD step
(and come from the ``posterior()`` cache when parameters and inducing set are unchanged).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from torch import Tensor

from ev_nav.checkpoints import check_model_header
from ev_nav.energy import Vehicle
from ev_nav.errors import ConfigError, ModelStateError
from ev_nav.gp.kernels import DTYPE, KERNEL_MODES, GraphMaternKernel, SegmentKernel
from ev_nav.gp.numerics import cholesky_jitter
from ev_nav.gp.posterior import (
    SegmentPosterior,
    combine_weights,
    stored_total,
    validate_observations,
    validate_total,
)
from ev_nav.gp.prior import PriorSettings
from ev_nav.roads.network import RoadNetwork

_STATE_VERSION = 1

#: With ``spectral_diag=None``, networks up to this many segments get the sparse kernel's
#: diagonal from a dense eigendecomposition when κ is learned (O(n³) once per process and
#: network, then O(n²) per κ; Monaco: 4 s once). Above it the set-up would dominate a short
#: session (Luxembourg: 30–45 s once, against ~0.7 s saved per trip), so it is opt-in there.
SPECTRAL_DIAG_AUTO_MAX = 3000
#: ``spectral_diag=True`` is refused above this size: the dense eigenvectors alone would take
#: more than ~3 GB.
SPECTRAL_DIAG_LIMIT = 20_000
_JITTERS = (1e-8, 1e-6, 1e-4)


@dataclass(frozen=True)
class SVGPConfig:
    """Settings of the online SVGP learner (defaults: the paper's, App. B.3).

    Attributes
    ----------
    num_inducing : int
        M, number of inducing segments (capped at the number of segments).
    batch_size : int
        B, observations drawn from the history per step.
    steps_per_trip : int
        G, NGD + Adam steps per trip.
    ngd_lr, adam_lr : float
        Learning rates of the natural-gradient and Adam steps.
    graph_nu, graph_kappa : float
        Initial graph Matérn ν and κ.
    lengthscale : float
        Initial lengthscale of both feature kernels (all dimensions).
    kernel_mode : str
        ``"auto"``, ``"dense"``, ``"sparse"`` or ``"truncated"`` (see :mod:`ev_nav.gp.kernels`).
    kernel_rank : int, optional
        Eigenpairs for ``"truncated"``.
    exact_refresh : bool
        Replace the NGD step by the closed-form optimum of q on all data.
    learn_hyperparameters : bool
        Take Adam steps on kernel hyperparameters and the noise.
    learn_graph_kappa : bool
        Include κ in the Adam step (with ``kernel_mode="sparse"`` every change of κ costs new
        sparse solves).
    learn_graph_nu : bool
        Learn ν too (dense/truncated modes only).
    graph_kappa_every : int
        κ takes its Adam step only on every k-th trip (the other hyperparameters on every
        trip). ``1`` is Algorithm 3; a larger k keeps the sparse factorisation and the solved
        kernel columns valid between κ steps, which is most of a trip's cost in sparse mode.
    hyper_batch_size : int, optional
        If set, the Adam gradient uses this many of the batch's distinct segments (uniformly
        subsampled, reweighted to stay unbiased) to bound its cost; ``None``: all of them.
    diag_grad_probes : int, optional
        Sparse mode: Hutchinson probes for the κ-derivative of the prior variances (an unbiased
        estimate inside the already stochastic Adam gradient); ``None``: exact (one more solve
        pass over all segments per step).
    spectral_diag : bool, optional
        Sparse mode with κ learned: prior variances and their exact κ-derivative from a one-off
        dense eigendecomposition of the Laplacian (memoised per process) instead of sparse
        solves and probes on every trip. ``None``: only on networks of at most
        ``SPECTRAL_DIAG_AUTO_MAX`` segments; ``True`` pays off for long runs on larger ones
        (fleet simulations set it up to 6000 segments).
    outputscale, noise_var : float, optional
        Prior σ0² and ς² [Wh²]; default :meth:`PriorSettings.from_network`.
    """

    num_inducing: int = 1000
    batch_size: int = 2500
    steps_per_trip: int = 1
    ngd_lr: float = 0.1
    adam_lr: float = 0.01
    graph_nu: float = 2.0
    graph_kappa: float = 1.0
    lengthscale: float = 1.0
    kernel_mode: str = "auto"
    kernel_rank: int | None = None
    exact_refresh: bool = False
    learn_hyperparameters: bool = True
    learn_graph_kappa: bool = True
    learn_graph_nu: bool = False
    graph_kappa_every: int = 1
    hyper_batch_size: int | None = None
    diag_grad_probes: int | None = 32
    spectral_diag: bool | None = None
    outputscale: float | None = None
    noise_var: float | None = None

    def __post_init__(self) -> None:
        if self.num_inducing < 1 or self.batch_size < 1 or self.steps_per_trip < 0:
            raise ConfigError("num_inducing and batch_size must be >= 1, steps_per_trip >= 0")
        if self.graph_kappa_every < 1:
            raise ConfigError(f"graph_kappa_every must be >= 1, got {self.graph_kappa_every}")
        if not (0 < self.ngd_lr <= 1):
            raise ConfigError(f"ngd_lr must lie in (0, 1], got {self.ngd_lr}")
        if self.kernel_mode not in KERNEL_MODES:
            raise ConfigError(f"kernel_mode must be one of {', '.join(KERNEL_MODES)}")


class _Hyper(torch.nn.Module):
    """Kernel and noise: the parameters Adam updates."""

    def __init__(self, kernel: SegmentKernel, noise_var: float) -> None:
        super().__init__()
        self.kernel = kernel
        self.raw_noise = torch.nn.Parameter(torch.tensor(math.log(noise_var), dtype=DTYPE))

    @property
    def noise_var(self) -> Tensor:
        return torch.exp(self.raw_noise)


def _spread_order(net: RoadNetwork, count: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """``count`` segments by farthest-point sampling on segment midpoints (metres, local plane)."""
    mid = net.segment_midpoints()
    lat0 = np.radians(mid[:, 1].mean())
    xy = np.column_stack([mid[:, 0] * np.cos(lat0), mid[:, 1]]) * 111_195.0
    n = xy.shape[0]
    count = min(count, n)
    out = np.empty(count, dtype=np.int64)
    out[0] = int(rng.integers(n))
    dist = np.sum((xy - xy[out[0]]) ** 2, axis=1)
    dist[out[0]] = -1.0
    for i in range(1, count):
        nxt = int(np.argmax(dist))
        out[i] = nxt
        np.minimum(dist, np.sum((xy - xy[nxt]) ** 2, axis=1), out=dist)
        # both directions of a street share a midpoint: mark picks so none is taken twice
        dist[out[: i + 1]] = -1.0
    return out


def _chol(a: Tensor) -> Tensor:
    """Cholesky factor with a small relative jitter ladder."""
    return cholesky_jitter(
        a,
        ladder=_JITTERS,
        symmetrize=True,
        error=ModelStateError,
        message="covariance matrix is not positive definite even with jitter; the "
        "hyperparameters have diverged — lower adam_lr or fix the hyperparameters",
    )[0]


class SVGPModel:
    """Online SVGP learner on road segments implementing the :class:`SegmentModel` protocol.

    Parameters
    ----------
    net : RoadNetwork
    vehicle : Vehicle, optional
        Vehicle of the prior mean E_det.
    config : SVGPConfig
    seed : int
        Seed of the ``numpy.random.Generator`` used for batches and the spread fill.
    """

    #: The ``kind`` its checkpoints carry.
    checkpoint_kind = "svgp"

    def __init__(
        self,
        net: RoadNetwork,
        vehicle: Vehicle | None = None,
        config: SVGPConfig | None = None,
        seed: int = 0,
    ) -> None:
        self.config = cfg = config or SVGPConfig()
        self.net = net
        self.seed = int(seed)
        self.n = n = net.n_segments
        self.m = min(cfg.num_inducing, n)
        if cfg.spectral_diag and n > SPECTRAL_DIAG_LIMIT:
            raise ConfigError(
                f"spectral_diag=True needs a dense eigendecomposition of {n} segments "
                f"(> {SPECTRAL_DIAG_LIMIT}); use spectral_diag=None or False"
            )
        prior = PriorSettings.from_network(net, vehicle, cfg.lengthscale)
        s0 = prior.outputscale if cfg.outputscale is None else cfg.outputscale
        noise = prior.noise_var if cfg.noise_var is None else cfg.noise_var
        graph = GraphMaternKernel(
            net,
            nu=cfg.graph_nu,
            kappa=cfg.graph_kappa,
            mode=cfg.kernel_mode,  # type: ignore[arg-type]
            rank=cfg.kernel_rank,
            learn_nu=cfg.learn_graph_nu,
            diag_grad_probes=cfg.diag_grad_probes,
            spectral_diag=cfg.learn_graph_kappa
            and cfg.learn_hyperparameters
            and (n <= SPECTRAL_DIAG_AUTO_MAX if cfg.spectral_diag is None else cfg.spectral_diag),
        )
        kernel = SegmentKernel(
            graph,
            net.features,
            lengthscale=cfg.lengthscale,
            product_scale=s0 * prior.graph_share,
            feature_scale=s0 * (1 - prior.graph_share),
        )
        self.hyper = _Hyper(kernel, noise)
        if not cfg.learn_graph_kappa:
            graph.raw_kappa.requires_grad_(False)
        self._params = [p for p in self.hyper.parameters() if p.requires_grad]
        self.adam = torch.optim.Adam(self._params, lr=cfg.adam_lr)
        self.prior_mean = net.e_det(vehicle).astype(np.float64)
        self.rng = np.random.default_rng(self.seed)
        self.spread = _spread_order(net, self.m, self.rng)
        # history, grown by doubling
        self._hist_ids = np.empty(1024, dtype=np.int64)
        self._hist_y = np.empty(1024, dtype=np.float64)
        self.n_hist = 0
        self.visits = np.zeros(n, dtype=np.int64)
        # trip totals as (distinct ids, weights, total [Wh]); see validate_total
        self.totals: list[tuple[NDArray[np.int64], NDArray[np.float64], float]] = []
        self.z = np.sort(self.spread[: self.m])
        self.lam = torch.eye(self.m, dtype=DTYPE)  # q(v) = prior N(0, I)
        self.h = torch.zeros(self.m, dtype=DTYPE)
        self.n_trips = 0
        self._post: SegmentPosterior | None = None
        self._full: dict[str, Tensor] | None = None

    # ------------------------------------------------------------------ protocol
    @property
    def noise_std(self) -> float:
        """Current (learned) observation-noise standard deviation ς [Wh]."""
        return float(torch.sqrt(self.hyper.noise_var.detach()))

    @property
    def kernel(self) -> SegmentKernel:
        """The composite kernel (with its current hyperparameters)."""
        return self.hyper.kernel

    def history(self) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """All observed (segment id, energy [Wh]) pairs, in arrival order (read-only views)."""
        ids, y = self._hist_ids[: self.n_hist], self._hist_y[: self.n_hist]
        ids.flags.writeable = False
        y.flags.writeable = False
        return ids, y

    def posterior(self, temperature: ArrayLike | None = None) -> SegmentPosterior:
        """Posterior mean/std of every segment's expected energy; cached until the next update.
        (No temperature: see :func:`_no_temperature`.)"""
        _no_temperature(temperature)
        if self._post is None:
            with torch.no_grad():
                mean, var = self._predict_all()
            std = np.sqrt(np.clip(var, 0.0, None))
            self._post = SegmentPosterior(mean=mean, std=std, noise_std=self.noise_std)
        return self._post

    def route_covariance(
        self, segment_ids: ArrayLike, temperature: ArrayLike | None = None
    ) -> NDArray[np.float64]:
        """Joint posterior covariance [Wh²] of the latent energies of ``segment_ids``.

        ``K_RR − AᵀA + (C⁻¹A)ᵀ(C⁻¹A)`` with the whitened loadings ``A = L⁻¹K_ZR`` and the
        Cholesky factor ``C`` of q's precision: the SVGP's predictive covariance, whose diagonal
        is :meth:`posterior`'s variance. Segments of one route are correlated (shared graph and
        feature kernel), so a route's energy variance is not the sum of its variances.
        """
        _no_temperature(temperature)
        ids = np.asarray(segment_ids, dtype=np.int64)
        with torch.no_grad():
            a, _, _ = self._loadings(ids)
            _, c = self._q_moments()
            t = torch.linalg.solve_triangular(c, a, upper=False)
            k = self.kernel.cross(ids, ids)
            cov = k - a.T @ a + t.T @ t
        out = cov.numpy()
        return 0.5 * (out + out.T)

    def predict_sum(
        self,
        segment_ids: ArrayLike,
        weights: ArrayLike | None = None,
        temperature: ArrayLike | None = None,
    ) -> tuple[float, float]:
        """Mean and variance [Wh, Wh²] of ``Σ weights·f(segment_ids)`` (weights default 1),
        from the joint posterior: correlations along the route included."""
        _no_temperature(temperature)
        u, w = combine_weights(segment_ids, weights)
        return float(w @ self.posterior().mean[u]), float(w @ self.route_covariance(u) @ w)

    def noise_variance(self, segment_ids: ArrayLike, weights: ArrayLike | None = None) -> float:
        """Noise variance [Wh²] of an observed ``Σ weights·y(segment_ids)``: ``ς² Σ weights``."""
        _, w = combine_weights(segment_ids, weights)
        return float(w.sum()) * self.noise_std**2

    def noise_variances(self, segment_ids: ArrayLike) -> NDArray[np.float64]:
        """Noise variance [Wh²] of one observation of each listed segment: ``ς²`` each."""
        ids = np.asarray(segment_ids, dtype=np.int64)
        return np.full(ids.shape, self.noise_std**2)

    def update(
        self, segment_ids: ArrayLike, energies: ArrayLike, temperature: ArrayLike | None = None
    ) -> None:
        """Algorithm 3 for one trip: record observations, refresh Z, take G steps [Wh]."""
        _no_temperature(temperature)
        ids, y = validate_observations(segment_ids, energies, self.n)
        if ids.size == 0:
            return
        self._append(ids, y)
        moved = self._set_inducing(self._select_inducing())
        for g in range(self.config.steps_per_trip):
            # which loadings a step uses must not depend on whether posterior() was queried
            # (cached and freshly solved loadings differ in the last bits): the first step of a
            # trip whose inducing set did not move uses the all-segment pass (computed here if
            # no query cached it), every other step solves for its batch only
            self._step(use_full_pass=g == 0 and not moved)
        if self.config.exact_refresh:
            self.refresh_exact()
        self.n_trips += 1
        self._post = None

    def record(self, segment_ids: ArrayLike, energies: ArrayLike) -> None:
        """Add observations to the history without learning steps (e.g. to import past trips).

        The next :meth:`update` (or :meth:`refresh_exact`) uses them.
        """
        ids, y = validate_observations(segment_ids, energies, self.n)
        self._append(ids, y)

    def update_total(
        self,
        segment_ids: ArrayLike,
        total_energy: float,
        weights: ArrayLike | None = None,
        temperature: ArrayLike | None = None,
    ) -> None:
        """Closed-form Gaussian update of q(v) with the sum observation ``y = Σ_e f(e) + ε``.

        ``ε`` has variance ``ς² Σ h`` (h: each segment's weight, the number of listed segments
        when unweighted) plus the SVGP's residual
        variance ``Σ_e (k_ee - ‖a_e‖²)`` of the listed segments, because the sum is observed
        through q(v) only. The observation is kept and re-enters every later NGD target, so the
        NGD steps do not forget it.
        """
        _no_temperature(temperature)
        u, h, total = validate_total(segment_ids, total_energy, self.n, weights)
        obs = (u.copy(), h.copy(), total)
        with torch.no_grad():
            a, r, v = self._total_sites([obs])
            self.lam = self.lam + (a.T / v) @ a
            self.h = self.h + a.T @ (r / v)
        self.totals.append(obs)
        self._post = None
        self._full = None

    # ------------------------------------------------------------------ inducing points
    def _append(self, ids: NDArray[np.int64], y: NDArray[np.float64]) -> None:
        need = self.n_hist + ids.size
        if need > self._hist_ids.size:
            cap = max(need, 2 * self._hist_ids.size)
            self._hist_ids = np.resize(self._hist_ids, cap)
            self._hist_y = np.resize(self._hist_y, cap)
        self._hist_ids[self.n_hist : need] = ids
        self._hist_y[self.n_hist : need] = y
        self.n_hist = need
        np.add.at(self.visits, ids, 1)

    def _select_inducing(self) -> NDArray[np.int64]:
        member = np.zeros(self.n, dtype=bool)
        member[self.z] = True
        spread_rank = np.full(self.n, self.n, dtype=np.int64)
        spread_rank[self.spread] = np.arange(self.spread.size)
        # most visited first; ties keep current members, then the spread order, then low ids
        order = np.lexsort((np.arange(self.n), spread_rank, ~member, -self.visits))
        return np.sort(order[: self.m])

    def _set_inducing(self, z_new: NDArray[np.int64]) -> bool:
        """Move q to the new inducing set: q(u') := current posterior at Z' (whitened).

        Returns whether the set changed.
        """
        if np.array_equal(z_new, self.z):
            return False
        with torch.no_grad():
            m = self.m
            full = self._full_pass()  # usually cached by the previous posterior() call
            zt = torch.as_tensor(z_new)
            a_new = full["A"][:, zt]  # L⁻¹K_{ZZ'}
            m_w = full["m_w"]
            mu = a_new.T @ m_w
            t = self._whitened_solve(full)[:, zt]  # C⁻¹ A'
            l_new = _chol(self.kernel.cross(z_new, z_new))
            b = torch.linalg.solve_triangular(l_new, a_new.T, upper=False)  # L'⁻¹ A'ᵀ
            bt = torch.linalg.solve_triangular(l_new, t.T, upper=False)  # L'⁻¹ (C⁻¹A')ᵀ
            # S'_w = L'⁻¹ Σ' L'⁻ᵀ with Σ' = K' - A'ᵀ A' + A'ᵀ S A'
            s_new = torch.eye(m, dtype=DTYPE) - b @ b.T + bt @ bt.T
            m_new = torch.linalg.solve_triangular(l_new, mu[:, None], upper=False)[:, 0]
            lam = torch.cholesky_inverse(_chol(s_new))
            self.lam = 0.5 * (lam + lam.T)
            self.h = self.lam @ m_new
        self.z = z_new
        self._full = None
        return True

    # ------------------------------------------------------------------ linear algebra pieces
    def _q_moments(self) -> tuple[Tensor, Tensor]:
        """Mean m of q(v) and the Cholesky factor C of its precision Λ."""
        c = _chol(self.lam)
        m = torch.cholesky_solve(self.h[:, None], c)[:, 0]
        return m, c

    def _loadings(self, rows: NDArray[np.int64]) -> tuple[Tensor, Tensor, Tensor]:
        """Whitened loadings ``A = L⁻¹ K_{Z,rows}`` (M × |rows|), prior variances at ``rows``, L.

        Differentiable in the hyperparameters when grad mode is on. Only the rows needed are
        evaluated: the graph columns of Z come from the kernel's cache.
        """
        k = self.kernel.cross(np.concatenate([self.z, rows]), self.z)
        chol = _chol(k[: self.m])
        a = torch.linalg.solve_triangular(chol, k[self.m :].T, upper=False)
        return a, self.kernel.diag_ids(rows), chol

    def _total_sites(
        self, totals: list[tuple[NDArray[np.int64], NDArray[np.float64], float]]
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Whitened loadings a_t, residuals r_t and variances v_t of total observations.

        ``v_t = k ς² + Σ_e n_e² (k_ee - ‖a_e‖²)``: the noise of the k summed observations plus the
        SVGP residual variance of each listed segment (diagonal, FITC-style, so O(kM) per sum).
        """
        noise = float(self.hyper.noise_var.detach())
        union = np.unique(np.concatenate([t[0] for t in totals]))
        with torch.no_grad():
            a_rows, d_rows, _ = self._loadings(union)
        a_rows = a_rows.T  # (|union|, M)
        resid_rows = (d_rows - (a_rows * a_rows).sum(1)).clamp_min(0)
        loads, resid, var = [], [], []
        for u, h, tot in totals:
            pos = torch.as_tensor(np.searchsorted(union, u))
            w = torch.as_tensor(h, dtype=DTYPE)
            loads.append(w @ a_rows[pos])
            resid.append(tot - float(h @ self.prior_mean[u]))
            var.append(float(h.sum()) * noise + float((w * w * resid_rows[pos]).sum()))
        return (
            torch.stack(loads),
            torch.as_tensor(resid, dtype=DTYPE),
            torch.as_tensor(var, dtype=DTYPE),
        )

    # ------------------------------------------------------------------ learning steps
    def _batch(self) -> tuple[NDArray[np.int64], Tensor, Tensor, Tensor, float]:
        """Distinct batch segments, their counts, residual sums and squared sums, and N/B."""
        n_hist, b = self.n_hist, self.config.batch_size
        if n_hist <= b:
            idx = np.arange(n_hist)
        else:
            idx = np.sort(self.rng.choice(n_hist, size=b, replace=False))
        ids = self._hist_ids[idx]
        r = self._hist_y[idx] - self.prior_mean[ids]
        u, inv, cnt = np.unique(ids, return_inverse=True, return_counts=True)
        s1 = np.bincount(inv, weights=r, minlength=u.size)
        s2 = np.bincount(inv, weights=r * r, minlength=u.size)
        scale = n_hist / idx.size
        return (
            u,
            torch.as_tensor(cnt, dtype=DTYPE),
            torch.as_tensor(s1),
            torch.as_tensor(s2),
            scale,
        )

    def _step(self, use_full_pass: bool = False) -> None:
        """One simultaneous NGD (q) and Adam (hyperparameters) step on a history batch.

        Both use the pre-step parameters and share the batch's whitened loadings: from the
        all-segment pass (``use_full_pass``; free after a ``posterior()`` call at the same
        parameters and inducing set) or solved for the batch's segments only.
        """
        u, cnt, s1, s2, scale = self._batch()
        cfg = self.config
        learn = cfg.learn_hyperparameters and bool(self._params)
        ngd = not cfg.exact_refresh
        if not (learn or ngd):
            return
        with torch.no_grad():
            full = self._full_pass() if use_full_pass else None
            ut = torch.as_tensor(u)
            if full is not None:
                m_w, c, chol = full["m_w"], full["C"], full["L"]
                a = full["A"][:, ut]
                t = self._whitened_solve(full)[:, ut] if learn else None
            else:
                m_w, c = self._q_moments()
                k = self.kernel.cross(np.concatenate([self.z, u]), self.z)
                chol = _chol(k[: self.m])
                a = torch.linalg.solve_triangular(chol, k[self.m :].T, upper=False)
                t = torch.linalg.solve_triangular(c, a, upper=False) if learn else None
            if ngd:
                noise = self.hyper.noise_var
                lam_t = torch.eye(self.m, dtype=DTYPE) + (a * (cnt * (scale / noise))) @ a.T
                h_t = a @ (s1 * (scale / noise))
                if self.totals:
                    at, rt, vt = self._total_sites(self.totals)
                    lam_t = lam_t + (at.T / vt) @ at
                    h_t = h_t + at.T @ (rt / vt)
        if learn:
            assert t is not None
            self._adam_step(u, cnt, s1, s2, a, t, chol, m_w, c)
        if ngd:
            rho = cfg.ngd_lr
            lam = (1 - rho) * self.lam + rho * lam_t
            self.lam = 0.5 * (lam + lam.T)
            self.h = (1 - rho) * self.h + rho * h_t
        self._full = None

    def _adam_step(
        self,
        u: NDArray[np.int64],
        cnt: Tensor,
        s1: Tensor,
        s2: Tensor,
        a: Tensor,
        t: Tensor,
        chol: Tensor,
        m_w: Tensor,
        c: Tensor,
    ) -> None:
        """Adam on the batch expected log-likelihood per datum (whitened q: the KL is constant).

        The gradient is exact but not taken by autograd through the Cholesky factor and the
        triangular solves: the adjoints of the whitened loadings are formed in closed form, then
        pulled back to ``K_ZZ`` (``K̄ = -L⁻ᵀ Φ(Ā aᵀ) L⁻¹``, Φ = lower triangle with half
        diagonal, the Cholesky derivative) and ``K_Zu`` (``L⁻ᵀ Ā``), and only the elementwise
        kernel evaluation is differentiated (:meth:`SegmentKernel.pullback`). This halves the
        cost of the step against autograd, which repeats the M×M factorisation work.

        ``a = L⁻¹K_{Z,u}`` and ``t = C⁻¹a`` are the loadings of the batch's distinct segments at
        the current parameters; with ``hyper_batch_size`` a uniform subset of them is used and
        reweighted to stay unbiased.
        """
        cfg = self.config
        n_u = u.size
        weight = 1.0
        if cfg.hyper_batch_size is not None and n_u > cfg.hyper_batch_size:
            pick = torch.as_tensor(
                np.sort(self.rng.choice(n_u, size=cfg.hyper_batch_size, replace=False))
            )
            u, a, t = u[pick.numpy()], a[:, pick], t[:, pick]
            weight = n_u / pick.numel()
            cn, s1, s2 = cnt[pick], s1[pick], s2[pick]
        else:
            cn = cnt
        kappa = self.kernel.graph.raw_kappa
        freeze_kappa = (
            cfg.learn_graph_kappa
            and kappa.requires_grad
            and self.n_trips % cfg.graph_kappa_every != 0
        )
        with torch.no_grad():
            noise = self.hyper.noise_var
            n_b = cnt.sum()
            kdiag = self.kernel.diag_ids(u)
            mu = a.T @ m_w
            var = kdiag - (a * a).sum(0) + (t * t).sum(0)
            sq = s2 - 2 * mu * s1 + cn * mu * mu + cn * var
            g_mu = weight * (cn * mu - s1) / (noise * n_b)
            g_var = weight * 0.5 * cn / (noise * n_b)
            s_a = torch.linalg.solve_triangular(c.T, t, upper=True)  # S a
            a_bar = m_w[:, None] * g_mu + 2.0 * (s_a - a) * g_var
            k_bar = torch.linalg.solve_triangular(chol.T, a_bar, upper=True)  # L⁻ᵀĀ
            phi = torch.tril(a_bar @ a.T)
            phi.diagonal().mul_(0.5)
            x = torch.linalg.solve_triangular(chol.T, phi, upper=True)  # L⁻ᵀΦ
            kzz_bar = -torch.linalg.solve_triangular(chol, x, upper=False, left=False)  # ·L⁻¹
            # a batch segment inside Z has K[u, Z] = K[z, Z], a row of K_ZZ: folding its adjoint
            # into that row evaluates the kernel derivative on M + |u \ Z| rows, not M + |u|
            # (in a fleet run nearly every driven segment is in Z)
            pos = np.minimum(np.searchsorted(self.z, u), self.m - 1)
            in_z = self.z[pos] == u
            k_rows = k_bar.T
            if in_z.any():
                kzz_bar.index_add_(0, torch.as_tensor(pos[in_z]), k_rows[torch.as_tensor(in_z)])
            out_z = torch.as_tensor(~in_z)
            g_block = torch.cat([kzz_bar, k_rows[out_z]])
        if freeze_kappa:
            kappa.requires_grad_(False)
        try:
            surrogate = self.kernel.pullback(np.concatenate([self.z, u[~in_z]]), self.z, g_block)
            surrogate = surrogate + (g_var * self.kernel.diag_ids(u)).sum()
            noise = self.hyper.noise_var
            ell = -0.5 * cn * torch.log(2 * math.pi * noise) - 0.5 * sq / noise
            loss = surrogate - weight * ell.sum() / n_b
            self.adam.zero_grad(set_to_none=True)
            loss.backward()
        finally:
            if freeze_kappa:
                kappa.requires_grad_(True)
        self.adam.step()
        self._full = None

    def refresh_exact(self) -> None:
        """Set q(v) to its exact optimum on the whole history (closed form; NGD with ρ=1, B=N)."""
        with torch.no_grad():
            ids, y = self.history()
            if ids.size:
                r = y - self.prior_mean[ids]
                u, inv, cnt = np.unique(ids, return_inverse=True, return_counts=True)
                s1 = torch.as_tensor(np.bincount(inv, weights=r, minlength=u.size))
                a, _, _ = self._loadings(u)
                noise = self.hyper.noise_var
                w = torch.as_tensor(cnt, dtype=DTYPE) / noise
                lam = torch.eye(self.m, dtype=DTYPE) + (a * w) @ a.T
                h = a @ (s1 / noise)
            else:
                lam, h = torch.eye(self.m, dtype=DTYPE), torch.zeros(self.m, dtype=DTYPE)
            if self.totals:
                at, rt, vt = self._total_sites(self.totals)
                lam = lam + (at.T / vt) @ at
                h = h + at.T @ (rt / vt)
            self.lam = 0.5 * (lam + lam.T)
            self.h = h
        self._post = None
        self._full = None

    # ------------------------------------------------------------------ prediction
    def _full_pass(self) -> dict[str, Tensor]:
        """Whitened loadings ``A = L⁻¹K_{Z,·}`` of all segments, q's moments, prior variances.

        Cached until the parameters, q or Z change. Rows of segments in Z are the columns of
        Lᵀ, so only the other n - M rows need a triangular solve.
        """
        if self._full is None:
            with torch.no_grad():
                rest = np.setdiff1d(np.arange(self.n), self.z, assume_unique=True)
                k = self.kernel.cross_all(self.z)  # (n, M)
                zt, rt = torch.as_tensor(self.z), torch.as_tensor(rest)
                chol = _chol(k[zt])
                # column-major (M, n): LAPACK's triangular solves then need no copy
                a = torch.empty((self.n, self.m), dtype=DTYPE).T
                a[:, zt] = chol.T
                if rest.size:
                    a[:, rt] = torch.linalg.solve_triangular(chol, k[rt].T, upper=False)
                m_w, c = self._q_moments()
                self._full = {
                    "A": a,
                    "L": chol,
                    "m_w": m_w,
                    "C": c,
                    "diag": self.kernel.diag_all(),
                }
        return self._full

    @staticmethod
    def _whitened_solve(full: dict[str, Tensor]) -> Tensor:
        """``C⁻¹ A`` for all segments (cached in ``full``): ``‖·‖²`` per column is aᵀ S a."""
        if "T" not in full:
            full["T"] = torch.linalg.solve_triangular(full["C"], full["A"], upper=False)
        return full["T"]

    def _predict_all(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        full = self._full_pass()
        a = full["A"]
        t = self._whitened_solve(full)
        mean = self.prior_mean + (a.T @ full["m_w"]).numpy()
        var = full["diag"] - (a * a).sum(0) + (t * t).sum(0)
        return mean, var.numpy()

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything that determines future posteriors and updates (tensors/arrays copied)."""
        return {
            "kind": "svgp",
            "version": _STATE_VERSION,
            "config": asdict(self.config),
            "seed": self.seed,
            "n_segments": self.n,
            "network_hash": self.net.content_hash,
            "prior_mean": self.prior_mean.copy(),
            "history_ids": self._hist_ids[: self.n_hist].copy(),
            "history_y": self._hist_y[: self.n_hist].copy(),
            "visits": self.visits.copy(),
            "totals": [(u.copy(), h.copy(), float(t)) for u, h, t in self.totals],
            "z": self.z.copy(),
            "spread": self.spread.copy(),
            "lam": self.lam.clone(),
            "h": self.h.clone(),
            "hyper": {k: v.clone() for k, v in self.hyper.state_dict().items()},
            "adam": _clone_nested(self.adam.state_dict()),
            "rng": self.rng.bit_generator.state,
            "n_trips": self.n_trips,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> SVGPModel:
        """Restore a :meth:`state_dict` of a model built with the same network and config."""
        check_model_header(
            state,
            kind="svgp",
            version=_STATE_VERSION,
            what="an SVGP",
            n_segments=self.n,
            network_hash=self.net.content_hash,
            config=self.config,
        )
        z = np.asarray(state["z"], dtype=np.int64)
        lam = torch.as_tensor(state["lam"], dtype=DTYPE)
        if z.shape != (self.m,) or lam.shape != (self.m, self.m):
            raise ModelStateError("checkpoint inducing set does not match num_inducing")
        try:
            self.hyper.load_state_dict(state["hyper"])
        except RuntimeError as exc:
            raise ModelStateError(
                f"checkpoint hyperparameters do not fit this model: {exc}"
            ) from None
        self.adam.load_state_dict(_clone_nested(state["adam"]))
        hist_ids = np.asarray(state["history_ids"], dtype=np.int64)
        self._hist_ids = hist_ids.copy()
        self._hist_y = np.asarray(state["history_y"], dtype=np.float64).copy()
        self.n_hist = hist_ids.size
        self.visits = np.asarray(state["visits"], dtype=np.int64).copy()
        self.totals = [stored_total(t) for t in state["totals"]]
        self.prior_mean = np.asarray(state["prior_mean"], dtype=np.float64).copy()
        self.spread = np.asarray(state["spread"], dtype=np.int64).copy()
        self.z = z.copy()
        self.lam = lam.clone()
        self.h = torch.as_tensor(state["h"], dtype=DTYPE).clone()
        self.seed = int(state["seed"])
        # seeded, though the checkpoint's generator state replaces it at once
        self.rng = np.random.default_rng(self.seed)
        self.rng.bit_generator.state = state["rng"]
        self.n_trips = int(state["n_trips"])
        self._post = None
        self._full = None
        return self


def _clone_nested(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: _clone_nested(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clone_nested(v) for v in obj]
    return obj


def _no_temperature(temperature: ArrayLike | None) -> None:
    """The inducing-point learner has no temperature coefficients (the paper mode): refuse a
    temperature rather than ignore it."""
    if temperature is not None:
        raise ConfigError(
            "the inducing-point learner (SVGP) does not model ambient temperature; use the "
            "exact learner or BI for trips with a temperature (docs/temperature.md)"
        )
