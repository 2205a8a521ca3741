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
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ev_nav.bo import benchmarks as bm
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


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class Problem:
    """A cost-varying variable-subset optimisation problem.

    Attributes
    ----------
    name
        Benchmark name.
    objective
        Noise-free ``f: (n, d) -> (n,)`` on the unit cube, maximised.
    dim
        Input dimension ``d``.
    control_sets
        0-based coordinate tuples, listed in cost order.
    costs
        The cost model (one mean per control set).
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
    objective: Callable[[Tensor], Tensor]
    dim: int
    control_sets: tuple[tuple[int, ...], ...]
    costs: CostModel
    variable: TruncatedNormal
    noise_std: float = 0.01
    lengthscale: float = 0.1
    f_max: float | None = None

    def __post_init__(self) -> None:
        if len(self.costs.means) != len(self.control_sets):
            raise ConfigError(
                f"{len(self.costs.means)} costs for {len(self.control_sets)} control sets"
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

    def observe(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """Noisy observations ``f(x) + noise_std · ε``."""
        fx = self.objective(x)
        return fx + self.noise_std * torch.randn(fx.shape, dtype=DTYPE, generator=generator)

    def expected(self, set_idx: int, x_ctrl: Tensor, S: Tensor) -> Tensor:
        """``F_i(x^i) = E f([x^i, X^{-i}])`` by Monte Carlo over the rows of ``S``: ``(b,)``."""
        return mc_expectation(self.objective, self.dim, self.control_sets[set_idx], x_ctrl, S)


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


# --------------------------------------------------------------------------- benchmarks

SETS_3D = ((0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2))
SETS_12D = (
    (0, 1, 2),
    (3, 4, 5),
    (6, 7, 8),
    (9, 10, 11),
    (0, 1, 2, 3, 4, 5),
    (6, 7, 8, 9, 10, 11),
    tuple(range(12)),
)
SETS_PLANT = ((0, 1), (2, 3), (3, 4), (0, 1, 2), (1, 2, 3), (2, 3, 4), (0, 1, 2, 3, 4))
SETS_AIRFOIL = ((3, 4), (1, 4), (0, 3), (1, 2), (2, 4), (0, 1), (2, 3))

#: Benchmark name -> (dimension, control sets, SE lengthscale of the surrogate, default budget).
BENCHMARKS: dict[str, tuple[int, tuple[tuple[int, ...], ...], float, float]] = {
    "gpsample": (3, SETS_3D, 0.1, 50.0),
    "hartmann3": (3, SETS_3D, 0.1, 50.0),
    "hartmann6": (12, SETS_12D, 0.2, 100.0),
    "ackley6": (12, SETS_12D, 0.2, 100.0),
    "levy6": (12, SETS_12D, 0.2, 100.0),
    "plant": (5, SETS_PLANT, 0.2, 200.0),
    "airfoil": (5, SETS_AIRFOIL, 0.2, 50.0),
}


def make_problem(
    name: str,
    *,
    costs: str | Sequence[float] = "moderate",
    variance: float = 0.04,
    cost_noise_std: float = 0.0,
    generator: torch.Generator | None = None,
    noise_std: float = 0.01,
) -> Problem:
    """Build a benchmark problem with the papers' control sets, costs and distributions.

    Parameters
    ----------
    name
        One of :data:`BENCHMARKS`.
    costs
        A preset name (``cheap``, ``moderate``, ``expensive``) or 7 mean costs.
    variance
        Truncated variance of every random coordinate (0.02, 0.04 or 0.08 in the papers).
    cost_noise_std
        0 for known deterministic costs; > 0 for random costs with unknown means.
    generator
        Needed only for ``gpsample`` (a new function per seed).
    """
    if name not in BENCHMARKS:
        raise ConfigError(f"unknown benchmark {name!r}; use one of {', '.join(BENCHMARKS)}")
    dim, sets, ls, _ = BENCHMARKS[name]
    if isinstance(costs, str):
        if costs not in COST_PRESETS:
            raise ConfigError(
                f"unknown cost preset {costs!r}; use one of {', '.join(COST_PRESETS)}"
            )
        means = COST_PRESETS[costs]
    else:
        means = tuple(float(c) for c in costs)
    f_max: float | None
    if name == "gpsample":
        if generator is None:
            raise ConfigError("the gpsample benchmark needs a seeded generator")
        obj = bm.gp_sample_objective(generator, dim=dim, lengthscale=ls)
        f_max = None
    elif name == "hartmann3":
        obj, f_max = bm.hartmann3, bm.HARTMANN3_MAX
    elif name == "hartmann6":
        obj, f_max = bm.hartmann6_12d, bm.HARTMANN6_MAX
    elif name == "ackley6":
        obj, f_max = bm.ackley6_12d, bm.ACKLEY_MAX
    elif name == "levy6":
        obj, f_max = bm.levy6_12d, bm.LEVY_MAX
    elif name == "plant":
        obj, f_max = bm.load_plant(), bm.PLANT_MAX
    else:
        obj, f_max = bm.load_airfoil(), None
    return Problem(
        name=name,
        objective=obj,
        dim=dim,
        control_sets=sets,
        costs=CostModel(means, noise_std=cost_noise_std),
        variable=TruncatedNormal.with_variance(variance),
        noise_std=noise_std,
        lengthscale=ls,
        f_max=f_max,
    )


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

    def try_spend(self, cost: float) -> bool:
        """Charge ``cost`` if affordable (tiny float slack); return whether it was charged."""
        if cost > self.remaining + 1e-9:
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


@dataclass(frozen=True)
class SetOptimum:
    """``max_{x^i} F_i(x^i)`` for every control set and the overall ``F*``."""

    values: tuple[float, ...]
    maximisers: tuple[Tensor, ...] = field(repr=False)

    @property
    def f_star(self) -> float:
        return max(self.values)

    @property
    def best_set(self) -> int:
        return int(np.argmax(self.values))
