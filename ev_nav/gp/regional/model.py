"""``RegionalGP``: the segment-energy posterior of a region as a sparse precision.

The production kernel ``a a'(s₁ K_G ∘ k_f + s₂ k'_f)`` is split into its two terms:

* the product term ``f₁`` by its Vecchia prior (:mod:`ev_nav.gp.regional.vecchia`), a sparse
  precision ``Q``;
* the feature-only term by ``J`` landmarks: a pivoted Cholesky ``s₂ a a' k'_f ≈ G Gᵀ``
  (N × J, stopped when the largest residual variance is below ``landmark_tol`` of the largest
  variance), ``f₂ = G u``, ``u ~ N(0, I_J)``. Segment context has 3–4 dimensions, so a few
  hundred landmarks reproduce the term to ~1e-6 of its variance. G is held in float32 (2 GB
  at 1M segments): ``G Gᵀ`` in those values is the prior's term, and products whose sums need
  float64 cast row blocks (:func:`landmark_products`).

Per-segment readings (sufficient statistics: count and residual sum per segment) give the
joint precision of ``(f₁, u)``::

    P = [[Q + W, W G], [Gᵀ W, I + Gᵀ W G]]

``Q + W`` is factorised on the Vecchia pattern (:class:`~ev_nav.gp.regional.factor.PrecisionFactor`)
and the J × J Schur complement ``S = I + GᵀWG − GᵀW(Q+W)⁻¹WG`` by dense Cholesky; each
factorisation also makes ``B = G − Y`` (N × J, float32) with ``Y = (Q+W)⁻¹WG``. The posterior
mean costs three sweeps of the factor, a joint Thompson sample of every segment one sweep and
two products with B (``x₂ = S⁻¹Bᵀb + S^{-T/2} ε₂``, ``L⁻ᵀ(L⁻¹b + ε₁) + B x₂``); the marginal
variances ``diag((Q+W)⁻¹) + rowsum(B S^{-T/2})²`` come from the
Takahashi recursion on the factor and from B. Trip totals (one linear row over a route) enter
by Woodbury on top of that posterior.

A trip's update is applied at once and costs what the readings reach: the factor columns they
change, a rank-k term of ``S`` and the rows of B solved on a hop halo of the trip, and — once
variances have been asked for — the kept variances (see :meth:`RegionalGP.update`).
Hyperparameters are fitted on the exact learner's schedule and objective
(:mod:`ev_nav.gp.fitting`, κ kept), each accepted fit rebuilding the prior at the fitted values
(:meth:`RegionalGP.refit`). Ambient temperatures
(:meth:`RegionalGP._temperature_segments`) and changed roads (:meth:`RegionalGP.reset_segments`)
are modelled exactly as the exact learner models them. docs/gp.md ("The regional learner")
has the design, the measured accuracy and costs, and what is missing.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from ev_nav.checkpoints import check_model_header
from ev_nav.energy import ClimateModel, Vehicle, check_temperature
from ev_nav.errors import ConfigError, ModelStateError, require_number
from ev_nav.gp.fitting import (
    FitCancelled,
    FitData,
    Rows,
    accept_fit,
    current_fit_rows,
    map_fit,
    next_fit,
    noise_floor,
    observation_rows,
    within_scatter,
)
from ev_nav.gp.incremental_state import IncrementalConfig
from ev_nav.gp.kernels import incidence_laplacian
from ev_nav.gp.lapack import potri
from ev_nav.gp.numerics import cholesky_jitter_np
from ev_nav.gp.posterior import (
    SegmentPosterior,
    TemperatureArg,
    combine_weights,
    stored_total,
    validate_observations,
    validate_reset,
    validate_segment_ids,
    validate_total,
)
from ev_nav.gp.prior import learner_prior
from ev_nav.gp.regional.factor import PrecisionFactor, deepcopy_sharing, halo_row_forms
from ev_nav.gp.regional.vecchia import (
    Entries,
    SpilledEntries,
    VecchiaPrior,
    VecchiaSettings,
    build_vecchia,
    network_entries,
    release_freed_memory,
)
from ev_nav.gp.temperature import TemperatureTerm
from ev_nav.roads.network import RoadNetwork

if TYPE_CHECKING:
    from ev_nav.store.state_cache import StateCache

__all__ = ["CHECKPOINT_KIND", "RegionalConfig", "RegionalGP", "landmark_products",
           "pivoted_cholesky"]

#: The ``kind`` a regional learner's checkpoint carries.
CHECKPOINT_KIND = "regional"
#: Format version of :meth:`RegionalGP.state_dict` (2: hyperparameter fits and their
#: schedule; a version-1 state was written by a learner that did not fit, and keeps not fitting;
#: 3: changed roads' extra variances and the temperature statistics, absent from older states).
STATE_VERSION = 3
#: The config fields of the fits and their schedule: they do not shape the prior.
_FIT_FIELDS = ("learn_hyperparameters", "first_fit", "fit_growth", "fit_max_gap",
               "fit_max_rows", "fit_iterations", "fit_test_level", "prior_log_sd")
#: Settings of the kept variances' bookkeeping alone: they shape neither the prior (not in its
#: cache key) nor what a checkpoint holds, so a checkpoint's value (or its absence, in states
#: written before the setting existed) is not checked and the learner's own is used.
_BOOKKEEPING_FIELDS = ("woodbury_tol", "variance_tol", "update_halo_min", "core_block_bytes",
                       "prior_spill_bytes")
#: Settings a checkpoint keeps as written (with the fit settings): a state written when the
#: factor's tolerance was 1e-8 keeps it, and its cached prior's key with it.
_KEPT_FIELDS = _FIT_FIELDS + ("factor_tol",)


@dataclass(frozen=True)
class RegionalConfig:
    """Settings of the regional learner.

    Attributes
    ----------
    graph_nu : int
        Graph Matérn smoothness ν (an integer: the graph factor is a sparse precision).
    graph_kappa, lengthscale : float
        κ and the lengthscale of both feature kernels (all dimensions), as the exact learner's
        :class:`~ev_nav.gp.incremental_state.IncrementalConfig`.
    outputscale, noise_var : float, optional
        σ0² and ς² [Wh²] (relative with ``segment_scale="loss"``); default
        :class:`~ev_nav.gp.prior.PriorSettings`, as the exact learner.
    segment_scale : str
        ``"uniform"`` or ``"loss"`` (see ``IncrementalConfig``).
    vecchia : VecchiaSettings
        How the product term's sparse prior is built.
    landmarks : int
        Largest number J of landmarks of the feature-only term.
    landmark_tol : float
        Stop adding landmarks once every segment's residual variance is below this fraction
        of the largest prior variance of the term.
    update_hops : int
        Least halo (hops around a trip's segments) on which a trip's change of the landmarks'
        Schur complement is solved (5: the halo's solve within ~4e-5 of the exact one on
        Monaco; docs/gp.md).
    update_halo_min : int
        The halo is widened hop by hop until it holds this many segments. On sparse real
        networks 5 hops hold a few hundred, and the Schur complement's per-trip changes then
        err enough to move the posterior mean from a refactorised learner's by up to 1.0e-2
        of a prior sd within 200 trips on Monaco (2.1e-3 on Luxembourg); widened to 1,000
        segments, 1.7e-3 (3.5e-4), most of which the factor's tolerance adds
        (``scripts/regional_accuracy.py --drift``). A 100k town's 5-hop halo already holds
        thousands.
    factor_tol : float
        A factor column is rewritten on an update when it moves by more than this fraction of
        its diagonal (smaller changes stay pending, never dropped). 1e-7 (it was 1e-8: a
        quarter fewer columns rewritten a trip at 100k segments, 40 → 33 ms) keeps the
        posterior mean within 1.7e-3 (Monaco) and 3.5e-4 (Luxembourg) of a prior sd of a
        refactorised learner's over 200 trips (1e-8: 3.7e-4 on Monaco; 1e-6 let it jump by
        1.4e-2; ``scripts/regional_accuracy.py --drift``). A checkpoint keeps the value it was
        written with.
    variance_refresh : int
        Trips between full recomputations of the landmarks' part of every variance (N·J²
        flops); in between it is kept by each trip's rank-k term (see
        ``RegionalGP._landmark_variances``).
    woodbury_tol : float
        Each trip's rank-k term leaves out the directions that lower no segment's landmark
        part by more than this fraction of its value after the trip: the kept variances are
        never below the exact ones, and each trip since the last recomputation leaves them
        above by at most this fraction (0 keeps every direction).
    variance_tol : float
        The trips' directions are applied to the kept landmark parts only once they would lower
        some segment's part by more than this fraction of its value; the rest are carried,
        summed, to the next posterior (see ``RegionalGP._deferred_directions``). So every kept
        landmark part lies between its exact value and ``1 + variance_tol`` times it (plus
        ``woodbury_tol`` a trip). At 0.01, of the 48–182 directions a 100k town's Bayes-UCB
        route brings, 2–78 pass it on their own, and the N × J × r product that dominates a
        Bayes-UCB posterior shrinks with the directions applied. 0 applies every direction at
        once.
    core_block_bytes : int
        Largest float64 N × c block of the landmarks' solves [bytes] (a factorisation's Schur
        complement, Bayes-UCB's B). While all J columns fit (up to ~650 landmarks at 100k
        segments) the Schur complement takes one sweep of the factor; beyond, each block of
        columns takes two and reads only the driven rows (a 1M region: 64 columns a block,
        no 4 GB float64 copy of G).
    prior_spill_bytes : int
        The Vecchia prior's A is kept on disk, mapped for each use, once its arrays exceed
        this [bytes] (``VecchiaPrior.spilled``; 0.9 GB at 1M segments, 90 MB at 100k): it is
        read where a factor is set up or a cache written, never on a trip.
    learn_hyperparameters, first_fit, fit_growth, fit_max_gap, fit_max_rows, fit_iterations, \
