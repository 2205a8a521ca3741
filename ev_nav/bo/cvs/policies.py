"""UCB-CVS (Tay et al. 2023), its explore-then-commit variants and the baselines.

All algorithms are *policies*: given the current :class:`BOContext` (problem, GP posterior, Monte
Carlo matrix, observed costs) they return a :class:`Decision` — which control set to play and its
control values. :func:`run_episode` owns everything else: the initial design, budget accounting,
drawing the random variables, noisy observations, GP updates and the per-iteration record.

Policies
--------
* :class:`UCBCVS` — Algorithm 1 with a pluggable ε-schedule (``ε ≡ 0`` is UCB-PSQ without the
  full-set shortcut).
* :class:`UCBPSQ` — cost-blind UCB over partially specified queries (full-set shortcut).
* :class:`ETC` — explore-then-commit UCB-CVS (ETC-50, ETC-100, ETC-Ada), the evaluated form.
* :class:`TSPSQ` — Thompson sampling with random Fourier features (full-set shortcut).
* :class:`PerCost` — the naive "acquisition per unit cost" baselines (UCB and TS).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from ev_nav.bo.acquisition import (
    MaximizerConfig,
    confidence_bound,
    maximize_over_set,
    single_threaded,
)
from ev_nav.bo.problems import Budget, Problem
from ev_nav.errors import ConfigError
from ev_nav.gp.exact import (
    ExactGP,
    RandomFourierFeatures,
    rff_posterior_sample,
    stationary_kernel,
)

DTYPE = torch.float64

# --------------------------------------------------------------------------- loop objects


@dataclass
class BOContext:
    """What a policy may look at when it chooses the next query.

    Mean costs are deliberately absent: a policy that needs them (UCB-CVS, ETC, per-cost
    baselines) receives them in its constructor; the unknown-cost method sees only
    ``cost_obs``, the realised costs of its own past plays.
    """

    problem: Problem
    model: ExactGP
    S: Tensor
    generator: torch.Generator
    maximizer: MaximizerConfig
    beta: float
    t: int = 0
    spent: float = 0.0
    budget: float = 0.0
    plays: list[int] = field(default_factory=list)
    cost_obs: list[list[float]] = field(default_factory=list)

    @property
    def remaining(self) -> float:
        return self.budget - self.spent

    def ucb(self, X: Tensor) -> Tensor:
        return confidence_bound(self.model, X, self.beta)

    def optimise(self, fn: Callable[[Tensor], Tensor], set_idx: int) -> tuple[float, Tensor]:
        """``max_{x^i} E fn([x^i, X^{-i}])`` for control set ``set_idx``."""
        p = self.problem
        return maximize_over_set(
            fn, p.dim, p.control_sets[set_idx], self.S, self.generator, self.maximizer
        )

    def optimise_ucb(self, set_idx: int) -> tuple[float, Tensor]:
        return self.optimise(self.ucb, set_idx)


@dataclass(frozen=True)
class Decision:
    """A chosen control set, its control values, and the acquisition values behind the choice."""

    set_idx: int
    x_ctrl: Tensor
    values: tuple[float, ...] = ()
    phase: str = ""


class Policy(Protocol):
    """One BO algorithm: choose the next partial query; optionally learn from realised costs."""

    name: str

    def select(self, ctx: BOContext) -> Decision: ...

    def observe(self, ctx: BOContext, set_idx: int, cost: float) -> None: ...


class _Base:
    name = "base"

    def observe(self, ctx: BOContext, set_idx: int, cost: float) -> None:  # noqa: B027
        """Default: ignore realised costs."""


# --------------------------------------------------------------------------- selection rules


def select_cvs(values: Sequence[float], costs: Sequence[float], eps: float) -> int:
    """UCB-CVS selection (Alg. 1): cheapest ε-near-optimal set, then the highest value.

    ``S1 = {i : v_i + ε ≥ max v}``, ``S2`` = the cheapest members of ``S1``, return
    ``argmax_{i ∈ S2} v_i`` (0-based).
    """
    v = np.asarray(values, dtype=float)
    c = np.asarray(costs, dtype=float)
    if v.shape != c.shape or v.size == 0:
        raise ConfigError("values and costs must be non-empty and of equal length")
    s1 = np.flatnonzero(v + eps >= v.max())
    cmin = c[s1].min()
    s2 = s1[np.isclose(c[s1], cmin, rtol=1e-12, atol=0.0)]
    return int(s2[np.argmax(v[s2])])


EpsSchedule = Callable[[int], float]


def constant_eps(eps: float = 0.0) -> EpsSchedule:
    """``ε_t = eps`` (``0`` gives UCB-PSQ)."""
    return lambda t: float(eps)


def linear_eps(start: float, cutoff: int) -> EpsSchedule:
    """``ε_t = start · max(1 − t / cutoff, 0)`` with ``t`` counted from 0 (official code)."""
    if cutoff <= 0:
        raise ConfigError("the cutoff of a linear ε-schedule must be positive")
    return lambda t: float(start) * max(1.0 - t / cutoff, 0.0)


# --------------------------------------------------------------------------- policies


class UCBCVS(_Base):
    """UCB-CVS with a general ε-schedule: maximise the expected UCB of every set, then
    :func:`select_cvs` with the known costs."""

    def __init__(self, costs: Sequence[float], eps: EpsSchedule, name: str = "ucb-cvs") -> None:
        self.costs = tuple(float(c) for c in costs)
        self.eps = eps
        self.name = name

    def select(self, ctx: BOContext) -> Decision:
        res = [ctx.optimise_ucb(i) for i in range(ctx.problem.m)]
        vals = [r[0] for r in res]
        i = select_cvs(vals, self.costs, self.eps(ctx.t))
        return Decision(i, res[i][1], tuple(vals))


def _argmax_sets(ctx: BOContext, candidates: Sequence[int], full_shortcut: bool) -> Decision:
    """Expected-UCB argmax over ``candidates``; the full set, when present, wins directly."""
    full = ctx.problem.full_set
    if full_shortcut and full is not None and full in candidates:
        val, x = ctx.optimise_ucb(full)
        return Decision(full, x, (val,))
    res = {i: ctx.optimise_ucb(i) for i in candidates}
    best = max(candidates, key=lambda i: res[i][0])
    return Decision(best, res[best][1], tuple(res[i][0] for i in candidates))


class UCBPSQ(_Base):
    """UCB-PSQ (Hayashi et al. 2022): ``argmax_{i, x^i} E u`` ignoring costs."""

    name = "ucb-psq"

    def select(self, ctx: BOContext) -> Decision:
        return _argmax_sets(ctx, range(ctx.problem.m), full_shortcut=True)


def cost_groups(costs: Sequence[float]) -> list[list[int]]:
    """Tay et al.'s ETC groups: sets sharing one cost that is not the maximum, ascending."""
    cmax = max(costs)
    levels = sorted({c for c in costs if c < cmax})
    return [[i for i, c in enumerate(costs) if c == lvl] for lvl in levels]


