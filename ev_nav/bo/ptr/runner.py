"""Run PTR methods on benchmarks or user objectives: trials, metrics, results and figures.

Metrics (Iwazaki et al., Sec. 6; decisions A12 in docs/bo-ptr.md): optimization records the
inference regret ``p_upper(x*) − p_upper(x̂_t)`` after every step; LSE records the F1 score of
``Ĥ_t`` against the true ``H`` (``F1 = 1`` if both are empty) and a variant that also counts
unclassified designs with ``μ^(p) ≥ α`` as positive. Trial ``k`` uses seed ``seed + k`` (see
:mod:`ev_nav.bo.ptr.api` for its streams), so the same seed reproduces the same query sequence
and all methods share the initial design. Every trial is an independent run on the fleet
grids' executors (:mod:`ev_nav.bo.core.runs`); a user objective has no true PTR, so its trials
record the queries and the recommendation only.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ev_nav.bo.core.maximize import blas_single_threaded
from ev_nav.bo.core.objective import load_objective
from ev_nav.bo.core.plots import mean_band, plot_bands, save_figure, standard_error, subplots
from ev_nav.bo.core.runs import (
    Execution,
    ExecutionConfig,
    Job,
    RunRecord,
    check_output_folder,
    read_results,
    run_jobs,
    write_results,
    write_table,
)
from ev_nav.bo.ptr.api import PTROptimizer
from ev_nav.bo.ptr.context import Policy
from ev_nav.bo.ptr.measure import ptr_posterior
from ev_nav.bo.ptr.problems import PER_TRIAL_BENCHMARKS, PTRProblem, make_problem, user_problem
from ev_nav.bo.ptr.registry import PTRMethodConfig, method_task
from ev_nav.errors import ConfigError, require_number, require_seed


@dataclass(frozen=True)
class PTRRunConfig:
    """One benchmark (or user objective) × method experiment.

    Attributes
    ----------
    benchmark, method
        Registered names (``ev-nav bo ptr list``); ``benchmark`` is ignored with ``objective``.
    iterations
        Queries per trial after the initial design (T).
    trials
        Independent trials (seeds ``seed .. seed + trials - 1``).
    seed
        First trial seed.
    alpha
        LSE level (default: the benchmark's).
    beta, m, eta
        PTR interval parameters (``None``: the method's paper default).
    n_init
        Random initial queries (default: the benchmark's; 0 except newsvendor).
    refit_every
        Hyperparameter refit period for benchmarks that learn them (newsvendor).
    uncontrollable_w
        Extension (no guarantee): ``w_t`` is drawn from ``p(w)`` instead of chosen.
    beta_schedule, delta
        ``"theory"``: BPT-UCB/BPT-LSE use ``β_t = |X|π²t²/(3δ)``.
    objective, bounds, environment, weights, threshold
        A user objective ``f(x, w)`` (see :mod:`ev_nav.bo.core.objective`) and overrides of
        its declarations.
    points_per_axis
        Design grid of a user objective without declared ``design_points``.
    threads
        torch threads per trial (BLAS is kept single-threaded), whatever runs it.
    """

    benchmark: str
    method: str
    iterations: int = 60
    trials: int = 5
    seed: int = 0
    alpha: float | None = None
    beta: float | None = None
    m: float = 2.0
    eta: float = 0.0
    n_init: int | None = None
    refit_every: int = 10
    uncontrollable_w: bool = False
    beta_schedule: str = "constant"
    delta: float = 0.1
    objective: str | None = None
    bounds: tuple[tuple[float, float], ...] | None = None
    environment: tuple[Any, ...] | None = None
    weights: tuple[float, ...] | None = None
    threshold: float | None = None
    points_per_axis: int | None = None
    threads: int = 1

    def __post_init__(self) -> None:
        if self.objective is None:
            given = [name for name in ("bounds", "environment", "weights", "threshold",
                                       "points_per_axis") if getattr(self, name) is not None]
            if given:  # they were ignored: a benchmark declares its own
                one = len(given) == 1
                raise ConfigError(f"{', '.join(given)} {'is' if one else 'are'} for a user "
                                  f"objective: give {'it' if one else 'them'} with objective "
                                  "(--objective), not with a benchmark")
        for name in ("iterations", "trials", "threads", "refit_every"):
            require_number(getattr(self, name), name, low=1, whole=True)
        require_seed(self.seed)
        # NaN passed the methods' own checks (a run labelled "β=nan"), a negative n_init ran
        if self.beta is not None:
            require_number(self.beta, "beta", low=0)
        require_number(self.m, "m (the moment order)", low=2)
        require_number(self.eta, "eta", low=0)
        if self.n_init is not None:
            require_number(self.n_init, "n_init", low=0, whole=True)
        require_number(self.delta, "delta", low=0, high=1, low_open=True, high_open=True)
        if self.alpha is not None:  # a probability level: 1.5 failed inside every trial
            require_number(self.alpha, "alpha", low=0, high=1, low_open=True, high_open=True)
        if self.threshold is not None:
            require_number(self.threshold, "threshold")
        method_task(self.method)
        if self.beta_schedule not in ("constant", "theory"):
            raise ConfigError("beta_schedule must be 'constant' or 'theory'")
        if self.beta_schedule == "theory" and self.method not in (
            "bpt-ucb",
            "bpt-lse",
            "bpt-lse-stop",
        ):
            raise ConfigError("the theory beta schedule applies to bpt-ucb and bpt-lse only")

    @property
    def problem_label(self) -> str:
        return self.objective or self.benchmark

    def method_config(self, alpha: float | None) -> PTRMethodConfig:
        return PTRMethodConfig(alpha=alpha, beta=self.beta, m=self.m, eta=self.eta)


@dataclass
class TrialResult:
    """One trial: the metric after every step and the query sequence."""

    seed: int
    metric: np.ndarray  # (T,) regret or F1 (NaN for a user objective)
    queries: np.ndarray  # (T, 2) design and environment indices (-1 after a stop)
    metric_alt: np.ndarray | None = None  # LSE: F1 with unclassified designs by posterior mean
    first_classified: int | None = None  # LSE: first step with U = ∅
    stopped_at: int | None = None  # faithful BPT-LSE: step at which it terminated
    seconds: float = 0.0
    problem_info: dict[str, object] = field(default_factory=dict)
    recommendation: dict[str, object] = field(default_factory=dict)
    optimizer: PTROptimizer | None = field(default=None, repr=False)  # final state (not saved)
    evaluated: np.ndarray | None = None  # (n_init + steps, d_x + d_w) told points, user units
    observed: np.ndarray | None = None  # (n_init + steps,) the values observed there
    n_init: int = 0
    init_queries: np.ndarray | None = None  # (n_init, 2) grid indices of the initial design


@dataclass
class ExperimentResult:
    """All trials of one :class:`PTRRunConfig`."""

    config: PTRRunConfig
    task: str
    trials: list[TrialResult]

    @property
    def metric(self) -> np.ndarray:
        """``(trials, T)`` metric matrix."""
        return np.stack([t.metric for t in self.trials])

    def mean_se(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard error (``ddof = 1``) over trials, each ``(T,)``; the SE of a single
        trial is ``NaN`` (unknown, not zero)."""
        M = self.metric
        return M.mean(0), standard_error(M)


def f1_score(pred: np.ndarray, truth: np.ndarray) -> float:
    """F1 of boolean ``pred`` against ``truth`` (positive class = True; 1 if both empty, A12)."""
    tp = float(np.sum(pred & truth))
    denom = float(np.sum(pred) + np.sum(truth))
    return 1.0 if denom == 0 else 2.0 * tp / denom


def run_trial(
    problem: PTRProblem,
    method: str | Policy,
    iterations: int,
    seed: int,
    *,
    n_init: int | None = None,
    alpha: float | None = None,
    refit_every: int = 10,
    method_config: PTRMethodConfig | None = None,
    beta_schedule: str = "constant",
    delta: float = 0.1,
    uncontrollable_w: bool = False,
) -> TrialResult:
    """Simulate one trial of ``method`` on ``problem`` for ``iterations`` queries.

    A faithful BPT-LSE (``stop_when_classified``) stops when every design is classified; its
    final estimate is carried forward to the remaining steps so curves keep length T.
    """
    t0 = time.perf_counter()
    opt = PTROptimizer(
        problem,
        method,
        seed=seed,
        method_config=method_config or PTRMethodConfig(alpha=alpha),
        n_init=n_init,
        refit_every=refit_every,
        beta_schedule=beta_schedule,
        delta=delta,
        uncontrollable_w=uncontrollable_w,
        capacity=iterations + 16,
    )
    noise_rng = np.random.default_rng(opt.noise_seed)

    def step() -> tuple[int, int]:
        s = opt.ask()
        ix, iw = int(s.detail["ix"]), int(s.detail["iw"])  # type: ignore[call-overload]
        opt.tell(s.x, problem.observe_y(ix, iw, noise_rng))
        return ix, iw

    while opt.initialising:
        step()
    scored = problem.f_true is not None
    task = opt.task
    p_true = problem.p_true if scored else None
    truth = problem.true_level_set(alpha) if scored and task == "lse" else None
    level = (alpha if alpha is not None else problem.alpha) if task == "lse" else None
    metric = np.full(iterations, np.nan)
    metric_alt = np.full(iterations, np.nan) if task == "lse" else None
    queries = np.empty((iterations, 2), dtype=np.int64)
    first_classified: int | None = None
    stopped_at: int | None = None
    for t in range(iterations):
        if stopped_at is not None:
            metric[t], queries[t] = metric[t - 1], -1
            if metric_alt is not None:
                metric_alt[t] = metric_alt[t - 1]
            continue
        queries[t] = step()
        if task == "opt":
            if p_true is not None:
                metric[t] = p_true.max() - p_true[opt.report()]  # type: ignore[index]
            continue
        high, low = opt.report()  # type: ignore[misc]
        unclassified = ~(high | low)
        if truth is not None:
            metric[t] = f1_score(high, truth)
            mu_p = ptr_posterior(opt.gp.mean, opt.gp.var, problem.p_w, problem.h).mean
            metric_alt[t] = f1_score(high | (unclassified & (mu_p >= level)), truth)  # type: ignore[index, operator]
        if not unclassified.any():
            if first_classified is None:
                first_classified = t + 1
            if getattr(opt.policy, "stop_when_classified", False):
                stopped_at = t + 1
    best = opt.result()
    n_init = len(best.y) - int((queries[:, 0] >= 0).sum())
    recommendation: dict[str, object] = {
        "x_best": best.x_best,
        "ptr_mean": best.value,
        "ix": best.detail["ix"],
    }
    if task == "lse":
        high, low = opt.report()  # type: ignore[misc]
        recommendation["high"] = np.flatnonzero(high).tolist()
        recommendation["low"] = np.flatnonzero(low).tolist()
        if not scored:  # a black box: the posterior PTR of every design goes to level_set.csv
            recommendation["ptr_mean_all"] = opt.ptr_mean().tolist()
    return TrialResult(
        seed=int(seed),
        metric=metric,
        queries=queries,
        metric_alt=metric_alt,
        first_classified=first_classified,
        stopped_at=stopped_at,
        seconds=time.perf_counter() - t0,
        problem_info={
            **problem.info,
            "d_w": int(problem.environments.shape[1]),
            "black_box": not scored,
        },
        recommendation=recommendation,
        optimizer=opt,
        evaluated=best.X,
        observed=best.y,
        n_init=n_init,
        init_queries=np.array(best.detail["grid_index"][:n_init], dtype=np.int64).reshape(-1, 2),
    )


# ------------------------------------------------------------------------------ experiments
@functools.lru_cache(maxsize=4)
def _shared_problem(name: str) -> PTRProblem:
    """A benchmark that does not change with the trial, built once per process."""
    return make_problem(name)


def build_problem(cfg: PTRRunConfig, seed: int, task: str) -> PTRProblem:
    """The problem of one trial (``gp-test`` draws a new function per trial)."""
    if cfg.objective is not None:
        user = load_objective(
            cfg.objective,
            bounds=cfg.bounds,
            environment=cfg.environment,
            weights=cfg.weights,
            threshold=cfg.threshold,
            alpha=cfg.alpha,
        )
        return user_problem(user, cfg.points_per_axis)
    if cfg.benchmark in PER_TRIAL_BENCHMARKS:
        return make_problem(cfg.benchmark, seed, task)
    return _shared_problem(cfg.benchmark)


def _level(cfg: PTRRunConfig, problem: PTRProblem) -> float | None:
    """The LSE level of ``cfg``: its own, else the benchmark's (``None``: the benchmark has none,
    and a level-set method refuses to run)."""
    return cfg.alpha if cfg.alpha is not None else problem.alpha


def _trial_task(cfg: PTRRunConfig, seed: int) -> RunRecord:
    torch.set_num_threads(cfg.threads)
    with blas_single_threaded():
        return _trial_record(cfg, seed)


def _trial_record(cfg: PTRRunConfig, seed: int) -> RunRecord:
    task = method_task(cfg.method)
    problem = build_problem(cfg, seed, task)
    alpha = _level(cfg, problem) if task == "lse" else cfg.alpha
    r = run_trial(
        problem,
        cfg.method,
        cfg.iterations,
        seed,
        n_init=cfg.n_init,
        alpha=alpha,
        refit_every=cfg.refit_every,
        method_config=cfg.method_config(alpha),
        beta_schedule=cfg.beta_schedule,
        delta=cfg.delta,
        uncontrollable_w=cfg.uncontrollable_w,
    )
    rows = trial_rows(r, cfg.iterations)
    info = {
        "seed": r.seed,
        "first_classified": r.first_classified,
        "stopped_at": r.stopped_at,
        "seconds": r.seconds,
        "problem_info": r.problem_info,
        "recommendation": r.recommendation,
        "has_metric_alt": r.metric_alt is not None and "metric_alt" in rows,
    }
    return RunRecord(rows, info)


def trial_rows(r: TrialResult, iterations: int) -> pd.DataFrame:
    """One row per evaluation of a trial: the initial design (``t <= 0``) then every step.

    Columns: ``t``, the grid indices ``ix``/``iw`` (``-1`` after a stop), the evaluated point in
    the user's coordinates (``x0, …`` design, ``w0, …`` environment), the observed ``y``, and
    the metric (regret or F1; only for benchmarks, which know the truth).
    """
    n0 = r.n_init
    steps = pd.DataFrame(
        {
            "t": np.arange(1, iterations + 1),
            "ix": r.queries[:, 0],
            "iw": r.queries[:, 1],
        }
    )
    frames = [steps]
    if n0:
        iq = r.init_queries if r.init_queries is not None else np.full((n0, 2), -1)
        frames.insert(0, pd.DataFrame({"t": np.arange(1 - n0, 1), "ix": iq[:, 0], "iw": iq[:, 1]}))
    rows = pd.concat(frames, ignore_index=True)
    if r.evaluated is not None and r.observed is not None:
        # evaluations in order: the initial design, then the steps taken (none after a stop)
        done = np.concatenate([np.ones(n0, dtype=bool), r.queries[:, 0] >= 0])
        E = np.full((len(rows), r.evaluated.shape[1]), np.nan)
        yv = np.full(len(rows), np.nan)
        E[done], yv[done] = r.evaluated, r.observed
        d_w = int(r.problem_info.get("d_w", 0)) or _d_w(r)
        d_x = E.shape[1] - d_w
        for j in range(d_x):
            rows[f"x{j}"] = E[:, j]
        for j in range(d_w):
            rows[f"w{j}"] = E[:, d_x + j]
        rows["y"] = yv
    if not bool(r.problem_info.get("black_box", False)):
        rows["metric"] = np.concatenate([np.full(n0, np.nan), r.metric])
        alt = r.metric_alt if r.metric_alt is not None else np.full(iterations, np.nan)
        rows["metric_alt"] = np.concatenate([np.full(n0, np.nan), alt])
    return rows


def _d_w(r: TrialResult) -> int:
    env = r.problem_info.get("environment")
    return int(np.atleast_2d(np.asarray(env, dtype=float).T).T.shape[1]) if env is not None else 0


def _run_id(method: str, seed: int, tag: str = "") -> str:
    """A trial's run id: ``METHOD-sSEED`` (``METHOD-TAG-sSEED`` where a method repeats)."""
    return f"{method}-{tag}-s{seed}" if tag else f"{method}-s{seed}"


def _tags(configs: Sequence[PTRRunConfig]) -> list[str]:
    """Per config, what tells its trials apart from another config's of the same method: its
    position (``c01``) where a method repeats, else nothing, so that methods listed in another
    order reuse their finished trials (the position was in every id: ``00-bpt-ucb-s0``)."""
    count = Counter(cfg.method for cfg in configs)
    return [f"c{i:02d}" if count[cfg.method] > 1 else "" for i, cfg in enumerate(configs)]


def jobs(configs: Sequence[PTRRunConfig]) -> list[Job]:
    """One run per (config, trial); ids from :func:`_run_id`."""
    out = []
    for cfg, tag in zip(configs, _tags(configs), strict=True):
        code = (None if cfg.objective is None
                else load_objective(cfg.objective, bounds=cfg.bounds).code_fingerprint)
        for k in range(cfg.trials):
            # the config narrowed to the trial: more trials later reuse the finished ones
            args = (replace(cfg, trials=1, seed=cfg.seed + k), cfg.seed + k)
            # a user objective's runs are made by its code, not by its name
            key = None if code is None else (replace(args[0], objective=code), args[1])
            out.append(Job(_run_id(cfg.method, cfg.seed + k, tag), _trial_task, args, key))
    return out


def _adopt_positional_runs(job_list: Sequence[Job], out_dir: str | Path) -> None:
    """Rename trial folders that earlier versions named by position (``00-bpt-ucb-s0``) to
    their run ids, where exactly one such folder is the trial's; the fingerprint check of
    :func:`~ev_nav.bo.core.runs.run_jobs` still refuses one of another configuration."""
    runs = Path(out_dir) / "runs"
    if not runs.is_dir():
        return
    for job in job_list:
        method, _, seed = job.run_id.rpartition("-s")
        new = runs / job.run_id
        old = [d for d in runs.glob(f"[0-9][0-9]-{method}-s{seed}") if d.is_dir()]
        if not new.exists() and len(old) == 1:
            old[0].rename(new)


def run_experiments(
    configs: Sequence[PTRRunConfig],
    out_dir: str | Path | None = None,
    execution: ExecutionConfig | None = None,
    *,
    progress: bool = False,
) -> list[ExperimentResult]:
    """Run every trial of every config; with ``out_dir``, write ``results.csv`` + manifest.

    Raises
    ------
    ConfigError
        Mixed task kinds, or a user objective that does not load or lacks what PTR needs (the
        environment grid, the threshold), before any run starts or anything is written.
    """
    if len({method_task(c.method) for c in configs}) > 1:
        raise ConfigError("mix of optimization and LSE methods: run them separately")
    for cfg in configs:
        if cfg.objective is not None:
            build_problem(cfg, cfg.seed, method_task(cfg.method))
    job_list = jobs(configs)
    if out_dir is not None:
        check_output_folder(out_dir, "ptr")  # before the old run folders are renamed
    if out_dir is not None and (execution is None or execution.resume):
        _adopt_positional_runs(job_list, out_dir)
    ex = run_jobs(job_list, out_dir, execution, progress=progress, family="ptr")
    results = _collect(configs, job_list, ex)
    if out_dir is not None:
        save_results(results, out_dir, execution=ex)
    return results


def run_experiment(
    cfg: PTRRunConfig,
    out_dir: str | Path | None = None,
    execution: ExecutionConfig | None = None,
    *,
    progress: bool = False,
) -> ExperimentResult:
    """All trials of one config (see :func:`run_experiments`)."""
    return run_experiments([cfg], out_dir, execution, progress=progress)[0]


def _collect(
    configs: Sequence[PTRRunConfig], job_list: Sequence[Job], ex: Execution
) -> list[ExperimentResult]:
    by_id = dict(zip((j.run_id for j in job_list), ex.records, strict=True))
    out = []
    for cfg, tag in zip(configs, _tags(configs), strict=True):
        trials = [
            _trial_from(by_id[_run_id(cfg.method, cfg.seed + k, tag)]) for k in range(cfg.trials)
        ]
        out.append(ExperimentResult(cfg, method_task(cfg.method), trials))
    return out


def _trial_from(rec: RunRecord) -> TrialResult:
    info = rec.info
    rows = rec.rows
    steps = rows[rows["t"] >= 1]
    T = len(steps)
    metric = steps["metric"].to_numpy(dtype=float) if "metric" in steps else np.full(T, np.nan)
    xw = [c for c in rows.columns if c[:1] in "xw" and c[1:].isdigit()]
    evaluated = observed = None
    if xw and "y" in rows:
        done = rows[rows["y"].notna()]
        evaluated = done[xw].to_numpy(dtype=float)
        observed = done["y"].to_numpy(dtype=float)
    return TrialResult(
        seed=int(info["seed"]),
        metric=metric,
        queries=steps[["ix", "iw"]].to_numpy(dtype=np.int64),
        metric_alt=steps["metric_alt"].to_numpy(dtype=float) if info["has_metric_alt"] else None,
        first_classified=info["first_classified"],
        stopped_at=info["stopped_at"],
        seconds=float(info["seconds"]),
        problem_info=info["problem_info"],
        recommendation=info.get("recommendation", {}),
        evaluated=evaluated,
        observed=observed,
        n_init=len(rows) - T,
        init_queries=rows[rows["t"] < 1][["ix", "iw"]].to_numpy(dtype=np.int64),
    )


# ------------------------------------------------------------------------------ outputs
def results_table(results: list[ExperimentResult], steps: tuple[int, ...] = ()) -> str:
    """Markdown table of mean ± 2 SE of the metric at chosen steps (default: T/6, T/2, T); with
    a single trial the SE is unknown and shown as ``± n/a``."""
    if not results:
        return ""
    if any(t.problem_info.get("black_box", False) for r in results for t in r.trials):
        return recommendations_table(results)
    T = results[0].metric.shape[1]
    cols = steps or tuple(sorted({max(1, T // 6), max(1, T // 2), T}))
    name = "regret" if results[0].task == "opt" else "F1"
    head = "| method | " + " | ".join(f"{name} @ t={c}" for c in cols) + " | s/trial |"
    lines = [head, "|---" * (len(cols) + 2) + "|"]
    for r in results:
        mean, se = r.mean_se()
        cells = [f"{mean[c - 1]:.3f} ± {_num(2 * se[c - 1])}" for c in cols]
        sec = np.mean([t.seconds for t in r.trials])
        lines.append(f"| {run_label(r.config)} | " + " | ".join(cells) + f" | {sec:.2f} |")
    return "\n".join(lines)


def _num(v: float) -> str:
    return f"{v:.3f}" if np.isfinite(v) else "n/a"


def recommendations_table(results: list[ExperimentResult]) -> str:
    """Markdown table of the recommendations of runs on a black box (no regret or F1 exists):
    the recommended design, its posterior PTR mean and, for level sets, the class sizes."""
    lse = results[0].task == "lse"
    head = "| method | seed | recommended design | posterior P[f > h] |"
    head += " designs in Ĥ / L̂ / unclassified |" if lse else ""
    lines = [head, "|---" * (5 if lse else 4) + "|"]
    for r in results:
        for t in r.trials:
            rec = t.recommendation
            x = ", ".join(f"{v:.4g}" for v in np.atleast_1d(np.asarray(rec["x_best"], float)))
            line = f"| {run_label(r.config)} | {t.seed} | [{x}] | {float(rec['ptr_mean']):.3f} |"
            if lse:
                n_x = len(rec.get("ptr_mean_all", []))
                nh, nl = len(rec.get("high", [])), len(rec.get("low", []))
                line += f" {nh} / {nl} / {n_x - nh - nl} |"
            lines.append(line)
    return "\n".join(lines)


def recommendations(results: list[ExperimentResult]) -> str:
    """One line per trial: the recommended design and its posterior PTR mean."""
    lines = []
    for r in results:
        for t in r.trials:
            rec = t.recommendation
            x = ", ".join(f"{v:.4g}" for v in np.asarray(rec.get("x_best", []), dtype=float))
            lines.append(
                f"{run_label(r.config)} seed {t.seed}: recommended design [{x}], "
                f"posterior P[f > h] {float(rec.get('ptr_mean', np.nan)):.3f}"
            )
    return "\n".join(lines)


def run_label(cfg: PTRRunConfig) -> str:
    """Method name plus any non-default PTR-interval settings (for tables and legends)."""
    label = cfg.method
    if cfg.beta is not None:
        label += f" β={cfg.beta:g}"
    if cfg.m != 2.0:
        label += f" m={cfg.m:g}"
    if cfg.beta_schedule != "constant":
        label += " β_t=theory"
    if cfg.uncontrollable_w:
        label += " w~p(w)"
    return label


def _style(method: str) -> dict[str, object]:
    """Line style: proposed methods thick, PTR-reporting variants dashed, random search dotted."""
    if method.startswith("bpt-"):
        return {"lw": 2.4, "ls": "-"}
    if method.startswith(("pmax-", "p-")):
        return {"lw": 1.2, "ls": "--"}
    if method.startswith("rs"):
        return {"lw": 1.4, "ls": ":"}
    return {"lw": 1.2, "ls": "-"}


def plot_results(results: list[ExperimentResult], path: str | Path, title: str = "") -> Path:
    """Mean ± 2 SE curves of every method (inference regret or F1) saved as a PNG.

    The iteration axis is logarithmic: the methods separate in the first tens of steps.
    """
    import matplotlib.pyplot as plt  # the shared plot helper has set the backend

    fig, axes = subplots(1, 1, (6.4, 4.2))
    colors = plt.get_cmap("tab20").colors
    bands, styles = {}, {}
    for k, r in enumerate(results):
        T = r.metric.shape[1]
        label = run_label(r.config)
        bands[label] = mean_band(np.arange(1, T + 1), r.metric, n_se=2.0)
        color = colors[(2 * k) % 20 if k < 10 else (2 * k + 1) % 20]
        styles[label] = {"color": color, **_style(r.config.method)}
    task = results[0].task if results else "opt"
    plot_bands(
        axes[0, 0],
        bands,
        xlabel="iteration t (log scale)",
        ylabel="inference regret" if task == "opt" else "F1 score",
        title=title or (results[0].config.benchmark if results else ""),
        logx=True,
        band_alpha=0.10,
        styles=styles,
        legend={"fontsize": 7, "ncol": 2},
    )
    return save_figure(fig, path, dpi=100)


def save_results(
    results: list[ExperimentResult],
    out_dir: str | Path,
    *,
    execution: Execution | None = None,
    wall_seconds: float | None = None,
) -> Path:
    """Write ``results.csv`` (one row per evaluation, :func:`trial_rows`), ``manifest.json``,
    ``recommendations.csv`` (one row per trial: the recommended design in the user's coordinates
    and its posterior PTR mean) and, for level-set runs on a user objective, ``level_set.csv``
    (every design, its posterior PTR mean and class: ``high`` (Ĥ), ``low`` (L̂) or
    ``unclassified``)."""
    frames, runs, recs, level = [], {}, [], []
    tags = _tags([r.config for r in results])
    for i, r in enumerate(results):
        label = run_label(r.config)
        head = {
            "config": i,
            "label": label,
            "benchmark": r.config.problem_label,
            "method": r.config.method,
            "task": r.task,
        }
        for t in r.trials:
            rows = trial_rows(t, t.metric.size)
            for k, v in reversed(list({**head, "seed": t.seed}.items())):
                rows.insert(0, k, v)
            frames.append(rows)
            runs[_run_id(r.config.method, t.seed, tags[i])] = {
                "seed": t.seed,
                "first_classified": t.first_classified,
                "stopped_at": t.stopped_at,
                "seconds": t.seconds,
                "problem_info": t.problem_info,
                "recommendation": t.recommendation,
                "has_metric_alt": t.metric_alt is not None
                and not t.problem_info.get("black_box", False),
            }
            rec = t.recommendation
            x_best = np.atleast_1d(np.asarray(rec.get("x_best", []), dtype=float))
            recs.append(
                {
                    **head,
                    "seed": t.seed,
                    **{f"x{j}": v for j, v in enumerate(x_best)},
                    "ptr_mean": float(rec.get("ptr_mean", np.nan)),
                }
            )
            if "ptr_mean_all" in rec and "design_points" in t.problem_info:
                level.append(_level_set_rows({**head, "seed": t.seed}, t))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    out = Path(out_dir)
    write_results(
        out,
        table,
        [asdict(r.config) for r in results],
        sorted({t.seed for r in results for t in r.trials}),
        execution=execution,
        runs=runs,
        family="ptr",
        markdown_table=results_table(results),
        # an execution records its own wall time
        **({} if wall_seconds is None or execution is not None else {"wall_seconds": wall_seconds}),
    )
    if recs:
        write_table(out / "recommendations.csv", pd.DataFrame(recs))
    if level:
        write_table(out / "level_set.csv", pd.concat(level, ignore_index=True))
    return out


def _level_set_rows(head: dict[str, object], t: TrialResult) -> pd.DataFrame:
    """Every design of a user-objective LSE trial with its posterior PTR mean and class."""
    X = np.atleast_2d(np.asarray(t.problem_info["design_points"], dtype=float).T).T
    rec = t.recommendation
    cls = np.full(X.shape[0], "unclassified", dtype=object)
    cls[np.asarray(rec.get("high", []), dtype=int)] = "high"
    cls[np.asarray(rec.get("low", []), dtype=int)] = "low"
    frame = pd.DataFrame({f"x{j}": X[:, j] for j in range(X.shape[1])})
    frame["ptr_mean"] = np.asarray(rec["ptr_mean_all"], dtype=float)
    frame["class"] = cls
    for k, v in reversed(list(head.items())):
        frame.insert(0, k, v)
    return frame


def load_results(path: str | Path) -> list[ExperimentResult]:
    """Rebuild experiments from a folder written by :func:`save_results`."""
    table, meta = read_results(path, "ptr", ("benchmark", "method", "iterations"),
                               ("config", "seed"))
    out = []
    configs = [PTRRunConfig(**_tuples(raw)) for raw in meta["config"]]
    for i, (cfg, tag) in enumerate(zip(configs, _tags(configs), strict=True)):
        part = table[table["config"] == i]
        trials = []
        for seed, g in part.groupby("seed", sort=False):
            info = _run_info(meta["runs"], cfg.method, int(seed), tag, i, path)
            trials.append(_trial_from(RunRecord(g.reset_index(drop=True), info)))
        out.append(ExperimentResult(cfg, method_task(cfg.method), trials))
    return out


def _run_info(runs: dict[str, Any], method: str, seed: int, tag: str, position: int,
              path: str | Path) -> dict[str, Any]:
    """The manifest's facts of one trial: under its run id, or under the id earlier versions
    gave it (the config's position first: ``00-bpt-ucb-s0``)."""
    for rid in (_run_id(method, seed, tag), f"{position:02d}-{method}-s{seed}"):
        if rid in runs:
            return runs[rid]
    raise ConfigError(f"{path}: the table's trial of {method}, seed {seed}, is not in its "
                      "manifest (the folder's files are from different runs)")


def _tuples(raw: dict[str, Any]) -> dict[str, Any]:
    """JSON lists back into the config's tuples."""

    def conv(v: Any) -> Any:
        return tuple(conv(x) for x in v) if isinstance(v, list) else v

    return {k: conv(v) for k, v in raw.items()}


def merge_results(parts: list[list[ExperimentResult]]) -> list[ExperimentResult]:
    """Concatenate the trials of runs split over seed ranges (same methods, same T)."""
    merged: dict[str, ExperimentResult] = {}
    for part in parts:
        for r in part:
            key = r.config.method
            if key not in merged:
                merged[key] = ExperimentResult(r.config, r.task, list(r.trials))
                continue
            if r.metric.shape[1] != merged[key].metric.shape[1]:
                raise ConfigError(f"cannot merge runs of {key!r} with different iteration counts")
            merged[key].trials.extend(r.trials)
    return list(merged.values())
