"""BO with *unknown* random costs per variable subset (Hoang, Nguyen & Tran, AAAI 2025).

The learner never sees the mean costs, only the realised cost of each of its own plays. The method
(:class:`UnknownCostCVS`) runs in two phases:

1. **Exploration** — round-robin over all control sets, each played at its expected-UCB maximiser;
   the running optimistic value of each set (``min`` over its plays of ``max E[u]``) and the best
   pessimistic value (``max`` of ``max E[l]``) are kept as intersected confidence bounds.
2. **Exploitation** — keep the sets whose optimistic value reaches the tolerance threshold
   ``lcb_bar − α |lcb_bar|`` (``= (1 − α) lcb_bar`` for non-negative objectives), and among them
   play the one with the smallest *cost* lower confidence bound
   ``max(ĉ_i − sqrt(2 ln t / n_i), 0)``, at its expected-UCB maximiser.

Two forms are provided: ``paper`` (Algorithm 1: ``τ`` plays per set, fixed ``α``) and
``practical`` (the experiments: explore while spend ≤ 60 % of the budget, ``α`` halved every ``d``
exploitation evaluations). Baselines (UCB-PSQ, TS-PSQ, UCB-CVS, ETC-50 with size groups) are the
known-cost policies of :mod:`ev_nav.bo.cvs.policies`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ev_nav.bo.cvs.acquisition import confidence_bound
from ev_nav.bo.cvs.policies import BOContext, Decision, _Base
from ev_nav.errors import ConfigError

# --------------------------------------------------------------------------- pure rules


def cost_lcb(observed: Sequence[float], t: int, clip: bool = True) -> float:
    """Bandit lower confidence bound on a set's mean cost.

    ``mean − sqrt(2 ln(max(t, 2)) / n)``; ``−inf`` for a set never played (optimism), and
    clipped at 0 when ``clip`` (the paper's rule; the official code does not clip).
    """
    n = len(observed)
    lcb = (
        -math.inf if n == 0 else float(np.mean(observed)) - math.sqrt(2.0 * math.log(max(t, 2)) / n)
    )
    return max(lcb, 0.0) if clip else lcb


def choose_cheapest(
    feasible: Sequence[int],
    cost_obs: Sequence[Sequence[float]],
    t: int,
    values: Sequence[float],
    clip: bool = True,
) -> int:
    """Among ``feasible`` sets, the smallest cost LCB; ties broken by the larger ``values[i]``."""
    if not feasible:
        raise ConfigError("no feasible control set to choose from")
    lcbs = {i: cost_lcb(cost_obs[i], t, clip) for i in feasible}
    low = min(lcbs.values())
    tied = [i for i in feasible if lcbs[i] <= low + 1e-12]
    return max(tied, key=lambda i: values[i])


def feasible_sets(ucb_bar: Sequence[float], lcb_bar: float, alpha: float) -> list[int]:
    """``{i : ucb_bar_i ≥ lcb_bar − α |lcb_bar|}`` (sign-safe form of ``(1 − α) lcb_bar``)."""
    thr = lcb_bar - alpha * abs(lcb_bar)
    return [i for i, u in enumerate(ucb_bar) if u >= thr]


# --------------------------------------------------------------------------- the method


@dataclass(frozen=True)
class UCVSConfig:
    """Hyper-parameters of the unknown-cost method.

    Attributes
    ----------
    mode
        ``"paper"`` (``τ`` exploration plays per set, fixed ``α``) or ``"practical"``
        (exploration while spend ≤ ``explore_frac`` · budget; ``α`` halved every
        ``alpha_halve_every`` exploitation evaluations).
    tau
        Exploration plays per set in paper mode.
    explore_frac
        Budget fraction spent on exploration in practical mode.
    alpha
        Initial tolerance ``α`` ∈ [0, 1).
    alpha_halve_every
        Exploitation evaluations between halvings (practical mode; ``None`` = input dimension).
    beta_lcb
        Multiplier of σ in the lower bound (``None`` = the loop's β).
    clip_cost_lcb
        Clip the cost LCB at 0 (paper) or not (official code).
    intersect
        Keep running min/max of the bounds (paper) or use only the current ones.
    refit_at_exploit
        Fit the GP hyperparameters (ML-II, ARD) once when exploitation starts and reset the
        intersections to the refitted model's bounds (the "paper mode" of docs/bo-cvs.md);
        hyperparameters stay fixed otherwise, so the intersections remain meaningful.
    """

    mode: str = "practical"
    tau: int = 10
    explore_frac: float = 0.6
    alpha: float = 0.1
    alpha_halve_every: int | None = None
    beta_lcb: float | None = None
    clip_cost_lcb: bool = True
    intersect: bool = True
    refit_at_exploit: bool = True

    def __post_init__(self) -> None:
        if self.mode not in ("paper", "practical"):
            raise ConfigError("mode must be 'paper' or 'practical'")
        if not 0.0 <= self.alpha < 1.0 or not 0.0 < self.explore_frac <= 1.0 or self.tau < 1:
            raise ConfigError("need 0 <= alpha < 1, 0 < explore_frac <= 1 and tau >= 1")


class UnknownCostCVS(_Base):
    """The proposed method (Algorithm 1 and its practical budget form); reads no mean costs."""

    def __init__(self, config: UCVSConfig | None = None, name: str = "ucvs") -> None:
        self.config = config or UCVSConfig()
        self.name = name
        self.n_explore = 0
        self.n_exploit = 0
        self.ucb_hist: list[list[float]] | None = None
        self.lcb_bar = -math.inf
        self.ucb_bar: list[float] | None = None
        self.last_feasible: list[int] = []

    # -- helpers
    def _max_lcb(self, ctx: BOContext, sets: Sequence[int]) -> float:
        """``max_{i ∈ sets} max_{x^i} E l``; with a full set only it is needed, because
        ``max_x l(x) ≥ E l([x^i, X^{-i}])`` for every partial query."""
        lcb_fn = self._lcb(ctx)
        full = ctx.problem.full_set
        if full is not None:
            return ctx.optimise(lcb_fn, full).value
        return max(ctx.optimise(lcb_fn, i).value for i in sets)

    def _lcb(self, ctx: BOContext):
        beta = ctx.beta if self.config.beta_lcb is None else self.config.beta_lcb
        return lambda X: confidence_bound(ctx.model, X, -beta)

    def _exploring(self, ctx: BOContext) -> bool:
        m = ctx.problem.m
        if self.config.mode == "paper":
            return self.n_explore < m * self.config.tau
        # practical: keep cycling while the spend is within the exploration budget
        return ctx.spent <= self.config.explore_frac * ctx.budget

    def alpha_now(self, dim: int) -> float:
        """Tolerance for the next exploitation step."""
        if self.config.mode == "paper":
            return self.config.alpha
        every = self.config.alpha_halve_every or dim
        return self.config.alpha * 0.5 ** (self.n_exploit // every)

    # -- policy
    def select(self, ctx: BOContext) -> Decision:
        m = ctx.problem.m
        if self.ucb_hist is None:
            self.ucb_hist = [[] for _ in range(m)]
        if self._exploring(ctx):
            i = self.n_explore % m
            self.n_explore += 1
            x, val = ctx.optimise_ucb(i)
            self.ucb_hist[i].append(val)
            lval = self._max_lcb(ctx, [i])
            self.lcb_bar = max(self.lcb_bar, lval)
            return Decision(i, x, (val, lval), "explore")
        return self._exploit(ctx)

    def on_refit(self, ctx: BOContext) -> None:
        """Bounds of the old model are not valid for the refitted one: restart the running
        intersections (exploration's history and the exploitation bounds)."""
        if self.ucb_hist is not None:
            self.ucb_hist = [[] for _ in self.ucb_hist]
        if self.ucb_bar is not None:
            self.ucb_bar = [math.inf] * len(self.ucb_bar)
        self.lcb_bar = -math.inf

    def _exploit(self, ctx: BOContext) -> Decision:
        m, cfg = ctx.problem.m, self.config
        assert self.ucb_hist is not None
        if self.ucb_bar is None:  # first exploitation step: intersections over exploration
            self.ucb_bar = [min(h) if h else math.inf for h in self.ucb_hist]
            if cfg.refit_at_exploit and ctx.refit():
                self.on_refit(ctx)
        ucb = [ctx.optimise_ucb(i) for i in range(m)]
        lcb_now = self._max_lcb(ctx, range(m))
        u_now = [u.value for u in ucb]
        if cfg.intersect:
            self.lcb_bar = max(self.lcb_bar, lcb_now)
            self.ucb_bar = [min(a, b) for a, b in zip(self.ucb_bar, u_now, strict=True)]
        else:
            self.lcb_bar, self.ucb_bar = lcb_now, list(u_now)
        alpha = self.alpha_now(ctx.problem.dim)
        feas = feasible_sets(self.ucb_bar, self.lcb_bar, alpha)
        if not feas:  # lines 17-20: drop the intersection and retry with current bounds
            self.lcb_bar, self.ucb_bar = lcb_now, list(u_now)
            feas = feasible_sets(self.ucb_bar, self.lcb_bar, alpha)
        if not feas:
            feas = [int(np.argmax(u_now))]
        self.last_feasible = feas
        i = choose_cheapest(feas, ctx.cost_obs, ctx.t + 1, u_now, cfg.clip_cost_lcb)
        self.n_exploit += 1
        return Decision(i, ucb[i].x, tuple(u_now), "exploit")
