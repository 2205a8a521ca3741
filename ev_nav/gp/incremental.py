"""Exact GP over road segments, updated incrementally: the product's learner.

Model (spec §5.2): ``f(e) = E_det(e) + g(e)``, ``g ~ GP(0, k)`` with the composite
:class:`~ev_nav.gp.kernels.SegmentKernel`; a driven segment is observed as ``f(e) + N(0, ς²)``
and a trip computer's total as ``Σ f(e) + N(0, K ς²)`` over the K segments of the trip.

Why an exact GP is affordable
-----------------------------
Segment context is static, so all observations of one segment collapse to sufficient statistics
(count ``n_e``, sum and sum of squares of the residuals ``y − E_det``). Given the data, the
posterior is a GP regression on the *support* S — the D distinct segments that any observation
touched — with noise ``ς²/n_e`` per segment; D grows with the distinct roads driven (a few
hundred to a few thousand on the paper routes), not with the number of trips.

Representation
--------------
The learner keeps the posterior mean ``μ`` and the full posterior covariance ``Σ`` of all N
segments (lower triangle, column-major). A trip observing segments T (counts ``c``, means ``ȳ``)
is the exact Bayesian update: with ``M = Σ[T, T] + diag(ς²/c) = L Lᵀ`` and
``W = L⁻¹ Σ[T, :]``, ``Σ ← Σ − WᵀW`` (one BLAS SYRK, N²k flops) and
``μ ← μ + Wᵀ L⁻¹(ȳ − μ_T)``; a trip total is the same with k = 1. Nothing is refactorised
between hyperparameter changes.

Why not only the D columns ``Σ[:, S]``: a segment x joining S would then need
``Σ[:, x] = K[:, x] − Σ[:, S] Q K[S, x]`` (Q the data precision on S), which feeds the rounding
errors of the stored columns back through ``Q``; measured on Luxembourg the error grew from
3e-13 to 0.15 in seven trips (docs/gp.md). The full covariance needs no such step, at the price
of N² memory: networks beyond :data:`MAX_EXACT_SEGMENTS` use the regional learner
(:mod:`ev_nav.gp.regional`).

A *refresh* recomputes ``Σ`` and ``μ`` from the sufficient statistics (``O(N²·D)``): after
each hyperparameter fit, which happens on a schedule (the ``first_fit``-th update, then every time
the number of updates has grown by ``fit_growth``, at least every ``fit_max_gap`` updates), so its
cost is amortised over the trips between fits. Hyperparameters (κ, both feature lengthscales,
both outputscales, ς²) are fitted by maximising the exact marginal likelihood of the sufficient
statistics (type-II MAP: weak log-normal priors centred on the initial values keep early fits on
a handful of trips from running off), with L-BFGS and autograd through the Cholesky factor.

Checkpoints
-----------
:meth:`IncrementalGP.state_dict` holds the hyperparameters, the sufficient statistics at the last
refresh and the observations since (plain arrays; no pickle, no covariance matrix). Loading
refreshes from those statistics and replays the observations since, the same computations in the
same order, so a restored model's posterior is bit-identical to the one that was saved. Saving
also caches that posterior (``cache/posterior-<key>.npy``, keyed by the checkpoint's content), and
loading reads it instead of recomputing; so does planning, without this module and torch:
:class:`~ev_nav.gp.incremental_state.ExactPosterior` (the torch-free half of the learner lives
in :mod:`ev_nav.gp.incremental_state`).
"""

from __future__ import annotations

import copy
import hashlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from torch import Tensor

from ev_nav.checkpoints import check_model_header
from ev_nav.energy import ClimateModel, Vehicle, check_temperature
from ev_nav.errors import ConfigError, ModelStateError
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
    row_combination,
    within_scatter,
)
from ev_nav.gp.incremental_state import (
    CACHE_KEEP,
    CHECKPOINT_KIND,
    MAX_EXACT_SEGMENTS,
    SAMPLE_JITTERS,
    STATE_VERSION,
    ExactPosterior,
    IncrementalConfig,
    batch_rows,
    cholesky,
    condition_rows,
    condition_segments,
    condition_total,
    marginal_std,
    posterior_key,
    posterior_name,
    predict_sum,
    read_matrix,
    read_posterior,
    route_covariance,
    segment_noise,
    segment_residuals,
    stored_log_entry,
    sym_rows,
    syrk_down,
    total_noise,
    uncondition_segments,
    write_matrix,
)
from ev_nav.gp.kernels import DTYPE, GraphMaternKernel, SegmentKernel
from ev_nav.gp.lapack import trtrs_lower
from ev_nav.gp.posterior import (
    SegmentPosterior,
    TemperatureArg,
    combine_weights,
    stored_total,
    validate_observations,
    validate_reset,
    validate_total,
)
from ev_nav.gp.prior import learner_prior
from ev_nav.gp.temperature import TemperatureTerm, condition_rows_t, within_information
from ev_nav.roads.network import RoadNetwork

if TYPE_CHECKING:
    from ev_nav.store.state_cache import StateCache

__all__ = ["CACHE_KEEP", "MAX_EXACT_SEGMENTS", "IncrementalConfig", "IncrementalGP"]


