"""Experiments of the cost-varying-subset papers: runs, tidy results, summaries.

:func:`run_experiment` runs one benchmark/cost/variance setting (or a user objective) for several
methods and seeds. Every (seed, method) is an independent run of :func:`~ev_nav.bo.cvs.api.
run_episode` on the fleet grids' executors (:mod:`ev_nav.bo.core.runs`: local pool by default,
resumable), plus one reference run per seed when the set optima are needed. The result is a tidy
table (one row per BO iteration, with the regrets) written as ``results.csv`` next to
``manifest.json`` (config, seeds, versions, references, summary).

Regrets (Tay et al. 2023, Sec. 3; Hoang et al. 2025, Sec. 4): simple regret against cost spent,
the cost-weighted cumulative regret, and for unknown costs the quality and cost regrets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ev_nav.bo.core.objective import UserObjective, load_objective
from ev_nav.bo.core.plots import standard_error
from ev_nav.bo.core.runs import (
    Execution,
    ExecutionConfig,
    Job,
    RunRecord,
    run_jobs,
    write_results,
)
from ev_nav.bo.cvs.acquisition import CVSMaximizerConfig
from ev_nav.bo.cvs.api import CVSLoopConfig, environment_start, run_episode, set_optima
from ev_nav.bo.cvs.benchmarks import BENCHMARKS, make_problem, user_problem
from ev_nav.bo.cvs.problems import COST_PRESETS, Problem, regrets, target_set, truncnorm_scale
from ev_nav.bo.cvs.registry import METHODS, CVSMethodConfig
from ev_nav.bo.cvs.surrogate import FIXED, USER_REFIT_EVERY, SurrogateConfig
from ev_nav.errors import ConfigError, require_number, require_seed

SETTINGS = ("cvs", "ucvs")
SURROGATES = ("auto", "fixed", "fitted")
DTYPE = torch.float64


@dataclass(frozen=True)
class CVSRunConfig:
    """One experimental cell: benchmark × costs × variance, several methods and seeds.

    ``setting="cvs"`` is Tay et al. (known deterministic costs); ``"ucvs"`` is Hoang et al.
    (random costs with unknown means, ``cost_noise_std`` > 0 for the noisy variant).

    Attributes
    ----------
    benchmark
        Registered benchmark (``ev-nav bo cvs list``); ignored when ``objective`` is given.
    objective
        A user objective ``module:function`` (see :mod:`ev_nav.bo.core.objective`); its
        declared ``control_sets`` and ``costs`` (or ``control_sets``/``costs`` here) apply.
    bounds, control_sets
        Overrides of the user objective's declarations.
    costs
        A preset name or one mean cost per control set.
    variance
        Truncated variance of every random coordinate (unit-cube units).
    budget
        Cost budget C.
    lengthscale
        SE lengthscale of the surrogate (default: the benchmark's; 0.2 for user objectives).
    surrogate
        The GP's hyperparameter treatment (:mod:`ev_nav.bo.cvs.surrogate`): ``"fixed"`` (the
        papers' prior on raw ``y``), ``"fitted"`` (standardised ``y``, marginal-likelihood refit
        every ``refit_every`` observations) or ``"auto"`` (fixed for benchmarks, fitted for user
        objectives).
    refit_every
        Observations between refits of the fitted treatment.
    refit_at_spend
        Refit once, for every method, when the spend first exceeds this fraction of the budget
        (``None``: no such refit).
    ucvs_refit
        The unknown-cost method's own single refit at the start of exploitation.
    """

    setting: str = "cvs"
    benchmark: str = "hartmann3"
    methods: tuple[str, ...] = ("ucb-psq", "etcada")
    costs: str | tuple[float, ...] = "moderate"
    variance: float = 0.04
    budget: float = 20.0
    seeds: tuple[int, ...] = (0, 1, 2)
    n_init: int = 5
    n_mc: int = 1024
    n_warmup: int = 100
    n_warmup_full: int = 10_000
    n_starts: int = 5
    maxiter: int = 200
    beta: float = 2.0
    cost_noise_std: float = 0.0
    ada_scale: float = 4.0
    etc_quota: int = 50
    alpha: float = 0.1
    explore_frac: float = 0.6
    tau: int = 10
    clip_cost_lcb: bool = True
    objective: str | None = None
    bounds: tuple[tuple[float, float], ...] | None = None
    control_sets: tuple[tuple[int, ...], ...] | None = None
    lengthscale: float | None = None
    surrogate: str = "auto"
    refit_every: int = USER_REFIT_EVERY
    refit_at_spend: float | None = None
    ucvs_refit: bool = True

    def __post_init__(self) -> None:
        if self.setting not in SETTINGS:
            raise ConfigError(f"setting must be one of {SETTINGS}")
        if self.surrogate not in SURROGATES:
            raise ConfigError(f"surrogate must be one of {SURROGATES}")
        for m in self.methods:
            METHODS[self.setting].entry(m)  # raises naming the registered methods
        if not self.seeds:
            raise ConfigError("need at least one seed")
        if len(set(self.methods)) != len(self.methods) or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError("methods and seeds must not repeat")
        if self.objective is None:
            BENCHMARKS.entry(self.benchmark)
        for seed in self.seeds:
            require_seed(seed)
        # NaN passed the checks these replace, inf ran without end, a negative beta turned UCB
        # into a lower bound and a negative noise sd acted as a positive one
        require_number(self.budget, "budget", low=0, low_open=True)
        require_number(self.variance, "variance", low=0, low_open=True)
        for name in ("n_init", "n_mc", "n_warmup", "n_warmup_full", "n_starts", "maxiter",
                     "etc_quota", "tau", "refit_every"):
            require_number(getattr(self, name), name, low=1, whole=True)
        require_number(self.beta, "beta", low=0)
        require_number(self.cost_noise_std, "cost noise sd", low=0)
        require_number(self.ada_scale, "ada_scale", low=0, low_open=True)
        require_number(self.alpha, "alpha", low=0, high=1, high_open=True)
        require_number(self.explore_frac, "explore_frac", low=0, high=1, low_open=True)
        if self.lengthscale is not None:
            require_number(self.lengthscale, "lengthscale", low=0, low_open=True)
        if self.refit_at_spend is not None:
            require_number(self.refit_at_spend, "refit_at_spend", low=0, high=1,
                           low_open=True, high_open=True)
        if not isinstance(self.costs, str):
            for c in self.costs:
                require_number(c, "every cost", low=0, low_open=True)
        if self.objective is None:
            # a benchmark's problem is built inside each run: these failed there, once per run
            m = len(BENCHMARKS.get(self.benchmark).control_sets)
            if not isinstance(self.costs, str) and len(self.costs) != m:
                raise ConfigError(
                    f"{len(self.costs)} costs for the {m} control sets of {self.benchmark}; "
                    f"give {m} (or a preset: {', '.join(COST_PRESETS)})"
                )
            truncnorm_scale(self.variance)  # its random inputs' truncated normal

    @property
    def problem_label(self) -> str:
        """The benchmark name, or the user objective's ``module:function``."""
        return self.objective or self.benchmark

    @property
    def cost_label(self) -> str:
        """The preset name, the explicit cost vector joined with '/', or ``declared`` for a
        user objective's own costs (which a preset name does not override)."""
        if isinstance(self.costs, str):
            user = self.user_objective()
            if user is not None and user.extras.get("costs") is not None:
                return "declared"
            return self.costs
        return "/".join(f"{c:g}" for c in self.costs)

    def loop(self) -> CVSLoopConfig:
        return CVSLoopConfig(
            n_init=self.n_init,
            n_mc=self.n_mc,
            beta=self.beta,
            maximizer=CVSMaximizerConfig(
                n_warmup=self.n_warmup,
                n_warmup_full=self.n_warmup_full,
                n_starts=self.n_starts,
                maxiter=self.maxiter,
            ),
            surrogate=self.surrogate_config(),
        )

    def surrogate_config(self) -> SurrogateConfig:
        """The GP treatment of this cell (``auto``: fitted for user objectives only)."""
        fitted = self.surrogate == "fitted" or (
            self.surrogate == "auto" and self.objective is not None
        )
        base = SurrogateConfig(standardise=True, refit_every=self.refit_every) if fitted else FIXED
        return replace(base, refit_at_spend=self.refit_at_spend)

    def method_config(self) -> CVSMethodConfig:
        return CVSMethodConfig(
            ada_scale=self.ada_scale,
            etc_quota=self.etc_quota,
            tau=self.tau,
            alpha=self.alpha,
            explore_frac=self.explore_frac,
            clip_cost_lcb=self.clip_cost_lcb,
            refit_at_exploit=self.ucvs_refit,
        )

    def user_objective(self) -> UserObjective | None:
        """The loaded user objective with this config's overrides (``None`` for a benchmark)."""
        if self.objective is None:
            return None
        return load_objective(self.objective, bounds=self.bounds, control_sets=self.control_sets)


