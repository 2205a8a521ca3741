"""The baselines of Iwazaki et al. (Sec. 6, App. E.1) for optimization and level-set estimation.

They optimise or classify *their own* robustness measure — ``f(x, E[w])`` (GP-UCB, LSE), the
worst case over the central 50% set Δ (StableOpt, StableLSE) or the expectation
``g(x) = Σ_w p(w) f(x, w)`` (BQO-*, BQLSE) — against ``h``. The ``Pmax-``/``P-`` variants keep
the base method's queries but report with the PTR rules (μ^(p) over queried designs; eq. 5),
which isolates the effect of *where* the methods sample. All use β^{1/2} = 2 (BQLSE: 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from ev_nav.bo.ptr.context import (
    Policy,
    StepContext,
    Task,
    best_queried,
    report_eq5,
    report_ptr_mean,
)
from ev_nav.bo.ptr.measure import argmax_random, argmin_random, straddle

ROOT_BETA = 2.0  # β^{1/2} of all baselines (E.1)
ROOT_BETA_BQLSE = 3.0


def _bounds(ctx: StepContext, root_beta: float = ROOT_BETA) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise ``lcb, ucb = μ ∓ β^{1/2} σ`` on the grid, each ``(n_x, n_w)``."""
    sd = np.sqrt(ctx.gp.var)
    return ctx.gp.mean - root_beta * sd, ctx.gp.mean + root_beta * sd


def _w_max_var(ctx: StepContext, ix: int, candidates: np.ndarray | None = None) -> int:
    """``argmax_w σ_{t-1}(x_t, w)`` over ``candidates`` (default all of Ω)."""
    cand = np.arange(ctx.problem.n_w) if candidates is None else candidates
    return int(cand[argmax_random(ctx.gp.var[ix, cand], ctx.rng)])


# ------------------------------------------------------------------------------ optimization
@dataclass
class GPUCB:
    """GP-UCB on ``f(x, E[w])`` with ``w_t = E[w]``; reports the best queried lcb at E[w]."""

    name: str = "gp-ucb"
    task: Task = "opt"

    def select(self, ctx: StepContext) -> tuple[int, int]:
        ie = ctx.problem.ew_index
        _, ucb = _bounds(ctx)
        return argmax_random(ucb[:, ie], ctx.rng), ie

    def report(self, ctx: StepContext) -> int:
        lcb, _ = _bounds(ctx)
        return best_queried(ctx, lcb[:, ctx.problem.ew_index])


@dataclass
class StableOpt:
    """StableOpt over Δ: ``x_t = argmax min_{w∈Δ} ucb``, ``w_t = argmin_{w∈Δ} lcb(x_t, w)``."""

    name: str = "stableopt"
    task: Task = "opt"

    def select(self, ctx: StepContext) -> tuple[int, int]:
        d = ctx.problem.delta_indices
        lcb, ucb = _bounds(ctx)
        ix = argmax_random(ucb[:, d].min(1), ctx.rng)
        return ix, int(d[argmin_random(lcb[ix, d], ctx.rng)])

    def report(self, ctx: StepContext) -> int:
        lcb, _ = _bounds(ctx)
        return best_queried(ctx, lcb[:, ctx.problem.delta_indices].min(1))


@dataclass
class _BQOBase:
    """Shared parts of the BQO methods: ``w_t = argmax_w σ(x_t, w)``, report ``argmax μ^(g)``."""

    name: str = "bqo"
    task: Task = "opt"

    def _choose_x(self, ctx: StepContext) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def select(self, ctx: StepContext) -> tuple[int, int]:
        ix = self._choose_x(ctx)
        return ix, _w_max_var(ctx, ix)

    def report(self, ctx: StepContext) -> int:
        mean_g, _ = ctx.gp.expectation_moments(ctx.problem.p_w)
        return best_queried(ctx, mean_g)


@dataclass
class BQOEI(_BQOBase):
    """Expected improvement of the Gaussian marginal of ``g(x)``; incumbent as in A11."""

    name: str = "bqo-ei"

    def _choose_x(self, ctx: StepContext) -> int:
        mean_g, var_g = ctx.gp.expectation_moments(ctx.problem.p_w)
        incumbent = mean_g[ctx.queried].max()
        sd = np.sqrt(np.maximum(var_g, 1e-300))
        z = (mean_g - incumbent) / sd
        ei = (mean_g - incumbent) * ndtr(z) + sd * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
        return argmax_random(ei, ctx.rng)


@dataclass
class BQOUCB(_BQOBase):
    """``argmax μ^(g) + 2 σ^(g)``."""

    name: str = "bqo-ucb"

    def _choose_x(self, ctx: StepContext) -> int:
        mean_g, var_g = ctx.gp.expectation_moments(ctx.problem.p_w)
        return argmax_random(mean_g + ROOT_BETA * np.sqrt(var_g), ctx.rng)


