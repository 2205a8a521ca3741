"""Ask/tell API of the cost-varying-subset family, and the simulation loop built on it.

:class:`CVSOptimizer` is one learner (one policy, one GP, one budget). ``ask()`` chooses a control
set and its values — the suggestion's other coordinates are ``NaN``, set by the environment —
and ``tell(x, y, cost=…)`` records the evaluated full point, its observation and the realised
cost. :func:`run_episode` is the papers' simulation: it asks, draws the cost and the random
coordinates from the problem, evaluates, and tells until the budget refuses a play.

Everything inside works on the unit cube (the problems' native domain): a user objective's
problem carries its inputs' :class:`~ev_nav.bo.core.space.Space` (continuous, integer and
categorical inputs on one internal cube), and ``bounds`` maps a plain box onto it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from torch import Tensor

from ev_nav.bo.core.api import BOResult, Suggestion
from ev_nav.bo.core.maximize import single_threaded
from ev_nav.bo.core.space import Space
from ev_nav.bo.cvs.acquisition import CVSMaximizerConfig, maximize_over_set
from ev_nav.bo.cvs.policies import BOContext, Decision, Policy
from ev_nav.bo.cvs.problems import Budget, HiddenCosts, Problem, input_slices, mc_expectation
from ev_nav.bo.cvs.registry import METHODS, CVSMethodConfig
from ev_nav.bo.cvs.surrogate import FIXED, SurrogateConfig, condition, new_model
from ev_nav.errors import ConfigError, EvNavError, OutOfDomainError

DTYPE = torch.float64
#: Offset between a run's environment seed and its algorithm seed (maximiser, RFF draws).
ALGORITHM_SEED_OFFSET = 10**6


class BudgetExhausted(EvNavError, ValueError):
    """A play was told whose cost does not fit in the remaining budget."""


@dataclass(frozen=True)
class CVSLoopConfig:
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
    surrogate
        The GP's hyperparameter treatment (:mod:`ev_nav.bo.cvs.surrogate`); ``None``: the
        problem's (the papers' fixed prior for the benchmarks, standardised ``y`` with
        marginal-likelihood refits for user objectives).
    """

    n_init: int = 5
    n_mc: int = 1024
    beta: float = 2.0
    maximizer: CVSMaximizerConfig = field(default_factory=CVSMaximizerConfig)
    max_iters: int = 100_000
    surrogate: SurrogateConfig | None = None


@dataclass
class StepRecord:
    """One BO iteration (initial design excluded); ``value`` is filled by a simulation."""

    t: int
    set_idx: int
    x_ctrl: list[float]
    x: list[float]
    y: float
    cost: float
    spent: float
    phase: str
    value: float = math.nan