def build_problem(cfg: CVSRunConfig, seed: int) -> Problem:
    """The problem of one seed (the GP-sample objective is drawn from the seed)."""
    user = cfg.user_objective()
    if user is not None:
        return user_problem(
            user,
            costs=_mean_costs(cfg, user),
            variance=cfg.variance,
            cost_noise_std=cfg.cost_noise_std,
            lengthscale=cfg.lengthscale,
        )
    gen = torch.Generator().manual_seed(10_000 + int(seed))
    problem = make_problem(
        cfg.benchmark,
        costs=cfg.costs,
        variance=cfg.variance,
        cost_noise_std=cfg.cost_noise_std,
        generator=gen,
    )
    if cfg.lengthscale is not None:
        problem = _with_lengthscale(problem, cfg.lengthscale)
    return problem


def _with_lengthscale(problem: Problem, lengthscale: float) -> Problem:
    return replace(problem, lengthscale=float(lengthscale))


def _mean_costs(cfg: CVSRunConfig, user: UserObjective | None) -> tuple[float, ...]:
    if user is not None and user.extras.get("costs") is not None and isinstance(cfg.costs, str):
        return tuple(float(c) for c in user.extras["costs"])  # type: ignore[union-attr]
    if isinstance(cfg.costs, str):
        if cfg.costs not in COST_PRESETS:
            raise ConfigError(
                f"unknown cost preset {cfg.costs!r}; use one of {', '.join(COST_PRESETS)}"
            )
        return COST_PRESETS[cfg.costs]
    return tuple(float(c) for c in cfg.costs)


