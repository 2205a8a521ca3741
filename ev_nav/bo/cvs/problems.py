"""Cost-varying variable-subset problems: control sets, random variables, costs, regrets.

A *control set* lists the (0-based) input coordinates the learner chooses; the remaining
coordinates are drawn by the environment from independent truncated normals on ``[0, 1]``. Each
control set has a cost, either known and deterministic (Tay et al. 2023) or random with an unknown
mean (Hoang et al. 2025). This module holds those objects and the bookkeeping that every
algorithm shares: partial-query assembly, Monte Carlo expectations of the objective, budget
accounting and the regrets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from ev_nav.errors import ConfigError

DTYPE = torch.float64

# --------------------------------------------------------------------------- distributions


def _std_normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def truncnorm_variance(scale: float, loc: float = 0.5) -> float:
    """Variance of ``N(loc, scale²)`` truncated to ``[0, 1]``."""
    a, b = (0.0 - loc) / scale, (1.0 - loc) / scale
    pa, pb = math.exp(-0.5 * a * a), math.exp(-0.5 * b * b)
    phi_a, phi_b = pa / math.sqrt(2 * math.pi), pb / math.sqrt(2 * math.pi)
    Z = _std_normal_cdf(b) - _std_normal_cdf(a)
    r1 = (a * phi_a - b * phi_b) / Z
    r2 = (phi_a - phi_b) / Z
    return scale * scale * (1.0 + r1 - r2 * r2)


def truncnorm_scale(variance: float, loc: float = 0.5) -> float:
    """Scale of a normal at ``loc`` whose truncation to ``[0, 1]`` has the given variance.

    Bisection on ``[0.001, 100]``; the truncated variance increases with the scale up to the
    uniform limit ``1/12`` (for ``loc = 0.5``), so larger targets are rejected.
    """
    lo, hi = 1e-3, 100.0
    if not truncnorm_variance(lo, loc) < variance < truncnorm_variance(hi, loc):
        raise ConfigError(
            f"variance {variance} is not reachable by a normal truncated to [0,1]; "
            f"use a value in ({truncnorm_variance(lo, loc):.2g}, {truncnorm_variance(hi, loc):.4f})"
        )
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if truncnorm_variance(mid, loc) < variance:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class TruncatedNormal:
    """``N(loc, scale²)`` truncated to ``[0, 1]``, sampled by the inverse-CDF transform."""

    scale: float
    loc: float = 0.5

    @classmethod
    def with_variance(cls, variance: float, loc: float = 0.5) -> TruncatedNormal:
        """The truncated normal at ``loc`` with the requested truncated variance."""
        return cls(truncnorm_scale(variance, loc), loc)

    @property
    def variance(self) -> float:
        return truncnorm_variance(self.scale, self.loc)

    def sample(self, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
        """Draws of the given shape, all inside ``[0, 1]``."""
        a = _std_normal_cdf((0.0 - self.loc) / self.scale)
        b = _std_normal_cdf((1.0 - self.loc) / self.scale)
        u = a + (b - a) * torch.rand(shape, dtype=DTYPE, generator=generator)
        x = self.loc + self.scale * torch.special.ndtri(u)
        return x.clamp(0.0, 1.0)

    def sample_coords(
        self, n: int, coords: Sequence[int], generator: torch.Generator
    ) -> Tensor:
        """``n`` draws of the listed input coordinates: ``(n, len(coords))`` (all share it)."""
        return self.sample((n, len(coords)), generator)


# --------------------------------------------------------------------------- costs

#: Cost vectors of the two papers, one entry per control set (cost order).
COST_PRESETS: dict[str, tuple[float, ...]] = {
    "cheap": (0.01, 0.01, 0.01, 0.1, 0.1, 0.1, 1.0),
    "moderate": (0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 1.0),
    "expensive": (0.6, 0.6, 0.6, 0.8, 0.8, 0.8, 1.0),
}


@dataclass(frozen=True)
class CostModel:
    """Per-control-set costs: deterministic (known) or noisy with unknown means.

    Attributes
    ----------
    means
        Mean cost of each control set (budget units).
    noise_std
        Standard deviation of the Gaussian cost noise; 0 gives deterministic costs.
    noise_min_mean
        Noise is added only to sets whose mean cost is at least this (the 2025 paper's rule).
    clip
        Realised costs are clipped to this interval.
    """

    means: tuple[float, ...]
    noise_std: float = 0.0
    noise_min_mean: float = 0.1
    clip: tuple[float, float] = (0.001, 2.0)

    def __post_init__(self) -> None:
        if any(c <= 0 for c in self.means):
            raise ConfigError("all mean costs must be positive")

    @property
    def n_sets(self) -> int:
        return len(self.means)

    @property
    def known(self) -> bool:
        """Deterministic costs equal their (then known) means."""
        return self.noise_std == 0.0

    def sample(self, set_idx: int, generator: torch.Generator) -> float:
        """Realised cost of one play of ``set_idx``."""
        c = self.means[set_idx]
        if self.noise_std == 0.0 or c < self.noise_min_mean:
            return c
        noisy = c + self.noise_std * float(torch.randn((), dtype=DTYPE, generator=generator))
        return float(min(max(noisy, self.clip[0]), self.clip[1]))


class HiddenCosts:
    """The learner's view of costs with unknown means: only their number can be read."""

    def __init__(self, m: int) -> None:
        self.n_sets = m

    @property
    def means(self) -> tuple[float, ...]:
        raise PermissionError(
            "mean costs are unknown to the learner; use the realised costs in ctx.cost_obs"
        )


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class Problem:
    """A cost-varying variable-subset optimisation problem.

    Attributes
    ----------
    name
        Benchmark name.
    objective
        Noise-free ``f: (n, d) -> (n,)`` on the unit cube, maximised; ``None`` when the learner
        only sees the structure (the ask/tell API, where the caller evaluates).
    dim
        Input dimension ``d``.
    control_sets
        0-based coordinate tuples, listed in cost order.
    costs
        The cost model (one mean per control set), or :class:`HiddenCosts` in the learner's view
        of an unknown-cost problem.
    variable
        Distribution of every random coordinate (all coordinates share it).
    noise_std
        Standard deviation of the Gaussian observation noise.
    lengthscale
        Lengthscale of the (fixed) SE surrogate used in the papers.
    f_max
        Known ``max_x f(x)`` when available (for the full set).
    """

    name: str
    objective: Callable[[Tensor], Tensor] | None
    dim: int
    control_sets: tuple[tuple[int, ...], ...]
    costs: CostModel | HiddenCosts
    variable: TruncatedNormal
    noise_std: float = 0.01
    lengthscale: float = 0.1
    f_max: float | None = None

    def __post_init__(self) -> None:
        if self.costs.n_sets != len(self.control_sets):
            raise ConfigError(
                f"{self.costs.n_sets} costs for {len(self.control_sets)} control sets"
            )
        for cs in self.control_sets:
            if not cs or len(set(cs)) != len(cs) or min(cs) < 0 or max(cs) >= self.dim:
                raise ConfigError(f"bad control set {cs} for dimension {self.dim}")

    @property
    def m(self) -> int:
        return len(self.control_sets)

    @property
    def full_set(self) -> int | None:
        """Index of the control set holding every coordinate, if there is one."""
        for i, cs in enumerate(self.control_sets):
            if len(cs) == self.dim:
                return i
        return None

    def random_coords(self, set_idx: int) -> tuple[int, ...]:
        cs = set(self.control_sets[set_idx])
        return tuple(j for j in range(self.dim) if j not in cs)

    def sample_random(self, set_idx: int, n: int, generator: torch.Generator) -> Tensor:
        """Fresh draws of the random coordinates of ``set_idx``: shape ``(n, d - |I_i|)``."""
        k = len(self.random_coords(set_idx))
        return self.variable.sample((n, k), generator)

    def mc_matrix(self, n_samples: int, generator: torch.Generator) -> Tensor:
        """The ``(N, d)`` Monte Carlo matrix drawn once per run (common random numbers)."""
        return self.variable.sample((n_samples, self.dim), generator)

    def assemble(self, set_idx: int, x_ctrl: Tensor, x_rand: Tensor) -> Tensor:
        """Scatter control and random values into full queries in the original coordinate order."""
        return assemble(self.dim, self.control_sets[set_idx], x_ctrl, x_rand)

    def f(self) -> Callable[[Tensor], Tensor]:
        """The objective; raises for the learner's view, which has none."""
        if self.objective is None:
            raise ConfigError(f"problem {self.name!r} has no objective to evaluate (ask/tell view)")
        return self.objective

    def learner_view(self) -> Problem:
        """A copy whose cost means cannot be read (enforces the unknown-cost protocol)."""
        return replace(self, costs=HiddenCosts(self.m))

    def observe(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """Noisy observations ``f(x) + noise_std · ε``."""
        fx = self.f()(x)
        return fx + self.noise_std * torch.randn(fx.shape, dtype=DTYPE, generator=generator)

    def expected(self, set_idx: int, x_ctrl: Tensor, S: Tensor) -> Tensor:
        """``F_i(x^i) = E f([x^i, X^{-i}])`` by Monte Carlo over the rows of ``S``: ``(b,)``."""
        return mc_expectation(self.f(), self.dim, self.control_sets[set_idx], x_ctrl, S)


def assemble(dim: int, control: Sequence[int], x_ctrl: Tensor, x_rand: Tensor) -> Tensor:
    """Full ``(b, d)`` queries with ``x_ctrl`` at ``control`` and ``x_rand`` elsewhere (in order).

    A scatter, not a concatenation: coordinate ``control[j]`` receives ``x_ctrl[:, j]`` and the
    ``k``-th non-controlled coordinate (ascending) receives ``x_rand[:, k]``.
    """
    control = list(control)
    rand = [j for j in range(dim) if j not in set(control)]
    x_ctrl = torch.atleast_2d(x_ctrl.to(DTYPE))
    x_rand = torch.atleast_2d(x_rand.to(DTYPE))
    if x_ctrl.shape[-1] != len(control) or (rand and x_rand.shape[-1] != len(rand)):
        raise ConfigError(
            f"control values {tuple(x_ctrl.shape)} / random values {tuple(x_rand.shape)} do not "
            f"match {len(control)} controlled and {len(rand)} random coordinates"
        )
    b = max(x_ctrl.shape[0], x_rand.shape[0] if rand else 1)
    cols: list[Tensor | None] = [None] * dim
    for j, c in enumerate(control):
        cols[c] = x_ctrl[:, j].expand(b)
    for k, c in enumerate(rand):
        cols[c] = x_rand[:, k].expand(b)
    return torch.stack(cols, dim=-1)  # type: ignore[arg-type]


def mc_expectation(
    fn: Callable[[Tensor], Tensor],
    dim: int,
    control: Sequence[int],
    x_ctrl: Tensor,
    S: Tensor,
) -> Tensor:
    """``(1/N) Σ_s fn([x^i, S_s^{-i}])`` for a batch ``x_ctrl`` of shape ``(b, |I|)``.

    Builds one ``(b·N, d)`` tensor so ``fn`` is called once (vectorised, differentiable). A full
    control set needs no expectation and evaluates ``fn`` directly.
    """
    x_ctrl = torch.atleast_2d(x_ctrl)
    control = list(control)
    if len(control) == dim:
        return fn(assemble(dim, control, x_ctrl, x_ctrl[:, :0]))
    b, N = x_ctrl.shape[0], S.shape[0]
    X = S.to(x_ctrl.dtype).unsqueeze(0).expand(b, N, dim).clone()
    X[:, :, control] = x_ctrl.unsqueeze(1).expand(b, N, len(control))
    return fn(X.reshape(b * N, dim)).reshape(b, N).mean(-1)


# --------------------------------------------------------------------------- budget


@dataclass
class Budget:
    """Budget accounting: a play is allowed only if its cost fits in what remains."""

    total: float
    spent: float = 0.0

    def __post_init__(self) -> None:
        if not self.total > 0:
            raise ConfigError("the budget must be positive")

    @property
    def remaining(self) -> float:
        return self.total - self.spent

    def affordable(self, cost: float) -> bool:
        """Whether ``cost`` fits in what remains (tiny float slack)."""
        return cost <= self.remaining + 1e-9

    def try_spend(self, cost: float) -> bool:
        """Charge ``cost`` if affordable; return whether it was charged."""
        if not self.affordable(cost):
            return False
        self.spent += cost
        return True


# --------------------------------------------------------------------------- regrets


@dataclass(frozen=True)
class RegretTrace:
    """Per-iteration regrets of one run (initial design excluded).

    Attributes
    ----------
    spent
        Cumulative cost after each iteration.
    value
        ``F_{i_t}(x_t^{i_t})`` of each iteration.
    simple
        ``F* − max_{τ≤t} value_τ``.
    cost_weighted
        Cumulative ``Σ c_{i_τ} (F* − value_τ)`` (Tay et al.'s regret; realised costs).
    quality
        Cumulative ``Σ ((1 − α) F* − value_τ)`` (Hoang et al.; unclipped).
    cost
        Cumulative ``Σ max(c̄_{i_τ} − c̄_{i_*}, 0)`` with mean costs ``c̄``.
    """

    spent: np.ndarray
    value: np.ndarray
    simple: np.ndarray
    cost_weighted: np.ndarray
    quality: np.ndarray
    cost: np.ndarray


def target_set(best_values: Sequence[float], mean_costs: Sequence[float], alpha: float) -> int:
    """The cheapest acceptable set ``i_*``: cheapest among ``F_i* ≥ F* − α|F*|``."""
    f_star = max(best_values)
    thr = f_star - alpha * abs(f_star)
    ok = [i for i, v in enumerate(best_values) if v >= thr - 1e-12]
    return min(ok, key=lambda i: (mean_costs[i], -best_values[i]))


def regrets(
    values: Sequence[float],
    set_idx: Sequence[int],
    realised_costs: Sequence[float],
    f_star: float,
    mean_costs: Sequence[float],
    target: int | None = None,
    alpha: float = 0.0,
) -> RegretTrace:
    """All regrets of one run from its per-iteration values, sets and costs."""
    v = np.asarray(values, dtype=float)
    c = np.asarray(realised_costs, dtype=float)
    idx = np.asarray(set_idx, dtype=int)
    means = np.asarray(mean_costs, dtype=float)
    best = np.maximum.accumulate(v) if v.size else v
    thr = f_star - alpha * abs(f_star)
    c_target = means[target] if target is not None else means.min()
    return RegretTrace(
        spent=np.cumsum(c),
        value=v,
        simple=f_star - best,
        cost_weighted=np.cumsum(c * (f_star - v)),
        quality=np.cumsum(thr - v),
        cost=np.cumsum(np.maximum(means[idx] - c_target, 0.0)) if v.size else v,
    )