prior_log_sd
        The hyperparameter fits and their schedule, as the exact learner's
        (:class:`~ev_nav.gp.incremental_state.IncrementalConfig`, whose defaults these are):
        the same objective (:mod:`ev_nav.gp.fitting`) on the same rows, κ kept. Each accepted
        fit rebuilds the prior at the fitted values (see :meth:`RegionalGP.refit`).
    fit_test_level : float
        At the schedule's steady state (one fit per ``fit_max_gap`` updates; every fit before
        it is taken) a fit's values are accepted only when the likelihood-ratio test on its
        rows rejects the current ones at this level
        (:func:`~ev_nav.gp.fitting.significant_gain`; 1 takes every improvement, the exact
        learner's default). 0.01 here: an accepted fit rebuilds the prior (~24 s at 100k
        segments, ~5 min at 1M), and the test's null counts the current values' own
        estimation error (:func:`~ev_nav.gp.fitting.gain_threshold`: 21.7 nats against an
        earlier fit of as many rows, with 9 free hyperparameters), so the level is the share
        of steady-state fits that rebuild for nothing.
    """

    graph_nu: int = 2
    graph_kappa: float = 1.0
    lengthscale: float = 1.0
    outputscale: float | None = None
    noise_var: float | None = None
    segment_scale: str = "uniform"
    vecchia: VecchiaSettings = field(default_factory=VecchiaSettings)
    landmarks: int = 500
    landmark_tol: float = 1e-8
    update_hops: int = 5
    update_halo_min: int = 1000
    factor_tol: float = 1e-7
    variance_refresh: int = 200
    woodbury_tol: float = 1e-6
    variance_tol: float = 0.01
    core_block_bytes: int = 1 << 29
    prior_spill_bytes: int = 1 << 26
    learn_hyperparameters: bool = IncrementalConfig.learn_hyperparameters
    first_fit: int = IncrementalConfig.first_fit
    fit_growth: float = IncrementalConfig.fit_growth
    fit_max_gap: int = IncrementalConfig.fit_max_gap
    fit_max_rows: int = IncrementalConfig.fit_max_rows
    fit_iterations: int = IncrementalConfig.fit_iterations
    #: not the exact learner's 1: an accepted fit here costs a prior's rebuild (see refit)
    fit_test_level: float = 0.01
    prior_log_sd: float = IncrementalConfig.prior_log_sd

    def __post_init__(self) -> None:
        # the same checks as the exact learner's (one place): it raises on a bad schedule
        IncrementalConfig(first_fit=self.first_fit, fit_growth=self.fit_growth,
                          fit_max_gap=self.fit_max_gap, fit_max_rows=self.fit_max_rows,
                          fit_iterations=self.fit_iterations, prior_log_sd=self.prior_log_sd,
                          fit_test_level=self.fit_test_level)
        if float(self.graph_nu) != int(self.graph_nu) or self.graph_nu < 1:
            raise ConfigError("the regional learner needs an integer graph_nu ≥ 1")
        if self.segment_scale not in ("uniform", "loss"):
            raise ConfigError(
                f"segment_scale must be 'uniform' or 'loss', got {self.segment_scale!r}"
            )
        if self.landmarks < 1 or not 0.0 < self.landmark_tol < 1.0:
            raise ConfigError("landmarks must be ≥ 1 and landmark_tol in (0, 1)")
        if not 0.0 <= self.woodbury_tol < 1.0:
            raise ConfigError(f"woodbury_tol must be in [0, 1), got {self.woodbury_tol}")
        if not 0.0 <= self.variance_tol < 1.0:
            raise ConfigError(f"variance_tol must be in [0, 1), got {self.variance_tol}")
        if self.core_block_bytes < 1:
            raise ConfigError(f"core_block_bytes must be ≥ 1, got {self.core_block_bytes}")
        if self.prior_spill_bytes < 0:
            raise ConfigError(f"prior_spill_bytes must be ≥ 0, got {self.prior_spill_bytes}")
        # (a negative halo or NaN tolerance ran, and NaN kept every factor change pending)
        require_number(self.update_hops, "update_hops", low=0, whole=True)
        require_number(self.update_halo_min, "update_halo_min", low=0, whole=True)
        require_number(self.variance_refresh, "variance_refresh", low=1, whole=True)
        require_number(self.factor_tol, "factor_tol", low=0, high=1, high_open=True)


@dataclass
class _PriorParts:
    """What the prior at one set of hyperparameters consists of (see :class:`RegionalGP`)."""

    prior: VecchiaPrior
    landmarks: NDArray[np.float32]
    landmark_ids: NDArray[np.int64]
    factor: PrecisionFactor


def pivoted_cholesky(
    column: Callable[[int], NDArray[np.float64]],
    diag: NDArray[np.float64],
    max_rank: int,
    tol: float,
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Greedy pivoted Cholesky ``K ≈ G Gᵀ`` of a PSD matrix given by columns.

    Parameters
    ----------
    column : callable
        ``column(j)`` returns ``K[:, j]``.
    diag : ndarray
        ``diag(K)``.
    max_rank : int
        Most columns of ``G``.
    tol : float
        Stop once the largest residual variance is ≤ ``tol · max(diag)``.

    Returns
    -------
    G : ndarray of float32 (n, J)
        Held in float32 (half the memory: N × J is 2 GB at 1M segments and J = 500); the
        column arithmetic runs in float64. ``G Gᵀ`` in these values *is* the learner's
        feature-only term (every later product reads the same numbers), so the rounding
        (~1e-7 of the term) changes which low-rank term the prior has, not how exactly the
        learner conditions it.
    pivots : ndarray of int64 (J,)
    """
    n = diag.size
    resid = np.asarray(diag, dtype=np.float64).copy()
    stop = tol * float(resid.max()) if n else 0.0
    g = np.zeros((n, min(max_rank, n)), dtype=np.float32)
    pivots = []
    for j in range(g.shape[1]):
        p = int(np.argmax(resid))
        if resid[p] <= stop:
            break
        col = column(p) - g[:, :j] @ g[p, :j]
        g[:, j] = col / math.sqrt(resid[p])
        gj = g[:, j].astype(np.float64)
        resid -= gj * gj
        resid[p] = 0.0
        pivots.append(p)
    # (no copy when every column is used: N × J is ~0.2 GB at 100k segments)
    return np.ascontiguousarray(g[:, : len(pivots)]), np.asarray(pivots, dtype=np.int64)


#: Rows of G per block where a product with it runs in float64 (a float64 copy of all of G
#: would be 4 GB at 1M segments).
_ROW_BLOCK = 8192