# --------------------------------------------------------------------------- the runs
def _episode_task(cfg: CVSRunConfig, seed: int, method: str) -> RunRecord:
    """One (seed, method) run: the episode's rows and its recommendation."""
    problem = build_problem(cfg, seed)
    ep, _ = run_episode(
        problem,
        method,
        cfg.budget,
        seed,
        cfg.loop(),
        family=cfg.setting,
        method_config=cfg.method_config(),
        # a user objective is scored (N evaluations per play) only when its optimum is known
        score=cfg.objective is None or problem.f_max is not None,
    )
    rows = pd.DataFrame(
        {
            "t": [s.t for s in ep.steps],
            "set_idx": [s.set_idx for s in ep.steps],
            "phase": [s.phase for s in ep.steps],
            "cost": [s.cost for s in ep.steps],
            "spent": [s.spent for s in ep.steps],
            "y": [s.y for s in ep.steps],
            "value": [s.value for s in ep.steps],
            **{f"x{j}": [s.x[j] for s in ep.steps] for j in range(problem.dim)},
        }
    )
    info: dict[str, Any] = {"stopped_by": ep.stopped_by, "policy": ep.method}
    if ep.result is not None:
        cs = ep.result.detail["control_set"]
        info["recommendation"] = {
            # the objective's units; None where the environment decides
            "x_best": [_plain(v) for v in ep.result.x_best],
            "posterior_value": ep.result.value,
            "control_set": None if cs is None else int(cs) + 1,  # type: ignore[call-overload]
        }
    return RunRecord(rows, info)