def size_groups(control_sets: Sequence[Sequence[int]], dim: int) -> list[list[int]]:
    """Hoang et al.'s ETC groups: sets with the same number of variables (full set excluded)."""
    sizes = sorted({len(cs) for cs in control_sets if len(cs) < dim})
    groups = [[i for i, cs in enumerate(control_sets) if len(cs) == s] for s in sizes]
    if len(groups) == 1 and len(groups[0]) == len(control_sets):
        # every set has the same size (airfoil): fall back to index groups {0,1,2}, {3,4,5}
        n = len(control_sets)
        return [list(range(0, min(3, n))), list(range(3, min(6, n)))]
    return groups


class ETC(_Base):
    """Explore-then-commit UCB-CVS: play each group's argmax for its quota, then all sets.

    Parameters
    ----------
    groups
        Control-set groups explored in order.
    plays
        Quota of plays per group; counted when the group is *selected* (including a final
        selection the budget then refuses), as in the official code.
    """

    def __init__(self, groups: Sequence[Sequence[int]], plays: Sequence[int], name: str = "etc"):
        if len(groups) != len(plays):
            raise ConfigError("ETC needs one play quota per group")
        self.groups = [list(g) for g in groups]
        self.remaining = [int(n) for n in plays]
        self.plays = tuple(int(n) for n in plays)
        self.name = name

    def select(self, ctx: BOContext) -> Decision:
        for g, group in enumerate(self.groups):
            if self.remaining[g] > 0:
                self.remaining[g] -= 1
                d = _argmax_sets(ctx, group, full_shortcut=True)
                return Decision(d.set_idx, d.x_ctrl, d.values, f"explore-g{g + 1}")
        d = _argmax_sets(ctx, range(ctx.problem.m), full_shortcut=True)
        return Decision(d.set_idx, d.x_ctrl, d.values, "exploit")