class CVSOptimizer:
    """One cost-varying-subset learner driven by ask/tell.

    Parameters
    ----------
    problem
        The structure the learner sees: dimension, control sets, costs (a
        :class:`~ev_nav.bo.cvs.problems.CostModel`, or
        :class:`~ev_nav.bo.cvs.problems.HiddenCosts` when the means are unknown), the random
        inputs' distribution, the noise level and the GP lengthscale. Its objective is never
        called.
    method
        A registered name (see ``ev-nav bo cvs list`` / ``bo ucvs list``) or a policy object.
    budget
        Total cost the learner may spend.
    family
        ``"cvs"`` (known costs) or ``"ucvs"`` (unknown costs): which registry ``method`` names.
    seed
        Seeds the algorithm's generator (``seed + 10**6``) and, when ``initial`` or
        ``mc_samples`` are not given, the initial design and the Monte Carlo matrix.
    config, method_config
        Loop and method settings (``config.surrogate``: the GP's hyperparameter treatment).
    hide_costs
        Give the policy a view whose mean costs cannot be read (default: for the unknown-cost
        methods ``ucvs*``, or when ``problem.costs`` is hidden already).
    bounds
        Box of the caller's units (default: the unit cube; ignored when the problem carries
        its inputs' space, as a user objective's problem does).
    initial
        Free initial observations ``(X0 (n, d), y0 (n,))`` in unit coordinates; without them
        the first ``config.n_init`` suggestions are uniform full queries.
    mc_samples
        The ``(N, d)`` Monte Carlo matrix (unit coordinates).

    Notes
    -----
    :meth:`tell` accepts any point of the domain, not only suggested ones (see there): prior
    data, or plays decided elsewhere.
    """

    def __init__(
        self,
        problem: Problem,
        method: str | Policy,
        budget: float,
        *,
        family: str = "cvs",
        seed: int = 0,
        config: CVSLoopConfig | None = None,
        method_config: CVSMethodConfig | None = None,
        hide_costs: bool | None = None,
        bounds: Sequence[tuple[float, float]] | None = None,
        initial: tuple[Tensor, Tensor] | None = None,
        mc_samples: Tensor | None = None,
    ) -> None:
        if family not in METHODS:
            raise ConfigError(f"unknown family {family!r}; use cvs or ucvs")
        self.problem = problem
        self.config = cfg = config or CVSLoopConfig()
        if isinstance(method, str):
            self.policy = METHODS[family].get(method)(problem, method_config or CVSMethodConfig())
        else:
            self.policy = method
        hidden = isinstance(problem.costs, HiddenCosts)
        if hide_costs is None:
            hide_costs = hidden or self.policy.name.startswith("ucvs")
        self.budget = Budget(float(budget))
        self.seed = int(seed)
        d = problem.dim
        self._space: Space | None = problem.space
        if self._space is None and bounds is not None:
            lower, upper = _box(bounds, d)
            self._space = Space.from_bounds(list(zip(lower, upper, strict=True)))
        self.surrogate = cfg.surrogate or problem.surrogate or FIXED
        start = torch.Generator().manual_seed(self.seed)
        self._init_X = (
            initial[0]
            if initial is not None
            else torch.rand(cfg.n_init, d, dtype=DTYPE, generator=start)
        )
        if initial is None:  # the uniform design at valid points of the inputs
            self._init_X = problem.snap(self._init_X)
        S = mc_samples if mc_samples is not None else problem.mc_matrix(cfg.n_mc, start)
        self.model = new_model(problem.lengthscale, problem.noise_std)
        self._init_y: list[float] = []
        # points the learner did not suggest, told before the model was first conditioned
        self._prior: list[tuple[Tensor, float]] = []
        self.told: list[StepRecord] = []  # unsuggested points (prior data or outside plays)
        # every observation (unit point, y) in the order it was told, initial design included:
        # steps and told are split by kind, so result() could not rebuild the order from them
        self._history: list[tuple[list[float], float]] = []
        self._refit_n = 0  # observations at the last scheduled refit
        self._refitted_at_spend = False
        self.ctx = BOContext(
            problem=problem.learner_view() if hide_costs and not hidden else problem,
            model=self.model,
            S=S,
            generator=torch.Generator().manual_seed(self.seed + ALGORITHM_SEED_OFFSET),
            maximizer=cfg.maximizer,
            beta=cfg.beta,
            budget=float(budget),
            plays=[0] * problem.m,
            cost_obs=[[] for _ in range(problem.m)],
            surrogate=self.surrogate,
        )
        if initial is not None:
            self._init_y = [float(v) for v in initial[1]]
            self._history = [
                (x.tolist(), v) for x, v in zip(self._init_X, self._init_y, strict=False)
            ]
            self._condition_initial()
        self.steps: list[StepRecord] = []
        self._pending: Decision | None = None

    # ------------------------------------------------------------------------ state
    @property
    def initialising(self) -> bool:
        """Whether the free initial design is still being evaluated (points told from
        elsewhere count towards it)."""
        return len(self._init_y) + len(self._prior) < self._init_X.shape[0]

    @property
    def spent(self) -> float:
        return self.budget.spent

    def can_afford(self, cost: float) -> bool:
        """Whether a play of this cost fits in the remaining budget."""
        return self.budget.affordable(cost)

    def fill_random(
        self, suggestion: Suggestion, generator: torch.Generator
    ) -> NDArray[np.float64]:
        """The pending suggestion with its ``NaN`` inputs drawn from the problem's
        distribution of the uncontrolled inputs (caller's units).

        For simulations: in a real experiment the environment sets these inputs.
        """
        i = suggestion.detail.get("control_set")
        if i is None:
            return np.array(suggestion.x)
        dec = self._pending
        if dec is None or dec.set_idx != i:
            raise ConfigError("fill_random(): call it with the pending suggestion of ask()")
        x_ctrl = dec.x_ctrl.detach().reshape(1, -1)
        u = self.problem.assemble(i, x_ctrl, self.problem.sample_random(i, 1, generator))
        return self._to_user(u[0].numpy())

    # ------------------------------------------------------------------------ ask / tell
    def ask(self) -> Suggestion:
        """The next query: a full uniform point during the initial design, then a control set's
        values with ``NaN`` at the coordinates the environment sets."""
        if self.initialising:
            u = self._init_X[len(self._init_y)]
            return Suggestion(self._to_user(u.numpy()), {"phase": "init", "control_set": None})
        if self.model.n_train == 0:
            raise ConfigError("no observations yet: tell prior data first, or use n_init > 0")
        if self._pending is None:
            with single_threaded():
                self.ctx.t = len(self.steps)
                self._pending = self.policy.select(self.ctx)
        dec = self._pending
        u = np.full(self.problem.dim, np.nan)
        u[list(self.problem.control_sets[dec.set_idx])] = dec.x_ctrl.detach().reshape(-1).numpy()
        costs = self.ctx.problem.costs
        return Suggestion(
            self._to_user(u),
            {
                "control_set": dec.set_idx,
                "phase": dec.phase,
                "values": dec.values,
                "cost": None if isinstance(costs, HiddenCosts) else costs.means[dec.set_idx],
            },
        )

    def tell(
        self,
        x: ArrayLike | Tensor,
        y: float,
        cost: float | None = None,
        *,
        control_set: int | None = None,
    ) -> None:
        """Record the observation ``y`` at the evaluated full point ``x`` (caller's units).

        ``x`` may be any point of the domain (every coordinate finite and inside the box):

        * **the pending suggestion** (its controlled coordinates, the environment's values
          elsewhere): a play of the suggested control set, charged ``cost`` — the realised
          cost, required when costs are unknown; default the set's known cost;
        * **the next initial-design point** while the initial design runs: free;
        * **any other point**, without ``control_set``: *prior data* — it conditions the GP
          and counts towards the initial design, is charged nothing and is no play of any
          set;
        * **any other point with** ``control_set=i`` (0-based; or with ``cost`` alone, which
          names the full set): a play of set ``i`` decided elsewhere — its coordinates outside
          set ``i`` are taken as the environment's — charged ``cost`` (default the set's known
          cost) and counted like a suggested play (the unknown-cost method learns the cost).

        A pending suggestion stays pending after an unsuggested point.

        Raises
        ------
        BudgetExhausted
            A charged play does not fit in the remaining budget.
        OutOfDomainError
            ``x`` has the wrong length or lies outside the domain.
        ConfigError
            The cost of a play is needed and unknown; ``control_set`` is out of range; a
            ``cost`` that is not a finite number > 0.
        """
        xu = self._to_unit(x)
        if not torch.isfinite(xu).all() or (xu < -1e-9).any() or (xu > 1.0 + 1e-9).any():
            raise OutOfDomainError("tell(): x must be a full point inside the domain (no NaN)")
        xu = xu.clamp(0.0, 1.0)
        if not math.isfinite(float(y)):
            raise ConfigError(f"tell(): the observation must be finite, got {y}")
        if cost is not None:
            # checked here, not by the budget: a negative cost would add to it, and NaN would
            # be refused as a play that "does not fit in the remaining budget"
            try:
                price = float(cost)
            except (TypeError, ValueError):
                price = math.nan
            if not (math.isfinite(price) and price > 0):
                raise ConfigError(f"tell(): cost must be a finite number > 0, got {cost!r}")
            cost = price
        if control_set is None:
            if self.initialising and self._is_next_initial(xu):
                self._tell_initial(float(y))
                return
            if self._pending is not None and self._matches_pending(xu):
                control_set = self._pending.set_idx
            elif cost is None:
                self._tell_prior(xu, float(y))
                return
            else:
                control_set = self._named_full_set()
        if self.initialising:
            raise ConfigError(
                "tell(): a charged play during the initial design; tell the initial points "
                "(or prior data without cost/control_set) first"
            )
        if not 0 <= int(control_set) < self.problem.m:
            raise ConfigError(f"tell(): control_set must be in 0..{self.problem.m - 1}")
        self._tell_play(xu, float(y), int(control_set), cost)

    def _is_next_initial(self, xu: Tensor) -> bool:
        k = len(self._init_y)
        return bool(torch.allclose(xu[0], self._init_X[k], atol=1e-9, rtol=0.0))

    def _matches_pending(self, xu: Tensor) -> bool:
        assert self._pending is not None
        control = list(self.problem.control_sets[self._pending.set_idx])
        x_ctrl = self._pending.x_ctrl.reshape(1, -1).detach()
        return bool(torch.allclose(xu[0, control], x_ctrl[0], atol=1e-9, rtol=0.0))

    def _named_full_set(self) -> int:
        full = self.problem.full_set
        if full is None:
            raise ConfigError("tell(): this problem has no full set; name control_set=")
        return full

    def _tell_play(self, xu: Tensor, y: float, i: int, cost: float | None) -> None:
        pending = self._pending
        suggested = pending is not None and pending.set_idx == i and self._matches_pending(xu)
        if cost is None:
            if isinstance(self.ctx.problem.costs, HiddenCosts):
                raise ConfigError("tell() needs the realised cost: the mean costs are unknown")
            cost = self.ctx.problem.costs.means[i]
        if not self.budget.try_spend(float(cost)):
            raise BudgetExhausted(
                f"a play of cost {cost:g} does not fit in the remaining budget "
                f"{self.budget.remaining:g}"
            )
        y_t = torch.as_tensor([y], dtype=DTYPE)
        self.model.update(xu, y_t)
        ctx = self.ctx
        ctx.spent = self.budget.spent
        ctx.plays[i] += 1
        ctx.cost_obs[i].append(float(cost))
        self.policy.observe(ctx, i, float(cost))
        control = list(self.problem.control_sets[i])
        x_ctrl = pending.x_ctrl.reshape(-1) if suggested and pending is not None else xu[0, control]
        record = StepRecord(
            t=len(self.steps) + 1,
            set_idx=i,
            x_ctrl=x_ctrl.detach().tolist(),
            x=xu[0].tolist(),
            y=y,
            cost=float(cost),
            spent=self.budget.spent,
            phase=pending.phase if suggested and pending is not None else "told",
        )
        self._history.append((record.x, y))
        if suggested:
            self.steps.append(record)
            self._pending = None
        else:
            self.told.append(record)
        self._scheduled_refit()

    def _tell_prior(self, xu: Tensor, y: float) -> None:
        record = StepRecord(
            t=0, set_idx=-1, x_ctrl=[], x=xu[0].tolist(), y=y, cost=0.0,
            spent=self.budget.spent, phase="prior",
        )  # fmt: skip
        self.told.append(record)
        self._history.append((record.x, y))
        if self.model.n_train == 0:
            self._prior.append((xu[0], y))
            if not self.initialising:
                self._condition_initial()
            return
        self.model.update(xu, torch.as_tensor([y], dtype=DTYPE))
        self._scheduled_refit()

    def _tell_initial(self, y: float) -> None:
        self._history.append((self._init_X[len(self._init_y)].tolist(), y))
        self._init_y.append(y)
        if not self.initialising:
            self._condition_initial()

    def _condition_initial(self) -> None:
        """Condition the GP on the initial design and any prior data (then a scheduled refit)."""
        k = len(self._init_y)
        X = [self._init_X[:k]] + [x.reshape(1, -1) for x, _ in self._prior]
        y = self._init_y + [v for _, v in self._prior]
        if not y:
            return
        condition(
            self.model,
            torch.cat(X),
            torch.tensor(y, dtype=DTYPE),
            self.surrogate,
            self.problem.noise_std,
        )
        self._scheduled_refit(initial=True)

    def _scheduled_refit(self, initial: bool = False) -> None:
        """ML-II refits due by the surrogate's schedule (after the initial conditioning and
        every ``refit_every`` observations; once when the spend first passes the fraction)."""
        sc = self.surrogate
        n = self.model.n_train
        due = bool(sc.refit_every) and (initial or n - self._refit_n >= sc.refit_every)
        if (
            sc.refit_at_spend is not None
            and not self._refitted_at_spend
            and self.budget.spent > sc.refit_at_spend * self.budget.total
        ):
            self._refitted_at_spend = due = True
        if due:
            self._refit_n = n
            if self.ctx.refit():
                hook = getattr(self.policy, "on_refit", None)
                if hook is not None:
                    hook(self.ctx)

    # ------------------------------------------------------------------------ result
    def result(self) -> BOResult:
        """The play whose expected value ``E f([x^i, X^{-i}])`` has the highest posterior mean.

        Points told from elsewhere compete too: plays of their set, and prior data as plays of
        the full set when there is one. ``X``, ``y``: every observation in the order it was
        told — the initial design, prior data, suggested and outside plays. ``detail``:
        ``control_set`` (0-based), ``spent``, ``plays`` per set.
        """
        full = self.problem.full_set
        cands = list(self.steps)
        for s in self.told:
            if s.set_idx >= 0:
                cands.append(s)
            elif full is not None:
                cands.append(replace(s, set_idx=full, x_ctrl=list(s.x)))
        X = np.array([x for x, _ in self._history], dtype=float).reshape(-1, self.problem.dim)
        y = np.array([v for _, v in self._history], dtype=float)
        if not cands:
            if not self._init_y:
                raise ConfigError("no observations yet: nothing to recommend")
            j = int(np.argmax(self._init_y))
            u, best_set, value = self._init_X[j].numpy(), None, float(self._init_y[j])
        else:
            scores = [self._posterior_value(s) for s in cands]
            k = int(np.argmax(scores))
            best = cands[k]
            best_set, value = best.set_idx, scores[k]
            u = np.full(self.problem.dim, np.nan)
            u[list(self.problem.control_sets[best_set])] = best.x_ctrl
        return BOResult(
            x_best=self._to_user(u),
            value=value,
            X=self._to_user(X),
            y=y,
            detail={
                "control_set": best_set,
                "spent": self.budget.spent,
                "plays": list(self.ctx.plays),
            },
        )

    def _posterior_value(self, step: StepRecord) -> float:
        control = self.problem.control_sets[step.set_idx]
        xc = torch.tensor([step.x_ctrl], dtype=DTYPE)
        with torch.no_grad():
            mean = lambda X: self.model.posterior(X)[0]  # noqa: E731
            return float(mc_expectation(mean, self.problem.dim, control, xc, self.ctx.S)[0])

    # ------------------------------------------------------------------------ units
    def user_point(self, u: ArrayLike | Tensor) -> NDArray[Any]:
        """An internal point (the problem's cube) in the caller's units."""
        if isinstance(u, Tensor):
            u = u.detach().numpy()
        return self._to_user(np.asarray(u, dtype=float))

    def _to_user(self, u: NDArray[np.float64]) -> NDArray[Any]:
        """Internal point(s) → the caller's units; ``NaN`` coordinates (inputs the environment
        sets) stay ``NaN``. Mixed spaces give object arrays (float, int, the choice)."""
        u = np.asarray(u, dtype=float)
        space = self._space
        if space is None:
            return u
        if space.is_continuous:
            lo = np.array([b[0] for b in space.bounds])
            hi = np.array([b[1] for b in space.bounds])
            return lo + (hi - lo) * u
        rows = np.atleast_2d(u)
        out = space.decode(np.nan_to_num(rows, nan=0.0))
        for j, sl in enumerate(input_slices(space)):
            out[np.isnan(rows[:, sl]).any(axis=1), j] = np.nan
        return out[0] if u.ndim == 1 else out

    def _to_unit(self, x: ArrayLike | Tensor) -> Tensor:
        """One full point in the caller's units → internal ``(1, d)`` (validated)."""
        if self._space is not None:
            pts = x if isinstance(x, Tensor) else np.asarray(x, dtype=object)
            return torch.as_tensor(self._space.encode(pts), dtype=DTYPE)
        if isinstance(x, Tensor):
            xu = x.to(DTYPE).reshape(1, -1)
        else:
            xu = torch.as_tensor(np.asarray(x, dtype=float).reshape(1, -1))
        if xu.shape[1] != self.problem.dim:
            raise OutOfDomainError(f"tell(): expected a point of {self.problem.dim} coordinates")
        return xu