def _plain(v: Any) -> Any:
    """A JSON-ready value: NaN (an input the environment sets) becomes ``None``."""
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def _reference_task(cfg: CVSRunConfig, seed: int) -> RunRecord:
    """``max_{x^i} F_i`` of every set with the seed's MC matrix (the regrets' reference)."""
    problem = build_problem(cfg, seed)
    _, _, _, S = environment_start(problem, seed, cfg.loop())
    vals, _ = set_optima(problem, S, torch.Generator().manual_seed(777 + seed))
    return RunRecord(pd.DataFrame({"set_value": vals}), {"f_star": max(vals)})


def _needs_reference(cfg: CVSRunConfig) -> bool:
    """Every set's optimum is needed for the unknown-cost regrets, or when ``F*`` is unknown."""
    if cfg.objective is not None:
        return False  # a black box: no reference maximisation through it
    spec = BENCHMARKS.get(cfg.benchmark)
    full = any(len(cs) == spec.dim for cs in spec.control_sets)
    return cfg.setting == "ucvs" or spec.f_max is None or not full


def jobs(cfg: CVSRunConfig) -> list[Job]:
    """The runs of ``cfg``: per seed, the reference (when needed) and one run per method.

    Each run carries the config narrowed to itself, so a resumed experiment with more seeds or
    methods reuses the runs it already has.
    """
    code = None if cfg.objective is None else cfg.user_objective().code_fingerprint

    def key(args: tuple) -> tuple | None:
        # a user objective's runs are made by its code, not by its name
        return None if code is None else (replace(args[0], objective=code), *args[1:])

    out: list[Job] = []
    for seed in cfg.seeds:
        if _needs_reference(cfg):
            ref = (replace(cfg, methods=(), seeds=(seed,)), seed)
            out.append(Job(f"ref-s{seed}", _reference_task, ref, key(ref)))
        for m in cfg.methods:
            args = (replace(cfg, methods=(m,), seeds=(seed,)), seed, m)
            out.append(Job(f"{m}-s{seed}", _episode_task, args, key(args)))
    return out


@dataclass
class CVSExperiment:
    """The tidy table of an experiment, its per-seed references and how it ran."""

    config: CVSRunConfig
    table: pd.DataFrame
    references: dict[int, dict[str, Any]]
    execution: Execution
    runs: dict[str, dict[str, Any]]

    def summary(self) -> pd.DataFrame:
        return summarise(self.table, self.config.budget)


def run_experiment(
    cfg: CVSRunConfig,
    out_dir: str | Path | None = None,
    execution: ExecutionConfig | None = None,
    *,
    progress: bool = False,
) -> CVSExperiment:
    """Run every (method, seed) of ``cfg``; with ``out_dir``, write results and manifest there.

    The table has one row per BO iteration (seed-major, methods in config order) with the
    regrets against the seed's reference.

    Raises
    ------
    ConfigError
        A user objective that does not load or lacks what the family needs (control sets,
        costs), before any run starts or anything is written: every run would fail with it.
    """
    if cfg.objective is not None and cfg.seeds:
        build_problem(cfg, cfg.seeds[0])
    job_list = jobs(cfg)
    ex = run_jobs(job_list, out_dir, execution, progress=progress, family=cfg.setting)
    by_id = dict(zip((j.run_id for j in job_list), ex.records, strict=True))
    means, m = _structure(cfg)
    frames, refs = [], {}
    for seed in cfg.seeds:
        ref = by_id.get(f"ref-s{seed}")
        if ref is not None:
            vals = [float(v) for v in ref.rows["set_value"]]
            f_star = max(vals)
        else:
            vals, f_star = [], _known_f_max(cfg)
        refs[seed] = {"set_optima": vals, "f_star": f_star}
        for method in cfg.methods:
            rec = by_id[f"{method}-s{seed}"]
            frames.append(episode_frame(rec.rows, method, seed, cfg, means, m, vals, f_star))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    runs = {j.run_id: r.info for j, r in zip(job_list, ex.records, strict=True)}
    result = CVSExperiment(cfg, table, refs, ex, runs)
    if out_dir is not None:
        write_results(
            out_dir,
            table,
            cfg,
            cfg.seeds,
            execution=ex,
            runs=runs,
            family=cfg.setting,
            references=refs,
            summary=result.summary().to_dict(orient="records") if len(table) else [],
        )
    return result