def etc_plays(variant: str, group_costs: Sequence[float], ada_scale: float = 4.0) -> list[int]:
    """Per-group quotas: ``etc50``/``etc100`` fixed, ``etcada`` = ``int(ada_scale / c_g)``."""
    if variant == "etc50":
        return [50] * len(group_costs)
    if variant == "etc100":
        return [100] * len(group_costs)
    if variant == "etcada":
        # round before truncating so that 4 / 0.1 = 39.99999 still gives 40 plays
        return [int(round(ada_scale / c, 9)) for c in group_costs]
    raise ConfigError(f"unknown ETC variant {variant!r}; use etc50, etc100 or etcada")


def make_etc(problem: Problem, variant: str, ada_scale: float = 4.0) -> ETC:
    """ETC with Tay et al.'s cost groups and the named quota rule."""
    means = problem.costs.means
    groups = cost_groups(means)
    plays = etc_plays(variant, [means[g[0]] for g in groups], ada_scale)
    return ETC(groups, plays, name=variant)


def _ts_values(
    ctx: BOContext, n_features: int, candidates: Sequence[int], full_shortcut: bool
) -> dict[int, tuple[float, Tensor]]:
    p = ctx.problem
    rff = RandomFourierFeatures(
        ctx.model.kind,
        ctx.model.lengthscale,
        ctx.model.outputscale,
        p.dim,
        n_features,
        ctx.generator,
    )
    assert ctx.model.X_train is not None and ctx.model.y_train is not None
    f = rff_posterior_sample(
        rff,
        ctx.model.X_train,
        ctx.model.y_train,
        ctx.model.noise_var,
        ctx.generator,
        mean=ctx.model.mean,
    )
    full = p.full_set
    if full_shortcut and full is not None and full in candidates:
        return {full: ctx.optimise(f, full)}
    return {i: ctx.optimise(f, i) for i in candidates}


class TSPSQ(_Base):
    """TS-PSQ: maximise one random-Fourier-feature posterior draw (expected over X^{-i})."""

    name = "ts-psq"

    def __init__(self, n_features: int = 2048) -> None:
        self.n_features = n_features

    def select(self, ctx: BOContext) -> Decision:
        res = _ts_values(ctx, self.n_features, range(ctx.problem.m), full_shortcut=True)
        best = max(res, key=lambda i: res[i][0])
        return Decision(best, res[best][1], tuple(r[0] for r in res.values()))


class PerCost(_Base):
    """Naive cost-aware baselines: ``argmax_i v_i / c_i`` with v from UCB or a TS draw.

    The raw value is divided by the cost (no shift), as in the official code: negative values get
    *more* negative for cheap sets, part of why these baselines fail.
    """

    def __init__(self, costs: Sequence[float], kind: str = "ucb", n_features: int = 2048):
        if kind not in ("ucb", "ts"):
            raise ConfigError("per-cost baseline kind must be 'ucb' or 'ts'")
        self.costs = tuple(float(c) for c in costs)
        self.kind = kind
        self.n_features = n_features
        self.name = f"{kind}-psq-per-cost"

    def select(self, ctx: BOContext) -> Decision:
        m = ctx.problem.m
        if self.kind == "ucb":
            res = {i: ctx.optimise_ucb(i) for i in range(m)}
        else:
            res = _ts_values(ctx, self.n_features, range(m), full_shortcut=False)
        ratio = [res[i][0] / self.costs[i] for i in range(m)]
        best = int(np.argmax(ratio))
        return Decision(best, res[best][1], tuple(res[i][0] for i in range(m)))