def _box(
    bounds: Sequence[tuple[float, float]] | None, dim: int
) -> tuple[NDArray[np.float64] | None, NDArray[np.float64] | None]:
    if bounds is None:
        return None, None
    b = np.asarray(bounds, dtype=float)
    if b.shape != (dim, 2) or not np.all(b[:, 0] < b[:, 1]):
        raise ConfigError(f"bounds must be {dim} increasing (lower, upper) pairs")
    return b[:, 0], b[:, 1]


# ------------------------------------------------------------------------- the simulation
@dataclass
class Episode:
    """Result of one simulated run: its iterations and where the budget stopped it."""

    method: str
    seed: int
    budget: float
    steps: list[StepRecord]
    n_init: int
    stopped_by: str  # "budget" or "max_iters"
    result: BOResult | None = None  # the learner's recommendation at the end

    @property
    def spent(self) -> float:
        return self.steps[-1].spent if self.steps else 0.0


def environment_start(
    problem: Problem, seed: int, config: CVSLoopConfig
) -> tuple[torch.Generator, Tensor, Tensor, Tensor]:
    """The environment's first draws of a run: initial design, its observations, MC matrix.

    Returns the environment generator (to continue with the per-iteration draws), ``X0``,
    ``y0`` and ``S``; a run's reference (set optima) uses the same ``S``.
    """
    env = torch.Generator().manual_seed(int(seed))
    X0 = problem.snap(torch.rand(config.n_init, problem.dim, dtype=DTYPE, generator=env))
    y0 = problem.observe(X0, env)
    S = problem.mc_matrix(config.n_mc, env)
    return env, X0, y0, S


