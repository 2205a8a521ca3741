"""Exploration schedules β_t and per-segment index rules (spec §6, Algorithm 2).

Energy is *minimised*, so the optimistic index is a lower confidence bound
``μ̃ = μ − √β_t σ`` (UCB, BUCB), a posterior sample (TS), or the mean (greedy): each rule gives a
standard score ``z`` per segment (``μ̃ = μ + z σ``). :func:`rectified_weights` turns it into
non-negative Dijkstra weights: in the product, the rule's value of each segment's loss under the
posterior truncated to physically possible (non-negative) losses; in the paper's reproductions,
Algorithm 2's ``E[max(0, μ̃ + ε)]``, ``ε ~ N(0, ς²)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import erfinv, log_ndtr, ndtr, ndtri, ndtri_exp

from ev_nav.errors import ConfigError

SQRT_2PI = math.sqrt(2.0 * math.pi)
LOG_SQRT_2PI = math.log(SQRT_2PI)


# ------------------------------------------------------------------------------- β schedules
def beta_ucb(t: int | ArrayLike, n_arms: int) -> NDArray[np.float64]:
    """GP-UCB schedule of Thm 3.1: ``β_t = 2 log(|A| t² / √(2π))``.

    Parameters
    ----------
    t : int or array_like
        Trip number(s), starting at 1.
    n_arms : int
        Number of base arms |A| (road segments).
    """
    t = np.asarray(t, dtype=np.float64)
    return 2.0 * np.log(n_arms * t**2 / SQRT_2PI)


def bucb_eta(t: int | ArrayLike, n_arms: int, omega: float = 1.0, xi: float = 1.0):
    """Quantile parameter of GP-BUCB: ``η_t = (2π)^{ω/2} / (2 |A|^ω t^ξ)``."""
    t = np.asarray(t, dtype=np.float64)
    return (2.0 * math.pi) ** (omega / 2.0) / (2.0 * float(n_arms) ** omega * t**xi)


def beta_bucb(
    t: int | ArrayLike, n_arms: int, omega: float = 1.0, xi: float = 1.0
) -> NDArray[np.float64]:
    """GP-BUCB schedule: ``β_t = 2 (erf⁻¹(1 − 2η_t))²`` (0 once η_t ≥ 1/2).

    The (1 − η_t)-quantile of N(μ, σ²) is μ + σ √2 erf⁻¹(1 − 2η_t), i.e. GP-UCB with this β_t.
    """
    eta = np.minimum(bucb_eta(t, n_arms, omega, xi), 0.5)
    return 2.0 * erfinv(1.0 - 2.0 * eta) ** 2


def beta_quantile(t: int | ArrayLike) -> NDArray[np.float64]:
    """Algorithm 2's simpler Bayes-UCB quantile Q(1/t): ``√β_t = Φ⁻¹(1 − 1/t)``.

    **[decision]** At t = 1 the quantile Q(1) is infinite (pessimistic); we use the median
    (β_1 = 0) there, which is the limit of the rule from t = 2 on.
    """
    t = np.asarray(t, dtype=np.float64)
    return np.maximum(ndtri(1.0 - 1.0 / np.maximum(t, 1.0)), 0.0) ** 2


#: Named schedules, ``name -> f(t, n_arms, **params)``.
BETA_SCHEDULES: dict[str, Callable[..., NDArray[np.float64]]] = {
    "ucb": lambda t, n_arms, **_: beta_ucb(t, n_arms),
    "bucb": lambda t, n_arms, omega=1.0, xi=1.0, **_: beta_bucb(t, n_arms, omega, xi),
    "quantile": lambda t, n_arms, **_: beta_quantile(t),
}


@dataclass(frozen=True)
class BetaSchedule:
    """A named β_t schedule with its parameters and an optional scale factor.

    ``BetaSchedule("ucb", scale=0.5)`` is the paper's "GP-UCB with β scaled by 0.5".
    """

    name: str = "ucb"
    scale: float = 1.0
    omega: float = 1.0
    xi: float = 1.0

    def __post_init__(self) -> None:
        if self.name not in BETA_SCHEDULES:
            raise ConfigError(
                f"unknown beta schedule {self.name!r}; choose one of {sorted(BETA_SCHEDULES)}"
            )
        if not self.scale >= 0:
            raise ConfigError(f"beta scale must be >= 0, got {self.scale}")

    def __call__(self, t: int | ArrayLike, n_arms: int) -> NDArray[np.float64]:
        """β_t for trip(s) ``t`` on a network with ``n_arms`` segments."""
        beta = BETA_SCHEDULES[self.name](t, n_arms, omega=self.omega, xi=self.xi)
        return self.scale * beta


# ------------------------------------------------------------------------------- rectification
def rectify(mu_tilde: ArrayLike, noise_std: float | ArrayLike) -> NDArray[np.float64]:
    """``E[max(0, z)]`` for ``z ~ N(μ̃, ς²)``: ``μ̃ Φ(μ̃/ς) + ς φ(μ̃/ς)``, vectorised.

    Always ≥ 0 (clipped against round-off far in the negative tail); equals ``max(μ̃, 0)`` when
    ``ς = 0``.
    """
    mu = np.asarray(mu_tilde, dtype=np.float64)
    s = np.asarray(noise_std, dtype=np.float64)
    if np.all(s == 0):
        return np.maximum(mu, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = mu / s
        out = mu * ndtr(z) + s * np.exp(-0.5 * z * z) / SQRT_2PI
    out = np.where(s > 0, out, np.maximum(mu, 0.0))
    return np.maximum(out, 0.0)


# ------------------------------------------------------------------------------- index rules
class Posterior(Protocol):
    """What an index rule needs from a model's posterior (see ``ev_nav.gp.posterior``)."""

    mean: NDArray[np.float64]
    std: NDArray[np.float64]
    noise_std: float