def _structure(cfg: CVSRunConfig) -> tuple[tuple[float, ...], int]:
    """Mean costs and number of control sets, without building a problem."""
    user = cfg.user_objective()
    means = _mean_costs(cfg, user)
    m = (
        len(user.extras["control_sets"])
        if user is not None
        else len(  # type: ignore[arg-type]
            BENCHMARKS.get(cfg.benchmark).control_sets
        )
    )
    if len(means) != m:
        raise ConfigError(f"{len(means)} costs for {m} control sets")
    return means, m


def _known_f_max(cfg: CVSRunConfig) -> float:
    """``max f`` when known: the benchmark's, or ``f(optimum)`` of a user objective that
    declares its maximiser; ``NaN`` otherwise (no regret is reported then)."""
    if cfg.objective is not None:
        f_max = build_problem(cfg, cfg.seeds[0]).f_max
        return math.nan if f_max is None else float(f_max)
    f_max = BENCHMARKS.get(cfg.benchmark).f_max
    return math.nan if f_max is None else float(f_max)


def episode_frame(
    rows: pd.DataFrame,
    method: str,
    seed: int,
    cfg: CVSRunConfig,
    mean_costs: Sequence[float],
    n_sets: int,
    set_values: Sequence[float],
    f_star: float,
) -> pd.DataFrame:
    """Tidy rows of one run with its regrets (set indices are 1-based in the table)."""
    idx = rows["set_idx"].to_numpy(dtype=int)
    tgt = target_set(set_values, mean_costs, cfg.alpha) if len(set_values) == n_sets else None
    r = regrets(
        rows["value"].to_numpy(dtype=float),
        idx,
        rows["cost"].to_numpy(dtype=float),
        f_star,
        mean_costs,
        target=tgt,
        alpha=cfg.alpha if cfg.setting == "ucvs" else 0.0,
    )
    points = rows[[c for c in rows.columns if c.startswith("x") and c[1:].isdigit()]]
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "setting": cfg.setting,
                    "benchmark": cfg.problem_label,
                    "costs": cfg.cost_label,
                    "variance": cfg.variance,
                    "method": method,
                    "seed": seed,
                    "t": rows["t"].to_numpy(dtype=int),
                    "set": idx + 1,
                    "phase": rows["phase"].astype(str).to_numpy(),
                    "cost": rows["cost"].to_numpy(dtype=float),
                    "spent": r.spent,
                    "y": rows["y"].to_numpy(dtype=float),
                    "value": r.value,
                    "f_star": f_star,
                    "simple_regret": r.simple,
                    "cost_weighted_regret": r.cost_weighted,
                    "quality_regret": r.quality,
                    "cost_regret": r.cost,
                    "target_set": (tgt + 1) if tgt is not None else 0,
                    "n_sets": n_sets,
                }
            ),
            points.reset_index(drop=True),
        ],
        axis=1,
    )


# --------------------------------------------------------------------------- aggregation


