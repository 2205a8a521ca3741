"""The BOKE-family methods of Zhu et al. (arXiv:2502.06178 v1): BOKE and BOKE+ (Algorithms 2
and 3), pure density exploration (eq. 3.10), the KR-UCB baseline (App. A.2) and BOKE on a finite
candidate set with ``O(m)`` updates (Thm 4.10 setting).

Every method maps the data ``(X, y)`` on the unit cube to a :class:`Proposal`; acquisitions are
maximised by :func:`ev_nav.bo.core.maximize.maximize` with the surrogate's analytic gradients and
the same budget for every method of the study (:class:`BOKEMaximizerConfig`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ev_nav.bo.boke.surrogate import (
    DEFAULT_C_H,
    BandwidthRule,
    BetaRule,
    CandidateCache,
    bandwidth,
    beta_schedule,
    kr_posterior,
    log_density_at_data,
    log_ikr_ucb,
)
from ev_nav.bo.core.maximize import Maximum, Objective, maximize
from ev_nav.bo.core.space import Space
from ev_nav.errors import ConfigError, require_number


@dataclass(frozen=True)
class BOKEMaximizerConfig:
    """Budget of the acquisition maximiser, identical for every method of the BOKE study.

    The paper maximises every acquisition with "a multi-start strategy integrated with L-BFGS-B"
    and reports no budget; all methods here score ``N_c = n_per_dim · min(d, 4)`` (at most
    ``max_candidates``) uniform points plus the ``n_best`` best observed ones, and run L-BFGS-B
    from the top ``n_starts`` of them (docs/bo-boke.md).

    Attributes
    ----------
    n_per_dim : int
        Random candidates per input dimension (capped at 4 dimensions and ``max_candidates``).
    max_candidates : int
    n_best : int
        Best observed points added to the candidate set.
    n_starts : int
        L-BFGS-B starting points (top candidates).
    maxiter : int
        L-BFGS-B iterations; ``0`` means "best random candidate only" (no local optimisation).
    """

    n_per_dim: int = 1000
    max_candidates: int = 4000
    n_best: int = 5
    n_starts: int = 5
    maxiter: int = 50

    def __post_init__(self) -> None:
        if self.n_per_dim < 1 or self.max_candidates < 1 or self.n_starts < 1:
            raise ConfigError("acquisition optimiser needs >= 1 candidate and >= 1 start")
        if self.n_best < 0 or self.maxiter < 0:
            raise ConfigError("n_best and maxiter must be >= 0")

    def n_candidates(self, d: int) -> int:
        """Number of random candidates scored for a ``d``-dimensional problem."""
        return min(self.n_per_dim * min(d, 4), self.max_candidates)


def maximize_acquisition(
    obj: Objective,
    X: torch.Tensor,
    ys: torch.Tensor | None,
    gen: torch.Generator,
    opt: BOKEMaximizerConfig,
    candidates: torch.Tensor | None = None,
    space: Space | None = None,
) -> Maximum:
    """Maximise ``obj`` over ``[0, 1]^d`` with the study's budget.

    ``candidates`` replace the uniform raw points; the ``opt.n_best`` observed points with the
    highest ``ys`` join them (``ys=None``: none). With a ``space`` that has integer or
    categorical inputs the acquisition is scored at snapped points
    (:meth:`~ev_nav.bo.core.space.Space.discrete_objective`) and the maximiser returned snapped.
    """
    d = X.shape[1]
    extra = None
    if ys is not None and opt.n_best > 0 and X.shape[0] > 0:
        extra = X[torch.topk(ys, min(opt.n_best, X.shape[0])).indices]
    discrete = space is not None and not space.is_continuous
    best = maximize(
        space.discrete_objective(obj) if discrete else obj,
        d,
        gen,
        n_raw=opt.n_candidates(d),
        n_starts=opt.n_starts,
        maxiter=opt.maxiter,
        start_rule="top",
        raw_points=candidates,
        extra_points=extra,
    )
    # the maximiser moves the continuous coordinates; a discrete input's value is its snap
    return Maximum(space.snap(best.x), best.value) if discrete else best


@dataclass
class Proposal:
    """One query chosen by a method (unit-cube coordinates) plus a few diagnostics."""

    x: torch.Tensor
    step: str  # "ucb", "exploit", "explore", "resample", "widen", "random"
    acq_value: float = float("nan")


@dataclass
class BOKEConfig:
    """Hyperparameters of the BOKE family (unit cube, standardised responses).

    Attributes
    ----------
    varsigma : float
        Sub-Gaussian noise parameter in ``beta_t`` (standardised units). Noise-free default 0.3;
        for noisy problems the method uses ``max(varsigma, noise_std / std(y))``.
    delta : float
        Confidence parameter of ``beta_t``.
    beta_rule : {"general", "finite"}
        Thm 4.13 or Thm 4.10 schedule.
    bandwidth_rule : {"scott", "silverman", "fixed"}
    c_h : float
        Bandwidth constant (or the fixed bandwidth).
    p_ucb : float
        BOKE+ probability of an IKR-UCB step (``1`` gives BOKE).
    """

    varsigma: float = 0.3
    delta: float = 0.1
    beta_rule: BetaRule = "general"
    bandwidth_rule: BandwidthRule = "scott"
    c_h: float = DEFAULT_C_H
    p_ucb: float = 0.5

    def __post_init__(self) -> None:
        require_number(self.p_ucb, "BOKE+ p", low=0, high=1, low_open=True)
        require_number(self.varsigma, "varsigma", low=0)  # NaN passed 'varsigma < 0'
        require_number(self.delta, "delta", low=0, high=1, low_open=True, high_open=True)
        require_number(self.c_h, "c_h", low=0, low_open=True)


def standardise(y: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """``(y - mean) / std`` over the current data (std 1 when all values coincide)."""
    mu = float(y.mean())
    sd = float(y.std()) if y.numel() > 1 else 0.0
    if not sd > 1e-12:
        sd = 1.0
    return (y - mu) / sd, mu, sd


@dataclass
class BOKEMethod:
    """BOKE (``p_ucb = 1``) and BOKE+ (``p_ucb < 1``): Algorithms 2 and 3.

    Each step maximises the log-transformed IKR-UCB over the unit cube with the shared multi-start
    L-BFGS-B (analytic gradients), or — on a BOKE+ exploitation step — the NW mean itself.
    """

    config: BOKEConfig = field(default_factory=BOKEConfig)
    opt: BOKEMaximizerConfig = field(default_factory=BOKEMaximizerConfig)
    plus: bool = False
    noise_std: float = 0.0  # known observation-noise std on the raw scale (0 = noise-free)

    @property
    def name(self) -> str:
        return "boke+" if self.plus else "boke"

    def beta(self, t: int, y_std: float) -> float:
        vs = self.config.varsigma
        if self.noise_std > 0:
            vs = max(vs, self.noise_std / y_std)
        return beta_schedule(t, vs, self.config.delta, 1.0, self.config.beta_rule)

    def propose(
        self, X: torch.Tensor, y: torch.Tensor, gen: torch.Generator, space: Space | None = None
    ) -> Proposal:
        t, d = X.shape
        ys, _, sd = standardise(y)
        h = bandwidth(self.config.bandwidth_rule, t, d, self.config.c_h)
        p = self.config.p_ucb if self.plus else 1.0
        exploit = p < 1.0 and float(torch.rand((), generator=gen, dtype=torch.float64)) >= p
        if exploit:

            def obj(Z: torch.Tensor, grad: bool):
                post = kr_posterior(Z, X, ys, h, with_grad=grad)
                return post.mean, post.grad_mean

            step = "exploit"
        else:
            beta = self.beta(t, sd)
            y_min = float(ys.min())

            def obj(Z: torch.Tensor, grad: bool):
                return log_ikr_ucb(kr_posterior(Z, X, ys, h, with_grad=grad), beta, y_min)

            step = "ucb"
        x, val = maximize_acquisition(obj, X, ys, gen, self.opt, space=space)
        return Proposal(x=x, step=step, acq_value=val)


@dataclass
class DensityExploration:
    """Pure density exploration (eq. 3.10): ``x_{t+1} = argmin W_t(x)`` (responses ignored)."""

    config: BOKEConfig = field(default_factory=BOKEConfig)
    opt: BOKEMaximizerConfig = field(default_factory=BOKEMaximizerConfig)
    name: str = "de"

    def propose(
        self, X: torch.Tensor, y: torch.Tensor, gen: torch.Generator, space: Space | None = None
    ) -> Proposal:
        t, d = X.shape
        h = bandwidth(self.config.bandwidth_rule, t, d, self.config.c_h)
        zeros = torch.zeros(t, dtype=torch.float64)

        def obj(Z: torch.Tensor, grad: bool):
            post = kr_posterior(Z, X, zeros, h, with_grad=grad)
            g = None if post.grad_log_density is None else -post.grad_log_density
            return -post.log_density, g

        x, val = maximize_acquisition(obj, X, None, gen, self.opt, space=space)
        return Proposal(x=x, step="explore", acq_value=val)


@dataclass
class KRUCBConfig:
    """KR-UCB (App. A.2) constants; the paper reports none (docs/bo-boke.md)."""

    alpha: float = 0.5  # widen while t^alpha >= number of distinct points
    C: float = 1.0  # exploration constant on standardised y
    tau: float = 0.5  # kernel threshold of the widening ball, rho = h sqrt(2 ln(1/tau))
    bandwidth_rule: BandwidthRule = "scott"
    c_h: float = DEFAULT_C_H

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1 or not 0 < self.tau < 1 or not self.C > 0:
            raise ConfigError("KR-UCB needs alpha in (0,1), tau in (0,1) and C > 0")


def n_distinct(X: torch.Tensor) -> int:
    """Number of distinct rows (equivalence classes ``[x_i]``) of ``X``."""
    return int(torch.unique(X, dim=0).shape[0])


@dataclass
class KRUCBMethod:
    """KR-UCB baseline (adapted from KR-UCT): re-sample an arm or widen next to it.

    Arm scores ``U_i = m(x_i) + C sqrt(log(sum_j W(x_j)) / W(x_i))`` need ``W`` at every data point
    (``O(t^2)``). When ``t^alpha < #distinct`` the best arm is re-sampled (a duplicate point);
    otherwise ``argmin W`` inside the ball ``|x - x_best| < rho`` (intersected with the box) is
    queried, solved by the shared multi-start L-BFGS-B with a quadratic penalty outside the ball
    and a final projection onto it.
    """

    config: KRUCBConfig = field(default_factory=KRUCBConfig)
    opt: BOKEMaximizerConfig = field(default_factory=BOKEMaximizerConfig)
    name: str = "kr-ucb"

    def propose(
        self, X: torch.Tensor, y: torch.Tensor, gen: torch.Generator, space: Space | None = None
    ) -> Proposal:
        t, d = X.shape
        ys, _, _ = standardise(y)
        h = bandwidth(self.config.bandwidth_rule, t, d, self.config.c_h)
        logw_data = log_density_at_data(X, h)
        m_data = kr_posterior(X, X, ys, h).mean
        log_total = float(torch.logsumexp(logw_data, 0))  # log sum_j W(x_j) >= log t > 0
        score = m_data + self.config.C * torch.sqrt(max(log_total, 0.0) * torch.exp(-logw_data))
        best = int(torch.argmax(score))
        x_tilde = X[best]
        if t**self.config.alpha < n_distinct(X):
            return Proposal(x=x_tilde.clone(), step="resample", acq_value=float(score[best]))
        rho = h * math.sqrt(2.0 * math.log(1.0 / self.config.tau))
        zeros = torch.zeros(t, dtype=torch.float64)
        penalty = 1e4 / (rho * rho)

        def obj(Z: torch.Tensor, grad: bool):
            post = kr_posterior(Z, X, zeros, h, with_grad=grad)
            diff = Z - x_tilde
            excess = ((diff * diff).sum(1) - rho * rho).clamp_min(0.0)
            val = -post.log_density - penalty * excess * excess
            if not grad:
                return val, None
            g = -post.grad_log_density - (4.0 * penalty * excess)[:, None] * diff
            return val, g

        starts = _ball_samples(x_tilde, rho, self.opt.n_candidates(d), gen)
        x, val = maximize_acquisition(obj, X, ys, gen, self.opt, candidates=starts)
        # project onto the ball, then the box; clipping cannot leave the ball since x_tilde is in it
        diff = x - x_tilde
        norm = float(diff.norm())
        if norm > rho:
            x = x_tilde + diff * (rho / norm)
        x = x.clamp(0.0, 1.0)
        # discrete inputs: the nearest valid point (it may leave the ball by less than a cell)
        return Proposal(x=x if space is None else space.snap(x), step="widen", acq_value=val)


def _ball_samples(centre: torch.Tensor, rho: float, n: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` uniform points in the ball ``B(centre, rho)``, clipped to the unit box."""
    d = centre.shape[0]
    g = torch.randn(n, d, generator=gen, dtype=torch.float64)
    g /= g.norm(dim=1, keepdim=True).clamp_min(1e-300)
    r = rho * torch.rand(n, 1, generator=gen, dtype=torch.float64) ** (1.0 / d)
    return (centre + g * r).clamp(0.0, 1.0)