class IndexRule(Protocol):
    """Where in each segment's posterior a rule looks: a standard score ``z`` per segment (the
    optimistic energy is ``μ̃ = μ + z σ``), or ``None`` for the posterior mean."""

    name: str

    def score(
        self, posterior: Posterior, t: int, rng: np.random.Generator
    ) -> NDArray[np.float64] | float | None: ...

    def __call__(
        self, posterior: Posterior, t: int, rng: np.random.Generator
    ) -> NDArray[np.float64]: ...


class _ScoredRule:
    """``μ̃ = μ + z σ`` from the rule's :meth:`score` (the paper's optimistic energy)."""

    def score(
        self, posterior: Posterior, t: int, rng: np.random.Generator
    ) -> NDArray[np.float64] | float | None:
        raise NotImplementedError

    def __call__(self, posterior: Posterior, t: int, rng: np.random.Generator):
        z = self.score(posterior, t, rng)
        if z is None:
            return np.array(posterior.mean, dtype=np.float64, copy=True)
        return posterior.mean + z * posterior.std


@dataclass(frozen=True)
class LowerConfidenceIndex(_ScoredRule):
    """UCB / BUCB for minimisation: ``μ̃ = μ − √β_t σ`` (``z = −√β_t``)."""

    schedule: BetaSchedule = field(default_factory=BetaSchedule)
    name: str = "ucb"

    def score(self, posterior: Posterior, t: int, rng: np.random.Generator) -> float:
        beta = float(self.schedule(t, posterior.mean.shape[0]))
        return -math.sqrt(max(beta, 0.0))


@dataclass(frozen=True)
class ThompsonIndex(_ScoredRule):
    """Thompson sampling: ``μ̃ ~ N(μ, σ²)`` per segment.

    ``joint=False`` (``ts``, spec §6, the paper's form): each segment drawn independently.
    ``joint=True`` (``ts-joint``, the textbook form): one draw from the model's joint
    posterior (:meth:`~ev_nav.gp.posterior.SegmentPosterior.joint_scores`), so correlated
    segments move together; models without a joint form (BI) draw exactly as ``ts`` does.
    ``scale`` multiplies the variance the draws are taken from (the standard score by
    ``√scale``), as ``BetaSchedule.scale`` multiplies UCB's β: below 1 the rule explores less
    (``docs/objective.md`` measures it), 0 is the posterior mean.
    """

    name: str = "ts"
    joint: bool = False
    scale: float = 1.0

    def __post_init__(self) -> None:
        if not (self.scale >= 0 and math.isfinite(self.scale)):
            raise ConfigError(f"Thompson sampling's scale must be a number >= 0, got {self.scale}")

    def score(self, posterior: Posterior, t: int, rng: np.random.Generator):
        joint_scores = getattr(posterior, "joint_scores", None)
        if self.joint and joint_scores is not None:
            z = joint_scores(rng)
        else:
            z = rng.standard_normal(posterior.mean.shape[0])
        return z if self.scale == 1.0 else math.sqrt(self.scale) * z