class IncrementalGP:
    """Exact GP posterior over all segments, updated by rank-k corrections.

    Implements the :class:`~ev_nav.gp.posterior.SegmentModel` protocol.

    Parameters
    ----------
    net : RoadNetwork
    vehicle : Vehicle, optional
        Vehicle of the prior mean E_det.
    config : IncrementalConfig, optional
    seed : int
        Seed of the generator that picks the marginal likelihood's rows when there are more
        than ``fit_max_rows``.
    cache : StateCache, optional
        A state's cache folder for the prior kernel matrix of the current hyperparameters
        (``prior-<hash>.npy``, keyed by the network's content hash and the exact hyperparameter
        values) and the posterior of a checkpoint (:meth:`cache_posterior`): a process that
        restores the model (every ``route``/``observe`` command) reads them instead of solving
        and evaluating the kernel again. A file is used only if its bytes match the checksum
        the state's store recorded when it was written; a missing, foreign, tampered or
        damaged one is recomputed, and at most :data:`CACHE_KEEP` files of a kind are kept.
    climate : ClimateModel, optional
        The physics prior of the temperature coefficients (:mod:`ev_nav.gp.temperature`); used
        once a reading carries an ambient temperature.
    """

    #: The ``kind`` its checkpoints carry.
    checkpoint_kind = CHECKPOINT_KIND

    def __init__(
        self,
        net: RoadNetwork,
        vehicle: Vehicle | None = None,
        config: IncrementalConfig | None = None,
        seed: int = 0,
        cache: StateCache | None = None,
        climate: ClimateModel | None = None,
    ) -> None:
        self.config = cfg = config or IncrementalConfig()
        if net.n_segments > MAX_EXACT_SEGMENTS:
            raise ConfigError(
                f"the exact learner keeps an N × N covariance and takes networks of up to "
                f"{MAX_EXACT_SEGMENTS:,} segments ({net.n_segments:,} given); use the "
                "regional learner (RegionalGP, learner='regional') for larger ones"
            )
        self.net = net
        self.n = net.n_segments
        self.seed = int(seed)
        self.cache = cache
        #: a_e [Wh] (None: uniform): the prior covariance is a_e a_e' k(e, e') and the noise
        #: variance ς² a_e²
        self.scale: NDArray[np.float64] | None
        prior, self.scale = learner_prior(net, vehicle, cfg.segment_scale, cfg.lengthscale)
        #: each segment's noise variance in units of ς² (None: 1 everywhere)
        self.noise_scale = None if self.scale is None else self.scale**2
        s0 = prior.outputscale if cfg.outputscale is None else cfg.outputscale
        noise = prior.noise_var if cfg.noise_var is None else cfg.noise_var
        graph = GraphMaternKernel(
            net, nu=cfg.graph_nu, kappa=cfg.graph_kappa, mode=cfg.kernel_mode, learn_nu=False
        )
        self.kernel = SegmentKernel(
            graph,
            net.features,
            lengthscale=cfg.lengthscale,
            product_scale=s0 * prior.graph_share,
            feature_scale=s0 * (1 - prior.graph_share),
        )
        for p in self.kernel.parameters():
            p.requires_grad_(False)
        self.noise_var = float(noise)
        self._prior_log = self._log_hyper()  # centres of the hyperparameter priors
        self.prior_mean = net.e_det(vehicle).astype(np.float64)
        #: the temperature coefficients (inactive until a reading carries a temperature)
        self.temp = TemperatureTerm(net, self.prior_mean, climate)
        self.rng = np.random.default_rng(self.seed)
        self.n_updates = 0
        self.next_refresh = cfg.first_fit
        self.fits: list[dict[str, Any]] = []
        #: Runtime setting, not saved: when true, an update that reaches the schedule's next
        #: refresh does not fit and refresh itself but sets :attr:`refit_due`, and whoever owns
        #: the model calls :meth:`refit` (the server refits a copy in a background thread, so
        #: absorbing observations never waits for a fit).
        self.defer_refits = False
        #: A deferred refit is due (see :attr:`defer_refits`).
        self.refit_due = False
        #: Σ and μ are shared with a :meth:`frozen_posterior` view: copy before changing them
        self._shared = False
        self._reset_data()
        self._base = self._snapshot()
        self._log: list[tuple[str, NDArray[np.int64], NDArray[np.float64]]] = []
        self._post: SegmentPosterior | None = None

    # ------------------------------------------------------------------ data
    def _reset_data(self) -> None:
        n = self.n
        self.n_obs = np.zeros(n, dtype=np.int64)
        self.sum_r = np.zeros(n, dtype=np.float64)  # Σ (y − E_det) per segment
        self.sum_r2 = np.zeros(n, dtype=np.float64)  # Σ (y − E_det)² per segment
        # trip totals as (distinct segment ids, weights, total [Wh]): the observed sum is
        # Σ weights·f(ids) (a weight counts repeats and partly driven end segments)
        self.totals: list[tuple[NDArray[np.int64], NDArray[np.float64], float]] = []
        self._in_support = np.zeros(n, dtype=bool)
        self.support = np.empty(0, dtype=np.int64)
        #: per-segment variance [Wh²] added to the prior's diagonal where a change of the road
        #: was detected (``reset_segments``): the changed road is no longer what its neighbours
        #: and features suggest, by about one prior standard deviation
        self.extra_var = np.zeros(n, dtype=np.float64)
        self._cov: NDArray[np.float64] | None = None  # built by the first refresh
        self._mean = self.prior_mean.copy()
        # temperature (mod:`ev_nav.gp.temperature`): off until a reading carries one
        self.temp.active = False
        self.temp.reset_information()
        #: M: the posterior mean's slope in the temperature coefficients (N × m), when active
        self.slope: NDArray[np.float64] | None = None
        self._t_phi = self._t_phiphi = self._t_phir = None  # per-segment Σφ, Σφφᵀ, Σφr
        self._t_psi: list[NDArray[np.float64]] = []  # each total's Σ h φ

    def _activate_temperature(self, log: bool = True) -> None:
        """Start carrying the temperature coefficients (the first reading with a temperature):
        everything observed so far had none, so the slope and the information start at 0."""
        if self.temp.active:
            return
        n, m = self.n, self.temp.m
        self._t_phi, self._t_phiphi, self._t_phir, self._t_psi = self.temp.start(
            n, len(self.totals))
        self.slope = None if self._cov is None else np.zeros((n, m))
        self._post = None
        if log:
            self._log.append(("act", np.empty(0, np.int64), np.empty(0)))

    def _snapshot(self) -> dict[str, Any]:
        snap = {
            "n_obs": self.n_obs.copy(),
            "sum_r": self.sum_r.copy(),
            "sum_r2": self.sum_r2.copy(),
            "support": self.support.copy(),
            "n_totals": len(self.totals),
            "extra_var": self.extra_var.copy(),
        }
        if self.temp.active:
            snap["temperature"] = {
                "phi": self._t_phi.copy(),
                "phiphi": self._t_phiphi.copy(),
                "phir": self._t_phir.copy(),
                "psi": np.array(self._t_psi, dtype=np.float64).reshape(-1, self.temp.m),
            }
        return snap

    # ------------------------------------------------------------------ protocol
    @property
    def noise_std(self) -> float:
        """Current observation-noise standard deviation ς [Wh]."""
        return math.sqrt(self.noise_var)

    @property
    def n_support(self) -> int:
        """D, the number of distinct segments that observations touched."""
        return int(self.support.size)

    def posterior(self, temperature: TemperatureArg = None) -> SegmentPosterior:
        """Exact posterior mean and std of every segment's expected energy [Wh] (cached), on a
        trip at ``temperature`` [°C] (None: without temperature terms, the reference
        conditions; see :mod:`ev_nav.gp.temperature`)."""
        if temperature is not None or self.temp.active:
            return self._posterior_at(temperature)
        if self._post is None:
            cov = self._covariance()
            std = marginal_std(cov)
            self._post = SegmentPosterior(
                mean=self._mean.copy(),
                std=std,
                noise_std=self.noise_std,
                joint_draw=self._joint_draw(std),
            )
        return self._post

    def _joint_draw(
        self, std: NDArray[np.float64]
    ) -> Callable[[np.random.Generator], NDArray[np.float64]]:
        """The posterior's ``joint_draw``: ``z = L ε / σ`` with ``LLᵀ = Σ`` and one
        ``rng.standard_normal(N)`` draw ``ε`` (so it takes from the generator what an independent
        draw takes). ``L`` is factorised on the first draw (O(N³/3), once per posterior) and
        read from the covariance as it is then: a draw from a posterior the model has since
        updated is refused. A tiny relative jitter (from 1e-10 of the mean variance) is added
        only where LAPACK finds the covariance singular to working precision."""
        factor: list[NDArray[np.float64]] = []

        def draw(rng: np.random.Generator) -> NDArray[np.float64]:
            # every change of the model drops its cached posterior (and with it this closure)
            if self._post is None or self._post.joint_draw is not draw:
                raise ModelStateError("a joint draw from a posterior the model has updated since")
            if not factor:
                factor.append(cholesky(self._covariance(), ladder=SAMPLE_JITTERS))
            eps = rng.standard_normal(std.shape[0])
            with np.errstate(divide="ignore", invalid="ignore"):
                z = (factor[0] @ eps) / std
            return np.where(std > 0, z, 0.0)

        return draw

    def _posterior_at(self, temperature: TemperatureArg) -> SegmentPosterior:
        """The marginals at ``temperature`` (:meth:`TemperatureTerm.marginals
        <ev_nav.gp.temperature.TemperatureTerm.marginals>`), with a joint draw that adds a draw
        of the coefficients to the conditional one."""
        t = None if temperature is None else float(check_temperature(temperature))
        cov = self._covariance()
        slope = self.slope if self.slope is not None else np.zeros((self.n, self.temp.m))
        mean, var = self.temp.marginals(self._mean, np.clip(np.diagonal(cov), 0.0, None),
                                        slope, t)
        std = np.sqrt(np.clip(var, 0.0, None))
        if self._post is None:  # the conditional posterior: its draw and the update guard
            self._post = SegmentPosterior(
                mean=self._mean.copy(), std=marginal_std(cov), noise_std=self.noise_std,
                joint_draw=self._joint_draw(marginal_std(cov)),
            )
        base = self._post
        a = slope + self.temp.features(np.arange(self.n), t)

        def draw(rng: np.random.Generator) -> NDArray[np.float64]:
            if self._post is not base:
                raise ModelStateError("a joint draw from a posterior the model has updated since")
            dev = base.joint_scores(rng) * base.std + a @ self.temp.draw(rng)
            with np.errstate(divide="ignore", invalid="ignore"):
                z = dev / std
            return np.where(std > 0, z, 0.0)

        return SegmentPosterior(mean=mean, std=std, noise_std=self.noise_std, joint_draw=draw)

    def update(
        self, segment_ids: ArrayLike, energies: ArrayLike, temperature: TemperatureArg = None
    ) -> None:
        """Learn from one observation per listed segment (repeats allowed) [Wh], made at
        ``temperature`` [°C] (one value, or one per reading; None: not recorded)."""
        ids, y = validate_observations(segment_ids, energies, self.n)
        if ids.size == 0:
            return
        if temperature is None and not self.temp.active:
            self._log.append(("seg", ids.copy(), y.copy()))
            self._apply_segments(ids, y)
            self._after_update()
            return
        temps = None if temperature is None else check_temperature(temperature, ids.size)
        self._activate_temperature()
        if temps is None:
            self._log.append(("seg", ids.copy(), y.copy()))
        else:
            self._log.append(("sgt", ids.copy(), np.concatenate([y, temps])))
        self._apply_segments(ids, y, temps=temps)
        self._after_update()

    def update_total(
        self,
        segment_ids: ArrayLike,
        total_energy: float,
        weights: ArrayLike | None = None,
        temperature: TemperatureArg = None,
    ) -> None:
        """Learn from the total energy [Wh] of driving the listed segments.

        ``weights`` (default 1 each) is the share of each listed segment driven: a partly
        driven first or last segment of a trip counts with its fraction (see
        :func:`~ev_nav.gp.posterior.validate_total`). ``temperature``: the trip's ambient
        temperature [°C] (None: not recorded).
        """
        u, h, total = validate_total(segment_ids, total_energy, self.n, weights)
        if temperature is None:
            self._log.append(("tot", u.copy(), np.concatenate([[total], h])))
            self._apply_total(u, h, total)
        else:
            t = float(check_temperature(temperature))
            self._activate_temperature()
            self._log.append(("ttt", u.copy(), np.concatenate([[total, t], h])))
            self._apply_total(u, h, total, temp=t)
        self._after_update()

    def absorb(
        self,
        segments: Sequence[tuple[ArrayLike, ArrayLike]],
        totals: Sequence[tuple[ArrayLike, float, ArrayLike | None]],
    ) -> None:
        """Learn from many observation batches at once: per-segment batches
        ``(ids, energies)`` and trip totals ``(ids, total, weights)``.

        The posterior is the same as after :meth:`update` / :meth:`update_total` on each batch
        in turn (exact Bayes), computed as one rank-k update
        (:func:`~ev_nav.gp.incremental_state.condition_rows`): what a server's writer or a
        command that catches up with a backlog needs. The schedule counts one update per batch,
        so hyperparameters are refitted (at most once, at the end) after as many absorbed
        batches as if they had come one by one. Each batch enters the replay log as it would.
        """
        if self.temp.active or any(len(b) > 2 for b in segments) or any(
            len(b) > 3 for b in totals
        ):
            self._absorb_in_turn(segments, totals)
            return
        seg = [validate_observations(i, y, self.n) for i, y in segments]
        seg = [(i, y) for i, y in seg if i.size]
        tot = [validate_total(i, t, self.n, w) for i, t, w in totals]
        if not seg and not tot:
            return
        # first: building Σ (the first refresh) also sets the mean, from the statistics as
        # they are before these batches
        self._covariance()
        self._own_arrays()
        cov = self._cov
        for ids, y in seg:
            self._log.append(("seg", ids.copy(), y.copy()))
            self._apply_segments(ids, y, posterior=False)
        for ids, h, total in tot:
            self._log.append(("tot", ids.copy(), np.concatenate([[total], h])))
            self._apply_total(ids, h, total, posterior=False)
        u, cnt, s1 = batch_rows(seg, self.prior_mean)
        condition_rows(
            cov, self._mean, self.prior_mean, self.noise_var, u, cnt, s1, tot, self.noise_scale
        )
        self._after_update(len(seg) + len(tot))

    def _absorb_in_turn(
        self,
        segments: Sequence[tuple[Any, ...]],
        totals: Sequence[tuple[Any, ...]],
    ) -> None:
        """:meth:`absorb` where temperatures are involved: batches ``(ids, energies[, °C])``
        and ``(ids, total, weights[, °C])`` applied one after the other (the same exact
        posterior), each logged as its own update would be; one refit at most, at the end."""
        seg = []
        for b in segments:
            ids, y = validate_observations(b[0], b[1], self.n)
            t = b[2] if len(b) > 2 else None
            if ids.size:
                seg.append((ids, y, None if t is None else check_temperature(t, ids.size)))
        tot = []
        for b in totals:
            t = b[3] if len(b) > 3 else None
            tot.append((*validate_total(b[0], b[1], self.n, b[2]),
                        None if t is None else float(check_temperature(t))))
        if not seg and not tot:
            return
        if any(t is not None for *_, t in seg) or any(t is not None for *_, t in tot):
            self._activate_temperature()
        for ids, y, t in seg:
            if t is None:
                self._log.append(("seg", ids.copy(), y.copy()))
            else:
                self._log.append(("sgt", ids.copy(), np.concatenate([y, t])))
            self._apply_segments(ids, y, temps=t)
        for u, h, total, t in tot:
            if t is None:
                self._log.append(("tot", u.copy(), np.concatenate([[total], h])))
            else:
                self._log.append(("ttt", u.copy(), np.concatenate([[total, t], h])))
            self._apply_total(u, h, total, temp=t)
        self._after_update(len(seg) + len(tot))

    def route_covariance(
        self, segment_ids: ArrayLike, temperature: TemperatureArg = None
    ) -> NDArray[np.float64]:
        """Joint posterior covariance [Wh²] of the latent energies of ``segment_ids`` (on a
        trip at ``temperature`` [°C]).

        Exact, including the correlations along the route (its segments share graph and
        feature kernels), so a route's variance is not the sum of its segments' variances.
        """
        cov = route_covariance(self._covariance(), segment_ids)
        if temperature is None and not self.temp.active:
            return cov
        t = None if temperature is None else float(check_temperature(temperature))
        return self.temp.route_covariance(
            np.asarray(segment_ids, dtype=np.int64), cov, self._slope(), t
        )

    def _slope(self) -> NDArray[np.float64]:
        return self.slope if self.slope is not None else np.zeros((self.n, self.temp.m))

    def predict_sum(
        self,
        segment_ids: ArrayLike,
        weights: ArrayLike | None = None,
        temperature: TemperatureArg = None,
    ) -> tuple[float, float]:
        """Mean and variance [Wh, Wh²] of ``Σ weights·f(segment_ids)`` (weights default 1) on
        a trip at ``temperature`` [°C] (None: without temperature terms)."""
        cov = self._covariance()  # first: building it (the first refresh) also sets the mean
        mean, var = predict_sum(cov, self._mean, segment_ids, weights)
        if temperature is None and not self.temp.active:
            return mean, var
        t = None if temperature is None else float(check_temperature(temperature))
        u, h = combine_weights(segment_ids, weights)
        return self.temp.sum_moments(u, h, mean, var, self._slope(), t)

    def noise_variance(self, segment_ids: ArrayLike, weights: ArrayLike | None = None) -> float:
        """Noise variance [Wh²] of an observed ``Σ weights·y(segment_ids)``: ``ς² Σ w_e s_e``
        (``s_e = a_e²`` with ``segment_scale="loss"``, else 1)."""
        u, h = combine_weights(segment_ids, weights)
        return total_noise(h, u, self.noise_scale) * self.noise_var

    def reset_segments(
        self, segment_ids: ArrayLike, counts: ArrayLike, sums: ArrayLike, sums_sq: ArrayLike
    ) -> None:
        """Forget every per-segment reading of ``segment_ids`` and keep instead readings with
        the given statistics (per segment: count, Σy [Wh], Σy² [Wh²]; zeros forget them all).

        What a detected change of a road needs (:mod:`ev_nav.gp.changes`): its readings from
        before the change stop counting, so its posterior — and through the kernel its
        neighbours' — widens again and returns to the prior where nothing else informs it.
        Trip totals that include the segments are kept (a total cannot be split). Exact: the
        old readings' information is removed by a rank-k downdate and the kept readings are
        conditioned on (:func:`~ev_nav.gp.incremental_state.uncondition_segments`; N²k flops,
        like an update), or — where the downdate is not positive definite in floating point —
        the posterior is recomputed from the statistics. The reset enters the replay log, so a
        checkpoint reproduces it bit for bit; it does not count as an update for the refit
        schedule.
        """
        ids, cnt, s1, s2 = validate_reset(segment_ids, counts, sums, sums_sq, self.n)
        if ids.size == 0:
            return
        s1_, s2_ = self.kernel.k_f.outputscale, self.kernel.k_f2.outputscale
        tau2 = np.full(ids.size, float(s1_) + float(s2_))  # mean prior variance of a segment
        if self.scale is not None:
            tau2 = tau2 * self.scale[ids] ** 2
        self._log.append(
            ("rst", ids.copy(), np.concatenate([cnt, s1, s2, tau2]).astype(np.float64))
        )
        self._apply_reset(ids, cnt, s1, s2, tau2)
        self._post = None

    def _apply_reset(
        self,
        ids: NDArray[np.int64],
        cnt: NDArray[np.int64],
        s1: NDArray[np.float64],
        s2: NDArray[np.float64],
        tau2: NDArray[np.float64],
        posterior: bool = True,
    ) -> None:
        e = self.prior_mean[ids]
        r1 = s1 - cnt * e  # the learner's statistics are residuals y − E_det
        r2 = np.maximum(s2 - 2.0 * e * s1 + cnt * e * e, 0.0)
        if self.temp.active:  # the kept readings carry no temperature: recompute
            self._t_phi[ids] = 0.0
            self._t_phiphi[ids] = 0.0
            self._t_phir[ids] = 0.0
            self.n_obs[ids] = cnt
            self.sum_r[ids] = r1
            self.sum_r2[ids] = r2
            self.extra_var[ids] += tau2
            self._join_support(ids[cnt > 0])
            self._refresh(reset_log=False)
            return
        refresh = False
        if posterior:
            self._covariance()  # first: building it (the first refresh) also sets the mean
            self._own_arrays()
            old = ids[self.n_obs[ids] > 0]
            if old.size and not uncondition_segments(
                self._cov, self._mean, self.prior_mean, self.noise_var, old,
                self.n_obs[old], self.sum_r[old], self.noise_scale,
            ):
                refresh = True
        self.n_obs[ids] = cnt
        self.sum_r[ids] = r1
        self.sum_r2[ids] = r2
        self.extra_var[ids] += tau2
        self._join_support(ids[cnt > 0])
        if not posterior:
            return
        # with their readings removed nothing observes these segments any more, so the extra
        # prior variance adds to their posterior variance alone; a trip total over one of them
        # still observes it, and then the posterior is recomputed
        in_totals = any(np.isin(u, ids).any() for u, _, _ in self.totals)
        if refresh or in_totals:
            self._refresh(reset_log=False)
            return
        self._cov.flat[ids * (self.n + 1)] += tau2
        keep = cnt > 0
        if keep.any():
            condition_segments(
                self._cov, self._mean, self.prior_mean, self.noise_var, ids[keep], cnt[keep],
                r1[keep], self.noise_scale,
            )

    def noise_variances(self, segment_ids: ArrayLike) -> NDArray[np.float64]:
        """Noise variance [Wh²] of one observation of each listed segment: ``ς² s_e``."""
        return segment_noise(np.asarray(segment_ids, dtype=np.int64), self.noise_scale,
                             self.noise_var)

    def hyperparameters(self) -> dict[str, float | list[float]]:
        """Current hyperparameters (κ, lengthscales, outputscales [Wh²], noise variance [Wh²])."""
        k = self.kernel
        return {
            "graph_kappa": float(k.graph.kappa),
            "lengthscale_product": k.k_f.base_kernel.lengthscale.reshape(-1).tolist(),
            "lengthscale_feature": k.k_f2.base_kernel.lengthscale.reshape(-1).tolist(),
            "outputscale_product": float(k.k_f.outputscale),
            "outputscale_feature": float(k.k_f2.outputscale),
            "noise_var": self.noise_var,
        }

    # ------------------------------------------------------------------ incremental steps
    def _covariance(self) -> NDArray[np.float64]:
        """Σ over all segments (lower triangle valid, column-major), the prior until data."""
        if self._cov is None:
            self._refresh(reset_log=False)
        assert self._cov is not None
        return self._cov

    def _after_update(self, n: int = 1) -> None:
        self.n_updates += n
        self._post = None
        if self.n_updates >= self.next_refresh:
            if self.defer_refits:
                self.refit_due = True
            else:
                self.refit()

    def frozen_posterior(self) -> ExactPosterior:
        """A read-only view of the current posterior (mean, covariance, noise) that later
        updates of this model do not change: it shares the arrays, and the model copies them
        (copy on write, one N × N memory copy) before its next update instead of the view
        copying the whole model. What a server publishes to its route requests.

        Raises
        ------
        ModelStateError
            Once the model has temperature coefficients (the view has none: copy the model).
        """
        if self.temp.active:
            raise ModelStateError("the read-only posterior view has no temperature "
                                  "coefficients; copy the model instead")
        cov = self._covariance()
        self._shared = True
        view = ExactPosterior(
            self._mean, cov, self.noise_var, self.prior_mean, self.n_updates, self.next_refresh,
            self.noise_scale,
        )
        view.temp = copy.copy(self.temp)  # inactive: the prior only; its own (empty) arrays
        view.temp.reset_information()
        return view

    def _own_arrays(self) -> None:
        """Copy Σ and μ before changing them in place if a frozen view shares them."""
        if self._shared:
            self._cov = np.array(self._cov, order="F", copy=True)
            self._mean = self._mean.copy()
            self._shared = False

    def refit(self, cancel: threading.Event | None = None) -> bool:
        """Fit the hyperparameters (if learned) and refresh the posterior at them, and schedule
        the next refit (``fit_growth`` times the updates so far, at most ``fit_max_gap`` later).

        Called by the schedule after an update (or by the model's owner when
        :attr:`defer_refits` is set). ``cancel`` (set from another thread) stops a fit between
        two evaluations of its objective; the model is then left as it was and ``False`` is
        returned (a server shutting down must not leave a thread inside torch at exit).
        """
        if self.config.learn_hyperparameters and not self._fit(cancel):
            return False
        if cancel is not None and cancel.is_set():
            return False
        self._refresh()
        cfg = self.config
        self.next_refresh = next_fit(self.n_updates, cfg.fit_growth, cfg.fit_max_gap)
        self.refit_due = False
        return True

    def _join_support(self, ids: NDArray[np.int64]) -> None:
        new = np.unique(ids[~self._in_support[ids]])
        if new.size:
            self._in_support[new] = True
            self.support = np.concatenate([self.support, new])

    def _apply_segments(
        self,
        ids: NDArray[np.int64],
        y: NDArray[np.float64],
        posterior: bool = True,
        temps: NDArray[np.float64] | None = None,
    ) -> None:
        if self.temp.active:
            self._apply_segments_t(ids, y, temps)
            return
        r, u, cnt, s1 = segment_residuals(ids, y, self.prior_mean)
        if posterior:
            cov = self._covariance()  # first: building it also sets the mean
            self._own_arrays()
            cov = self._cov
            condition_segments(
                cov, self._mean, self.prior_mean, self.noise_var, u, cnt, s1, self.noise_scale
            )
        self._join_support(u)
        np.add.at(self.n_obs, ids, 1)
        np.add.at(self.sum_r, ids, r)
        np.add.at(self.sum_r2, ids, r * r)

    def _apply_segments_t(
        self, ids: NDArray[np.int64], y: NDArray[np.float64], temps: NDArray[np.float64] | None
    ) -> None:
        """:meth:`_apply_segments` with the temperature coefficients: each segment's batch
        mean is one row ``g(e) + φ̄ᵀδ``, and the readings' spread around it informs ``δ``
        alone (:func:`~ev_nav.gp.temperature.within_information`)."""
        term = self.temp
        phi = term.features(ids, temps)
        r = y - self.prior_mean[ids] - term.offset(phi)
        u, inv, cnt = np.unique(ids, return_inverse=True, return_counts=True)
        inv = inv.reshape(-1)
        noise = np.broadcast_to(
            self.noise_var * (1.0 if self.noise_scale is None else self.noise_scale[ids]),
            ids.shape,
        ).astype(np.float64)
        phi_bar, r_bar, info, vec = within_information(phi, r, inv, cnt, noise)
        self._covariance()  # first: building it also sets the mean and the slope
        self._own_arrays()
        a = sym_rows(self._cov, u)
        seg_noise = self.noise_var * (1.0 if self.noise_scale is None else self.noise_scale[u])
        m = a[:, u] + np.diag(seg_noise / cnt)
        innov = self.prior_mean[u] + r_bar - self._mean[u]
        condition_rows_t(self._cov, self._mean, self.slope, term, a, m, innov, phi_bar,
                         self.slope[u])
        term.info += info
        term.info_vec += vec
        self._join_support(u)
        np.add.at(self.n_obs, ids, 1)
        np.add.at(self.sum_r, ids, r)
        np.add.at(self.sum_r2, ids, r * r)
        np.add.at(self._t_phi, ids, phi)
        np.add.at(self._t_phiphi, ids, phi[:, :, None] * phi[:, None, :])
        np.add.at(self._t_phir, ids, phi * r[:, None])

    def _apply_total(
        self,
        u: NDArray[np.int64],
        h: NDArray[np.float64],
        total: float,
        posterior: bool = True,
        temp: float | None = None,
    ) -> None:
        if self.temp.active:
            psi = h @ self.temp.features(u, temp)
            self._covariance()  # first: building it also sets the mean and the slope
            self._own_arrays()
            a = (h @ sym_rows(self._cov, u))[None, :]
            m = np.array([[float(a[0, u] @ h) + total_noise(h, u, self.noise_scale)
                           * self.noise_var]])
            innov = np.array([total - float(psi @ self.temp.beta0) - float(h @ self._mean[u])])
            condition_rows_t(self._cov, self._mean, self.slope, self.temp, a, m, innov,
                             psi[None, :], (h @ self.slope[u])[None, :])
            self._join_support(u)
            self.totals.append((u.copy(), h.copy(), float(total)))
            self._t_psi.append(psi)
            return
        if posterior:
            self._covariance()  # first: building it also sets the mean
            self._own_arrays()
            condition_total(self._cov, self._mean, self.noise_var, u, h, total, self.noise_scale)
        self._join_support(u)
        self.totals.append((u.copy(), h.copy(), float(total)))

    # ------------------------------------------------------------------ refresh
    def _rows(self) -> Rows:
        """Observation rows: one per observed segment (its mean residual), one per trip total."""
        offsets = (np.array([float(self._t_psi[k] @ self.temp.beta0)
                             for k in range(len(self.totals))])
                   if self.temp.active else None)
        return observation_rows(self.n_obs, self.sum_r, self.noise_scale, self.totals,
                                self.prior_mean, offsets)

    def _refresh(self, reset_log: bool = True) -> None:
        """Recompute Σ and μ from the sufficient statistics at the current hyperparameters.

        ``Σ = K − X Xᵀ``, ``μ = E_det + X L⁻¹ r`` with ``C = K Hᵀ``, ``G = H K Hᵀ + R = L Lᵀ``
        and ``Xᵀ = L⁻¹ Cᵀ``: O(N² D) for D observation rows, once per schedule step.
        """
        cov = self._prior_covariance()
        if self.extra_var.any():  # changed roads (reset_segments): K + diag(extra)
            cov.flat[:: self.n + 1] += self.extra_var
        self._cov = None
        rows = self._rows()
        mean = self.prior_mean.copy()
        if rows.pos:
            c = row_combination(cov, rows.pos, rows.wts)  # (N, n_rows)
            g = row_combination(np.ascontiguousarray(c.T), rows.pos, rows.wts)
            g = 0.5 * (g + g.T) + np.diag(rows.noise_factor() * self.noise_var)
            chol = cholesky(g)
            xt = trtrs_lower(chol, c.T)
            beta = trtrs_lower(chol, rows.resid)
            mean += xt.T @ beta
            cov = syrk_down(cov, xt)
            if self.temp.active:
                self._refresh_temperature(chol, xt, beta)
        elif self.temp.active:
            self._refresh_temperature(None, None, None)
        self._cov = cov
        self._mean = mean
        self._shared = False  # new arrays: a frozen view keeps the old ones
        self._post = None
        if reset_log:
            self._base = self._snapshot()
            self._log = []

    def _temperature_rows(self) -> NDArray[np.float64]:
        """Mean features ``φ̄`` of the segment rows and ``ψ`` of the totals (as :meth:`_rows`)."""
        segs = np.flatnonzero(self.n_obs > 0)
        phi = self._t_phi[segs] / self.n_obs[segs, None].astype(np.float64)
        return np.vstack([phi, *[p[None, :] for p in self._t_psi]]).reshape(-1, self.temp.m)

    def _refresh_temperature(
        self,
        chol: NDArray[np.float64] | None,
        xt: NDArray[np.float64] | None,
        beta: NDArray[np.float64] | None,
    ) -> None:
        """The slope ``M`` and the coefficients' information from the statistics (batch form
        of the rank-k steps): with the rows' features ``Φ`` and ``Z = L⁻¹Φ``, ``M = −XZ`` and
        the information ``ZᵀZ``, ``Zᵀ L⁻¹ r``, plus each segment's spread of readings."""
        term = self.temp
        term.reset_information()
        self.slope = np.zeros((self.n, self.temp.m))
        if chol is not None:
            zr = trtrs_lower(chol, self._temperature_rows())
            self.slope -= xt.T @ zr
            term.add_information(-zr, beta)
        segs = np.flatnonzero(self.n_obs > 0)
        if segs.size:
            n = self.n_obs[segs].astype(np.float64)
            v = self.noise_var * (1.0 if self.noise_scale is None else self.noise_scale[segs])
            v = np.broadcast_to(v, n.shape)
            phi = self._t_phi[segs]
            within = self._t_phiphi[segs] - phi[:, :, None] * phi[:, None, :] / n[:, None, None]
            term.info += np.einsum("eij,e->ij", within, 1.0 / v)
            wvec = self._t_phir[segs] - phi * (self.sum_r[segs] / n)[:, None]
            term.info_vec += wvec.T @ (1.0 / v)
            term._coef = None

    def _prior_covariance(self) -> NDArray[np.float64]:
        """K over all segments, column-major (SYRK updates it in place), from the cache if any."""
        name = None
        if self.cache is not None:
            digest = hashlib.sha256(self.net.content_hash.encode())
            digest.update(self._log_hyper().numpy().tobytes())
            digest.update(repr((self.config.graph_nu, self.kernel.graph.mode)).encode())
            if self.scale is not None:
                digest.update(self.scale.tobytes())
            name = f"prior-{digest.hexdigest()[:24]}.npy"
            cached = read_matrix(self.cache, name, self.n)
            if cached is not None:
                return cached
        cov = self.kernel.full()
        if self.scale is not None:  # a_e a_e' k(e, e'), in place (column-major N × N)
            cov *= self.scale[:, None]
            cov *= self.scale[None, :]
        if name is not None:
            write_matrix(self.cache, name, cov)
        return cov

    def _digest_after(self, log: list[tuple[str, NDArray[np.int64], NDArray[np.float64]]]) -> str:
        """Content key of the posterior reached from the current base by ``log``
        (:func:`~ev_nav.gp.incremental_state.posterior_key`: what a checkpoint holds)."""
        hyper = {k: v.numpy() if isinstance(v, Tensor) else v for k, v in self._raw_hyper().items()}
        totals = self.totals[: self._base["n_totals"]]
        return posterior_key(self.net.content_hash, hyper, self._base, totals, log)

    def cache_posterior(self) -> None:
        """Store the current posterior (Σ and μ) in ``cache``, keyed by the model's state, so
        that the next :meth:`load_state_dict` of this state skips the refresh and the replay.

        Derived data: the restored posterior is the very same array, bit for bit; without the
        file, loading recomputes it. Does nothing without a ``cache``.
        """
        if self.cache is None or self.temp.active:  # (no cached form of the temperature part)
            return
        both = np.empty((self.n, self.n + 1), dtype=np.float64, order="F")
        both[:, : self.n] = self._covariance()
        both[:, self.n] = self._mean
        write_matrix(self.cache, posterior_name(self._digest_after(self._log)), both)

    # ------------------------------------------------------------------ hyperparameters
    def _raw_hyper(self) -> dict[str, Tensor | float]:
        """The raw (unconstrained) kernel hyperparameters and ς², as a checkpoint holds them."""
        k = self.kernel
        return {
            "raw_kappa": k.graph.raw_kappa.detach().clone(),
            "raw_ls_1": k.k_f.base_kernel.raw_lengthscale.detach().clone(),
            "raw_ls_2": k.k_f2.base_kernel.raw_lengthscale.detach().clone(),
            "raw_s_1": k.k_f.raw_outputscale.detach().clone(),
            "raw_s_2": k.k_f2.raw_outputscale.detach().clone(),
            "noise_var": self.noise_var,
        }

    def raw_hyperparameters(self) -> dict[str, float | list[Any]]:
        """The raw hyperparameters and ς² as plain numbers, as a checkpoint's ``hyper`` holds
        them (a server reports them, so a client can rebuild the served posterior exactly)."""
        return {
            k: (v.tolist() if isinstance(v, Tensor) else float(v))
            for k, v in self._raw_hyper().items()
        }

    def _log_hyper(self) -> Tensor:
        """Log hyperparameters ``[κ, ℓ₁ (d), ℓ₂ (d), s₁, s₂, ς²]`` (s₁ normalised as in K_G)."""
        k = self.kernel
        return torch.cat(
            [
                torch.log(k.graph.kappa.detach()).reshape(1),
                torch.log(k.k_f.base_kernel.lengthscale.detach().reshape(-1)),
                torch.log(k.k_f2.base_kernel.lengthscale.detach().reshape(-1)),
                torch.log(k.k_f.outputscale.detach()).reshape(1),
                torch.log(k.k_f2.outputscale.detach()).reshape(1),
                torch.tensor([math.log(self.noise_var)], dtype=DTYPE),
            ]
        )

    def _set_hyper(self, theta: Tensor) -> None:
        k = self.kernel
        dim = k.features.shape[1]
        t = theta.detach().exp()
        # a κ that did not change keeps its exact bits: the memoised dense graph matrix (and the
        # sparse factorisation) are keyed by it, and a log/exp round trip moves the last bit
        if abs(float(t[0]) - float(k.graph.kappa)) > 1e-12 * float(k.graph.kappa):
            k.graph.kappa = t[0]
        k.k_f.base_kernel.lengthscale = t[1 : 1 + dim].reshape(1, -1)
        k.k_f2.base_kernel.lengthscale = t[1 + dim : 1 + 2 * dim].reshape(1, -1)
        k.k_f.outputscale = t[1 + 2 * dim]
        k.k_f2.outputscale = t[2 + 2 * dim]
        self.noise_var = float(t[3 + 2 * dim])
        for p in k.parameters():
            p.requires_grad_(False)

    def _fit_rows(self) -> Rows:
        """The observation rows of the marginal likelihood (a random subset beyond the cap)."""
        rows = self._rows()
        if self.temp.active:  # at the current coefficient estimate (see _fit)
            d = self.temp.coefficients()[0]
            rows = Rows(rows.pos, rows.wts, rows.resid - self._temperature_rows() @ d,
                         rows.noise)
        return rows.subset(self.config.fit_max_rows, self.rng)

    def _fit(self, cancel: threading.Event | None = None) -> bool:
        """Type-II MAP of the hyperparameters on the sufficient statistics (L-BFGS, autograd).

        Negative log posterior of ``[log κ, log ℓ₁, log ℓ₂, log s₁, log s₂, log ς²]``: the
        marginal likelihood of the per-segment means (noise ``ς²/n_e``) and trip totals, plus
        the within-segment scatter ``Σ (y − ȳ_e)²`` (which only ς² explains), plus the
        log-normal priors. The graph block is the raw ``(cI + Δ)^(-ν)`` with the scale
        ``s₁/z`` (:meth:`GraphMaternKernel.raw_block`), converted back once at the end.
        Returns ``False`` (nothing changed) when ``cancel`` was set during the fit.
        """
        rows = self._fit_rows()
        if len(rows.pos) < 2:
            return True
        cfg = self.config
        dim = self.kernel.features.shape[1]
        graph = self.kernel.graph
        segs = np.unique(np.concatenate(rows.pos))
        local = np.full(self.n, -1, dtype=np.int64)
        local[segs] = np.arange(segs.size)
        lpos = [local[p] for p in rows.pos]
        x = self.kernel.features[torch.as_tensor(segs)]
        amp = None if self.scale is None else torch.as_tensor(self.scale[segs])
        extra = torch.as_tensor(self.extra_var[segs]) if self.extra_var[segs].any() else None
        r = torch.as_tensor(rows.resid)
        noise_factor = torch.as_tensor(rows.noise_factor())
        observed = self.n_obs > 0
        sum_r, sum_r2 = self.sum_r[observed], self.sum_r2[observed]
        if self.temp.active:
            # residuals at the current coefficient estimate δ̂ (a plug-in: the fit does not
            # integrate over δ; the posterior given the hyperparameters stays exact)
            d = self.temp.coefficients()[0]
            sum_r2 = (sum_r2 - 2.0 * self._t_phir[observed] @ d
                      + np.einsum("eij,i,j->e", self._t_phiphi[observed], d, d))
            sum_r = sum_r - self._t_phi[observed] @ d
        ssw, dof = within_scatter(
            self.n_obs[observed], sum_r, sum_r2,
            None if self.noise_scale is None else self.noise_scale[observed],
            clamp=self.temp.active)
        i_s1 = 1 + 2 * dim
        theta0 = self._log_hyper()
        log_z0 = math.log(graph.normaliser())
        start = theta0.clone()
        start[i_s1] -= log_z0
        centre = self._prior_log.clone()
        centre[i_s1] -= log_z0
        free = torch.ones_like(start, dtype=torch.bool)
        free[0] = cfg.learn_graph_kappa
        # the noise no lower than a share of the prior's (fitting.NOISE_FLOOR_SHARE): readings
        # that repeat exactly drove it to 0, and the next fit failed on its logarithm
        lower = noise_floor(start, float(self._prior_log[-1]))
        start = torch.maximum(start, lower)
        fixed_raw: Tensor | None = None
        if not cfg.learn_graph_kappa:  # a slice of the memoised dense graph matrix
            raw = graph.dense_raw()[np.ix_(segs, segs)]
            fixed_raw = torch.from_numpy(np.ascontiguousarray(raw))

        def block(kappa: Tensor) -> Tensor:
            return fixed_raw if fixed_raw is not None else graph.raw_block(segs, segs, kappa=kappa)

        data = FitData(x=x, pos=lpos, wts=rows.wts, resid=r, noise_factor=noise_factor,
                       ssw=ssw, dof=dof, amp=amp, extra=extra)
        try:
            fit = map_fit(data, block, start, centre, free, cfg.fit_iterations,
                          cfg.prior_log_sd, cancel, lower=lower)
        except FitCancelled:
            return False
        accepted = accept_fit(fit, int(free.sum()), self.n_updates, cfg.fit_growth,
                              cfg.fit_max_gap, cfg.fit_test_level, len(rows.pos),
                              current_fit_rows(self.fits))
        if accepted:
            fitted = fit.theta
            # κ first (the normaliser depends on it), then s₁ = (s₁/z) · z(κ*)
            self._set_hyper(torch.cat([fitted[:1], theta0[1:]]))
            fitted[i_s1] += math.log(graph.normaliser())
            self._set_hyper(fitted)
        self.fits.append(
            {"update": self.n_updates, "rows": len(rows.pos), "nll": fit.nll,
             "gain": fit.gain(), "accepted": accepted, **self.hyperparameters()}
        )
        return True

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Hyperparameters, statistics at the last refresh and the observations since (arrays)."""
        state = {
            "kind": CHECKPOINT_KIND,
            "version": STATE_VERSION,
            "config": asdict(self.config),
            "seed": self.seed,
            "n_segments": self.n,
            "network_hash": self.net.content_hash,
            "prior_mean": self.prior_mean.copy(),
            "hyper": self._raw_hyper(),
            "base": {key: (v.copy() if isinstance(v, np.ndarray) else v)
                     for key, v in self._base.items()},
            "totals": [
                (u.copy(), h.copy(), t) for u, h, t in self.totals[: self._base["n_totals"]]
            ],
            "log": [(kind, ids.copy(), y.copy()) for kind, ids, y in self._log],
            "n_updates": self.n_updates,
            "next_refresh": self.next_refresh,
            "rng": self.rng.bit_generator.state,
            "prior_log": self._prior_log.clone(),
            "fits": [dict(f) for f in self.fits],
        }
        if self.temp.active:  # only then: a model without temperatures saves what it did
            state["climate"] = self.temp.state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> IncrementalGP:
        """Restore a :meth:`state_dict` (same network and config): refresh, then replay."""
        check_model_header(
            state,
            kind=CHECKPOINT_KIND,
            version=STATE_VERSION,
            what="an incremental-GP",
            n_segments=self.n,
            network_hash=self.net.content_hash,
            config=self.config,
        )
        try:
            h = state["hyper"]
            k = self.kernel
            with torch.no_grad():
                k.graph.raw_kappa.copy_(torch.as_tensor(h["raw_kappa"], dtype=DTYPE))
                k.k_f.base_kernel.raw_lengthscale.copy_(torch.as_tensor(h["raw_ls_1"]))
                k.k_f2.base_kernel.raw_lengthscale.copy_(torch.as_tensor(h["raw_ls_2"]))
                k.k_f.raw_outputscale.copy_(torch.as_tensor(h["raw_s_1"], dtype=DTYPE))
                k.k_f2.raw_outputscale.copy_(torch.as_tensor(h["raw_s_2"], dtype=DTYPE))
            self.noise_var = float(h["noise_var"])
            base = state["base"]
            arrays = {key: np.asarray(base[key]) for key in ("n_obs", "sum_r", "sum_r2")}
            if any(a.shape != (self.n,) for a in arrays.values()):
                raise ModelStateError("checkpoint statistics have the wrong length")
            support = np.asarray(base["support"], dtype=np.int64)
            # absent: written before change detection (no road flagged as changed)
            extra_var = np.asarray(base.get("extra_var", np.zeros(self.n)), dtype=np.float64)
            if extra_var.shape != (self.n,):
                raise ModelStateError("checkpoint statistics have the wrong length")
            totals = [stored_total(t) for t in state["totals"]]
            log = [stored_log_entry(str(kind), i, y) for kind, i, y in state["log"]]
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise ModelStateError(f"damaged incremental-GP checkpoint: {exc}") from None
        if "climate" in state:
            self.temp.check_state(state["climate"])
        temp_base = base.get("temperature")
        self.prior_mean = np.asarray(state["prior_mean"], dtype=np.float64).copy()
        self._reset_data()
        self.n_obs = arrays["n_obs"].astype(np.int64).copy()
        self.sum_r = arrays["sum_r"].astype(np.float64).copy()
        self.sum_r2 = arrays["sum_r2"].astype(np.float64).copy()
        self.totals = totals
        self.support = support.copy()
        self._in_support[support] = True
        self.extra_var = extra_var.copy()
        if temp_base is not None:
            try:
                self._activate_temperature(log=False)
                self._t_phi = np.asarray(temp_base["phi"], dtype=np.float64).reshape(
                    self.n, self.temp.m).copy()
                self._t_phiphi = np.asarray(temp_base["phiphi"], dtype=np.float64).reshape(
                    self.n, self.temp.m, self.temp.m).copy()
                self._t_phir = np.asarray(temp_base["phir"], dtype=np.float64).reshape(
                    self.n, self.temp.m).copy()
                psi = np.asarray(temp_base["psi"], dtype=np.float64).reshape(-1, self.temp.m)
            except (KeyError, TypeError, ValueError) as exc:
                raise ModelStateError(f"damaged incremental-GP checkpoint: {exc}") from None
            if psi.shape[0] != len(self.totals):
                raise ModelStateError("damaged incremental-GP checkpoint: temperature totals")
            self._t_psi = [p.copy() for p in psi]
        self._prior_log = torch.as_tensor(state["prior_log"], dtype=DTYPE).clone()
        self._base = self._snapshot()
        self._log = []
        with_temperature = temp_base is not None or any(k == "act" for k, _, _ in log)
        cached = None if with_temperature else read_posterior(
            self.cache, self._digest_after(log), self.n)
        if cached is None:
            self._refresh()
        for kind, ids, y in log:
            self._log.append((kind, ids, y))
            if kind == "act":
                self._activate_temperature(log=False)
            elif kind == "sgt":
                k = ids.size
                self._apply_segments(ids, y[:k], temps=y[k:])
            elif kind == "ttt":
                self._apply_total(ids, y[2:], float(y[0]), temp=float(y[1]))
            elif kind == "seg":
                self._apply_segments(ids, y, posterior=cached is None)
            elif kind == "rst":
                k = ids.size
                self._apply_reset(ids, y[:k].astype(np.int64), y[k : 2 * k],
                                  y[2 * k : 3 * k], y[3 * k :], posterior=cached is None)
            else:
                self._apply_total(ids, y[1:], float(y[0]), posterior=cached is None)
        if cached is not None:
            self._cov, self._mean = cached
        self.n_updates = int(state["n_updates"])
        self.next_refresh = int(state["next_refresh"])
        # seeded, though the checkpoint's generator state replaces it at once
        self.rng = np.random.default_rng(self.seed)
        self.rng.bit_generator.state = state["rng"]
        self.fits = [dict(f) for f in state["fits"]]
        self._post = None
        return self
