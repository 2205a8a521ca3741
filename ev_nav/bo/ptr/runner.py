"""Run PTR methods on benchmarks: trials, metrics, results files and figures.

Metrics (spec §1.3, §1.4, A12): optimization records the inference regret
``p_upper(x*) − p_upper(x̂_t)`` after every step; LSE records the F1 score of ``Ĥ_t`` against the
true ``H`` (``F1 = 1`` if both are empty) and a variant that also counts unclassified designs with
``μ^(p) ≥ α`` as positive. Trial ``k`` uses seed ``seed + k``; its streams (initial design,
policy, noise, posterior samples) are spawned from that seed, so the same seed reproduces the
same query sequence and all methods share the initial design.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ev_nav.bo.ptr import ptr_posterior
from ev_nav.bo.ptr_benchmarks import PER_TRIAL_BENCHMARKS, PTRProblem, make_problem
from ev_nav.bo.ptr_gp import GridKernel, GridPosterior, ProductGrid
from ev_nav.bo.ptr_policies import (
    Policy,
    StepContext,
    TheoryBeta,
    UncontrollableW,
    make_policy,
    method_task,
)
from ev_nav.errors import ConfigError, InvalidObservation
from ev_nav.gp.exact import ExactGP
from ev_nav.provenance import atomic_write_json, atomic_write_text, run_metadata


@dataclass(frozen=True)
class RunConfig:
    """One benchmark × method experiment.

    Attributes
    ----------
    benchmark, method
        Registered names (see ``ev_nav.bo.ptr_benchmarks.BENCHMARKS`` and
        ``ev_nav.bo.ptr_policies.METHODS``).
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
        Extension of spec §1.5: ``w_t`` is drawn from ``p(w)`` instead of chosen.
    beta_schedule, delta
        ``"theory"``: BPT-UCB/BPT-LSE use ``β_t = |X|π²t²/(3δ)`` (spec §2.6).
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

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.trials < 1:
            raise ConfigError("iterations and trials must be >= 1")
        method_task(self.method)
        if self.beta_schedule not in ("constant", "theory"):
            raise ConfigError("beta_schedule must be 'constant' or 'theory'")
        if self.beta_schedule == "theory" and self.method not in (
            "bpt-ucb",
            "bpt-lse",
            "bpt-lse-stop",
        ):
            raise ConfigError("the theory beta schedule applies to bpt-ucb and bpt-lse only")


@dataclass
class TrialResult:
    """One trial: the metric after every step and the query sequence."""

    seed: int
    metric: np.ndarray  # (T,) regret or F1
    queries: np.ndarray  # (T, 2) design and environment indices
    metric_alt: np.ndarray | None = None  # LSE: F1 with unclassified designs by posterior mean
    first_classified: int | None = None  # LSE: first step with U = ∅
    stopped_at: int | None = None  # faithful BPT-LSE: step at which it terminated
    seconds: float = 0.0
    problem_info: dict[str, object] = field(default_factory=dict)
    posterior: GridPosterior | None = field(default=None, repr=False)  # final GP (not saved)