@dataclass(frozen=True)
class MeanIndex(_ScoredRule):
    """Greedy: the posterior mean (no exploration). For drivers who want the best guess."""

    name: str = "mean"

    def score(self, posterior: Posterior, t: int, rng: np.random.Generator) -> None:
        return None


@dataclass(frozen=True)
class SafeIndex(_ScoredRule):
    """Risk-averse (for a driver short of charge): the upper ``quantile`` of each segment's
    energy, ``μ + z σ``. Summed along a route this bounds the route's upper quantile from above
    (exactly so for fully correlated segments), so the route minimising it is the one least
    likely to need much more energy than predicted. Never explores."""

    name: str = "safe"
    quantile: float = 0.95

    def score(self, posterior: Posterior, t: int, rng: np.random.Generator) -> float:
        return float(ndtri(self.quantile))


@dataclass(frozen=True)
class RouteConfidenceIndex(_ScoredRule):
    """UCB / BUCB on a route's **total** loss: the route minimising
    ``Σ E[ℓ_e] − √β_t √(Σ Var ℓ_e)`` (``ucb-route``, ``bucb-route``).

    The per-segment rules (:class:`LowerConfidenceIndex`) sum each segment's lower bound, so a
    route of ``m`` unexplored segments is made ``√β_t Σ σ_e`` cheaper than expected, about
    ``√m`` times more than a lower confidence bound of its total at the same level
    (``√β_t √(Σ σ_e²)``). The search (:func:`route_confidence_path`) needs the route's variance,
    which is not a sum of per-segment weights, so this rule has no per-segment weight: its
    :meth:`score` is ``None`` (the weights are the posterior's expected losses) and
    :class:`~ev_nav.bandits.agent.Agent` plans it by a parametric search. Segments are taken
    as independent, as in the per-segment rules and ``ts``.
    """

    schedule: BetaSchedule = field(default_factory=BetaSchedule)
    name: str = "ucb-route"

    def sqrt_beta(self, t: int, n_segments: int) -> float:
        """``√β_t`` of trip ``t`` on a network of ``n_segments`` segments."""
        return math.sqrt(max(float(self.schedule(t, n_segments)), 0.0))

    def score(self, posterior: Posterior, t: int, rng: np.random.Generator) -> None:
        return None