def step_on_grid(spent: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Carry-forward step function of ``values`` at cost points ``spent``, read at ``grid``.

    Before its first point a run takes its first value (the official plotting convention).
    """
    pos = np.searchsorted(spent, grid, side="right") - 1
    return values[np.clip(pos, 0, len(values) - 1)]


def aggregate(df: pd.DataFrame, column: str = "simple_regret", budget: float | None = None):
    """Per method: union cost grid, mean and standard error of ``column`` over seeds (sample sd,
    ``ddof = 1``; ``NaN`` for a single seed, so its figure has no band), and the ``(seeds,
    grid)`` matrix."""
    out = {}
    for method, g in df.groupby("method", sort=False):
        runs = [(r["spent"].to_numpy(), r[column].to_numpy()) for _, r in g.groupby("seed")]
        grid = np.unique(np.concatenate([s for s, _ in runs]))
        if budget is not None:
            grid = grid[grid <= budget + 1e-9]
        M = np.stack([step_on_grid(s, v, grid) for s, v in runs])
        out[method] = (grid, M.mean(0), standard_error(M), M)
    return out


def regret_at(df: pd.DataFrame, spend: float) -> pd.DataFrame:
    """Simple regret of every (method, seed) after spending at most ``spend``."""
    rows = []
    for (method, seed), g in df.groupby(["method", "seed"], sort=False):
        g = g.sort_values("t")
        upto = g[g["spent"] <= spend + 1e-9]
        r = upto["simple_regret"].iloc[-1] if len(upto) else g["simple_regret"].iloc[0]
        rows.append({"method": method, "seed": seed, "spend": spend, "simple_regret": float(r)})
    return pd.DataFrame(rows)


def lock_on_spend(g: pd.DataFrame, last_set: int) -> float:
    """Spend at the first iteration from which every later choice is ``last_set`` (1-based)."""
    g = g.sort_values("t")
    sets = g["set"].to_numpy()
    not_last = np.flatnonzero(sets != last_set)
    k = 0 if not_last.size == 0 else not_last[-1] + 1
    if k >= len(sets):
        return float("nan")
    spent_before = g["spent"].to_numpy()[k] - g["cost"].to_numpy()[k]
    return float(spent_before)


def summarise(df: pd.DataFrame, budget: float) -> pd.DataFrame:
    """Per method: final simple regret at C/4, C/2, C (mean, SE, median), evaluations, the median
    best observation and the mean lock-on spend.

    The SE is the sample standard deviation over seeds (``ddof = 1``) over ``sqrt(seeds)``.
    Only defined numbers are reported: the regret columns need a known optimum (a benchmark's,
    or a user objective's declared ``optimum``), and a column that is undefined for some method
    (the lock-on spend of a method that never commits to the last set; the SE of one seed) is
    left out, so the summary holds no ``NaN``.
    """
    rows = []
    m_last = int(df["n_sets"].max()) if len(df) else 7
    scored = bool(len(df)) and bool(np.isfinite(df["simple_regret"]).all())
    for method, g in df.groupby("method", sort=False):
        row: dict = {"method": method, "seeds": g["seed"].nunique()}
        if scored:
            for frac, tag in ((0.25, "C/4"), (0.5, "C/2"), (1.0, "C")):
                r = regret_at(g, frac * budget)["simple_regret"].to_numpy()
                row[f"regret@{tag}"] = float(r.mean())
                row[f"se@{tag}"] = float(standard_error(r))
                row[f"median@{tag}"] = float(np.median(r))
        row["evals"] = float(g.groupby("seed")["t"].max().mean())
        row["best_y"] = float(g.groupby("seed")["y"].max().median())
        spends = np.array([lock_on_spend(s, m_last) for _, s in g.groupby("seed")])
        row["lock_on_spend"] = (
            float(spends[np.isfinite(spends)].mean()) if np.isfinite(spends).any() else math.nan
        )
        rows.append(row)
    return pd.DataFrame(rows).dropna(axis=1)