# --------------------------------------------------------------------------------------------
# finite decision sets: the incremental path (Thm 4.10 setting)
# --------------------------------------------------------------------------------------------
class FiniteBOKE:
    """BOKE on a finite candidate set with a fixed bandwidth, updated in ``O(m)`` per observation.

    The surrogate lives entirely in a :class:`CandidateCache`, so :meth:`observe` costs
    ``O(m d)`` and :meth:`suggest` ``O(m)``, whatever the number of past observations.
    ``beta_t`` follows Thm 4.10 (``4 varsigma^2 log t``) by default.
    """

    def __init__(
        self,
        candidates: torch.Tensor,
        h: float,
        varsigma: float = 0.3,
        delta: float = 0.1,
        beta_rule: BetaRule = "finite",
    ) -> None:
        self.cache = CandidateCache(candidates, h)
        self.varsigma, self.delta, self.beta_rule = varsigma, delta, beta_rule
        self._sum = 0.0
        self._sumsq = 0.0

    def observe(self, index: int, y: float) -> None:
        """Record response ``y`` at candidate ``index``."""
        self.cache.add(self.cache.candidates[index], y)
        self._sum += float(y)
        self._sumsq += float(y) ** 2

    def suggest(self) -> int:
        """Index of the candidate maximising IKR-UCB on standardised responses."""
        n = self.cache.n_obs
        post = self.cache.posterior()
        mu = self._sum / n
        var = (self._sumsq - n * mu * mu) / max(n - 1, 1)
        sd = math.sqrt(var) if var > 1e-24 else 1.0
        post.mean = (post.mean - mu) / sd
        beta = beta_schedule(max(n, 1), self.varsigma, self.delta, 1.0, self.beta_rule)
        y_min = float(post.mean.min())
        g, _ = log_ikr_ucb(post, beta, y_min)
        return int(torch.argmax(g))