def truncated_variance(mean: ArrayLike, std: ArrayLike) -> NDArray[np.float64]:
    """Variance of ``N(m, s²)`` conditioned on being ``≥ 0`` [Wh²]: ``s² (1 − aλ − λ²)`` with
    ``a = m/s`` and ``λ = φ(a)/Φ(a)`` (0 where ``s = 0``)."""
    m = np.asarray(mean, dtype=np.float64)
    s = np.asarray(std, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = m / s
        lam = _inverse_mills(a)
        out = s * s * (1.0 - a * lam - lam * lam)
    return np.where(s > 0, np.clip(out, 0.0, s * s), 0.0)


#: Share of a segment's expected loss below which :func:`route_confidence_path` does not lower
#: its weight.
CLIP_SHARE = 1e-3


def route_confidence_path(
    route: Callable[[NDArray[np.float64]], NDArray[np.int64]],
    mean: NDArray[np.float64],
    var: NDArray[np.float64],
    sqrt_beta: float,
    n_refs: int = 16,
) -> NDArray[np.int64]:
    """A route of least ``Σ mean − √β √(Σ var)`` (its total's lower confidence bound) among
    candidates found by ``route``, a shortest-path search on non-negative per-segment weights
    (e.g. ``lambda w: router.route(w, start, goal)``).

    The objective is concave in a route's (mean, variance) pair, so its minimum lies on a
    vertex of their convex hull, each the shortest route under ``mean − λ var`` for some
    ``λ > 0``. Those weights can be negative and a shortest simple path under negative weights
    is NP-hard, so the search is a heuristic over three families of weights, each floored at
    :data:`CLIP_SHARE` of the segment's expected loss and each route found judged by the exact
    objective. (Floored at 0, routes through clipped segments would all cost nothing there and
    the router's tie-break would take the one of fewest segments; the floor takes the one of
    least expected loss.) The families:

    * the tangent ``mean − λ var`` and the concave ``mean − √β (√(s² + var) − s)`` (the
      bound's gain from adding a segment to a route of variance ``s²``, which does not
      overstate long uncertain segments as the tangent does) for ``n_refs`` values of ``s``
      spaced geometrically over ``[√S₀, √Σvar]`` — the best route's variance is at least the
      expected-loss route's ``S₀`` (one with less variance and more mean is worse) and at
      most the whole network's — with ``λ = √β / (2s)``;
    * the per-segment bounds ``mean − k σ`` for five ``k`` from ``√β/16`` to ``√β``.

    The expected-loss route and the per-segment bounds' route at ``k = √β`` (floored likewise)
    are candidates, so the result's bound is never above theirs.
    """
    best = route(mean)
    s0 = float(var[best].sum())
    best_value = float(mean[best].sum()) - sqrt_beta * math.sqrt(s0)
    total = float(var.sum())
    if not (sqrt_beta > 0 and total > 0):
        return best
    refs = np.geomspace(math.sqrt(max(s0, total * 1e-12)), math.sqrt(total), n_refs)
    sd = np.sqrt(var)
    bonuses = chain(  # made one at a time: each is a per-segment array
        (sqrt_beta * (np.sqrt(r * r + var) - r) for r in refs),
        (sqrt_beta / (2.0 * r) * var for r in refs),
        (k * sd for k in sqrt_beta * np.geomspace(1.0 / 16.0, 1.0, 5)),
    )
    floor = CLIP_SHARE * mean
    seen = {best.tobytes()}
    for bonus in bonuses:
        path = route(np.maximum(mean - bonus, floor))
        key = path.tobytes()
        if key in seen:
            continue
        seen.add(key)
        value = float(mean[path].sum()) - sqrt_beta * math.sqrt(float(var[path].sum()))
        if value < best_value:
            best, best_value = path, value
    return best


#: Policies that bound each route's total (:class:`RouteConfidenceIndex`): they need the
#: reduced-cost rectification.
ROUTE_POLICIES: tuple[str, ...] = ("bucb-route", "ucb-route")


def make_index(
    policy: str, *, beta_scale: float = 1.0, omega: float = 1.0, xi: float = 1.0
) -> IndexRule:
    """Index rule by name: ``ucb``, ``bucb``, ``bucb-quantile``, ``ucb-route``, ``bucb-route``,
    ``ts``, ``ts-joint``, ``mean`` or ``safe``. ``beta_scale`` multiplies the β of the
    confidence rules and the variance of Thompson sampling's draws."""
    if not isinstance(policy, str):
        raise ConfigError(f"a policy is a name (ts, bucb, ucb, mean, ...), got {policy!r}")
    policy = policy.lower()
    if policy == "ucb":
        return LowerConfidenceIndex(BetaSchedule("ucb", scale=beta_scale), name="ucb")
    if policy == "bucb":
        return LowerConfidenceIndex(
            BetaSchedule("bucb", scale=beta_scale, omega=omega, xi=xi), name="bucb"
        )
    if policy == "bucb-quantile":
        return LowerConfidenceIndex(
            BetaSchedule("quantile", scale=beta_scale), name="bucb-quantile"
        )
    if policy in ROUTE_POLICIES:
        schedule = (BetaSchedule("ucb", scale=beta_scale) if policy == "ucb-route"
                    else BetaSchedule("bucb", scale=beta_scale, omega=omega, xi=xi))
        return RouteConfidenceIndex(schedule, name=policy)
    if policy == "ts":
        return ThompsonIndex(scale=beta_scale)
    if policy == "ts-joint":
        return ThompsonIndex(name="ts-joint", joint=True, scale=beta_scale)
    if policy == "mean":
        return MeanIndex()
    if policy == "safe":
        return SafeIndex()
    raise ConfigError(
        f"unknown policy {policy!r}; choose ts, ts-joint, bucb, bucb-quantile, ucb, "
        "bucb-route, ucb-route, mean or safe"
    )


def truncated_mean(mean: ArrayLike, std: ArrayLike) -> NDArray[np.float64]:
    """Mean of ``N(m, s²)`` conditioned on being ``≥ 0``: ``m + s φ(m/s) / Φ(m/s)`` [Wh].

    Computed through ``log Φ`` so that it stays accurate far in the tails; ``max(m, 0)`` where
    ``s = 0`` (a loss known exactly).
    """
    m = np.asarray(mean, dtype=np.float64)
    s = np.asarray(std, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = m + s * _inverse_mills(m / s)
    return np.where(s > 0, np.maximum(out, 0.0), np.maximum(m, 0.0))


def _inverse_mills(a: NDArray[np.float64]) -> NDArray[np.float64]:
    """``φ(a)/Φ(a)`` through ``log Φ`` (accurate far in the negative tail)."""
    return np.exp(-0.5 * a * a - LOG_SQRT_2PI - log_ndtr(a))


def truncated_quantile(
    mean: ArrayLike, std: ArrayLike, score: ArrayLike
) -> NDArray[np.float64]:
    """The quantile at level ``Φ(z)`` of ``N(m, s²)`` conditioned on being ``≥ 0`` [Wh].

    ``Q = m − s Φ⁻¹(Φ(−z) Φ(m/s))`` (``log Φ`` and :func:`scipy.special.ndtri_exp` keep it
    accurate in the tails). It is ``m + z s`` when the constraint is far (``m ≫ s``), always
    positive when ``s > 0``, and ``max(m, 0)`` where ``s = 0``.
    """
    z = np.asarray(score, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return truncated_quantile_from_tail(mean, std, log_ndtr(-z))


def truncated_quantile_from_tail(
    mean: ArrayLike, std: ArrayLike, log_tail: ArrayLike
) -> NDArray[np.float64]:
    """:func:`truncated_quantile` given ``log Φ(−z)`` (the log of the probability above the
    level ``Φ(z)``) instead of the score ``z`` [Wh]. A score drawn by inversion, ``z = Φ⁻¹(u)``,
    has ``log Φ(−z) = log(1 − u)``, which needs neither ``Φ⁻¹`` nor ``log Φ``
    (:meth:`ev_nav.bandits.routing.SeededScores.log_tails`).
    """
    m = np.asarray(mean, dtype=np.float64)
    s = np.asarray(std, dtype=np.float64)
    t = np.asarray(log_tail, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = m - s * ndtri_exp(t + log_ndtr(m / s))
    return np.where(s > 0, np.maximum(out, 0.0), np.maximum(m, 0.0))


def rectified_weights(
    rule: IndexRule,
    posterior: Posterior,
    t: int,
    rng: np.random.Generator,
    potential_change: NDArray[np.float64] | None = None,
    loss_bound: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """Per-segment Dijkstra weights [Wh] of ``rule`` for trip ``t``.

    With the segments' ``ΔΦ`` (:func:`ev_nav.potential.potential_change`; the product) the
    weight is the rule's value of the segment's **loss** ``ℓ = f − ΔΦ``, which physics makes
    ``≥ 0``: the GP posterior ``N(μ − ΔΦ, σ²)`` of the loss conditioned on ``ℓ ≥ 0`` (a
    truncated normal) is summarised by its mean (``mean``), a draw from it (``ts``, by the
    rule's standard score through the inverse CDF), or its lower quantile at level
    ``Φ(−√β_t)`` (``ucb``, ``bucb``; the upper one for ``safe``). A route's energy is
    ``Φ(goal) − Φ(start)`` plus its weights' sum, so the weights are non-negative (Dijkstra-safe)
    and nothing else is added to them: with the truth as the mean and ``σ = 0`` every rule's
    weight is the true loss and the planned route is the energy-optimal one. See
    ``docs/objective.md``.

    ``loss_bound`` (with ``potential_change``; e.g. :func:`ev_nav.potential.loss_lower_bound`)
    truncates the loss posterior at that physical bound instead of at 0, so every weight is at
    least its bound and a goal-directed :class:`~ev_nav.bandits.routing.Router` built on it
    (``Router(net, loss_bound)``) routes exactly. Off by default: it changes the weights.

    Without ``potential_change`` (the paper's reproductions) this is Algorithm 2:
    ``E[max(0, μ̃ + ε)]`` with ``ε ~ N(0, ς²)``, which values a regenerating segment like a free
    one and adds about ``0.4 ς`` to every segment whose energy is near zero.
    """
    if potential_change is None:
        return rectify(rule(posterior, t, rng), posterior.noise_std)
    loss_mean = posterior.mean - potential_change
    bound = 0.0 if loss_bound is None else np.asarray(loss_bound, dtype=np.float64)
    z = rule.score(posterior, t, rng)
    if z is None:
        return bound + truncated_mean(loss_mean - bound, posterior.std)
    return bound + truncated_quantile(loss_mean - bound, posterior.std, z)
