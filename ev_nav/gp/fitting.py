"""Type-II MAP of the production kernel's hyperparameters: the one objective both GP learners
(the exact :class:`~ev_nav.gp.incremental.IncrementalGP` and the regional
:class:`~ev_nav.gp.regional.RegionalGP`) fit on their schedule.

The kernel is ``a a'(s₁ K_G ∘ k₁ + s₂ k₂) + diag(extra)`` with ``k₁, k₂`` Matérn-5/2 feature
correlations. The parameters are ``θ = log [κ, ℓ₁ (d), ℓ₂ (d), s₁, s₂, ς²]``; the negative log
posterior is the Gaussian marginal likelihood of the observation rows (a segment's mean
residual with noise ``ς² s_e / n_e``, or a trip total's residual), plus the within-segment
scatter ``Σ (y − ȳ_e)²`` that only ς² explains, plus independent log-normal priors centred on
the initial values. The learners differ only in where the graph block ``K_G[S, S]`` of the
fit's segments comes from (a slice of the exact learner's dense matrix, the regional
learner's graph-kernel entries), so that is an argument.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import scipy.sparse as sp
import torch
from numpy.typing import NDArray
from torch import Tensor

from ev_nav.gp.incremental_state import total_noise
from ev_nav.gp.numerics import matern52_parts

__all__ = ["FitCancelled", "FitData", "MapFit", "Rows", "accept_fit", "at_steady_state",
           "current_fit_rows", "fit_objective", "gain_threshold", "map_fit", "next_fit",
           "observation_rows", "row_combination", "significant_gain", "within_scatter"]

_Matrix = TypeVar("_Matrix", NDArray[np.float64], Tensor)


@dataclass(frozen=True)
class Rows:
    """Observation rows: support positions and weights (``H``), residual, and the noise variance
    of each row in units of ς² (``s_e/n_e`` for the mean of a segment's ``n_e`` observations,
    ``Σ h_e s_e`` for a trip total; ``s_e`` the segment's noise scale, 1 when uniform)."""

    pos: list[NDArray[np.int64]]
    wts: list[NDArray[np.float64]]
    resid: NDArray[np.float64]
    noise: NDArray[np.float64]

    def noise_factor(self) -> NDArray[np.float64]:
        """Noise variance of each row in units of ς²."""
        return self.noise

    def subset(self, cap: int, rng: np.random.Generator) -> Rows:
        """These rows, or ``cap`` of them drawn at random (kept in order) when there are more:
        what a fit's marginal likelihood uses (the likelihood of a subset is still exact)."""
        if len(self.pos) <= cap:
            return self
        keep = np.sort(rng.choice(len(self.pos), size=cap, replace=False))
        return Rows([self.pos[i] for i in keep], [self.wts[i] for i in keep],
                    self.resid[keep], self.noise[keep])


def observation_rows(
    n_obs: NDArray[np.int64],
    sum_r: NDArray[np.float64],
    noise_scale: NDArray[np.float64] | None,
    totals: list[tuple[NDArray[np.int64], NDArray[np.float64], float]],
    prior_mean: NDArray[np.float64],
    total_offsets: NDArray[np.float64] | None = None,
) -> Rows:
    """The rows of a learner's sufficient statistics: one per observed segment (its mean
    residual ``sum_r / n_obs`` [Wh]), one per trip total (its residual against the prior mean,
    less ``total_offsets`` [Wh] where given: a known term such as temperature's)."""
    segs = np.flatnonzero(n_obs > 0)
    pos = [np.array([e]) for e in segs]
    wts = [np.ones(1) for _ in segs]
    resid = list(sum_r[segs] / n_obs[segs])
    seg_scale = 1.0 if noise_scale is None else noise_scale[segs]
    noise = list(seg_scale / n_obs[segs].astype(np.float64))
    for k, (u, h, total) in enumerate(totals):
        pos.append(u)
        wts.append(h)
        offset = 0.0 if total_offsets is None else float(total_offsets[k])
        resid.append(total - float(h @ prior_mean[u]) - offset)
        noise.append(total_noise(h, u, noise_scale))
    return Rows(pos, wts, np.asarray(resid, dtype=np.float64),
                np.asarray(noise, dtype=np.float64))


def within_scatter(
    n_obs: NDArray[np.int64],
    sum_r: NDArray[np.float64],
    sum_r2: NDArray[np.float64],
    noise_scale: NDArray[np.float64] | None,
    clamp: bool = False,
) -> tuple[float, float]:
    """``(Σ_e Σ (y − ȳ_e)² / s_e, Σ_e (n_e − 1))`` over the observed segments given (their
    counts, residual sums [Wh] and sums of squares [Wh²], noise scales ``s_e``): the scatter
    [Wh²] only ς² explains and its degrees of freedom. ``clamp``: negative scatter (sums that
    a plug-in adjusted) counts as 0."""
    n = n_obs.astype(np.float64)
    scatter = sum_r2 - sum_r**2 / n
    if clamp:
        scatter = np.maximum(scatter, 0.0)
    if noise_scale is not None:  # each segment's scatter in units of its noise scale
        scatter = scatter / noise_scale
    return float(np.sum(scatter)), float(np.sum(n - 1.0))


def next_fit(n_updates: int, growth: float, max_gap: int) -> int:
    """The update of the next scheduled fit after one at ``n_updates``: ``growth`` times as
    many updates, at most ``max_gap`` and at least one later."""
    return n_updates + max(1, min(math.ceil(n_updates * (growth - 1.0)), max_gap))


def at_steady_state(n_updates: int, growth: float, max_gap: int) -> bool:
    """Whether a fit at ``n_updates`` is one of the schedule's steady state, the next one
    ``max_gap`` updates later (:func:`next_fit`): from then on each fit sees little more data
    than the last (100 trips on top of hundreds), while before it each sees ``growth`` times
    as much."""
    return next_fit(n_updates, growth, max_gap) - n_updates >= max_gap


class FitCancelled(Exception):
    """Raised inside the L-BFGS objective when a fit's ``cancel`` event is set."""


def row_combination(k: _Matrix, pos: list[NDArray[np.int64]], wts: list[NDArray]) -> _Matrix:
    """``K Hᵀ``: column j is ``Σ_i w_ji K[:, pos_ji]`` (NumPy or torch, differentiable in K)."""
    torch_in = isinstance(k, Tensor)
    if all(p.size == 1 for p in pos):  # only segment rows: a column gather
        idx = np.concatenate(pos)
        return k[:, torch.as_tensor(idx)] if torch_in else k[:, idx]
    cols = []
    for p, w in zip(pos, wts, strict=True):
        if torch_in:
            cols.append(k[:, torch.as_tensor(p)] @ torch.as_tensor(w, dtype=k.dtype))
        else:
            cols.append(k[:, p] @ w)
    return torch.stack(cols, dim=1) if torch_in else np.stack(cols, axis=1)


@dataclass(frozen=True)
class FitData:
    """What a fit's marginal likelihood reads, in the fit's own segment numbering.

    Attributes
    ----------
    x : Tensor (S, d)
        Standardised context of the S segments the rows touch.
    pos, wts : list of ndarray
        Each row's segments (local numbers) and weights.
    resid : Tensor (R,)
        Each row's residual against the prior mean [Wh].
    noise_factor : Tensor (R,)
        Each row's noise variance in units of ς².
    ssw, dof : float
        Within-segment scatter (in units of each segment's noise scale) [Wh²] and its degrees
        of freedom ``Σ (n_e − 1)`` over every observed segment.
    amp : Tensor (S,), optional
        Segment amplitudes ``a_e`` (``segment_scale="loss"``).
    extra : Tensor (S,), optional
        Independent prior variance added to each segment (road changes) [Wh²].
    """

    x: Tensor
    pos: list[NDArray[np.int64]]
    wts: list[NDArray[np.float64]]
    resid: Tensor
    noise_factor: Tensor
    ssw: float
    dof: float
    amp: Tensor | None = None
    extra: Tensor | None = None


@dataclass(frozen=True)
class MapFit:
    """What :func:`map_fit` found.

    Attributes
    ----------
    theta : Tensor
        The best point the search evaluated (``log`` hyperparameters).
    nll : float
        Its objective (negative log posterior) [nats].
    start_nll : float
        The objective at the starting point (the current hyperparameters) on the same rows
        [nats]: ``start_nll − nll`` is what the fit gained.
    """

    theta: Tensor
    nll: float
    start_nll: float

    def gain(self) -> float:
        """How much the fitted point lowers the objective against the start [nats]."""
        return self.start_nll - self.nll


def significant_gain(fit: MapFit, free: int, level: float, rows: int = 0,
                     current_rows: int | None = None) -> bool:
    """Whether ``fit`` improves on its start by more than chance at ``level``: the
    likelihood-ratio test of the current values, twice the gain against the χ² quantile with as
    many degrees of freedom as free hyperparameters, scaled by :func:`gain_threshold` when the
    current values are themselves a fit's estimate (``current_rows``).

    A fit's rows are a random subset of the readings, so refits of the same data move the
    lengthscales by factors of 2–4 for gains of 2–10 nats (``docs/gp.md``): such moves are the
    subsets' noise, not what the data says. ``level = 1`` accepts every improvement (the exact
    learner's default)."""
    if level >= 1.0:
        return fit.gain() > 0.0
    return fit.gain() > gain_threshold(level, free, rows, current_rows)


def gain_threshold(level: float, free: int, rows: int = 0,
                   current_rows: int | None = None) -> float:
    """The gain [nats] a fit of ``rows`` rows with ``free`` free hyperparameters must pass at
    ``level`` (0 at level 1).

    Against fixed values (``current_rows`` None: the initial ones) twice the gain is χ²-
    distributed under the null, so the threshold is half the χ² quantile (10.8 nats at 1 % with
    9 free). Against the values of an earlier fit on ``current_rows`` rows it is not: those
    values carry their own estimation error, independent of the new rows', so the difference of
    the two estimates has covariance ``(1 + rows/current_rows) I⁻¹`` (``I`` the new rows'
    information) and twice the gain is that factor times χ². Two fits of equal size thus need
    twice the gain: 21.7 nats at 1 % with 9 free. That null's mean gain (9 nats with 9 free) is
    closer than the fixed-values null's (4.5) to what consecutive steady-state fits gained (a
    mean of 5–7 nats at 100k segments, ~10 at 1M; ``docs/gp.md``), and tested against fixed
    values one fit in 14 rebuilt the prior for what chance gives."""
    if level >= 1.0:
        return 0.0
    from scipy.stats import chi2

    factor = 1.0 + rows / current_rows if current_rows else 1.0
    return 0.5 * factor * float(chi2.ppf(1.0 - level, max(free, 1)))


def accept_fit(fit: MapFit, free: int, n_updates: int, growth: float, max_gap: int,
               level: float, rows: int = 0, current_rows: int | None = None) -> bool:
    """Whether a learner takes the values of a fit of ``rows`` rows at ``n_updates``: every fit
    of the growing schedule, and at its steady state (:func:`at_steady_state`) one whose gain
    passes the likelihood-ratio test at ``level`` (:func:`significant_gain`) against the
    current values, an earlier fit's on ``current_rows`` rows (None: never fitted). Both
    learners decide so."""
    return (not at_steady_state(n_updates, growth, max_gap)
            or significant_gain(fit, free, level, rows, current_rows))


def current_fit_rows(fits: Sequence[Mapping[str, Any]]) -> int | None:
    """The rows of the fit whose values a learner holds: its last accepted one in ``fits``
    (each a record with ``rows`` and ``accepted``), None when it has taken none."""
    for f in reversed(fits):
        if f.get("accepted"):
            return int(f["rows"])
    return None


def _row_matrix(pos: list[NDArray[np.int64]], wts: list[NDArray[np.float64]],
                n: int) -> sp.csr_matrix:
    """The observation rows as a sparse ``R × S`` matrix H (a row's weights at its segments)."""
    return sp.csr_matrix(
        (np.concatenate([np.asarray(w, dtype=np.float64) for w in wts]), np.concatenate(pos),
         np.cumsum([0, *[p.size for p in pos]])), shape=(len(pos), n))


def fit_objective(
    theta: Tensor,
    data: FitData,
    graph_block: Callable[[Tensor], Tensor],
    centre: Tensor,
    free: Tensor,
    prior_log_sd: float,
    rows: sp.csr_matrix | None = None,
) -> tuple[float, Tensor] | None:
    """The negative log posterior that :func:`map_fit` minimises [nats], and its gradient in
    ``θ`` (zero at the entries that are not ``free``); None where the rows' covariance is not
    positive definite.

    The gradient is in closed form: with ``G = H K Hᵀ + ς² diag(noise_factor)`` the rows'
    covariance and ``α = G⁻¹r``, the Gaussian term's derivative in G is
    ``M = ½ (G⁻¹ − ααᵀ)`` (``G⁻¹`` from the Cholesky factor by LAPACK's ``potri``), each
    kernel parameter's is ``⟨HᵀMH, ∂K/∂θ⟩``, and the Matérn lengthscales' ``∂K/∂θ`` are
    elementwise. Autograd through the factorisation took about ten times the factorisation
    itself (two full triangular solves, products and masks per evaluation) and ~60 % of a
    fit; this form takes one ``potri`` and a few elementwise passes. Only a free κ goes
    through autograd (the graph block's derivative is the caller's). ``rows``: H as a sparse
    ``R × S`` matrix, made from ``data`` when not given (:func:`map_fit` makes it once)."""
    dim = data.x.shape[1]
    i_s1 = 1 + 2 * dim
    th = theta.detach()
    t = th.exp()
    s1, s2, noise = t[i_s1], t[i_s1 + 1], t[i_s1 + 2]
    kappa_free = bool(free[0])
    log_kappa = th[0].clone().requires_grad_(kappa_free)
    with torch.set_grad_enabled(kappa_free):
        block_g = graph_block(log_kappa.exp())
    block = block_g.detach()
    with torch.no_grad():
        m1, q1, u1 = matern52_parts(data.x, t[1 : 1 + dim])
        m2, q2, u2 = matern52_parts(data.x, t[1 + dim : i_s1])
        a1 = block * m1
        k = s1 * a1 + s2 * m2
        amp = data.amp
        if amp is not None:
            k = amp[:, None] * k * amp[None, :]
        if data.extra is not None:
            k = k + torch.diag(data.extra)
        h = _row_matrix(data.pos, data.wts, k.shape[0]) if rows is None else rows
        hk = h @ k.numpy()
        g = torch.from_numpy(h @ np.ascontiguousarray(hk.T))
        g = 0.5 * (g + g.T) + torch.diag(noise * data.noise_factor)
        chol, info = torch.linalg.cholesky_ex(g)
        if int(info) != 0:
            return None
        r = data.resid
        alpha = torch.cholesky_solve(r[:, None], chol)[:, 0]
        dev = (th - centre)[free]
        nll = (0.5 * (r @ alpha) + torch.log(chol.diagonal()).sum()
               + 0.5 * data.dof * torch.log(noise) + 0.5 * data.ssw / noise
               + 0.5 * (dev @ dev) / prior_log_sd**2)
        mg = torch.cholesky_inverse(chol)
        mg -= torch.outer(alpha, alpha)
        mg *= 0.5
        mgn = mg.numpy()
        mk = torch.from_numpy(h.T @ np.ascontiguousarray((h.T @ mgn).T))  # HᵀMH (M symmetric)
        if amp is not None:
            mk = mk * amp[:, None] * amp[None, :]
        grad = torch.zeros_like(th)
        grad[i_s1] = s1 * (mk * a1).sum()
        grad[i_s1 + 1] = s2 * (mk * m2).sum()
        # Σ_ij w_ij (u_id − u_jd)² = 2 Σ_i u_id² (W1)_i − 2 u_dᵀ W u_d (W symmetric): two
        # products instead of d passes over S × S differences
        for off, w, u in ((1, (s1 * mk) * block * q1, u1), (1 + dim, (s2 * mk) * q2, u2)):
            grad[off : off + dim] = 2.0 * ((u * u).T @ w.sum(1) - (u * (w @ u)).sum(0))
        grad[i_s1 + 2] = (noise * (mg.diagonal() * data.noise_factor).sum()
                          + 0.5 * data.dof - 0.5 * data.ssw / noise)
    if kappa_free and block_g.requires_grad:  # (a block that ignores κ: its derivative is 0)
        (gk,) = torch.autograd.grad(block_g, log_kappa, grad_outputs=(s1 * mk) * m1)
        grad[0] = gk
    grad[free] += (th - centre)[free] / prior_log_sd**2
    grad[~free] = 0.0
    return float(nll), grad


#: The least noise variance a fit may give, as a share of the prior's (a noise sd of 1 % of
#: the prior's): readings never repeat a segment's energy exactly, and near noise-free ones
#: drove the fitted noise to 0 (the exact learner then failed at its next fit, on log 0) or
#: to 4e-16 (the regional learner's core matrix lost positive definiteness): every later
#: route of the state failed.
NOISE_FLOOR_SHARE = 1e-4


def noise_floor(start: Tensor, prior_log_noise: float) -> Tensor:
    """The ``lower`` bounds of :func:`map_fit` for ``θ`` laid out as ``start`` (its last entry
    ``log ς²``): ``log(NOISE_FLOOR_SHARE · ς²_prior)`` for the noise, none for the rest."""
    lower = torch.full_like(start, -math.inf)
    lower[-1] = math.log(NOISE_FLOOR_SHARE) + float(prior_log_noise)
    return lower


def map_fit(
    data: FitData,
    graph_block: Callable[[Tensor], Tensor],
    start: Tensor,
    centre: Tensor,
    free: Tensor,
    iterations: int,
    prior_log_sd: float,
    cancel: threading.Event | None = None,
    lower: Tensor | None = None,
) -> MapFit:
    """Minimise the negative log posterior (:func:`fit_objective`) from ``start`` by L-BFGS
    (strong Wolfe).

    Parameters
    ----------
    graph_block : callable
        ``κ ↦ K_G[S, S]`` in the scale that ``θ``'s s₁ multiplies (differentiable in κ where κ
        is free; a fixed block may ignore it).
    start, centre : Tensor
        ``θ`` to start from and the centres of its log-normal priors.
    free : Tensor of bool
        Which entries of ``θ`` move (the others keep their start values).
    iterations, prior_log_sd
        L-BFGS iterations and the priors' standard deviation (natural-log units).
    cancel : threading.Event, optional
        Checked before every evaluation: :class:`FitCancelled` is raised when set.
    lower : Tensor, optional
        Least values of ``θ`` (``-inf``: none): the objective is evaluated at
        ``max(θ, lower)``, flat below it, so the point found respects them.

    Returns
    -------
    MapFit
        The best point the search evaluated and its objective (a failed line search keeps it),
        and the objective at ``start``.
    """
    theta = start.clone()
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=iterations,
                            line_search_fn="strong_wolfe")
    best = {"nll": math.inf, "theta": start.clone(), "start": math.nan}
    rows = _row_matrix(data.pos, data.wts, data.x.shape[0])

    def closure() -> Tensor:
        if cancel is not None and cancel.is_set():
            raise FitCancelled
        point = theta if lower is None else torch.maximum(theta.detach(), lower)
        out = fit_objective(point, data, graph_block, centre, free, prior_log_sd, rows)
        if out is None:  # far outside the useful range: steer the line search away
            if math.isnan(best["start"]):  # the start itself: any fitted point beats it
                best["start"] = math.inf
            theta.grad = torch.zeros_like(theta)
            return torch.tensor(1e30, dtype=theta.dtype)
        nll, grad = out
        # below a bound the objective is flat (evaluated at the bound)
        theta.grad = grad if lower is None else torch.where(theta < lower, 0.0, grad)
        if math.isnan(best["start"]):  # the first evaluation is at the start
            best["start"] = nll
        if nll < best["nll"]:
            best.update(nll=nll, theta=point.detach().clone())
        return torch.tensor(nll, dtype=theta.dtype)

    try:
        opt.step(closure)
    except (RuntimeError, ValueError):  # a failed line search keeps the best point seen
        pass
    return MapFit(best["theta"], float(best["nll"]), float(best["start"]))