def mc_average_moments(
    gp: ExactGP, dim: int, control: Sequence[int], S: Tensor, xc: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Posterior moments of ``A(x^i) = (1/N) Σ_s f([x^i, S_s^{-i}])`` for a batch ``xc``.

    Returns the mean ``(b,)``, the variance ``(b,)`` and the covariance with the latent values at
    the training inputs ``(b, n)``. Only ``k̄ = mean_s k([x^i, S_s^{-i}], X_train)`` depends on
    ``x^i``: with the SE kernel ``k([x^i, s], [x^i, s']) = k(s, s')`` (the controlled coordinates
    coincide), so ``Var A`` needs a per-set constant, not an N × N matrix per candidate.
    """
    if gp.kind != "se":
        raise ConfigError("MC-average moments rely on the SE kernel's product structure")
    assert gp.X_train is not None and gp._L is not None and gp._alpha is not None
    X = gp.X_train
    control = list(control)
    rand = [j for j in range(dim) if j not in set(control)]
    k_ctrl = stationary_kernel(
        "se", xc, X[:, control], _coords(gp.lengthscale, control), gp.outputscale
    )
    if rand:
        Sr, ls_r = S[:, rand], _coords(gp.lengthscale, rand)
        k_rr = stationary_kernel("se", Sr, Sr, ls_r, gp.outputscale).mean()
        kbar = k_ctrl * stationary_kernel("se", Sr, X[:, rand], ls_r, 1.0).mean(0)
    else:
        k_rr = torch.tensor(gp.outputscale, dtype=DTYPE)
        kbar = k_ctrl
    mean = gp.mean + kbar @ gp._alpha
    proj = torch.cholesky_solve(kbar.T, gp._L).T  # k̄ (K + σ² I)^{-1}
    cov_tr = kbar - proj @ gp.kernel(X, X)
    var = (k_rr - (proj * kbar).sum(-1)).clamp_min(1e-12)
    return mean, var, cov_tr


class EIPerCost(_Base):
    """EI-PSQ per unit cost (Tay et al., App. B): ``argmax_i EI_i / c_i``.

    ``EI_i(x^i) = E_f[max((1/N) Σ_s f([x^i, S_s^{-i}]) − max_j f(x_j), 0)]`` over joint posterior
    draws of ``f`` at the training inputs and the MC rows (32 scrambled-Sobol base samples; the
    incumbent is the draw's max over the training inputs). Instead of sampling the
    (n + N)-dimensional joint, ``(A, f(X_train))`` is treated as the (n + 1)-dimensional Gaussian
    it is (:func:`mc_average_moments`): exact, and O(N n) per candidate.
    """

    def __init__(self, costs: Sequence[float], n_fantasies: int = 32) -> None:
        self.costs = tuple(float(c) for c in costs)
        self.n_fantasies = n_fantasies
        self.name = "ei-psq-per-cost"

    def select(self, ctx: BOContext) -> Decision:
        p, gp = ctx.problem, ctx.model
        assert gp.X_train is not None
        n = gp.X_train.shape[0]
        mu_tr, cov_tr = gp.posterior_cov(gp.X_train)
        L_tr = torch.linalg.cholesky(cov_tr + 1e-9 * torch.eye(n, dtype=DTYPE))
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=ctx.generator))
        u = torch.quasirandom.SobolEngine(n + 1, scramble=True, seed=seed).draw(
            self.n_fantasies, dtype=DTYPE
        )
        z = torch.special.ndtri(u.clamp(1e-9, 1 - 1e-9))
        f_tr = mu_tr + z[:, :n] @ L_tr.T  # (F, n) joint draws at the training inputs
        best_tr = f_tr.max(-1).values
        w = z[:, n]
        resid = torch.cholesky_solve((f_tr - mu_tr).T, L_tr)  # Σ_tr^{-1}(f_tr − μ_tr), (n, F)
        res = {}
        for i in range(p.m):
            control = p.control_sets[i]

            def ei(xc: Tensor, control: Sequence[int] = control) -> Tensor:
                m_a, v_a, c = mc_average_moments(gp, p.dim, control, ctx.S, xc)
                g = torch.cholesky_solve(c.T, L_tr)  # Σ_tr^{-1} c, (n, b)
                cond_mean = m_a[:, None] + c @ resid
                cond_var = (v_a - (c * g.T).sum(-1)).clamp_min(1e-12)
                a = cond_mean + cond_var.sqrt()[:, None] * w[None, :]
                return torch.relu(a - best_tr[None, :]).mean(-1)

            full = len(control) == p.dim
            res[i] = ctx.optimise(ei, i) if full else _opt_partial(ctx, ei, len(control))
        ratio = [res[i][0] / self.costs[i] for i in range(p.m)]
        best = int(np.argmax(ratio))
        return Decision(best, res[best][1], tuple(res[i][0] for i in range(p.m)))


def _coords(lengthscale: Tensor, idx: Sequence[int]) -> Tensor:
    ls = torch.as_tensor(lengthscale, dtype=DTYPE)
    return ls if ls.ndim == 0 else ls[list(idx)]


def _opt_partial(ctx: BOContext, h: Callable[[Tensor], Tensor], k: int) -> tuple[float, Tensor]:
    """Maximise a function already defined on the control coordinates (no MC expansion)."""
    from ev_nav.bo.acquisition import maximize

    m = ctx.maximizer
    return maximize(
        h, k, ctx.generator, n_warmup=m.n_warmup, n_starts=m.n_starts, maxiter=m.maxiter
    )


# --------------------------------------------------------------------------- the loop


class HiddenCosts:
    """Stand-in for a :class:`CostModel` in the learner's view of an unknown-cost problem."""

    def __init__(self, m: int) -> None:
        self.m = m

    @property
    def means(self) -> tuple[float, ...]:
        raise PermissionError(
            "mean costs are unknown to the learner; use the realised costs in ctx.cost_obs"
        )


def learner_view(problem: Problem) -> Problem:
    """A shallow copy of ``problem`` whose cost means cannot be read."""
    view = copy.copy(problem)
    object.__setattr__(view, "costs", HiddenCosts(problem.m))
    return view


@dataclass
class StepRecord:
    """One BO iteration (initial design excluded)."""

    t: int
    set_idx: int
    x_ctrl: list[float]
    x: list[float]
    y: float
    cost: float
    spent: float
    value: float
    phase: str


@dataclass
class Episode:
    """Result of one run: its iterations and where the budget stopped it."""

    method: str
    seed: int
    budget: float
    steps: list[StepRecord]
    n_init: int
    stopped_by: str  # "budget" or "max_iters"

    @property
    def spent(self) -> float:
        return self.steps[-1].spent if self.steps else 0.0


@dataclass(frozen=True)
class LoopConfig:
    """Settings shared by every policy in one experiment.

    Attributes
    ----------
    n_init
        Uniform full queries observed for free before the loop.
    n_mc
        Rows of the Monte Carlo matrix (drawn once per run, shared with the regret).
    beta
        UCB multiplier of σ.
    maximizer
        Acquisition maximiser settings.
    max_iters
        Safety cap on BO iterations.
    """

    n_init: int = 5
    n_mc: int = 1024
    beta: float = 2.0
    maximizer: MaximizerConfig = field(default_factory=MaximizerConfig)
    max_iters: int = 100_000


def run_episode(
    problem: Problem,
    policy: Policy,
    budget: float,
    seed: int,
    config: LoopConfig | None = None,
    *,
    hide_costs: bool = False,
    progress: bool = False,
) -> tuple[Episode, Tensor]:
    """Run one policy on one problem until the budget refuses the next play.

    Random streams: the *environment* generator (seeded with ``seed``) draws, in order, the
    initial design, the MC matrix, then per iteration the cost, the random variables and the
    noise — so two policies with the same seed share the initial design and MC matrix. The
    *algorithm* generator (``seed + 10**6``) feeds the acquisition maximiser and RFF draws.

    With ``hide_costs`` the policy sees :func:`learner_view` of the problem: any attempt to read
    the mean costs raises, which enforces the unknown-cost protocol.

    Returns
    -------
    (Episode, Tensor)
        The record and the MC matrix used (for evaluating the regret with the same samples).
    """
    with single_threaded():
        return _run_episode(problem, policy, budget, seed, config, hide_costs, progress)


def _run_episode(
    problem: Problem,
    policy: Policy,
    budget: float,
    seed: int,
    config: LoopConfig | None,
    hide_costs: bool,
    progress: bool,
) -> tuple[Episode, Tensor]:
    cfg = config or LoopConfig()
    env = torch.Generator().manual_seed(int(seed))
    alg = torch.Generator().manual_seed(int(seed) + 10**6)
    d = problem.dim
    X0 = torch.rand(cfg.n_init, d, dtype=DTYPE, generator=env)
    y0 = problem.observe(X0, env)
    S = problem.mc_matrix(cfg.n_mc, env)
    model = ExactGP("se", problem.lengthscale, 1.0, max(problem.noise_std, 1e-4) ** 2)
    model.fit(X0, y0)
    ctx = BOContext(
        problem=learner_view(problem) if hide_costs else problem,
        model=model,
        S=S,
        generator=alg,
        maximizer=cfg.maximizer,
        beta=cfg.beta,
        budget=float(budget),
        plays=[0] * problem.m,
        cost_obs=[[] for _ in range(problem.m)],
    )
    acct = Budget(float(budget))
    steps: list[StepRecord] = []
    stopped = "max_iters"
    bar = tqdm(
        total=float(budget), desc=policy.name, unit="cost", disable=not progress, leave=False
    )
    for t in range(cfg.max_iters):
        ctx.t = t
        dec = policy.select(ctx)
        i = dec.set_idx
        cost = problem.costs.sample(i, env)
        if not acct.try_spend(cost):
            stopped = "budget"
            break
        x_rand = problem.sample_random(i, 1, env)
        x_ctrl = dec.x_ctrl.reshape(1, -1).detach()
        x = problem.assemble(i, x_ctrl, x_rand)
        y = problem.observe(x, env)
        model.update(x, y)
        with torch.no_grad():
            value = float(problem.expected(i, x_ctrl, S)[0])
        ctx.spent = acct.spent
        ctx.plays[i] += 1
        ctx.cost_obs[i].append(cost)
        policy.observe(ctx, i, cost)
        steps.append(
            StepRecord(
                t=t + 1,
                set_idx=i,
                x_ctrl=x_ctrl[0].tolist(),
                x=x[0].tolist(),
                y=float(y[0]),
                cost=cost,
                spent=acct.spent,
                value=value,
                phase=dec.phase,
            )
        )
        bar.update(cost)
    bar.close()
    return Episode(policy.name, int(seed), float(budget), steps, cfg.n_init, stopped), S


def set_optima(
    problem: Problem,
    S: Tensor,
    generator: torch.Generator,
    config: MaximizerConfig | None = None,
) -> tuple[list[float], list[Tensor]]:
    """``max_{x^i} F_i(x^i)`` of the noise-free objective for every set (same MC matrix).

    The full set uses the known maximum when the problem has one (avoids optimiser error).
    """
    cfg = config or MaximizerConfig(n_warmup=1000, n_warmup_full=20_000, n_starts=5)
    vals, xs = [], []
    with single_threaded():
        for i in range(problem.m):
            v, x = _set_optimum(problem, i, S, generator, cfg)
            vals.append(float(v))
            xs.append(x)
    return vals, xs


def _set_optimum(
    problem: Problem, i: int, S: Tensor, generator: torch.Generator, cfg: MaximizerConfig
) -> tuple[float, Tensor]:
    if i == problem.full_set and problem.f_max is not None:
        return problem.f_max, torch.full((problem.dim,), math.nan, dtype=DTYPE)
    return maximize_over_set(
        problem.objective, problem.dim, problem.control_sets[i], S, generator, cfg
    )


POLICY_NAMES: tuple[str, ...] = (
    "ucb-psq",
    "ts-psq",
    "etc50",
    "etc100",
    "etcada",
    "ucb-cvs",
    "ucb-per-cost",
    "ts-per-cost",
    "ei-per-cost",
)


def make_policy(
    name: str,
    problem: Problem,
    *,
    ada_scale: float = 4.0,
    eps_start: float = 1.0,
    eps_cutoff: int = 100,
    n_features: int = 2048,
) -> Policy:
    """Build a known-cost policy by name (see :data:`POLICY_NAMES`)."""
    means = problem.costs.means
    if name == "ucb-psq":
        return UCBPSQ()
    if name == "ts-psq":
        return TSPSQ(n_features)
    if name in ("etc50", "etc100", "etcada"):
        return make_etc(problem, name, ada_scale)
    if name == "ucb-cvs":
        return UCBCVS(means, linear_eps(eps_start, eps_cutoff))
    if name == "ucb-per-cost":
        return PerCost(means, "ucb")
    if name == "ts-per-cost":
        return PerCost(means, "ts", n_features)
    if name == "ei-per-cost":
        return EIPerCost(means)
    raise ConfigError(f"unknown method {name!r}; use one of {', '.join(POLICY_NAMES)}")
