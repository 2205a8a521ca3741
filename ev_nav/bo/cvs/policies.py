"""UCB-CVS (Tay et al. 2023), its explore-then-commit variants and the baselines.

All algorithms are *policies*: given the current :class:`BOContext` (problem, GP posterior, Monte
Carlo matrix, observed costs) they return a :class:`Decision` — which control set to play and its
control values. :class:`ev_nav.bo.cvs.api.CVSOptimizer` owns everything else (the ask/tell loop:
budget accounting, GP updates, the per-iteration record).

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from ev_nav.bo.core.maximize import Maximum
from ev_nav.bo.cvs.acquisition import (
    CVSMaximizerConfig,
    confidence_bound,
    maximize_box,
    maximize_over_set,
)
from ev_nav.bo.cvs.problems import Problem
from ev_nav.bo.cvs.surrogate import FIXED, SurrogateConfig, refit
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
    maximizer: CVSMaximizerConfig
    beta: float
    t: int = 0
    spent: float = 0.0
    budget: float = 0.0
    plays: list[int] = field(default_factory=list)
    cost_obs: list[list[float]] = field(default_factory=list)
    surrogate: SurrogateConfig = FIXED

    @property
    def remaining(self) -> float:
        return self.budget - self.spent

    def refit(self) -> bool:
        """Fit the GP's hyperparameters to its data by marginal likelihood (the loop's
        treatment, :mod:`ev_nav.bo.cvs.surrogate`); ``False`` when the fit failed and the
        hyperparameters were kept."""
        return refit(self.model, self.surrogate, self.generator)

    def ucb(self, X: Tensor) -> Tensor:
        return confidence_bound(self.model, X, self.beta)

    def optimise(self, fn: Callable[[Tensor], Tensor], set_idx: int) -> Maximum:
        """``max_{x^i} E fn([x^i, X^{-i}])`` for control set ``set_idx``."""
        p = self.problem
        return maximize_over_set(
            fn,
            p.dim,
            p.control_sets[set_idx],
            self.S,
            self.generator,
            self.maximizer,
            p.control_space(set_idx),
        )

    def optimise_ucb(self, set_idx: int) -> Maximum:
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

    def on_refit(self, ctx: BOContext) -> None:  # noqa: B027
        """Called after the loop refitted the GP's hyperparameters; default: nothing to reset."""


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
    """``ε_t = start · max(1 − t / cutoff, 0)`` with ``t`` counted from 0 (the form of the
    official code's ``LinearSchedule``, which its experiments do not use)."""
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
        vals = [r.value for r in res]
        i = select_cvs(vals, self.costs, self.eps(ctx.t))
        return Decision(i, res[i].x, tuple(vals))


def _argmax_sets(ctx: BOContext, candidates: Sequence[int], full_shortcut: bool) -> Decision:
    """Expected-UCB argmax over ``candidates``; the full set, when present, wins directly."""
    full = ctx.problem.full_set
    if full_shortcut and full is not None and full in candidates:
        x, val = ctx.optimise_ucb(full)
        return Decision(full, x, (val,))
    res = {i: ctx.optimise_ucb(i) for i in candidates}
    best = max(candidates, key=lambda i: res[i].value)
    return Decision(best, res[best].x, tuple(res[i].value for i in candidates))


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
) -> dict[int, Maximum]:
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
        best = max(res, key=lambda i: res[i].value)
        return Decision(best, res[best].x, tuple(r.value for r in res.values()))


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
        ratio = [res[i].value / self.costs[i] for i in range(m)]
        best = int(np.argmax(ratio))
        return Decision(best, res[best].x, tuple(res[i].value for i in range(m)))


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
        res: dict[int, Maximum] = {}
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
            # ei is already defined on the control coordinates: no MC expansion for partial sets
            res[i] = (
                ctx.optimise(ei, i)
                if full
                else maximize_box(
                    ei,
                    len(control),
                    ctx.generator,
                    ctx.maximizer.n_warmup,
                    ctx.maximizer,
                    p.control_space(i),
                )
            )
        ratio = [res[i].value / self.costs[i] for i in range(p.m)]
        best = int(np.argmax(ratio))
        return Decision(best, res[best].x, tuple(res[i].value for i in range(p.m)))


def _coords(lengthscale: Tensor, idx: Sequence[int]) -> Tensor:
    ls = torch.as_tensor(lengthscale, dtype=DTYPE)
    return ls if ls.ndim == 0 else ls[list(idx)]