@dataclass
class BQOTS(_BQOBase):
    """``argmax_x Σ_w p(w) f̂(x, w)`` for one joint posterior sample ``f̂``."""

    name: str = "bqo-ts"

    def _choose_x(self, ctx: StepContext) -> int:
        return argmax_random(ctx.sample() @ ctx.problem.p_w, ctx.rng)


@dataclass
class RandomSearch:
    """Uniform random ``(x, w)``; PTR-aware report."""

    name: str = "rs"
    task: Task = "opt"

    def select(self, ctx: StepContext) -> tuple[int, int]:
        return int(ctx.rng.integers(ctx.problem.n_x)), int(ctx.rng.integers(ctx.problem.n_w))

    def report(self, ctx: StepContext) -> int:
        return report_ptr_mean(ctx)


@dataclass
class PmaxVariant:
    """Base method's queries, PTR-aware report ``argmax_{queried} μ^(p)_t``."""

    base: Policy
    task: Task = "opt"

    @property
    def name(self) -> str:
        return f"pmax-{self.base.name}"

    def select(self, ctx: StepContext) -> tuple[int, int]:
        return self.base.select(ctx)

    def report(self, ctx: StepContext) -> int:
        return report_ptr_mean(ctx)


# ------------------------------------------------------------------------------ level sets
@dataclass
class _LSEBase:
    """Straddle on an interval ``[l(x), u(x)]`` of the method's own measure against ``h``."""

    name: str = "lse-base"
    task: Task = "lse"

    def interval(self, ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    def choose_w(self, ctx: StepContext, ix: int) -> int:  # pragma: no cover
        raise NotImplementedError

    def select(self, ctx: StepContext) -> tuple[int, int]:
        lo, up = self.interval(ctx)
        ix = argmax_random(straddle(lo, up, ctx.problem.h), ctx.rng)
        return ix, self.choose_w(ctx, ix)

    def report(self, ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:
        lo, up = self.interval(ctx)
        high = lo > ctx.problem.h
        return high, (up < ctx.problem.h) & ~high


@dataclass
class LSE(_LSEBase):
    """LSE (Bryan et al.) on ``f(x, E[w])`` with ``w_t = E[w]``."""

    name: str = "lse"

    def interval(self, ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:
        lcb, ucb = _bounds(ctx)
        ie = ctx.problem.ew_index
        return lcb[:, ie], ucb[:, ie]

    def choose_w(self, ctx: StepContext, ix: int) -> int:
        return ctx.problem.ew_index


@dataclass
class StableLSE(_LSEBase):
    """Worst case over Δ: ``[min_Δ lcb, min_Δ ucb]``; ``w_t = argmax_{w∈Δ} σ(x_t, w)``."""

    name: str = "stablelse"

    def interval(self, ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:
        d = ctx.problem.delta_indices
        lcb, ucb = _bounds(ctx)
        return lcb[:, d].min(1), ucb[:, d].min(1)

    def choose_w(self, ctx: StepContext, ix: int) -> int:
        return _w_max_var(ctx, ix, ctx.problem.delta_indices)


@dataclass
class BQLSE(_LSEBase):
    """LSE on ``g(x)`` with ``μ^(g) ± 3σ^(g)``; ``w_t = argmax_{w∈Ω} σ(x_t, w)``."""

    name: str = "bqlse"

    def interval(self, ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:
        mean_g, var_g = ctx.gp.expectation_moments(ctx.problem.p_w)
        sd = np.sqrt(var_g)
        return mean_g - ROOT_BETA_BQLSE * sd, mean_g + ROOT_BETA_BQLSE * sd

    def choose_w(self, ctx: StepContext, ix: int) -> int:
        return _w_max_var(ctx, ix)


@dataclass
class RandomSearchLSE:
    """Uniform random ``(x, w)``, classified by eq. 5."""

    alpha: float
    beta: float = 1.5
    m: float = 2.0
    name: str = "rs-lse"
    task: Task = "lse"

    def select(self, ctx: StepContext) -> tuple[int, int]:
        return int(ctx.rng.integers(ctx.problem.n_x)), int(ctx.rng.integers(ctx.problem.n_w))

    def report(self, ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:
        return report_eq5(ctx, self.alpha, self.beta, self.m)


@dataclass
class PVariant:
    """Base LSE method's queries, classified by eq. 5 (the ``P-`` variants)."""

    base: Policy
    alpha: float
    beta: float = 1.5
    m: float = 2.0
    task: Task = "lse"

    @property
    def name(self) -> str:
        return f"p-{self.base.name}"

    def select(self, ctx: StepContext) -> tuple[int, int]:
        return self.base.select(ctx)

    def report(self, ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:
        return report_eq5(ctx, self.alpha, self.beta, self.m)