def landmark_products(
    g: NDArray[np.float32], v: NDArray[np.float64] | None = None,
    c: NDArray[np.float64] | None = None, w: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """``Gᵀv`` (J × k; ``v`` given), ``Gc`` (N × k; ``c`` given) or ``Gᵀ diag(w) G`` (J × J;
    ``w`` given) in float64 from float32 rows of the landmarks, by row blocks (no N × J
    float64 copy); ``rowsum(G²)`` with none."""
    n = g.shape[0]
    if w is not None:
        out = np.zeros((g.shape[1], g.shape[1]))
        for r0 in range(0, n, _ROW_BLOCK):
            b = g[r0 : r0 + _ROW_BLOCK].astype(np.float64)
            out += b.T @ (w[r0 : r0 + _ROW_BLOCK, None] * b)
        return out
    if v is not None:
        out = np.zeros((g.shape[1],) + np.shape(v)[1:])
        for r0 in range(0, n, _ROW_BLOCK):
            out += g[r0 : r0 + _ROW_BLOCK].astype(np.float64).T @ v[r0 : r0 + _ROW_BLOCK]
        return out
    if c is not None:
        out = np.empty((n,) + np.shape(c)[1:])
        for r0 in range(0, n, _ROW_BLOCK):
            out[r0 : r0 + _ROW_BLOCK] = g[r0 : r0 + _ROW_BLOCK].astype(np.float64) @ c
        return out
    out = np.empty(n)
    for r0 in range(0, n, _ROW_BLOCK):
        b = g[r0 : r0 + _ROW_BLOCK].astype(np.float64)
        out[r0 : r0 + _ROW_BLOCK] = np.einsum("ij,ij->i", b, b)
    return out


def _matern52_rows(x: NDArray[np.float64], p: int, ls: NDArray[np.float64]) -> NDArray[np.float64]:
    r = np.sqrt(5.0 * (((x - x[p]) / ls) ** 2).sum(1))
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


class RegionalGP:
    """Posterior over all segments of a region, as a sparse precision plus landmarks.

    Implements :class:`~ev_nav.gp.posterior.SegmentModel`, with ambient temperatures and
    changed roads (``reset_segments``) as the exact learner.

    Parameters
    ----------
    net : RoadNetwork
    vehicle : Vehicle, optional
        Vehicle of the prior mean E_det.
    config : RegionalConfig, optional
    hyperparameters : mapping, optional
        Exact values in the form of :meth:`IncrementalGP.hyperparameters
        <ev_nav.gp.incremental.IncrementalGP.hyperparameters>` (κ, lengthscales, outputscales,
        noise variance), overriding the config's.
    seed : int
        Seed of the coarse-to-fine order's tie-breaking.
    cache : StateCache, optional
        A state's verified cache folder: the prior (Vecchia factor, landmarks and Q on the
        factor's pattern: ~550 MB, ~1 min to build at 100k segments) is read from it when it
        was built for the same network, settings and hyperparameters, and written otherwise.
    climate : ClimateModel, optional
        The physics prior of the temperature coefficients (:mod:`ev_nav.gp.temperature`);
        used once a reading carries an ambient temperature.
    """

    checkpoint_kind = CHECKPOINT_KIND

    def __init__(
        self,
        net: RoadNetwork,
        vehicle: Vehicle | None = None,
        config: RegionalConfig | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        seed: int = 0,
        cache: StateCache | None = None,
        climate: ClimateModel | None = None,
    ) -> None:
        self.config = cfg = config or RegionalConfig()
        self.net = net
        self.n = net.n_segments
        self.seed = int(seed)
        d = net.features.shape[1]
        self.scale: NDArray[np.float64] | None  # a_e [Wh], as the exact learner's
        prior, self.scale = learner_prior(net, vehicle, cfg.segment_scale, cfg.lengthscale)
        self.noise_scale = None if self.scale is None else self.scale**2
        s0 = prior.outputscale if cfg.outputscale is None else cfg.outputscale
        hyper: dict[str, Any] = {
            "graph_kappa": cfg.graph_kappa,
            "lengthscale_product": [cfg.lengthscale] * d,
            "lengthscale_feature": [cfg.lengthscale] * d,
            "outputscale_product": s0 * prior.graph_share,
            "outputscale_feature": s0 * (1 - prior.graph_share),
            "noise_var": prior.noise_var if cfg.noise_var is None else cfg.noise_var,
        }
        if hyperparameters is not None:
            unknown = set(hyperparameters) - set(hyper)
            if unknown:
                raise ConfigError(f"unknown hyperparameters: {sorted(unknown)}")
            hyper.update({k: v for k, v in hyperparameters.items()})
        self.hyper = {
            k: [float(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else float(v)
            for k, v in hyper.items()
        }
        self.noise_var = float(self.hyper["noise_var"])
        #: the values the fits' log-normal priors are centred on (the initial ones)
        self.prior_hyper = {k: list(v) if isinstance(v, list) else v
                            for k, v in self.hyper.items()}
        self.prior_mean = net.e_det(vehicle).astype(np.float64)
        #: the temperature coefficients (inactive until a reading carries a temperature)
        self.temp = TemperatureTerm(net, self.prior_mean, climate)
        self.cache = cache
        #: the prior at the current hyperparameters, built (or read from the cache) when first
        #: needed: a model about to load a checkpoint at fitted values never builds the initial one
        self._parts: _PriorParts | None = None
        #: the graph-kernel entries (:meth:`_entries`) and the κ they are for, kept between
        #: fits when hyperparameters are learned: κ is not fitted, so each fit and each
        #: rebuild of the prior reads the same entries (~25 s to compute at 100k; on disk
        #: between uses, ~0.2 GB at 100k and 2.1 GB at 1M)
        self._kept_entries: tuple[float, SpilledEntries] | None = None
        und = ((net.line_graph + net.line_graph.T) > 0).tocsr()
        self._adjacency = (und.indptr.astype(np.int64), und.indices.astype(np.int64))
        #: the exact learner's schedule: the first fit at ``first_fit`` updates, then each
        #: ``fit_growth`` times as many (at most ``fit_max_gap`` later); ``rng`` draws the rows
        #: of a fit beyond ``fit_max_rows``
        self.next_refresh = cfg.first_fit
        self.rng = np.random.default_rng(self.seed)
        self.fits: list[dict[str, Any]] = []
        #: the owner (a server) decides when to refit: a due fit only sets ``refit_due``
        self.defer_refits = False
        self.refit_due = False
        self._reset_data()

    def raw_hyperparameters(self) -> dict[str, float | list[float]]:
        """:meth:`hyperparameters`, as a checkpoint's ``hyper`` holds them: this learner keeps
        no transformed (raw) values. A server reports them (its health showed none for this
        learner)."""
        return self.hyperparameters()

    def prepare(self) -> None:
        """Build the prior at the current hyperparameters now, or read it from the state's
        cache, and keep it there: ``ev-nav init`` pays for it once (minutes at 100k segments)
        instead of the first trip's ``route``."""
        self._prior_parts()

    def _prior_parts(self) -> _PriorParts:
        """The prior at the current hyperparameters: from the cache when it holds it, else
        built and written there."""
        if self._parts is not None:
            return self._parts
        cfg, n = self.config, self.n
        amp = np.ones(n) if self.scale is None else self.scale
        key = self._prior_key(amp)
        cached = _read_prior(self.cache, key, n)
        if cached is None:
            prior, landmarks, landmark_ids = self._build_prior(amp)
            prior = self._spill(prior)
            factor = PrecisionFactor(prior, tol=cfg.factor_tol)
            if self.cache is not None:
                _write_prior(self.cache, key, prior, landmarks, landmark_ids, factor.q_values)
        else:
            prior, landmarks, landmark_ids, q_values = cached
            prior = self._spill(prior)
            factor = PrecisionFactor(prior, tol=cfg.factor_tol, q_values=q_values)
        self._parts = _PriorParts(prior, landmarks, landmark_ids, factor)
        release_freed_memory()  # the build's transients (a region: GBs of heap pages)
        return self._parts

    def _spill(self, prior: VecchiaPrior) -> VecchiaPrior:
        """``prior`` with A on disk (:meth:`VecchiaPrior.spilled`) where A's arrays exceed
        ``prior_spill_bytes``: A is read where the factor is set up, a cache written or a
        factorisation has no readings, never on a trip."""
        if prior.a_matrix.nnz * 12 < self.config.prior_spill_bytes:  # float64 + int32
            return prior
        return prior.spilled()

    @property
    def prior(self) -> VecchiaPrior:
        """The product term's Vecchia prior."""
        return self._prior_parts().prior

    @property
    def landmarks(self) -> NDArray[np.float32]:
        """``G`` (N × J, float32): the feature-only term ``≈ G Gᵀ`` (exactly ``G Gᵀ`` in these
        values is the learner's prior; see :func:`pivoted_cholesky`)."""
        return self._prior_parts().landmarks

    @property
    def landmark_ids(self) -> NDArray[np.int64]:
        """The landmarks' segments (the pivoted Cholesky's pivots)."""
        return self._prior_parts().landmark_ids

    @property
    def factor(self) -> PrecisionFactor:
        """The factor of ``Q + W`` (changed in place by updates)."""
        return self._prior_parts().factor

    def __deepcopy__(self, memo: dict[int, Any]) -> RegionalGP:
        """An independent copy that shares what never changes after construction (network,
        prior, landmarks: ~0.5 GB at 100k segments), as the server's snapshots need."""
        parts = self._parts
        shared = () if parts is None else (parts.prior, parts.landmarks, parts.landmark_ids)
        return deepcopy_sharing(self, memo, (
            self.net, self.prior_mean, self.scale, self.noise_scale, self._adjacency, self.cache,
            *shared, self._kept_entries))

    def _prior_key(self, amp: NDArray[np.float64]) -> str:
        """Digest of everything the prior is built from (network, settings, hyperparameters,
        seed, segment amplitudes): the name of its cache files."""
        h = hashlib.sha256()
        h.update(self.net.content_hash.encode())
        shaping = {k: v for k, v in asdict(self.config).items()
                   if k not in _FIT_FIELDS + _BOOKKEEPING_FIELDS}
        fields = {"config": shaping, "hyper": self.hyper, "seed": self.seed,
                  "version": PRIOR_CACHE_VERSION}
        h.update(json.dumps(fields, sort_keys=True).encode())
        h.update(np.ascontiguousarray(amp, dtype=np.float64).tobytes())
        return h.hexdigest()[:24]

    def _entries(self) -> Entries:
        """The coarse-to-fine order and the graph-kernel entries (:func:`network_entries`)
        at the current κ: computed once and kept when hyperparameters are learned (on disk,
        :class:`SpilledEntries`; the caller holds them only while it reads them)."""
        kappa = float(self.hyper["graph_kappa"])
        kept = self._kept_entries
        if kept is not None and kept[0] == kappa:
            return kept[1].load()
        nu = int(self.config.graph_nu)
        self._kept_entries = None  # (entries at another κ: let go before the build's peak)
        entries = network_entries(self.net, incidence_laplacian(self.net), 2.0 * nu / kappa**2,
                                  nu, self.config.vecchia, seed=self.seed)
        if self.config.learn_hyperparameters:
            self._kept_entries = (kappa, SpilledEntries(entries))
        return entries

    def _build_prior(
        self, amp: NDArray[np.float64]
    ) -> tuple[VecchiaPrior, NDArray[np.float64], NDArray[np.int64]]:
        """The product term's Vecchia prior, the feature-only term's landmarks (N × J) and
        their pivots, from the graph-kernel entries (:meth:`_entries`)."""
        cfg, net = self.config, self.net
        # the graph-kernel entries first: their build is the memory peak (~3 GB at 100k
        # segments), before the N × J landmarks exist
        rank, kg, kg_diag, _ = self._entries()
        x = np.asarray(net.features, dtype=np.float64)
        ls2 = np.asarray(self.hyper["lengthscale_feature"], dtype=np.float64)
        s2 = float(self.hyper["outputscale_feature"])
        landmarks, landmark_ids = pivoted_cholesky(
            lambda p: s2 * amp * amp[p] * _matern52_rows(x, p, ls2),
            s2 * amp * amp, cfg.landmarks, cfg.landmark_tol,
        )
        # what the landmarks leave of the feature-only term's variance goes into the Vecchia
        # prior's diagonal, so every segment's prior variance is exact
        remainder = np.maximum(s2 * amp * amp - landmark_products(landmarks), 0.0)
        prior = build_vecchia(
            kg, kg_diag, rank, x, np.asarray(self.hyper["lengthscale_product"]),
            float(self.hyper["outputscale_product"]), amp, cfg.vecchia.neighbours, remainder,
        )
        return prior, landmarks, landmark_ids

    # ------------------------------------------------------------------ data
    def _reset_data(self) -> None:
        self.n_obs = np.zeros(self.n, dtype=np.int64)
        #: Σ (y − E_det − φᵀβ₀) per segment [Wh] (φ: the reading's temperature features, 0
        #: until a reading carries a temperature), and the sum of squares [Wh²]
        self.sum_r = np.zeros(self.n)
        self.sum_r2 = np.zeros(self.n)
        self.totals: list[tuple[NDArray[np.int64], NDArray[np.float64], float]] = []
        #: per-segment variance [Wh²] added to the prior where a change of the road was
        #: detected (:meth:`reset_segments`), as the exact learner's
        self.extra_var = np.zeros(self.n)
        # temperature (:mod:`ev_nav.gp.temperature`): off until a reading carries one
        self.temp.active = False
        self.temp.reset_information()
        #: per segment Σφ, Σφφᵀ, Σφr and per trip total Σhφ (once a temperature was seen)
        self._t_phi: NDArray[np.float64] | None = None
        self._t_phiphi: NDArray[np.float64] | None = None
        self._t_phir: NDArray[np.float64] | None = None
        self._t_psi: list[NDArray[np.float64]] = []
        self.n_updates = 0
        #: the factor, W G and the Schur complement's Cholesky factor match the statistics
        self._core_ok = False
        self._s = np.zeros((0, 0))  # the Schur complement S (J × J) and its Cholesky factor
        self._ls = np.zeros((0, 0))
        #: the driven segments (in the order first driven) and their rows of G (float32, as
        #: G), contiguous: W and b vanish elsewhere, so products with G that W or b multiply
        #: read only these (in float64 by row blocks: landmark_products; a draw's in float32)
        self._oi = np.zeros(0, dtype=np.int64)
        self._go32 = np.zeros((0, 0), dtype=np.float32)  # (J columns once the prior exists)
        self._n_oi = 0
        #: B = G − (Q+W)⁻¹WG (N × J), made by each factorisation and kept by each trip's
        #: halo update, in float32 (2 GB at 1M segments and J = 500): a draw's products with
        #: it in float32 (see _solve_parts), a mean's or a variance's in float64 by row
        #: blocks (landmark_products), the per-trip Woodbury product of the kept variances
        #: in float32 (see _landmark_variances)
        self._bl: NDArray[np.float32] | None = None
        #: Bᵀb (J), a draw's Schur right-hand side: made with B, kept by each trip's update,
        #: recomputed every ``variance_refresh`` trips (rounding; see _schur_rhs)
        self._btb: NDArray[np.float64] | None = None
        self._btb_age = 0
        #: the factor's part of the variances, diag((Q+W)⁻¹), kept once asked for (see
        #: _factor_variances), and trips since its last full computation
        self._var1: NDArray[np.float64] | None = None
        self._var1_age = 0
        self._var2: NDArray[np.float64] | None = None  # the landmarks' part of the variances
        self._var2_age = 0
        self._var2_dirty = np.zeros(self.n, dtype=bool)
        self._var2_pending: list[NDArray[np.float64]] = []
        #: the directions carried to a later posterior (J × J, their sum D; None: none; see
        #: _deferred_directions)
        self._var2_defer: NDArray[np.float64] | None = None
        self._mom: dict[str, Any] | None = None  # mean, variances and the totals' terms
        #: the temperature coefficients' information from the segments (_temperature_segments)
        self._tmom: dict[str, Any] | None = None
        #: (Q+W)⁻¹C_f (N × m), kept by each trip's halo terms once computed, and trips since
        #: its last full solve (see _temperature_segments)
        self._ty: NDArray[np.float64] | None = None
        self._ty_age = 0
        self._post: SegmentPosterior | None = None
        self._post_t: tuple[float, SegmentPosterior] | None = None  # at one temperature

    #: the statistics (the data; everything else is derived from them and the prior)
    _STATS = ("n_obs", "sum_r", "sum_r2", "totals", "extra_var", "_t_phi", "_t_phiphi",
              "_t_phir", "_t_psi")

    def _activate_temperature(self) -> None:
        """Start carrying the temperature coefficients (the first reading with a temperature):
        everything observed so far had none (φ = 0), so their statistics start at 0."""
        if self.temp.active:
            return
        self._t_phi, self._t_phiphi, self._t_phir, self._t_psi = self.temp.start(
            self.n, len(self.totals))
        self._mom = None
        self._tmom = None
        self._post = None
        self._post_t = None

    @property
    def noise_std(self) -> float:
        """Observation-noise standard deviation ς [Wh] (relative with ``segment_scale="loss"``)."""
        return math.sqrt(self.noise_var)

    def hyperparameters(self) -> dict[str, float | list[float]]:
        """The hyperparameters in use (the exact learner's names and units)."""
        return {k: list(v) if isinstance(v, list) else v for k, v in self.hyper.items()}

    def _noise(self, ids: NDArray[np.int64]) -> NDArray[np.float64]:
        return self.noise_var * (np.ones(ids.size) if self.noise_scale is None
                                 else self.noise_scale[ids])

    def _seg_weights(
        self, ids: NDArray[np.int64], n_obs: NDArray[np.int64], sum_r: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``W`` and ``b`` of segments ``ids`` with ``n_obs`` readings of residual sum ``sum_r``.

        ``n/ς²`` and ``Σr/ς²``; at a changed road (``extra_var`` τ² > 0, see
        :meth:`reset_segments`) the readings observe the learner's latent ``f`` plus the road's
        own effect ``h ~ N(0, τ²)``, shared by its readings: integrated out, their mean is one
        reading of ``f`` with variance ``τ² + ς²/n``, i.e. ``n/(ς² + nτ²)`` and
        ``Σr/(ς² + nτ²)`` (the same numbers, bit for bit, where τ² = 0)."""
        d = self._noise(ids) + n_obs * self.extra_var[ids]
        return n_obs / d, sum_r / d

    def _weight_change(
        self, u: NDArray[np.int64], cnt: NDArray[np.int64], rs: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """What ``cnt`` more readings of residual sum ``rs`` add to ``W`` and ``b`` at ``u``."""
        noise = self._noise(u)
        dw, db = cnt / noise, rs / noise
        ex = self.extra_var[u] > 0
        if ex.any():
            e = u[ex]
            w0, b0 = self._seg_weights(e, self.n_obs[e], self.sum_r[e])
            w1, b1 = self._seg_weights(e, self.n_obs[e] + cnt[ex], self.sum_r[e] + rs[ex])
            dw[ex], db[ex] = w1 - w0, b1 - b0
        return dw, db

    def _changed_roads(
        self,
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64],
               NDArray[np.float64]] | None:
        """The posterior of ``F = f + h`` at the changed roads from that of ``f``.

        Given ``f``, a changed road's own effect is ``h | data ~ N(κ(r̄ − f), c)`` with
        ``κ = nτ²/(nτ² + ς²)``, ``c = τ²ς²/(nτ² + ς²)`` (its ``n`` readings of mean residual
        ``r̄``; ``κ = 0``, ``c = τ²`` without readings), so ``F = (1 − κ)f + κr̄ + η`` with
        ``η ~ N(0, c)`` independent: an exact affine map of the posterior. Returns the segments,
        ``1 − κ``, ``κr̄`` and ``c``, or None when no road changed."""
        ex = np.flatnonzero(self.extra_var)
        if not ex.size:
            return None
        n = self.n_obs[ex].astype(np.float64)
        tau2, nu = self.extra_var[ex], self._noise(ex)
        d = n * tau2 + nu
        rbar = np.divide(self.sum_r[ex], n, out=np.zeros(ex.size), where=n > 0)
        return ex, nu / d, n * tau2 / d * rbar, tau2 * nu / d

    def update(
        self, segment_ids: ArrayLike, energies: ArrayLike, temperature: TemperatureArg = None
    ) -> None:
        """Learn from one reading per listed segment (repeats allowed) [Wh], made at
        ``temperature`` [°C] (one value, or one per reading; None: not recorded).

        Applied at once (before the next draw): the factor's columns the readings reach are
        rewritten, and the Schur complement gets the trip's rank-k term and B its rows'
        change, both computed on a ``update_hops``-hop halo of the readings
        (:meth:`PrecisionFactor.local_solve`).
        Temperatures enter the statistics only (see :meth:`_temperature_segments`): given the
        coefficients they shift the residuals, which the factor's right-hand side holds at
        the prior's coefficients."""
        ids, y = validate_observations(segment_ids, energies, self.n)
        temps = None if temperature is None else check_temperature(temperature, ids.size)
        if ids.size == 0:
            return
        if temps is not None:
            self._activate_temperature()
        r = y - self.prior_mean[ids]
        phi = None
        if self.temp.active:
            phi = self.temp.features(ids, temps)
            r = r - self.temp.offset(phi)
        u, inv = np.unique(ids, return_inverse=True)
        cnt = np.bincount(inv, minlength=u.size)
        rs = np.bincount(inv, weights=r, minlength=u.size)
        if self._core_ok:
            self._observed(u[self.n_obs[u] == 0])
            dcf = None
            if self._ty is not None and phi is not None:
                assert self._t_phi is not None
                trip_phi = np.zeros((u.size, self.temp.m))
                np.add.at(trip_phi, inv, phi)
                dcf = (self._c_latent(u, self.n_obs[u] + cnt, self._t_phi[u] + trip_phi)
                       - self._c_latent(u, self.n_obs[u], self._t_phi[u]))
            self._add_readings(u, *self._weight_change(u, cnt, rs), dcf)
        self.n_obs[u] += cnt
        self.sum_r[u] += rs
        self.sum_r2[u] += np.bincount(inv, weights=r * r, minlength=u.size)
        if phi is not None:
            np.add.at(self._t_phi, ids, phi)
            np.add.at(self._t_phiphi, ids, phi[:, :, None] * phi[:, None, :])
            np.add.at(self._t_phir, ids, phi * r[:, None])
        self._changed()

    def update_total(
        self,
        segment_ids: ArrayLike,
        total_energy: float,
        weights: ArrayLike | None = None,
        temperature: TemperatureArg = None,
    ) -> None:
        """Learn from the total energy [Wh] of driving the listed segments (weights: the share
        of each driven, see :func:`~ev_nav.gp.posterior.validate_total`) on a trip at
        ``temperature`` [°C] (None: not recorded)."""
        u, h, total = validate_total(segment_ids, total_energy, self.n, weights)
        t = None if temperature is None else float(check_temperature(temperature))
        if t is not None:
            self._activate_temperature()
        self.totals.append((u, h, total))
        if self.temp.active:
            self._t_psi.append(h @ self.temp.features(u, t))
        self._changed()

    def reset_segments(
        self, segment_ids: ArrayLike, counts: ArrayLike, sums: ArrayLike, sums_sq: ArrayLike
    ) -> None:
        """Forget every per-segment reading of ``segment_ids`` and keep instead readings with
        the given statistics (per segment: count, Σy [Wh], Σy² [Wh²]; zeros forget them all):
        what a detected change of a road needs (:mod:`ev_nav.gp.changes`), as the exact
        learner's :meth:`~ev_nav.gp.incremental.IncrementalGP.reset_segments`.

        The changed road also gets an extra prior variance of one mean prior variance (the
        road is no longer what its neighbours and features suggest), modelled exactly as its
        own effect ``h`` (see :meth:`_seg_weights` and :meth:`_changed_roads`). Trip totals
        that include the segments are kept. The learner refactorises from the statistics at
        its next use (one factorisation: ~7 s at 100k segments; resets are rare events); the
        reset does not count as an update for the refit schedule."""
        ids, cnt, s1, s2 = validate_reset(segment_ids, counts, sums, sums_sq, self.n)
        if ids.size == 0:
            return
        h = self.hyper
        tau2 = np.full(ids.size, float(h["outputscale_product"]) + float(h["outputscale_feature"]))
        if self.scale is not None:
            tau2 = tau2 * self.scale[ids] ** 2
        e = self.prior_mean[ids]
        self.n_obs[ids] = cnt
        self.sum_r[ids] = s1 - cnt * e  # the statistics are residuals y − E_det
        self.sum_r2[ids] = np.maximum(s2 - 2.0 * e * s1 + cnt * e * e, 0.0)
        self.extra_var[ids] += tau2
        if self.temp.active:  # the kept readings carry no temperature
            self._t_phi[ids] = 0.0
            self._t_phiphi[ids] = 0.0
            self._t_phir[ids] = 0.0
        self.restart_from_statistics()

    def restart_from_statistics(self) -> None:
        """Drop the per-trip state (factor, Schur factor, kept variances) so that the next use
        factorises afresh from the statistics, exactly as a learner restored from
        :meth:`state_dict` does. Per-trip updates leave pending changes below their tolerance,
        so they are not bit-reproducible from a checkpoint; a fleet run calls this at each
        checkpoint so that a resumed run gives the very same results."""
        n_updates, active = self.n_updates, self.temp.active
        stats = {k: getattr(self, k) for k in self._STATS}
        self._reset_data()
        for k, v in stats.items():
            setattr(self, k, v)
        self.temp.active = active
        self.n_updates = n_updates

    def _changed(self) -> None:
        self.n_updates += 1
        self._mom = None
        self._tmom = None
        self._post = None
        self._post_t = None
        if self.n_updates >= self.next_refresh:
            if self.defer_refits:
                self.refit_due = True
            else:
                self.refit()

    # ------------------------------------------------------------------ hyperparameters
    def refit(self, cancel: threading.Event | None = None) -> bool:
        """Fit the hyperparameters (if learned), rebuild the prior at them when the fit is
        accepted (``fit_test_level``), and schedule the next fit (``fit_growth`` times the
        updates so far, at most ``fit_max_gap`` later): the exact learner's schedule and
        objective (:meth:`IncrementalGP.refit <ev_nav.gp.incremental.IncrementalGP.refit>`).

        The rebuild is the prior's construction at the fitted values (the Vecchia factor and
        the landmarks; the graph-kernel entries are kept, κ not being fitted), read from the
        state's cache instead when it holds the prior of these values, and the next use's
        first factorisation.
        ``cancel`` (set from another thread) stops a fit between two evaluations of its
        objective; the model is then left as it was and ``False`` is returned.
        """
        if self.config.learn_hyperparameters:
            # the temperature coefficients' estimate the fit's residuals are taken at: from
            # the posterior at the current values, before their prior is let go below
            delta = None
            if self.temp.active:
                self._mean_terms()
                delta = self.temp.coefficients()[0].copy()
            kept = self._kept_entries
            if cancel is None and (kept is None or kept[0] != self.hyper["graph_kappa"]):
                # nothing stops this fit and the graph-kernel entries are not kept (the first
                # fit, or the first after a checkpoint was loaded): the old prior is let go
                # first, so that its memory serves the entries when they are computed (the
                # build's peak). With kept entries the prior stays: a fit the test does not
                # accept (most, at steady state) then costs no rebuild
                self._parts = None
                self.restart_from_statistics()
            done = self._fit(cancel, delta)
            if done is None:
                return False
            fitted = done
            if fitted != self.hyper or self._parts is None:
                self.hyper = fitted
                self.noise_var = float(fitted["noise_var"])
                # the old prior and the per-trip state (B: 2 GB at 1M segments) go before
                # the build
                self._parts = None
                self.restart_from_statistics()
                self._prior_parts()  # κ is kept: from the kept graph-kernel entries
                # built and factorised here, not at the next draw: a server refits a copy in
                # the background and swaps in a model that is ready to serve
                self._core()
        cfg = self.config
        self.next_refresh = next_fit(self.n_updates, cfg.fit_growth, cfg.fit_max_gap)
        self.refit_due = False
        return True

    def _fit_rows(self, delta: NDArray[np.float64] | None = None) -> Rows:
        """The marginal likelihood's rows, the exact learner's: one per observed segment, one
        per trip total, a random subset of ``fit_max_rows`` beyond it; with temperatures, the
        residuals at the coefficients' current estimate (the exact learner's plug-in)."""
        rows = observation_rows(self.n_obs, self.sum_r, self.noise_scale, self.totals,
                                self.prior_mean, self._total_offsets())
        if delta is not None:
            assert self._t_phi is not None
            d = delta
            segs = np.flatnonzero(self.n_obs > 0)
            phi = self._t_phi[segs] / self.n_obs[segs, None].astype(np.float64)
            rows_t = np.vstack([phi, *[p[None, :] for p in self._t_psi]]).reshape(
                -1, self.temp.m)
            rows = Rows(rows.pos, rows.wts, rows.resid - rows_t @ d, rows.noise)
        return rows.subset(self.config.fit_max_rows, self.rng)

    def _total_offsets(self) -> NDArray[np.float64] | None:
        """Each trip total's prior temperature energy ``ψᵀβ₀`` [Wh] (None without)."""
        if not self.temp.active:
            return None
        return np.array([float(p @ self.temp.beta0) for p in self._t_psi])

    def _log_hyper(self, hyper: Mapping[str, Any]) -> NDArray[np.float64]:
        """``log [κ, ℓ₁ (d), ℓ₂ (d), s₁, s₂, ς²]``: :mod:`ev_nav.gp.fitting`'s parameters."""
        return np.log(np.concatenate([
            [hyper["graph_kappa"]], hyper["lengthscale_product"], hyper["lengthscale_feature"],
            [hyper["outputscale_product"], hyper["outputscale_feature"], hyper["noise_var"]],
        ]).astype(np.float64))

    def _fit(
        self, cancel: threading.Event | None = None, delta: NDArray[np.float64] | None = None
    ) -> dict[str, Any] | None:
        """Type-II MAP of the hyperparameters (κ kept) by :func:`~ev_nav.gp.fitting.map_fit`:
        the exact learner's objective, with the graph block of the fit's segments taken from
        the graph-kernel entries (:meth:`_entries`; entries below ``entry_tol`` of the
        diagonal are 0). Returns the fitted hyperparameters (the current ones with fewer than
        two rows), or None when ``cancel`` was set during the fit. ``delta``: the temperature
        coefficients' estimate (the exact learner's plug-in), None without temperatures."""
        import torch

        rows = self._fit_rows(delta)
        pos = rows.pos
        if len(pos) < 2:
            return self.hyper
        cfg = self.config
        segs = np.unique(np.concatenate(pos))
        local = np.full(self.n, -1, dtype=np.int64)
        local[segs] = np.arange(segs.size)
        _, kg, kg_diag, _ = self._entries()
        half = kg[segs][:, segs].toarray()  # each pair once, in the later segment's row
        block = torch.from_numpy(half + half.T + np.diag(kg_diag[segs]))
        observed = self.n_obs > 0
        sum_r, sum_r2 = self.sum_r[observed], self.sum_r2[observed]
        if delta is not None:  # at the coefficients' current estimate, as the rows
            assert self._t_phi is not None and self._t_phir is not None
            assert self._t_phiphi is not None
            d = delta
            sum_r2 = (sum_r2 - 2.0 * self._t_phir[observed] @ d
                      + np.einsum("eij,i,j->e", self._t_phiphi[observed], d, d))
            sum_r = sum_r - self._t_phi[observed] @ d
        ssw, dof = within_scatter(
            self.n_obs[observed], sum_r, sum_r2,
            None if self.noise_scale is None else self.noise_scale[observed],
            clamp=delta is not None)
        extra = self.extra_var[segs]
        data = FitData(
            x=torch.as_tensor(np.asarray(self.net.features, dtype=np.float64)[segs]),
            pos=[local[p] for p in pos], wts=rows.wts, resid=torch.as_tensor(rows.resid),
            noise_factor=torch.as_tensor(rows.noise_factor()), ssw=ssw, dof=dof,
            amp=None if self.scale is None else torch.as_tensor(self.scale[segs]),
            extra=torch.as_tensor(extra) if extra.any() else None,
        )
        start = torch.as_tensor(self._log_hyper(self.hyper))
        free = torch.ones_like(start, dtype=torch.bool)
        free[0] = False  # κ: its graph-kernel entries are the prior's costliest part
        # the noise no lower than a share of the prior's (fitting.NOISE_FLOOR_SHARE): near
        # noise-free readings drove it to 4e-16 at 30k segments, the fitted scales exploded
        # and the next update's core was no longer positive definite
        lower = noise_floor(start, math.log(float(self.prior_hyper["noise_var"])))
        start = torch.maximum(start, lower)
        try:
            fit = map_fit(data, lambda kappa: block, start,
                          torch.as_tensor(self._log_hyper(self.prior_hyper)), free,
                          cfg.fit_iterations, cfg.prior_log_sd, cancel, lower=lower)
        except FitCancelled:
            return None
        # the test guards the steady state only: before it each fit sees `fit_growth` times
        # the data of the last, and is taken (Fig. 2's Thompson regret on Monaco A rose from
        # 3,057 to 7,122 Wh, that of a learner that never fits, when every fit was tested)
        accepted = accept_fit(fit, int(free.sum()), self.n_updates, cfg.fit_growth,
                              cfg.fit_max_gap, cfg.fit_test_level, len(pos),
                              current_fit_rows(self.fits))
        fitted = dict(self.hyper)
        if accepted:
            t = np.exp(fit.theta.numpy())
            d = (t.size - 4) // 2
            fitted = {
                "graph_kappa": self.hyper["graph_kappa"],  # the very same float (the cache key)
                "lengthscale_product": [float(v) for v in t[1 : 1 + d]],
                "lengthscale_feature": [float(v) for v in t[1 + d : 1 + 2 * d]],
                "outputscale_product": float(t[1 + 2 * d]),
                "outputscale_feature": float(t[2 + 2 * d]),
                "noise_var": float(t[3 + 2 * d]),
            }
        self.fits.append({"update": self.n_updates, "rows": len(pos), "nll": fit.nll,
                          "gain": fit.gain(), "accepted": accepted, **fitted})
        return fitted

    # ------------------------------------------------------------------ linear algebra
    def _core(self) -> None:
        """Factorise from the statistics (first use, and after a checkpoint is loaded)."""
        if self._core_ok:
            return
        w, b = self._seg_weights(np.arange(self.n), self.n_obs, self.sum_r)
        self.factor.factorize(w, b)
        self._n_oi = 0
        if self._go32.shape[1] != self.landmarks.shape[1]:  # first use: J is known now
            self._oi = np.zeros(0, dtype=np.int64)
            self._go32 = np.zeros((0, self.landmarks.shape[1]), dtype=np.float32)
        self._observed(np.flatnonzero(self.n_obs))
        g = self.landmarks
        self._bl = self._btb = None
        if g.shape[1] and not self._n_oi:  # no readings: S = I, B = G (no solves)
            self._s = np.eye(g.shape[1])
            self._ls = np.eye(g.shape[1])
            self._bl = g.copy()  # (a copy: each trip's update rewrites rows of B in place)
            self._btb, self._btb_age = np.zeros(g.shape[1]), 0
        elif g.shape[1]:
            f = self.factor
            oi, go = self._oi[: self._n_oi], self._go32[: self._n_oi]  # W vanishes elsewhere
            s = np.eye(g.shape[1]) + landmark_products(go, w=w[oi])
            b = np.empty(g.shape, dtype=np.float32)
            blocks = self._column_blocks()
            if len(blocks) == 1:
                # GᵀW(Q+W)⁻¹WG = XᵀX with X = L⁻¹WG: one sweep of the factor, not two, on
                # WG made in the factor's numbering (no N × J copies between numberings);
                # Y = (Q+W)⁻¹WG, B's other half, is one more sweep from X
                x = self._wg_block(slice(None))
                f.sweep(x)
                s -= x.T @ x
                f.sweep(x, transpose=True)
                self._fill_b(b, slice(None), x)
                del x
            else:
                # N × J in float64 over the memory budget (a region): X's blocks cannot all
                # be held for XᵀX, so each block of columns is solved whole, Y_c =
                # (Q+W)⁻¹WG_c (two sweeps), and GᵀW(Q+W)⁻¹WG_c = (WG)ᵀY_c reads only the
                # driven rows
                pos, wo = f.pos[oi], w[oi, None]
                for c in blocks:
                    y = self._wg_block(c)
                    f.sweep(y)
                    f.sweep(y, transpose=True)
                    s[:, c] -= landmark_products(go, v=wo * y[pos])
                    self._fill_b(b, c, y)
                    del y
            self._bl = b
            self._btb, self._btb_age = landmark_products(b, v=f.b), 0
            self._s = 0.5 * (s + s.T)
            self._ls = cholesky_jitter_np(self._s, ladder=(0.0,),
                                          error=ModelStateError)[0]
        self._core_ok = True

    def _fill_b(self, b: NDArray[np.float32], cols: slice, y: NDArray[np.float64]) -> None:
        """``B[:, cols] = G[:, cols] − Y`` from ``Y = (Q+W)⁻¹WG[:, cols]`` in the factor's
        numbering, by row blocks (no N-row temporaries)."""
        g, pos = self.landmarks, self.factor.pos
        for r0 in range(0, self.n, _ROW_BLOCK):
            r1 = r0 + _ROW_BLOCK
            b[r0:r1, cols] = g[r0:r1, cols] - y[pos[r0:r1]]

    def _column_blocks(self) -> list[slice]:
        """The landmarks' columns in blocks whose N-row float64 copy fits
        ``core_block_bytes`` (one block up to ~650 landmarks at 100k segments; 64 columns
        at 1M)."""
        j = self.landmarks.shape[1]
        width = max(1, min(j, self.config.core_block_bytes // (8 * max(self.n, 1))))
        return [slice(c, min(c + width, j)) for c in range(0, j, width)]

    def _wg_block(self, cols: slice) -> NDArray[np.float64]:
        """``W G[:, cols]`` in float64 in the factor's numbering (C-contiguous, to sweep),
        made by row blocks (no N-row float32 copy beside it)."""
        f, g = self.factor, self.landmarks
        x = np.empty((self.n, len(range(*cols.indices(g.shape[1])))))
        for r0 in range(0, self.n, _ROW_BLOCK):
            rows = f.seg[r0 : r0 + _ROW_BLOCK]
            blk = x[r0 : r0 + _ROW_BLOCK]
            blk[...] = g[rows, cols]
            blk *= f.w[rows, None]
        return x

    def _observed(self, new: NDArray[np.int64]) -> None:
        """Append newly driven segments to the kept rows of G (capacity doubles)."""
        if not new.size:
            return
        k = self._n_oi
        if k + new.size > self._oi.size:
            cap = max(2 * self._oi.size, k + new.size, 1024)
            oi = np.empty(cap, dtype=np.int64)
            go32 = np.empty((cap, self.landmarks.shape[1]), dtype=np.float32)
            oi[:k], go32[:k] = self._oi[:k], self._go32[:k]
            self._oi, self._go32 = oi, go32
        self._oi[k : k + new.size] = new
        self._go32[k : k + new.size] = self.landmarks[new]
        self._n_oi = k + new.size

    def _add_readings(self, u: NDArray[np.int64], dw: NDArray[np.float64],
                      db: NDArray[np.float64], dcf: NDArray[np.float64] | None = None) -> None:
        """One trip's readings: ``W += diag(dw)``, ``b += db`` at the distinct segments u
        (and the temperature features' ``C_f += dcf`` there).

        The Schur complement ``S = I + GᵀWG − GᵀW(Q+W)⁻¹WG`` changes by the rank-k term
        ``Hᵀ(Δ⁻¹ + Y_uu)⁻¹H``, ``Y = (Q+W)⁻¹E_u``, ``H = G_u − YᵀWG`` (pre-trip W and factor),
        with Y solved on the halo of u; the kept variances and ``(Q+W)⁻¹C_f`` (once asked
        for) change by the same trip's Woodbury terms."""
        g = self.landmarks
        if g.shape[1]:
            # the readings in the factor's order: the halo solve's columns then need no
            # reordering (PrecisionFactor.local_solve)
            o = np.argsort(self.factor.pos[u])
            u, dw, db = u[o], dw[o], db[o]
            if dcf is not None:
                dcf = dcf[o]
            seg, yh = self.factor.local_solve(u, self._adjacency, self.config.update_hops,
                                              self.config.update_halo_min)
            # u's rows of the halo (its segments are in the factor's order)
            y_uu = yh[np.searchsorted(self.factor.pos[seg], self.factor.pos[u])]
            obs = self.factor.w[seg] > 0
            so = seg[obs]
            # H is B's rows at u, but solved afresh on this halo in float64 rather than read
            # from the kept B: S accumulates every trip's term, and B's float32 rounding and
            # its halo updates' drift (docs/gp.md) would add up in S with them
            h = g[u].astype(np.float64) - yh[obs].T @ (self.factor.w[so, None] * g[so])
            gm = np.diag(1.0 / dw) + y_uu
            lg = cholesky_jitter_np(gm, ladder=(0.0,), symmetrize=True, error=ModelStateError)[0]
            z = sla.solve_triangular(lg, h, lower=True)
            ztz = z.T @ z
            if self._var1 is not None:
                # (Q+W')⁻¹ = (Q+W)⁻¹ − Y (Δ⁻¹ + Y_uu)⁻¹ Yᵀ (Woodbury) with Y on the halo:
                # each halo variance drops by its row's form y (Δ⁻¹ + Y_uu)⁻¹ yᵀ, the rest by
                # less than the halo's truncation squared (~1e-9). The forms are taken on
                # each row's few large entries (halo_row_forms): the dense k × |halo|
                # triangular solve was the costliest part of a long route's update, ~0.4 s of
                # a Bayes-UCB trip on 1M segments
                inv = np.array(lg, order="F")  # (lg is read again below)
                if potri(inv) != 0:  # (reads and writes the lower triangle only)
                    raise ModelStateError("a trip's Woodbury block is not positive definite")
                self._var1[seg] -= halo_row_forms(yh, inv)
                self._var1_age += 1
            if self._var2 is not None:
                # each variance's landmark part b S⁻¹ bᵀ drops by |b W|², W Wᵀ =
                # S⁻¹zᵀ (I + z S⁻¹ zᵀ)⁻¹ z S⁻¹ (Woodbury), applied when next asked. With
                # z S⁻¹ zᵀ = P diag(e) Pᵀ, W = S⁻¹zᵀ P (I + diag(e))^{-1/2}: a direction with
                # e ≤ woodbury_tol lowers no segment's part by more than that fraction of
                # its value after the trip, so it is left out (until the next full
                # recomputation): at 100k segments a Bayes-UCB route's k = 150–380 readings
                # keep r = 60–155 directions above 1e-6, and the N × J × r product is the
                # costliest part of the trip
                self._var2_pending.append(self._woodbury_directions(z, ztz))
            # S += zᵀz, refactorised (J³/3 by LAPACK: faster than k rank-one updates)
            self._s += ztz
            self._ls = cholesky_jitter_np(self._s, ladder=(0.0,), error=ModelStateError)[0]
            # (Q+W')⁻¹E_u from the pre-trip halo solve by Woodbury: yh (I + Δ Y_uu)⁻¹ (k × k:
            # well conditioned, eigenvalues ≥ 1)
            m_u = np.eye(u.size) + dw[:, None] * y_uu
            if self._ty is not None:
                # (Q+W')⁻¹C' = (Q+W)⁻¹C − Y(Δ⁻¹ + Y_uu)⁻¹(Q+W)⁻¹C|_u + (Q+W')⁻¹E_u ΔC_u on the
                # halo (Woodbury; beyond it the terms are below the halo's truncation)
                self._ty[seg] -= yh @ sla.cho_solve((lg, True), self._ty[u])
                if dcf is not None:
                    self._ty[seg] += yh @ np.linalg.solve(m_u, dcf)
                self._ty_age += 1
            # B = G − (Q+W)⁻¹WG moves by −(Q+W')⁻¹E_u Δ B_u (Y_u = G_u − B_u) on the halo:
            # yh times a k × J matrix, whose product runs in float32 as B is held (its
            # rounding, ~1e-7 of the change, is far below B's own). Bᵀb, the draws' Schur
            # right-hand side, follows from the same terms: (B + ΔB)ᵀ(b + Δb) with
            # ΔBᵀb = −cᵀ(yhᵀb_halo) and Δb at u
            bl = self._bl
            assert bl is not None and self._btb is not None
            c = np.linalg.solve(m_u, dw[:, None] * bl[u])
            self._btb -= c.T @ (yh.T @ self.factor.b[seg])
            bl[seg] -= yh.astype(np.float32) @ c.astype(np.float32)
            self._btb += bl[u].T.astype(np.float64) @ db
            self._btb_age += 1
            self._var2_dirty[seg] = True
            self._var2_age += 1
        else:
            # no halo solve without landmarks: recomputed when next asked
            self._var1 = self._ty = None
        self.factor.add(u, dw, db)

    def _woodbury_directions(self, z: NDArray[np.float64],
                             ztz: NDArray[np.float64]) -> NDArray[np.float64]:
        """A trip's W (J × r) with ``W Wᵀ = S⁻¹ − (S + zᵀz)⁻¹``, its directions of eigenvalue
        ``e ≤ woodbury_tol`` left out (:meth:`_add_readings`).

        The nonzero eigenvalues of ``z S⁻¹ zᵀ`` (k × k) are those of ``L_S⁻¹ zᵀz L_S⁻ᵀ``
        (J × J), and ``W = S⁻¹zᵀ P (I + E)^{-1/2} = L_S⁻ᵀ Q (E (I + E)⁻¹)^{1/2}`` direction by
        direction, so the eigendecomposition runs on the smaller of the two: a 1M region's
        Bayes-UCB routes read k = 700–1,400 segments against J = 500 (~9 k³ flops each)."""
        tol = self.config.woodbury_tol
        if z.shape[0] <= z.shape[1]:
            sz = sla.cho_solve((self._ls, True), z.T)
            zsz = z @ sz
            e, p = np.linalg.eigh(0.5 * (zsz + zsz.T))
            keep = e > tol
            return sz @ (p[:, keep] / np.sqrt(1.0 + e[keep]))
        a = sla.solve_triangular(self._ls, sla.solve_triangular(self._ls, ztz, lower=True).T,
                                 lower=True)
        e, q = np.linalg.eigh(0.5 * (a + a.T))
        keep = e > tol
        return sla.solve_triangular(self._ls, q[:, keep] * np.sqrt(e[keep] / (1.0 + e[keep])),
                                    lower=True, trans="T")

    def _solve_parts(
        self,
        eps: tuple[NDArray[np.float64], NDArray[np.float64]] | None,
        shift: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
    ) -> NDArray[np.float64]:
        """``x₁ + G x₂`` for ``x = L_P⁻ᵀ(L_P⁻¹ b + ε)`` with ``L_P`` the block factor of the
        precision of ``(f₁, u)``: the posterior mean's deviation from the prior mean with
        ``eps = None`` (three sweeps), a joint draw of it with standard normal ``eps`` (one
        sweep and two products with B). ``shift``: ``(s, (Q+W)⁻¹s)`` with the right-hand
        side ``b − s`` instead (the readings' residuals moved by the temperature
        coefficients' ``Cδ``), at no more sweeps.

        With ``Y = (Q+W)⁻¹WG`` and ``B = G − Y``: the Schur block's right-hand side is
        ``Gᵀ(b − W(Q+W)⁻¹b) = Bᵀb`` (kept, :meth:`_schur_rhs`), and
        ``x₁ = L⁻ᵀ(L⁻¹b + ε₁) − Y x₂``, so ``x₁ + G x₂ = L⁻ᵀ(L⁻¹b + ε₁) + B x₂``: a draw
        takes one sweep from the kept ``L⁻¹b`` instead of the block factor's three (~15 ms of
        a 100k town's ~36 ms draw). The mean keeps the three float64 sweeps: the kept B
        (closer to ``G − (Q+W)⁻¹WG`` with the exact ``(Q+W)⁻¹`` than a refactorised
        learner's, ``scripts/regional_accuracy.py --drift``) is not the zero-fill factor's
        own: in one sequence of 40 trips on Monaco a mean through it was 3.8e-3 of a prior
        sd from the exact value, a refactorised learner's 9.7e-4 (a draw's centre is tested
        within 1e-2)."""
        self._core()
        f = self.factor
        g = self.landmarks
        b = f.b if shift is None else f.b - shift[0]
        if not g.shape[1]:
            if shift is not None:
                return f.solve(b) if eps is None else f.draw_solve(eps[0], b)
            return f.mean_solve() if eps is None else f.draw_solve(eps[0])
        if eps is not None:
            bl = self._landmark_b()
            rhs = self._schur_rhs()
            if shift is not None:
                rhs = rhs - landmark_products(bl, v=shift[0])
            z2 = sla.solve_triangular(self._ls, rhs, lower=True)
            x2 = sla.solve_triangular(self._ls, z2 + eps[1], lower=True, trans="T")
            x1 = f.draw_solve(eps[0])  # L⁻ᵀ(L⁻¹b + ε₁) from the kept L⁻¹b, float32 values
            if shift is not None:
                x1 -= shift[1]
            # in float32, like the sweep (~1e-7 relative, far below the draw's own spread)
            return x1 + bl @ x2.astype(np.float32)
        m1 = f.mean_solve()  # (Q+W)⁻¹ b
        if shift is not None:
            m1 -= shift[1]
        oi = self._oi[: self._n_oi]
        # the driven rows of G are held in float32: the mean's products cast them to float64
        # by row blocks (landmark_products)
        go = self._go32[: self._n_oi]
        v = b[oi] - f.w[oi] * m1[oi]
        z2 = sla.solve_triangular(self._ls, landmark_products(go, v=v), lower=True)
        x2 = sla.solve_triangular(self._ls, z2, lower=True, trans="T")
        # x₁ = L⁻ᵀ(L⁻¹b − L⁻¹WGx₂) = (Q+W)⁻¹(b − WGx₂)
        r = b.copy()
        r[oi] -= f.w[oi] * landmark_products(go, c=x2)
        x1 = f.solve(r)
        # the one product over every segment's row: in float32 (half the memory traffic;
        # ~1e-7 relative)
        return x1 + g @ x2.astype(np.float32)

    def _schur_rhs(self) -> NDArray[np.float64]:
        """``Bᵀb`` [J], kept by the trips' updates (:meth:`_add_readings`), recomputed in
        float64 every ``variance_refresh`` trips so that the updates' rounding cannot add up
        (one N × J product, ~15 ms at 100k segments)."""
        assert self._bl is not None and self._btb is not None
        if self._btb_age >= self.config.variance_refresh:
            self._btb, self._btb_age = landmark_products(self._bl, v=self.factor.b), 0
        return self._btb

    def _moments(self) -> dict[str, Any]:
        """Posterior mean deviation and variances, with the trip totals' Woodbury terms."""
        mom = self._mean_terms()
        if "var" not in mom:
            var = self._factor_variances()
            if self.landmarks.shape[1]:
                var = var + self._landmark_variances()
            roads = self._changed_roads()
            if roads is not None:
                ex, keep, _, c = roads
                var = var.copy()  # (not the kept parts)
                var[ex] = keep * keep * var[ex] + c
            if mom["e"] is not None:
                var = var - (mom["e"] ** 2).sum(1)
            mom["var"] = var
        return mom

    def _mean_terms(self) -> dict[str, Any]:
        """Posterior mean deviation with the trip totals' Woodbury terms, without variances
        (what a draw, a route's total and the mean need). Kept until the next update."""
        if self._mom is not None:
            return self._mom
        self._core()
        dev = self._solve_parts(None)
        roads = self._changed_roads()
        if roads is not None:
            ex, keep, shift, _ = roads
            dev[ex] = keep * dev[ex] + shift
        mom: dict[str, Any] = {"dev": dev, "base_dev": dev, "ct": None, "e": None,
                               "slope": None}
        if self.totals:
            v, resid, noise = self._total_matrix()
            ct = self._cov_base(v)  # Σ_base Vᵀ (N × T)
            ktt = v.T @ ct + np.diag(noise)
            lk = cholesky_jitter_np(ktt, symmetrize=True, error=ModelStateError)[0]
            innov = resid - v.T @ dev
            alpha = sla.cho_solve((lk, True), innov)
            e = sla.solve_triangular(lk, ct.T, lower=True).T  # Σ_base Vᵀ L_K⁻ᵀ
            mom.update({"ct": ct, "lk": lk, "v": v, "noise": noise, "e": e, "innov": innov,
                        "dev": dev + ct @ alpha})
        if self.temp.active:
            ts = self._temperature_segments()
            info, vec = ts["info"].copy(), ts["vec"].copy()
            if mom["e"] is not None:
                # each trip total's whitened innovation and its slope Z = L_K⁻¹(Ψ − VᵀΣ_base C)
                psi = np.array(self._t_psi).reshape(-1, self.temp.m)
                z = sla.solve_triangular(mom["lk"], psi - mom["ct"].T @ ts["c"], lower=True)
                z0 = sla.solve_triangular(mom["lk"], mom["innov"], lower=True)
                info += z.T @ z
                vec += z.T @ z0
                mom["psi"] = psi
            self._set_temperature_information(info, vec)
        self._mom = mom
        return mom

    def _temperature_segments(self) -> dict[str, Any]:
        """What the per-segment readings say about the temperature coefficients' deviation
        ``δ = β − β₀``, and what a draw given ``δ`` needs (kept until the next update).

        Given ``δ`` every reading is an ordinary one with its residual moved by ``φᵀδ``: the
        posterior covariance is the one without temperatures and the mean moves linearly,
        ``μ + Mδ`` (:meth:`_slope`). Per segment the readings' mean row ``φ̄`` has precision
        ``n/ς²``; with ``C = Σφ/ς²`` (N × m, rows of driven segments) the likelihood of ``δ``,
        the latent integrated out, has information ``Σ Σφφᵀ/ς² − CᵀΣ_base C`` and vector
        ``Σ Σφr/ς² − Cᵀμ_b`` (``μ_b``: the mean at ``δ = 0`` before the totals; the readings'
        spread within a segment included); each trip total then adds its whitened
        innovation's slope (:meth:`_mean_terms`). The quadratic form
        ``CᵀΣ_base C = Cᵀ(Q+W)⁻¹C + |L_S⁻¹BᵀC|²`` and ``Cᵀμ_b = Cᵀ(Q+W)⁻¹b +
        (L_S⁻¹BᵀC)ᵀ(L_S⁻¹Bᵀb)`` need ``(Q+W)⁻¹C`` (m = 7 right-hand sides, two sweeps), one
        more sweep for ``(Q+W)⁻¹b`` and products with the driven rows only, not the mean; a
        draw given ``δ`` is the draw without temperatures with ``b − Cδ`` (no more sweeps).
        The same exact posterior as the exact learner's rank-k steps
        (:func:`~ev_nav.gp.temperature.condition_rows_t`). At changed roads ``C`` acts on
        ``F = f + h`` (:meth:`_changed_roads`): on the latent it is ``(1 − κ)C``, ``F``'s own
        shift moves by ``−κφ̄δ`` and its own noise ``c`` adds ``Σ c CCᵀ``."""
        if self._tmom is not None:
            return self._tmom
        self._core()
        term, f = self.temp, self.factor
        assert self._t_phi is not None and self._t_phiphi is not None
        assert self._t_phir is not None
        obs = np.flatnonzero(self.n_obs)
        inv_noise = 1.0 / self._noise(obs)
        c = np.zeros((self.n, term.m))  # C (F's readings)
        c[obs] = self._t_phi[obs] * inv_noise[:, None]
        cf = c.copy()  # the latent's: (1 − κ)C at changed roads (as _c_latent)
        road_shift = None
        info = np.einsum("eij,e->ij", self._t_phiphi[obs], inv_noise)
        vec = self._t_phir[obs].T @ inv_noise
        roads = self._changed_roads()
        if roads is not None:
            ex, keep, shift, var = roads
            cf[ex] *= keep[:, None]
            # F's shift κr̄ moves by −κφ̄δ = −τ²Σφ δ/(nτ² + ς²)
            road_shift = (ex, self.extra_var[ex, None] * keep[:, None]
                          / self._noise(ex)[:, None] * self._t_phi[ex])
            info -= c[ex].T @ (var[:, None] * c[ex])
            vec -= c[ex].T @ shift
        # (Q+W)⁻¹C_f: kept by the trips' halo terms (_add_readings) between full solves, which
        # took ~60 ms a trip at 100k segments (m = 7 right-hand sides, two sweeps)
        if self._ty is None or self._ty_age >= self.config.variance_refresh:
            self._ty = f.solve(cf)
            self._ty_age = 0
        y = self._ty
        m1 = f.mean_solve()
        quad = cf[obs].T @ y[obs]
        lin = cf[obs].T @ m1[obs]
        if self.landmarks.shape[1]:
            oi, go = self._oi[: self._n_oi], self._go32[: self._n_oi]
            w = f.w[oi]
            btc = landmark_products(go, v=cf[oi] - w[:, None] * y[oi])  # BᵀC_f (driven rows)
            btb = landmark_products(go, v=f.b[oi] - w * m1[oi])  # Bᵀb
            zc = sla.solve_triangular(self._ls, btc, lower=True)
            quad += zc.T @ zc
            lin += zc.T @ sla.solve_triangular(self._ls, btb, lower=True)
        self._tmom = {"c": c, "cf": cf, "y": y, "road": road_shift,
                      "info": info - 0.5 * (quad + quad.T), "vec": vec - lin}
        return self._tmom

    def _c_latent(
        self, ids: NDArray[np.int64], n_obs: NDArray[np.int64], sum_phi: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Rows ``ids`` of ``C_f``, the temperature features' coupling to the learner's latent,
        with ``n_obs`` readings of feature sum ``sum_phi``: ``Σφ/ς²``, times ``1 − κ`` at a
        changed road (see :meth:`_temperature_segments`)."""
        noise = self._noise(ids)
        return sum_phi / (noise + n_obs * self.extra_var[ids])[:, None]

    def _set_temperature_information(
        self, info: NDArray[np.float64], vec: NDArray[np.float64]
    ) -> None:
        self.temp.reset_information()
        self.temp.info = 0.5 * (info + info.T)
        self.temp.info_vec = vec

    def _slope(self) -> NDArray[np.float64]:
        """``M`` (N × m): every segment's posterior mean's slope in ``δ`` (zeros while no
        reading carried a temperature), ``−Σ_base C`` less the totals' Woodbury term: m
        columns of the posterior covariance, computed when first asked for after an update
        (a planner's posterior at a temperature; a Thompson draw does not need it)."""
        mom = self._mean_terms()
        if not self.temp.active:
            return np.zeros((self.n, self.temp.m))
        if mom.get("slope") is None:
            slope = -self._cov_base(self._temperature_segments()["c"])
            if mom["e"] is not None:
                z = sla.solve_triangular(mom["lk"], mom["psi"] + mom["v"].T @ slope, lower=True)
                slope -= mom["e"] @ z
            mom["slope"] = slope
        return mom["slope"]

    def _landmark_b(self) -> NDArray[np.float32]:
        """``B = G − (Q+W)⁻¹WG`` (N × J, float32): made by each factorisation (:meth:`_core`),
        then kept by each trip's halo update (:meth:`_add_readings`)."""
        self._core()
        assert self._bl is not None
        return self._bl

    def _factor_variances(self) -> NDArray[np.float64]:
        """``diag((Q+W)⁻¹)``, the factor's part of each segment's variance.

        First (and every ``variance_refresh`` trips) by Takahashi's recursion on the whole
        factor (:meth:`PrecisionFactor.variances`, ~2.5 s at 100k segments); in between, each
        trip's readings lower the halo's variances by the Woodbury term of the update's own
        halo solve (:meth:`_add_readings`, ~4 ms), where recomputing the Takahashi columns
        the update reaches took ~90 ms. The two agree within 1e-5 relative over 30 trips at
        100k segments (the halo's truncation and the factor's pending changes; tested)."""
        if self._var1 is None or self._var1_age >= self.config.variance_refresh:
            self._core()
            self._var1 = self.factor.variances()
            self._var1_age = 0
        return self._var1

    def _deferred_directions(self, w: NDArray[np.float64]) -> NDArray[np.float64]:
        """Of the trips' directions ``w`` (J × r, ``w wᵀ`` what they lower the landmarks'
        parts by) and those carried from earlier posteriors, the ones to apply now.

        With the carried sum D, every kept landmark part is ``b (S⁻¹ + D) bᵀ`` for its row b
        of B (S the current Schur complement). Relative to the exact ``b S⁻¹ bᵀ`` that is at
        most ``1 + λ`` with λ the largest eigenvalue of ``M = L_Sᵀ D L_S``: so M's eigenvectors
        whose eigenvalue passes ``variance_tol`` are applied (``L_S⁻ᵀ q √μ``), the rest are
        carried. Rows recomputed from B (the trips' halos) take ``b (S⁻¹ + D) bᵀ`` too
        (:meth:`_landmark_variances`), so applying a carried direction later is right for every
        row."""
        tol = self.config.variance_tol
        if tol == 0.0:
            return w
        d = w @ w.T
        if self._var2_defer is not None:
            d += self._var2_defer
        ls = self._ls
        m = ls.T @ d @ ls
        mu, q = np.linalg.eigh(0.5 * (m + m.T))
        now = mu > tol
        later = ~now & (mu > 0.0)
        v = sla.solve_triangular(ls, q[:, later] * np.sqrt(mu[later]), lower=True, trans="T")
        self._var2_defer = v @ v.T
        return sla.solve_triangular(ls, q[:, now] * np.sqrt(mu[now]), lower=True, trans="T")

    def _landmark_variances(self) -> NDArray[np.float64]:
        """``rowsum(((G − Y) L_S⁻ᵀ)²)``, the landmarks' part of each segment's variance.

        All N rows at first (N·J² flops); then each trip's rank-k change of S lowers every row
        by a Woodbury term (an N × J by J × r product over the directions that pass
        ``variance_tol``, the others carried: :meth:`_deferred_directions`), and the rows whose
        Y the trip moved (its halo) are recomputed. A full recomputation every
        ``variance_refresh`` trips keeps rounding from adding up. The Woodbury product runs in
        float32 (B is held in float32; the recomputations cast its rows to float64): a term's
        relative rounding is ~1e-7, so with every direction applied the kept variances stay
        within ~1e-5 of their recomputation over the 200 trips between refreshes (tested), at
        half the time of the product that dominates a Bayes-UCB trip."""
        b = self._landmark_b()
        if self._var2 is None or self._var2_age >= self.config.variance_refresh:
            var2 = np.empty(self.n)
            for r0 in range(0, self.n, 8192):  # in row blocks: no J × N temporaries
                c = sla.solve_triangular(self._ls, b[r0 : r0 + 8192].T.astype(np.float64),
                                         lower=True)
                var2[r0 : r0 + 8192] = np.einsum("ij,ij->j", c, c)
            self._var2 = var2
            self._var2_age = 0
            self._var2_defer = None
        else:
            if self._var2_pending:
                wp = self._deferred_directions(np.hstack(self._var2_pending)).astype(np.float32)
                # in row blocks: the N × r product would be GBs at 1M segments
                for r0 in range(0, self.n, 8 * _ROW_BLOCK):
                    # the row sums in float32 too: 5.5× faster than einsum's cast to float64
                    # (~140 ms a trip at 1M segments), ~3e-7 of each trip's drop
                    bw = b[r0 : r0 + 8 * _ROW_BLOCK] @ wp
                    self._var2[r0 : r0 + 8 * _ROW_BLOCK] -= np.einsum("ij,ij->i", bw, bw)
            if self._var2_dirty.any():
                rows = np.flatnonzero(self._var2_dirty)
                if self._var2_defer is None:  # nothing carried: b S⁻¹ bᵀ
                    c = sla.solve_triangular(self._ls, b[rows].T.astype(np.float64), lower=True)
                    self._var2[rows] = (c * c).sum(0)
                else:
                    # with what is carried, as every other row: b (S⁻¹ + D) bᵀ, by the
                    # Cholesky factor R of S⁻¹ + D (one J × J product a row, as the
                    # triangular solve above)
                    s_inv = sla.cho_solve((self._ls, True), np.eye(self._ls.shape[0]))
                    r = cholesky_jitter_np(s_inv + self._var2_defer, ladder=(0.0,),
                                           symmetrize=True, error=ModelStateError)[0]
                    c = b[rows].astype(np.float64) @ r
                    self._var2[rows] = np.einsum("ij,ij->i", c, c)
        self._var2_pending = []
        self._var2_dirty[:] = False
        return self._var2

    def _cov_base(self, v: NDArray[np.float64]) -> NDArray[np.float64]:
        """``Σ_base V`` for V (N × k): ``(Q+W)⁻¹V + B S⁻¹ BᵀV`` with ``B = G − (Q+W)⁻¹WG``.

        k solves and two products with the kept B (made by each factorisation, see
        :meth:`_core`). At changed roads, the covariance of ``F = f + h``
        (:meth:`_changed_roads`)."""
        roads = self._changed_roads()
        if roads is None:
            return self._cov_f(v)
        ex, keep, _, c = roads
        vk = v.copy()
        vk[ex] *= keep[:, None]
        out = self._cov_f(vk)
        out[ex] *= keep[:, None]
        out[ex] += c[:, None] * v[ex]
        return out

    def _cov_f(self, v: NDArray[np.float64]) -> NDArray[np.float64]:
        """``Σ_f V`` of the learner's latent (:meth:`_cov_base` without the changed roads)."""
        self._core()
        x = self.factor.solve(v)
        if not self.landmarks.shape[1]:
            return x
        bl = self._landmark_b()
        btv = landmark_products(bl, v=v)
        return x + landmark_products(bl, c=sla.cho_solve((self._ls, True), btv))

    def _total_matrix(self) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """The totals as rows V (N × T, column per total), residual totals and noise variances."""
        t = len(self.totals)
        v = np.zeros((self.n, t))
        resid = np.empty(t)
        noise = np.empty(t)
        for k, (u, h, total) in enumerate(self.totals):
            v[u, k] = h
            resid[k] = total - h @ self.prior_mean[u]
            if self.temp.active:  # the prior coefficients' share (the factor's b holds it too)
                resid[k] -= float(self._t_psi[k] @ self.temp.beta0)
            noise[k] = float(h @ self._noise(u))
        return v, resid, noise

    # ------------------------------------------------------------------ predictions
    def posterior(self, temperature: TemperatureArg = None) -> SegmentPosterior:
        """Posterior mean and std of every segment's expected energy [Wh], with a joint draw,
        on a trip at ``temperature`` [°C] (None: without temperature terms, the reference
        conditions; see :mod:`ev_nav.gp.temperature`)."""
        if temperature is None and not self.temp.active:
            if self._post is None:
                mom = self._moments()
                std = np.sqrt(np.clip(mom["var"], 0.0, None))
                mean = self.prior_mean + mom["dev"]
                self._post = SegmentPosterior(mean=mean, std=std, noise_std=self.noise_std,
                                              joint_draw=self._joint_draw(mean, std, None))
            return self._post
        t = None if temperature is None else float(check_temperature(temperature))
        if self._post_t is None or self._post_t[0] != t:
            mom = self._moments()
            mean, var = self.temp.marginals(self.prior_mean + mom["dev"], mom["var"],
                                            self._slope(), t)
            std = np.sqrt(np.clip(var, 0.0, None))
            self._post_t = (t, SegmentPosterior(mean=mean, std=std, noise_std=self.noise_std,
                                                joint_draw=self._joint_draw(mean, std, t)))
        return self._post_t[1]

    def posterior_mean(self, temperature: TemperatureArg = None) -> NDArray[np.float64]:
        """Every segment's posterior mean [Wh] (at ``temperature`` [°C]) without the variances
        (three sweeps, and m more solves once temperatures were seen)."""
        mean = self.prior_mean + self._mean_terms()["dev"]
        if temperature is None and not self.temp.active:
            return mean
        t = None if temperature is None else float(check_temperature(temperature))
        m, _ = self.temp.coefficients()
        phi = self.temp.features(np.arange(self.n), t)
        return mean + self._slope() @ m + phi @ (self.temp.beta0 + m)

    def _joint_draw(
        self, mean: NDArray[np.float64], std: NDArray[np.float64], temperature: float | None
    ) -> Callable[[np.random.Generator], NDArray[np.float64]]:
        mom = self._moments()

        def draw(rng: np.random.Generator) -> NDArray[np.float64]:
            if self._mom is not mom:
                raise ModelStateError("a joint draw from a posterior the model has updated since")
            dev = self.sample(rng, temperature) - mean
            return dev / np.where(std > 0, std, 1.0) * (std > 0)

        return draw

    def sample(
        self, rng: np.random.Generator, temperature: TemperatureArg = None
    ) -> NDArray[np.float64]:
        """One joint posterior draw of every segment's expected energy [Wh] on a trip at
        ``temperature`` [°C]: three sweeps of the factor, no variances (what a
        Thompson-sampling trip needs). Draws ``rng.standard_normal(N + J)``, then, once
        temperatures were seen or one is given, one normal per temperature coefficient (the
        coefficients are drawn first and the latent given them: the same sweeps with the
        readings' residuals moved), then one per changed road and one per trip total."""
        t = None if temperature is None else float(check_temperature(temperature))
        g = self.landmarks
        e = rng.standard_normal(self.n + g.shape[1])
        delta = shift = ts = None
        mom = self._mean_terms() if self.totals else None
        if self.temp.active:
            ts = self._temperature_segments()
            if mom is None:  # (with totals, _mean_terms set the information)
                self._set_temperature_information(ts["info"], ts["vec"])
        if t is not None or self.temp.active:
            m, _ = self.temp.coefficients()
            delta = m + self.temp.draw(rng)
            if ts is not None:
                shift = (ts["cf"] @ delta, ts["y"] @ delta)
        dev = self._solve_parts((e[: self.n], e[self.n:]), shift)
        roads = self._changed_roads()
        if roads is not None:
            ex, keep, road_mean, c = roads
            dev[ex] = keep * dev[ex] + road_mean + np.sqrt(c) * rng.standard_normal(ex.size)
            if ts is not None and ts["road"] is not None:
                dev[ex] -= ts["road"][1] @ delta
        f = self.prior_mean + dev
        if self.totals and mom is not None:  # Matheron's rule: condition the draw on the totals
            base_dev = f - self.prior_mean - mom["base_dev"]
            eps = rng.standard_normal(mom["noise"].size) * np.sqrt(mom["noise"])
            if shift is not None:  # the totals' residuals given δ
                eps = eps + mom["psi"] @ delta
            fix = mom["ct"] @ sla.cho_solve((mom["lk"], True), mom["v"].T @ base_dev + eps)
            f = self.prior_mean + mom["dev"] + base_dev - fix
        if delta is not None:
            f = f + self.temp.features(np.arange(self.n), t) @ (self.temp.beta0 + delta)
        return f

    def route_covariance(
        self, segment_ids: ArrayLike, temperature: TemperatureArg = None
    ) -> NDArray[np.float64]:
        """Joint posterior covariance [Wh²] of the latent energies of ``segment_ids`` (on a trip
        at ``temperature`` [°C])."""
        ids = validate_segment_ids(segment_ids, self.n)
        t = None if temperature is None else float(check_temperature(temperature))
        e = np.zeros((self.n, ids.size))
        e[ids, np.arange(ids.size)] = 1.0
        if self.totals or self.extra_var.any():
            mom = self._mean_terms()
            cov = self._cov_base(e)[ids]
            if mom["e"] is not None:
                ei = mom["e"][ids]
                cov = cov - ei @ ei.T
        else:  # k solves: B's rows at ids in float64, G_ids − ((Q+W)⁻¹E_ids)ᵀWG
            self._core()
            f = self.factor
            x = f.solve(e)
            cov = x[ids]
            g = self.landmarks
            if g.shape[1]:
                obs = np.flatnonzero(f.w)
                b = g[ids] - x[obs].T @ (f.w[obs, None] * g[obs])
                cov = cov + b @ sla.cho_solve((self._ls, True), b.T)
        if t is not None or self.temp.active:
            cov = self.temp.route_covariance(ids, cov, self._slope(), t)
        return 0.5 * (cov + cov.T)

    def predict_sum(
        self,
        segment_ids: ArrayLike,
        weights: ArrayLike | None = None,
        temperature: TemperatureArg = None,
    ) -> tuple[float, float]:
        """Mean [Wh] and variance [Wh²] of ``Σ weights_i·f(segment_ids_i)`` (noise not included)
        on a trip at ``temperature`` [°C]."""
        validate_segment_ids(segment_ids, self.n)
        t = None if temperature is None else float(check_temperature(temperature))
        u, h = combine_weights(segment_ids, weights)
        mom = self._mean_terms()
        # hᵀΣh from one column: Σ_base h minus the totals' term (no k × k covariance needed)
        v = np.zeros((self.n, 1))
        v[u, 0] = h
        var = float(h @ self._cov_base(v)[u, 0])
        if mom["e"] is not None:
            eh = mom["e"][u].T @ h
            var -= float(eh @ eh)
        mean = float(h @ (self.prior_mean[u] + mom["dev"][u]))
        if t is not None or self.temp.active:
            mean, var = self.temp.sum_moments(u, h, mean, var, self._slope(), t)
        return mean, max(var, 0.0)

    def noise_variance(self, segment_ids: ArrayLike, weights: ArrayLike | None = None) -> float:
        """Noise variance [Wh²] of an observed ``Σ weights·y(segment_ids)``: ``ς² Σ w_e s_e``."""
        u, h = combine_weights(segment_ids, weights)
        return float(h @ self._noise(u))

    def noise_variances(self, segment_ids: ArrayLike) -> NDArray[np.float64]:
        """Noise variance [Wh²] of one reading of each listed segment: ``ς² s_e``."""
        return self._noise(np.asarray(segment_ids, dtype=np.int64))

    # ------------------------------------------------------------------ checkpoints
    def _config_dict(self) -> dict[str, Any]:
        return asdict(self.config)

    def state_dict(self) -> dict[str, Any]:
        """The learner's data, settings, hyperparameters and fit schedule (plain arrays and
        numbers, no pickles). The prior is rebuilt from them on load (deterministic, or read
        from the state's cache), so a restored model's posterior is bit-identical."""
        state: dict[str, Any] = {
            "kind": CHECKPOINT_KIND,
            "version": STATE_VERSION,
            "network_hash": self.net.content_hash,
            "n_segments": self.n,
            "config": self._config_dict(),
            "hyperparameters": self.hyperparameters(),
            "prior_hyperparameters": {k: list(v) if isinstance(v, list) else v
                                      for k, v in self.prior_hyper.items()},
            "seed": self.seed,
            "n_updates": self.n_updates,
            "next_refresh": self.next_refresh,
            "fits": [dict(f) for f in self.fits],
            "rng": self.rng.bit_generator.state,
            "n_obs": self.n_obs.copy(),
            "sum_r": self.sum_r.copy(),
            "sum_r2": self.sum_r2.copy(),
            "totals": [(u.copy(), h.copy(), t) for u, h, t in self.totals],
            "extra_var": self.extra_var.copy(),
        }
        if self.temp.active:  # only then: a learner without temperatures saves what it did
            assert self._t_phi is not None and self._t_phiphi is not None
            assert self._t_phir is not None
            state["temperature"] = {
                "climate": self.temp.state(),
                "phi": self._t_phi.copy(), "phiphi": self._t_phiphi.copy(),
                "phir": self._t_phir.copy(),
                "psi": np.array(self._t_psi, dtype=np.float64).reshape(-1, self.temp.m),
            }
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> RegionalGP:
        """Restore :meth:`state_dict` (same network, prior settings and seed). The checkpoint's
        hyperparameters and fit schedule are adopted (the prior is rebuilt at fitted values,
        or read from the cache); a version-1 checkpoint (written before the learner fitted)
        keeps its fixed hyperparameters: ``learn_hyperparameters`` is off for it."""
        version = state.get("version")
        check_model_header(state, kind=CHECKPOINT_KIND,
                           version=version if version in (1, 2) else STATE_VERSION,
                           what="a regional learner's", n_segments=self.n,
                           network_hash=self.net.content_hash)
        saved = dict(state.get("config") or {})
        if version == 1:
            saved.setdefault("learn_hyperparameters", False)
        mine = self._config_dict()
        shaping = [k for k in mine if k not in _KEPT_FIELDS + _BOOKKEEPING_FIELDS]
        if any(saved.get(k) != mine[k] for k in shaping) or state.get("seed") != self.seed:
            raise ModelStateError("the checkpoint was written with other regional settings")
        try:
            config = replace(self.config, **{k: saved[k] for k in _KEPT_FIELDS if k in saved})
        except (TypeError, ConfigError) as exc:
            raise ModelStateError(f"the checkpoint's fit settings are not valid: {exc}") from None
        n_obs = np.asarray(state["n_obs"], dtype=np.int64)
        if n_obs.shape != (self.n,) or np.any(n_obs < 0):
            raise ModelStateError("the checkpoint's reading counts do not fit this network")
        hyper = _plain_hyper(state.get("hyperparameters"), self.hyper)
        prior_hyper = _plain_hyper(state.get("prior_hyperparameters", hyper), self.hyper)
        self.config = config
        self.prior_hyper = prior_hyper
        if hyper != self.hyper:
            self.hyper = hyper
            self.noise_var = float(hyper["noise_var"])
            self._parts = None  # built at these values when first needed
        if self._parts is not None:
            self._parts.factor.tol = config.factor_tol  # the checkpoint's (kept, above)
        self._reset_data()
        self.n_obs = n_obs.copy()
        self.sum_r = np.asarray(state["sum_r"], dtype=np.float64).copy()
        self.sum_r2 = np.asarray(state["sum_r2"], dtype=np.float64).copy()
        self.totals = [stored_total(t) for t in state["totals"]]
        self._load_changes_and_temperature(state)
        self.n_updates = int(state["n_updates"])
        if version == 1:
            self.next_refresh, self.fits = config.first_fit, []
            self.rng = np.random.default_rng(self.seed)
        else:
            self.next_refresh = int(state["next_refresh"])
            self.fits = [dict(f) for f in state["fits"]]
            self.rng = np.random.default_rng(self.seed)
            self.rng.bit_generator.state = state["rng"]
        self.refit_due = False
        return self

    def _load_changes_and_temperature(self, state: Mapping[str, Any]) -> None:
        """A version-3 state's extra variances and temperature statistics (an older state has
        neither: no road changed, no reading carried a temperature)."""
        n, m = self.n, self.temp.m
        extra = np.asarray(state.get("extra_var", np.zeros(n)), dtype=np.float64)
        if extra.shape != (n,) or not np.all(np.isfinite(extra)) or np.any(extra < 0):
            raise ModelStateError("the checkpoint's extra variances do not fit this network")
        self.extra_var = extra.copy()
        temp = state.get("temperature")
        if temp is None:
            return
        if not isinstance(temp, Mapping):
            raise ModelStateError("damaged regional checkpoint: temperature statistics")
        self.temp.check_state(temp.get("climate") or {})
        arrays = {k: np.asarray(temp.get(k), dtype=np.float64)
                  for k in ("phi", "phiphi", "phir", "psi")}
        shapes = {"phi": (n, m), "phiphi": (n, m, m), "phir": (n, m),
                  "psi": (len(self.totals), m)}
        if any(arrays[k].shape != shapes[k] or not np.all(np.isfinite(arrays[k]))
               for k in shapes):
            raise ModelStateError("damaged regional checkpoint: temperature statistics")
        self._activate_temperature()
        self._t_phi, self._t_phiphi = arrays["phi"].copy(), arrays["phiphi"].copy()
        self._t_phir = arrays["phir"].copy()
        self._t_psi = [row.copy() for row in arrays["psi"]]


def _plain_hyper(stored: object, like: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's hyperparameters as plain floats (lists for the lengthscales), checked
    against the names and shapes of ``like``."""
    if not isinstance(stored, Mapping) or set(stored) != set(like):
        raise ModelStateError("the checkpoint's hyperparameters are not a regional learner's")
    out: dict[str, Any] = {}
    for k, ref in like.items():
        v = stored[k]
        if isinstance(ref, list):
            vals = [float(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else []
            if len(vals) != len(ref):
                raise ModelStateError(f"the checkpoint's {k} does not fit this network")
            out[k] = vals
        else:
            out[k] = float(v)
        if not all(math.isfinite(x) and x > 0 for x in np.atleast_1d(out[k])):
            raise ModelStateError(f"the checkpoint's {k} is not positive")
    return out


#: Layout version of the prior's cache files (part of their key: a change rebuilds them).
PRIOR_CACHE_VERSION = 3  # 3: the landmarks built and held in float32


def _read_prior(
    cache: StateCache | None, key: str, n: int
) -> tuple[VecchiaPrior, NDArray[np.float32], NDArray[np.int64], NDArray[np.float64]] | None:
    """The prior of ``key`` from a state's cache (three verified files: sizes, integers,
    floats) with the prior precision on the factor's pattern, or None when missing or
    refused."""
    if cache is None:
        return None
    meta = cache.read_array(f"regionalmeta-{key}.npy", (3,), np.int64)
    if meta is None or int(meta[0]) != n or min(int(meta[1]), int(meta[2])) < 0:
        return None
    nnz, j = int(meta[1]), int(meta[2])
    ints = cache.read_array(f"regionalint-{key}.npy", (2 * n + 1 + nnz + j,), np.int64)
    floats = cache.read_array(f"regionalfloat-{key}.npy", (2 * nnz + n + n * j,), np.float64)
    if ints is None or floats is None:
        return None
    indptr, indices = ints[: n + 1], ints[n + 1 : n + 1 + nnz]
    rank, ids = ints[n + 1 + nnz : 2 * n + 1 + nnz], ints[2 * n + 1 + nnz :]
    if indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0) or (
        nnz and (indices.min() < 0 or indices.max() >= n)
    ) or not np.array_equal(np.sort(rank), np.arange(n)):
        return None  # verified bytes of another layout: rebuild rather than trust them
    a = sp.csr_matrix((floats[:nnz].copy(), indices.copy(), indptr.copy()), shape=(n, n))
    prior = VecchiaPrior(a, floats[nnz : nnz + n].copy(), rank.copy())
    g = floats[nnz + n : nnz + n + n * j].reshape(n, j).astype(np.float32)
    return prior, g, ids.copy(), floats[nnz + n + n * j :].copy()


def _write_prior(
    cache: StateCache,
    key: str,
    prior: VecchiaPrior,
    landmarks: NDArray[np.float32],
    landmark_ids: NDArray[np.int64],
    q_values: NDArray[np.float64],
) -> None:
    """Store the prior of ``key`` and its precision on the factor's pattern (floats and
    integers first, the sizes last: a reader finds the sizes only once both others are in
    place); the newest two priors are kept."""
    a = prior.a_matrix
    ints = np.concatenate([a.indptr, a.indices, prior.rank, landmark_ids]).astype(np.int64)
    floats = np.concatenate([a.data, prior.d, landmarks.ravel(), q_values]).astype(np.float64)
    cache.write_array(f"regionalint-{key}.npy", ints, keep=2)
    cache.write_array(f"regionalfloat-{key}.npy", floats, keep=2)
    meta = np.array([prior.n, a.nnz, landmarks.shape[1]], dtype=np.int64)
    cache.write_array(f"regionalmeta-{key}.npy", meta, keep=2)