@dataclass
class ExperimentResult:
    """All trials of one :class:`RunConfig`."""

    config: RunConfig
    task: str
    trials: list[TrialResult]

    @property
    def metric(self) -> np.ndarray:
        """``(trials, T)`` metric matrix."""
        return np.stack([t.metric for t in self.trials])

    def mean_se(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard error over trials, each ``(T,)``."""
        M = self.metric
        se = M.std(0, ddof=1) / np.sqrt(M.shape[0]) if M.shape[0] > 1 else np.zeros(M.shape[1])
        return M.mean(0), se


def f1_score(pred: np.ndarray, truth: np.ndarray) -> float:
    """F1 of boolean ``pred`` against ``truth`` (positive class = True; 1 if both empty, A12)."""
    tp = float(np.sum(pred & truth))
    denom = float(np.sum(pred) + np.sum(truth))
    return 1.0 if denom == 0 else 2.0 * tp / denom


def _fit_hyperparameters(gp: GridPosterior, seed: int) -> GridKernel:
    """Refit the kernel and noise of ``gp`` by marginal likelihood (shared ExactGP core).

    The fit runs on ``y / s`` with ``s`` the RMS of the observations (the prior mean stays zero,
    so this is only a change of units) and the result is scaled back: the optimiser's random
    restarts assume O(1) outputs. If every start fails, the previous hyperparameters are kept.
    """
    Z = gp.grid.Z[torch.as_tensor(gp.obs_index)]
    y = torch.as_tensor(gp.y, dtype=torch.float64) - gp.prior_mean
    s2 = max(float((y * y).mean()), 1e-12)
    model = ExactGP(
        gp.kernel.kind,
        gp.kernel.ls_tensor(Z.shape[1]),
        min(max(gp.kernel.outputscale / s2, 1e-3), 1e3),
        min(max(gp.noise_var / s2, 1e-6), 0.5),
    )
    try:
        model.fit_hyperparameters(
            Z, y / s2**0.5, n_restarts=3, generator=torch.Generator().manual_seed(seed)
        )
    except InvalidObservation:
        return gp.kernel
    kernel = GridKernel(gp.kernel.kind, tuple(model.lengthscale.tolist()), model.outputscale * s2)
    gp.refit(kernel, model.noise_var * s2)
    return kernel


def run_trial(
    problem: PTRProblem,
    policy: Policy,
    iterations: int,
    seed: int,
    *,
    n_init: int | None = None,
    alpha: float | None = None,
    refit_every: int = 10,
) -> TrialResult:
    """Run one trial of ``policy`` on ``problem`` for ``iterations`` queries.

    A faithful BPT-LSE (``stop_when_classified``) stops when every design is classified; its
    final estimate is carried forward to the remaining steps so curves keep length T.
    """
    t0 = time.perf_counter()
    ss = np.random.SeedSequence(int(seed))
    s_init, s_policy, s_noise, s_torch = ss.spawn(4)
    rng_init = np.random.default_rng(s_init)
    noise_rng = np.random.default_rng(s_noise)
    tgen = torch.Generator().manual_seed(int(s_torch.generate_state(1)[0]))
    grid = ProductGrid(problem.x_points, problem.w_points)
    gp = GridPosterior(grid, problem.kernel, problem.noise_std**2, capacity=iterations + 16)
    ctx = StepContext(problem, gp, [], np.random.default_rng(s_policy), tgen)

    n0 = problem.n_init if n_init is None else n_init
    for _ in range(n0):
        ix, iw = int(rng_init.integers(problem.n_x)), int(rng_init.integers(problem.n_w))
        gp.add(ix, iw, problem.observe_y(ix, iw, noise_rng))
        ctx.queried_x.append(ix)
    if problem.fit_hyperparameters and gp.n >= 2:
        _fit_hyperparameters(gp, seed)
        ctx.invalidate_sampler()

    p_true = problem.p_true
    task = policy.task
    truth = problem.true_level_set(alpha) if task == "lse" else None
    level = (alpha if alpha is not None else problem.alpha) if task == "lse" else None
    metric = np.empty(iterations)
    metric_alt = np.empty(iterations) if task == "lse" else None
    queries = np.empty((iterations, 2), dtype=np.int64)
    first_classified: int | None = None
    stopped_at: int | None = None
    for t in range(iterations):
        if stopped_at is not None:
            metric[t], queries[t] = metric[t - 1], -1
            if metric_alt is not None:
                metric_alt[t] = metric_alt[t - 1]
            continue
        ix, iw = policy.select(ctx)
        queries[t] = ix, iw
        gp.add(ix, iw, problem.observe_y(ix, iw, noise_rng))
        ctx.queried_x.append(ix)
        if problem.fit_hyperparameters and (t + 1) % refit_every == 0:
            _fit_hyperparameters(gp, seed + t)
            ctx.invalidate_sampler()
        if task == "opt":
            metric[t] = p_true.max() - p_true[policy.report(ctx)]  # type: ignore[index]
            continue
        high, low = policy.report(ctx)  # type: ignore[misc]
        metric[t] = f1_score(high, truth)  # type: ignore[arg-type]
        unclassified = ~(high | low)
        mu_p = ptr_posterior(gp.mean, gp.var, problem.p_w, problem.h).mean
        metric_alt[t] = f1_score(high | (unclassified & (mu_p >= level)), truth)  # type: ignore[index, arg-type, operator]
        if not unclassified.any():
            if first_classified is None:
                first_classified = t + 1
            if getattr(policy, "stop_when_classified", False):
                stopped_at = t + 1
    return TrialResult(
        seed=int(seed),
        metric=metric,
        queries=queries,
        metric_alt=metric_alt,
        first_classified=first_classified,
        stopped_at=stopped_at,
        seconds=time.perf_counter() - t0,
        problem_info=dict(problem.info),
        posterior=gp,
    )


def run_experiment(
    cfg: RunConfig, *, progress: bool = True, problem_kwargs: dict | None = None
) -> ExperimentResult:
    """Run all trials of ``cfg`` (a tqdm bar over trials unless ``progress`` is False)."""
    task = method_task(cfg.method)
    kw = problem_kwargs or {}
    shared = None if cfg.benchmark in PER_TRIAL_BENCHMARKS else make_problem(cfg.benchmark, **kw)
    alpha = cfg.alpha
    if task == "lse" and alpha is None:
        alpha = shared.alpha if shared is not None else 0.8
    policy = make_policy(cfg.method, alpha=alpha, beta=cfg.beta, m=cfg.m, eta=cfg.eta)
    if cfg.beta_schedule == "theory":
        policy = TheoryBeta(policy, cfg.delta)  # type: ignore[arg-type]
    if cfg.uncontrollable_w:
        policy = UncontrollableW(policy)
    trials = []
    bar = tqdm(
        range(cfg.trials),
        desc=f"{cfg.benchmark}/{cfg.method}",
        disable=not progress,
        leave=False,
    )
    for k in bar:
        seed = cfg.seed + k
        problem = shared if shared is not None else make_problem(cfg.benchmark, seed, task, **kw)
        trials.append(
            run_trial(
                problem,
                policy,
                cfg.iterations,
                seed,
                n_init=cfg.n_init,
                alpha=alpha,
                refit_every=cfg.refit_every,
            )
        )
    return ExperimentResult(cfg, task, trials)


# ------------------------------------------------------------------------------ outputs
def results_table(results: list[ExperimentResult], steps: tuple[int, ...] = ()) -> str:
    """Markdown table of mean ± 2 SE of the metric at chosen steps (default: T/2 and T)."""
    if not results:
        return ""
    T = results[0].metric.shape[1]
    cols = steps or tuple(sorted({max(1, T // 6), max(1, T // 2), T}))
    name = "regret" if results[0].task == "opt" else "F1"
    head = "| method | " + " | ".join(f"{name} @ t={c}" for c in cols) + " | s/trial |"
    lines = [head, "|---" * (len(cols) + 2) + "|"]
    for r in results:
        mean, se = r.mean_se()
        cells = [f"{mean[c - 1]:.3f} ± {2 * se[c - 1]:.3f}" for c in cols]
        sec = np.mean([t.seconds for t in r.trials])
        lines.append(f"| {run_label(r.config)} | " + " | ".join(cells) + f" | {sec:.2f} |")
    return "\n".join(lines)


def run_label(cfg: RunConfig) -> str:
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    colors = plt.get_cmap("tab20").colors
    for k, r in enumerate(results):
        mean, se = r.mean_se()
        t = np.arange(1, mean.size + 1)
        color = colors[(2 * k) % 20 if k < 10 else (2 * k + 1) % 20]
        ax.plot(t, mean, label=run_label(r.config), color=color, **_style(r.config.method))
        ax.fill_between(t, mean - 2 * se, mean + 2 * se, alpha=0.10, color=color, lw=0)
    task = results[0].task if results else "opt"
    ax.set_xscale("log")
    ax.set_xlabel("iteration t (log scale)")
    ax.set_ylabel("inference regret" if task == "opt" else "F1 score")
    ax.set_title(title or (results[0].config.benchmark if results else ""))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def load_results(path: str | Path) -> list[ExperimentResult]:
    """Rebuild experiments from a ``results.json`` written by :func:`save_results`."""
    import json

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    out = []
    for d in data:
        cfg = RunConfig(**d["config"])
        trials = [
            TrialResult(
                seed=t["seed"],
                metric=np.asarray(t["metric"], dtype=float),
                queries=np.asarray(t["queries"], dtype=np.int64),
                metric_alt=None if t["metric_alt"] is None else np.asarray(t["metric_alt"]),
                first_classified=t["first_classified"],
                stopped_at=t["stopped_at"],
                seconds=t["seconds"],
                problem_info=t["problem_info"],
            )
            for t in d["trials"]
        ]
        out.append(ExperimentResult(cfg, d["task"], trials))
    return out


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


def save_results(
    results: list[ExperimentResult], out_dir: str | Path, wall_seconds: float | None = None
) -> Path:
    """Write ``results.json`` (curves, queries), ``table.md`` and ``metadata.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = []
    for r in results:
        mean, se = r.mean_se()
        payload.append(
            {
                "config": r.config,
                "task": r.task,
                "mean": mean,
                "se": se,
                "trials": [
                    {
                        "seed": t.seed,
                        "metric": t.metric,
                        "metric_alt": t.metric_alt,
                        "queries": t.queries,
                        "first_classified": t.first_classified,
                        "stopped_at": t.stopped_at,
                        "seconds": t.seconds,
                        "problem_info": t.problem_info,
                    }
                    for t in r.trials
                ],
            }
        )
    atomic_write_json(out / "results.json", payload)
    atomic_write_text(out / "table.md", results_table(results) + "\n")
    atomic_write_json(
        out / "metadata.json",
        run_metadata(
            [r.config for r in results],
            seeds=[[t.seed for t in r.trials] for r in results],
            wall_seconds=wall_seconds,
        ),
    )
    return out
