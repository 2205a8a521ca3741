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

from ev_nav.bo.core.space import Categorical, Integer, Space
from ev_nav.bo.cvs.surrogate import SurrogateConfig
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

    def sample_coords(self, n: int, coords: Sequence[int], generator: torch.Generator) -> Tensor:
        """``n`` draws of the listed input coordinates: ``(n, len(coords))`` (all share it)."""
        return self.sample((n, len(coords)), generator)


@dataclass(frozen=True)
class Uniform:
    """Uniform on ``[0, 1]`` (an integer input's equal cells make its values equally likely)."""

    def sample(self, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
        return torch.rand(shape, dtype=DTYPE, generator=generator)


@dataclass(frozen=True)
class Choice:
    """A categorical input's distribution: choice ``k`` with probability ``probs[k]``."""

    probs: tuple[float, ...]

    def __post_init__(self) -> None:
        p = np.asarray(self.probs, dtype=float)
        if p.ndim != 1 or p.size < 2 or (p < 0).any() or not np.isclose(p.sum(), 1.0):
            raise ConfigError(f"choice probabilities must be >= 0 and sum to 1, got {self.probs}")

    def sample_onehot(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` one-hot rows ``(n, k)``."""
        k = torch.multinomial(
            torch.as_tensor(self.probs, dtype=DTYPE), n, replacement=True, generator=generator
        )
        return torch.nn.functional.one_hot(k, len(self.probs)).to(DTYPE)


InputDistribution = TruncatedNormal | Uniform | Choice


@dataclass(frozen=True)
class RandomInputs:
    """Independent distributions of a user objective's inputs on the internal cube.

    One distribution per *user* input (:class:`~ev_nav.bo.core.space.Space`): a continuous
    input's coordinate follows its :class:`TruncatedNormal` or :class:`Uniform`; an integer
    input's coordinate is drawn the same way and snapped to its value's cell centre; a
    categorical input's one-hot block follows its :class:`Choice`.
    """

    space: Space
    dists: tuple[InputDistribution, ...]

    def __post_init__(self) -> None:
        if len(self.dists) != self.space.dim:
            raise ConfigError(f"{len(self.dists)} input distributions for {self.space.dim} inputs")
        for p, d in zip(self.space.parameters, self.dists, strict=True):
            if isinstance(p, Categorical) != isinstance(d, Choice):
                raise ConfigError(f"input {p.name}: {type(d).__name__} does not fit {p!r}")

    def sample_coords(self, n: int, coords: Sequence[int], generator: torch.Generator) -> Tensor:
        """``n`` draws of the internal coordinates ``coords`` (whole inputs), in that order."""
        want = set(int(c) for c in coords)
        cols: dict[int, Tensor] = {}
        for p, d, sl in zip(
            self.space.parameters, self.dists, input_slices(self.space), strict=True
        ):
            block = set(range(sl.start, sl.stop))
            if not block & want:
                continue
            if not block <= want:
                raise ConfigError(f"coordinates {sorted(want)} split input {p.name}")
            if isinstance(d, Choice):
                draw = d.sample_onehot(n, generator)
            else:
                draw = d.sample((n, 1), generator)
                if isinstance(p, Integer):
                    draw = torch.as_tensor(self.space_snap(p, draw), dtype=DTYPE)
            for k, c in enumerate(range(sl.start, sl.stop)):
                cols[c] = draw[:, k]
        return (
            torch.stack([cols[int(c)] for c in coords], dim=-1)
            if coords
            else torch.zeros(n, 0, dtype=DTYPE)
        )

    @staticmethod
    def space_snap(p: Integer, u: Tensor) -> Tensor:
        """An integer input's coordinates moved to their cell centres."""
        n = p.n_values
        return (torch.clamp(torch.floor(u.clamp(0.0, 1.0) * n), max=n - 1) + 0.5) / n


def input_slices(space: Space) -> list[slice]:
    """The internal coordinates of each user input, in order (one per continuous or integer
    input, one per choice of a categorical)."""
    out, start = [], 0
    for p in space.parameters:
        out.append(slice(start, start + p.width))
        start += p.width
    return out


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
        if not all(0 < c < math.inf for c in self.means):  # a NaN passed 'c <= 0'
            raise ConfigError(f"all mean costs must be positive finite numbers, got {self.means}")

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
        Distribution of the random coordinates: one :class:`TruncatedNormal` shared by every
        coordinate (the papers), or a user objective's per-input :class:`RandomInputs`.
    noise_std
        Standard deviation of the Gaussian observation noise (simulations add it to ``f``);
        ``None`` for a user objective that declares none: its values are the observations.
    lengthscale
        Initial lengthscale of the SE surrogate (fixed in the papers).
    f_max
        Known ``max_x f(x)`` when available (for the full set).
    space
        A user objective's inputs (:class:`~ev_nav.bo.core.space.Space`); the problem then lives
        on its internal cube (``dim`` = internal coordinates, control sets = the coordinates of
        their inputs). ``None``: the unit cube of the benchmarks.
    surrogate
        The GP treatment a learner uses unless its loop config names one (``None``: the
        papers' fixed prior; user objectives: standardised and refitted).
    """

    name: str
    objective: Callable[[Tensor], Tensor] | None
    dim: int
    control_sets: tuple[tuple[int, ...], ...]
    costs: CostModel | HiddenCosts
    variable: TruncatedNormal | RandomInputs
    noise_std: float | None = 0.01
    lengthscale: float = 0.1
    f_max: float | None = None
    space: Space | None = None
    surrogate: SurrogateConfig | None = None

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
        return self.variable.sample_coords(n, self.random_coords(set_idx), generator)

    def mc_matrix(self, n_samples: int, generator: torch.Generator) -> Tensor:
        """The ``(N, d)`` Monte Carlo matrix drawn once per run (common random numbers)."""
        return self.variable.sample_coords(n_samples, tuple(range(self.dim)), generator)

    def snap(self, U: Tensor) -> Tensor:
        """Points of the internal cube moved to valid values of discrete inputs (identity on
        the benchmarks and on continuous inputs)."""
        if self.space is None or self.space.is_continuous:
            return U
        return self.space.snap(U)

    def control_space(self, set_idx: int) -> Space | None:
        """The inputs of control set ``set_idx`` as a space whose internal coordinates are the
        set's (``None`` when every coordinate is continuous: nothing to snap)."""
        if self.space is None or self.space.is_continuous:
            return None
        slices = zip(self.space.parameters, input_slices(self.space), strict=True)
        starts = {sl.start: p for p, sl in slices}
        return Space([starts[c] for c in self.control_sets[set_idx] if c in starts])

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
        """Noisy observations ``f(x) + noise_std · ε`` (``f(x)`` when ``noise_std`` is ``None``)."""
        fx = self.f()(x)
        if self.noise_std is None:
            return fx
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
        Cumulative ``Σ max(c̄_{i_τ} − c̄_{i_*}, 0)`` with mean costs ``c̄`` and ``i_*`` the
        cheapest acceptable set; ``NaN`` when ``i_*`` is not known (no reference run).
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
    # the cost regret is measured against the cheapest *acceptable* set i_*; without it (no
    # reference run) the cheapest set would be a misleading target, so it is left undefined
    nan = np.full(v.shape, np.nan)
    return RegretTrace(
        spent=np.cumsum(c),
        value=v,
        simple=f_star - best,
        cost_weighted=np.cumsum(c * (f_star - v)),
        quality=np.cumsum(thr - v),
        cost=np.cumsum(np.maximum(means[idx] - means[target], 0.0)) if target is not None else nan,
    )