def run_episode(
    problem: Problem,
    method: str | Policy,
    budget: float,
    seed: int,
    config: CVSLoopConfig | None = None,
    *,
    family: str = "cvs",
    method_config: CVSMethodConfig | None = None,
    hide_costs: bool | None = None,
    score: bool = True,
) -> tuple[Episode, Tensor]:
    """Simulate one learner on ``problem`` until the budget refuses the next play.

    ``score=False`` skips each play's noise-free expected value ``F_i(x^i)`` (``NaN``): for a
    black-box objective, whose Monte Carlo average would cost ``N`` evaluations per play.

    Random streams: the *environment* generator (seeded with ``seed``) draws, in order, the
    initial design, the MC matrix, then per iteration the cost, the random variables and the
    noise — so two policies with the same seed share the initial design and MC matrix. The
    *algorithm* generator (``seed + 10**6``) feeds the acquisition maximiser and RFF draws.

    Returns
    -------
    (Episode, Tensor)
        The record (with each play's noise-free expected value ``F_i(x^i)``) and the MC matrix
        (for evaluating the regret with the same samples).
    """
    cfg = config or CVSLoopConfig()
    with single_threaded():
        env, X0, y0, S = environment_start(problem, seed, cfg)
        opt = CVSOptimizer(
            problem,
            method,
            budget,
            family=family,
            seed=seed,
            config=cfg,
            method_config=method_config,
            hide_costs=hide_costs,
            initial=(X0, y0),
            mc_samples=S,
        )
        steps: list[StepRecord] = []
        stopped = "max_iters"
        for _ in range(cfg.max_iters):
            s = opt.ask()
            i = s.detail["control_set"]
            assert isinstance(i, int)
            cost = problem.costs.sample(i, env)
            if not opt.can_afford(cost):
                stopped = "budget"
                break
            pending = opt._pending  # the decision behind s, in the problem's coordinates
            assert pending is not None
            x_ctrl = pending.x_ctrl.detach().reshape(1, -1)
            x = problem.assemble(i, x_ctrl, problem.sample_random(i, 1, env))
            y = float(problem.observe(x, env)[0])
            opt.tell(x if problem.space is None else opt.user_point(x[0]), y, cost=cost)
            last = opt.steps[-1]
            value = math.nan
            if score:
                with torch.no_grad():
                    xc = torch.tensor([last.x_ctrl], dtype=DTYPE)
                    value = float(problem.expected(i, xc, S)[0])
            steps.append(replace(last, value=value))
        result = opt.result()
    episode = Episode(opt.policy.name, int(seed), float(budget), steps, cfg.n_init, stopped, result)
    return episode, S


def set_optima(
    problem: Problem,
    S: Tensor,
    generator: torch.Generator,
    config: CVSMaximizerConfig | None = None,
) -> tuple[list[float], list[Tensor]]:
    """``max_{x^i} F_i(x^i)`` of the noise-free objective for every set (same MC matrix).

    The full set uses the known maximum when the problem has one (avoids optimiser error).
    """
    cfg = config or CVSMaximizerConfig(n_warmup=1000, n_warmup_full=20_000, n_starts=5)
    vals, xs = [], []
    with single_threaded():
        for i in range(problem.m):
            if i == problem.full_set and problem.f_max is not None:
                vals.append(float(problem.f_max))
                xs.append(torch.full((problem.dim,), math.nan, dtype=DTYPE))
                continue
            best = maximize_over_set(
                problem.f(),
                problem.dim,
                problem.control_sets[i],
                S,
                generator,
                cfg,
                problem.control_space(i),
            )
            vals.append(float(best.value))
            xs.append(best.x)
    return vals, xs
