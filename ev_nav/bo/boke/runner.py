"""Experiment runner of the BOKE study: methods x benchmarks x seeds -> regret and CPU time.

Protocol (docs/bo-boke.md, "Protocol and settings"):

* ``n0 = max(5, 2d)`` Latin-hypercube points, **shared by all methods** for a given seed;
  exactly ``T`` evaluations in total, initial design included.
* Simple regret ``f* - max_{s<=t} f(x_s)`` always uses the **noise-free** ``f`` at the queried
  points, also in noisy runs.
* CPU time is the process CPU time (``time.process_time``) of the acquisition step only,
  excluding the objective evaluations; it is recorded cumulatively per iteration.
* Every random draw comes from generators derived from the run's seed (:func:`run_streams`):
  for the study's benchmarks from ``(seed, benchmark)`` (design, noise) and
  ``(seed, benchmark, method)`` (acquisition candidates, BOKE+ coin flips), as published; for a
  user objective from the seed alone, as ``BOKEOptimizer(bounds, method, seed=seed)`` draws, so
  a run never depends on the objective's name or on the folder its file lies in.

Each (benchmark, method, seed) is an independent run of a loop over
:class:`~ev_nav.bo.boke.api.BOKEOptimizer` on the fleet grids' executors
(:mod:`ev_nav.bo.core.runs`); results are ``results.csv`` (one row per evaluation) and
``manifest.json``.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy.stats import qmc

from ev_nav.bo.boke.api import BOKEOptimizer
from ev_nav.bo.boke.methods import BOKEMaximizerConfig
from ev_nav.bo.boke.problems import Benchmark, get_benchmark
from ev_nav.bo.boke.registry import METHODS, USER_GP_REFIT_EVERY, BOKEMethodConfig
from ev_nav.bo.boke.surrogate import DEFAULT_C_H
from ev_nav.bo.core.maximize import blas_single_threaded
from ev_nav.bo.core.objective import UserObjective, load_objective
from ev_nav.bo.core.runs import (
    Execution,
    ExecutionConfig,
    Job,
    RunRecord,
    read_results,
    run_jobs,
    write_results,
)
from ev_nav.errors import (
    ConfigError,
    InvalidObservation,
    OutOfDomainError,
    require_number,
    require_seed,
)


@dataclass(frozen=True)
class BOKERunConfig:
    """Everything that defines one experiment (stored in ``manifest.json``).

    Attributes
    ----------
    benchmarks, methods : tuple of str
    seeds : tuple of int
    noisy : bool
        Add Gaussian noise of std ``0.1 std_X(f)`` to the observations.
    budget : int or None
        Total evaluations ``T`` (``None``: each benchmark's default).
    varsigma, delta, c_h, bandwidth_rule, p_ucb : BOKE-family settings (see ``BOKEConfig``).
    gp_lengthscale, gp_sqrt_beta : GP-UCB settings; ``gp-ucb-wide`` uses lengthscale 0.5.
    gp_refit_every : int or None
        GP baselines' marginal-likelihood refit period; ``None``: ``0`` (fixed lengthscale, the
        study's set-up) on the benchmarks, ``USER_GP_REFIT_EVERY`` on a user objective.
    opt : BOKEMaximizerConfig
        Acquisition optimiser budget shared by all methods.
    threads : int
        torch threads per run (the executors keep BLAS single-threaded).
    objective, bounds : str, tuple or None
        A user objective ``module:function`` instead of ``benchmarks`` (and its box override).
    """

    benchmarks: tuple[str, ...] = ("sphere6",)
    methods: tuple[str, ...] = ("boke", "boke+", "gp-ucb", "kr-ucb", "random")
    seeds: tuple[int, ...] = (0, 1, 2)
    noisy: bool = False
    budget: int | None = None
    varsigma: float = 0.3
    delta: float = 0.1
    c_h: float = DEFAULT_C_H
    bandwidth_rule: str = "scott"
    p_ucb: float = 0.5
    gp_lengthscale: float = 0.2
    gp_sqrt_beta: float = 2.0
    gp_refit_every: int | None = None
    opt: BOKEMaximizerConfig = field(default_factory=BOKEMaximizerConfig)
    threads: int = 1
    objective: str | None = None
    bounds: tuple[tuple[float, float], ...] | None = None

    def __post_init__(self) -> None:
        for m in self.methods:
            METHODS.entry(m)  # raises naming the registered methods
        if not self.seeds:
            raise ConfigError("give at least one seed")
        if self.objective is None:
            for b in self.benchmarks:
                get_benchmark(b)  # raises ConfigError for unknown names
        if self.budget is not None:
            require_number(self.budget, "budget T (evaluations)", low=2, whole=True)
        require_number(self.threads, "threads", low=1, whole=True)
        if self.gp_refit_every is not None:
            require_number(self.gp_refit_every, "gp_refit_every", low=0, whole=True)
        for seed in self.seeds:
            require_seed(seed)
        require_number(self.varsigma, "varsigma", low=0)
        require_number(self.delta, "delta", low=0, high=1, low_open=True, high_open=True)
        require_number(self.c_h, "c_h", low=0, low_open=True)
        require_number(self.p_ucb, "p_ucb", low=0, high=1, low_open=True)
        require_number(self.gp_lengthscale, "gp_lengthscale", low=0, low_open=True)
        require_number(self.gp_sqrt_beta, "gp_sqrt_beta", low=0)
        if self.noisy and self.objective is not None:
            raise ConfigError(
                "noisy adds synthetic noise to benchmarks; declare noise_std on your objective"
            )

    @property
    def problems(self) -> tuple[str, ...]:
        """The benchmarks, or the user objective's ``module:function``."""
        return (self.objective,) if self.objective is not None else self.benchmarks

    def _gp_refit_every(self) -> int:
        if self.gp_refit_every is not None:
            return self.gp_refit_every
        return 0 if self.objective is None else USER_GP_REFIT_EVERY

    def method_config(self) -> BOKEMethodConfig:
        return BOKEMethodConfig(
            varsigma=self.varsigma,
            delta=self.delta,
            c_h=self.c_h,
            bandwidth_rule=self.bandwidth_rule,  # type: ignore[arg-type]
            p_ucb=self.p_ucb,
            gp_lengthscale=self.gp_lengthscale,
            gp_sqrt_beta=self.gp_sqrt_beta,
            gp_refit_every=self._gp_refit_every(),
            maximizer=self.opt,
        )


@dataclass
class RunResult:
    """One (benchmark, method, seed) run.

    Attributes
    ----------
    f_values : list of float (T,)
        Noise-free objective at each query (initial design first).
    y_values : list of float (T,)
        What the method observed (noisy in noisy runs).
    acq_cpu : list of float (T,)
        Cumulative acquisition CPU seconds after each evaluation (0 during the design).
    steps : dict
        How many iterations were of each kind ("ucb", "exploit", "resample", ...).
    X : list of list of float (T, d)
        The queries (unit cube).
    """

    benchmark: str
    method: str
    seed: int
    noisy: bool
    n_init: int
    f_max: float | None
    f_values: list[float]
    y_values: list[float]
    acq_cpu: list[float]
    steps: dict[str, int]
    X: list[list[float]]

    def simple_regret(self, f_star: float | None = None) -> np.ndarray:
        """``f* - max_{s<=t} f(x_s)`` per evaluation (``f*`` defaults to the known optimum)."""
        ref = self.f_max if f_star is None else f_star
        if ref is None:
            raise ConfigError(f"{self.benchmark} has no known optimum; pass a reference f*")
        return np.maximum(ref - np.maximum.accumulate(np.asarray(self.f_values)), 0.0)

    def rows(self) -> pd.DataFrame:
        """This run's rows of ``results.csv`` (one per evaluation)."""
        X = np.asarray(self.X)
        return pd.DataFrame(
            {
                "benchmark": self.benchmark,
                "method": self.method,
                "seed": self.seed,
                "noisy": self.noisy,
                "t": np.arange(1, len(self.f_values) + 1),
                "f": self.f_values,
                "y": self.y_values,
                "acq_cpu": self.acq_cpu,
                **{f"x{j}": X[:, j] for j in range(X.shape[1])},
            }
        )

    def facts(self) -> dict[str, object]:
        """What ``manifest.json`` records of this run besides its rows."""
        return {"n_init": self.n_init, "f_max": self.f_max, "steps": self.steps}


def _stable_seed(*parts: object) -> int:
    # CRC-32 of fixed strings (stream and registered benchmark names): the same in every
    # process and Python version, unlike hash()
    return zlib.crc32("|".join(str(p) for p in parts).encode())


@dataclass(frozen=True)
class RunStreams:
    """The random streams of one (benchmark, method, seed) run.

    Attributes
    ----------
    design : numpy.random.Generator
        Draws the Latin-hypercube initial design (shared by all methods of a seed).
    noise : numpy.random.Generator
        Draws the synthetic observation noise of a noisy benchmark run.
    method_seed : int
        Seeds the method's torch generator (acquisition candidates, BOKE+ coin flips).
    """

    design: np.random.Generator
    noise: np.random.Generator
    method_seed: int


def run_streams(bench: Benchmark, method: str, seed: int) -> RunStreams:
    """Where the run of ``method`` on ``bench`` for ``seed`` draws its randomness.

    A benchmark of the study mixes its registered name and the method into the seed, which
    keeps the published results (docs/bo-boke.md) reproducible. A user objective
    (``bench.user``) draws from ``seed`` alone, exactly as ``BOKEOptimizer(bounds, method,
    seed=seed)`` does: the same objective gives the same run whatever it is called and wherever
    its file lies.
    """
    if bench.user:
        return RunStreams(
            np.random.default_rng(seed),
            np.random.default_rng([seed, _stable_seed("noise")]),
            seed,
        )
    return RunStreams(
        np.random.default_rng([seed, _stable_seed("design", bench.name)]),
        np.random.default_rng([seed, _stable_seed("noise", bench.name)]),
        _stable_seed("method", bench.name, method, seed),
    )


def initial_design(bench: Benchmark, seed: int, n0: int | None = None) -> np.ndarray:
    """The shared LHS initial design (unit cube) of ``bench`` for ``seed``."""
    n = bench.n_init if n0 is None else n0
    rng = run_streams(bench, "", seed).design
    return qmc.LatinHypercube(bench.dim, seed=rng).random(n)


def objective_label(spec: str) -> str:
    """The name results give a user objective: ``spec`` without the folders of its file.

    ``path/to/my_problem.py:f`` becomes ``my_problem:f`` (``module:function`` stays as it is),
    so results and run ids do not depend on where the file lies.
    """
    module, _, attr = spec.rpartition(":")
    return f"{Path(module).stem}:{attr}" if module.endswith(".py") else spec


def user_benchmark(user: UserObjective, budget: int | None) -> Benchmark:
    """A user objective as a benchmark of the study (its space; ``f*`` from ``optimum``).

    With a declared ``optimum`` (a maximiser) the known optimum value is ``f(optimum)`` and the
    summary reports simple regret; without one it reports the best values found only.
    """
    if budget is None:
        raise ConfigError("with an objective of your own, give the evaluation budget: --budget T")
    user.require_call("f(x)", "BOKE")
    space = user.space

    def fn(x: np.ndarray) -> np.ndarray:
        return np.array([user(row) for row in x])

    f_max = None
    if user.extras.get("optimum") is not None:
        try:
            f_max = user(space.validate(user.extras["optimum"]))
        except OutOfDomainError as exc:
            raise ConfigError(f"objective {user.name}: optimum {exc}") from None
    lower = tuple(lo for lo, _ in space.bounds)
    upper = tuple(hi for _, hi in space.bounds)
    return Benchmark(
        objective_label(user.name),
        space.internal_dim,
        lower,
        upper,
        fn,
        f_max,
        None,
        int(budget),
        user=True,
        space=None if space.is_continuous else space,
    )


def run_single(
    bench: Benchmark,
    method_name: str,
    seed: int,
    cfg: BOKERunConfig,
    noise_std: float | None = None,
) -> RunResult:
    """Run one method on one benchmark for one seed (exactly ``T`` evaluations).

    ``noise_std`` overrides the noise of a noisy run (a user objective's declared noise).
    """
    with blas_single_threaded():
        return _run_single(bench, method_name, seed, cfg, noise_std)


def _run_single(
    bench: Benchmark,
    method_name: str,
    seed: int,
    cfg: BOKERunConfig,
    noise_override: float | None,
) -> RunResult:
    T = cfg.budget if cfg.budget is not None else bench.budget
    streams = run_streams(bench, method_name, seed)
    U0 = initial_design(bench, seed)
    n0 = min(U0.shape[0], T)
    noise_std = bench.noise_std if cfg.noisy and noise_override is None else 0.0
    opt = BOKEOptimizer(
        bench.dim if bench.space is None else bench.space,
        method_name,
        seed=streams.method_seed,
        method_config=cfg.method_config(),
        noise_std=noise_std if noise_override is None else noise_override,
        initial_design=U0[:n0],
    )

    def observe(U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        f = bench.f_unit(U)
        if not np.all(np.isfinite(f)):
            raise InvalidObservation(f"{bench.name} returned a non-finite value at {U.tolist()}")
        y = f + noise_std * streams.noise.standard_normal(f.shape) if noise_std > 0 else f.copy()
        return f, y

    # the loop works on internal points; the optimizer speaks the user's values
    f0, y0 = observe(opt.design)
    opt.tell(opt.space.decode(opt.design), y0)
    f_values, acq_cpu, cpu = f0.tolist(), [0.0] * n0, 0.0
    while opt.X.shape[0] < T:
        t0 = time.process_time()
        s = opt.ask()
        cpu += time.process_time() - t0
        f1, y1 = observe(opt.space.encode(s.x))
        opt.tell(s.x, y1)
        f_values.append(float(f1[0]))
        acq_cpu.append(cpu)
    return RunResult(
        benchmark=bench.name,
        method=method_name,
        seed=seed,
        noisy=cfg.noisy,
        n_init=n0,
        f_max=bench.f_max,
        f_values=f_values,
        y_values=opt.y.tolist(),
        acq_cpu=acq_cpu,
        steps=dict(opt.steps),
        X=opt.X.tolist(),
    )


# ---------------------------------------------------------------------------------------------
# experiments on the executors
# ---------------------------------------------------------------------------------------------
def _benchmark(cfg: BOKERunConfig, name: str) -> tuple[Benchmark, float | None]:
    """The benchmark called ``name`` (or the user objective) and a noise override."""
    if cfg.objective is None:
        return get_benchmark(name), None
    user = load_objective(cfg.objective, bounds=cfg.bounds)
    noise = user.extras.get("noise_std")
    return user_benchmark(user, cfg.budget), None if noise is None else float(noise)  # type: ignore[arg-type]


def _run_task(cfg: BOKERunConfig, name: str, method: str, seed: int) -> RunRecord:
    torch.set_num_threads(cfg.threads)
    bench, noise = _benchmark(cfg, name)
    r = run_single(bench, method, seed, cfg, noise)
    return RunRecord(r.rows(), r.facts())


def _run_id(name: str, method: str, seed: int) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return f"{safe}-{method.replace('+', 'plus')}-s{seed}"


def jobs(cfg: BOKERunConfig) -> list[Job]:
    """One run per (benchmark, seed, method): seed-major, so a partial experiment still holds
    complete seeds for every method."""
    code = (None if cfg.objective is None
            else load_objective(cfg.objective, bounds=cfg.bounds).code_fingerprint)
    out = []
    for b in cfg.problems:
        for s in cfg.seeds:
            for m in cfg.methods:
                narrowed = _narrowed(cfg, b, m, s)
                # a user objective's runs are made by its code, not by its name
                key = None if code is None else (replace(narrowed, objective=code), code, m, s)
                out.append(Job(_run_id(_label(cfg, b), m, s), _run_task, (narrowed, b, m, s),
                               key))
    return out


def _label(cfg: BOKERunConfig, problem: str) -> str:
    """The name results give ``problem`` (a user objective's without its file's folders)."""
    return problem if cfg.objective is None else objective_label(problem)


def _narrowed(cfg: BOKERunConfig, benchmark: str, method: str, seed: int) -> BOKERunConfig:
    """The config of one run: more seeds or methods later reuse the finished runs."""
    benchmarks = cfg.benchmarks if cfg.objective is not None else (benchmark,)
    return replace(cfg, benchmarks=benchmarks, methods=(method,), seeds=(seed,))


def run_experiment(
    cfg: BOKERunConfig,
    out_dir: str | Path | None = None,
    execution: ExecutionConfig | None = None,
    *,
    progress: bool = False,
) -> list[RunResult]:
    """All (benchmark, method, seed) runs of ``cfg``; with ``out_dir``, results + manifest.

    Raises
    ------
    ConfigError
        A user objective that does not load (module, function, declarations), before any run
        starts or anything is written: every run would fail with it.
    """
    if cfg.objective is not None:
        _benchmark(cfg, cfg.problems[0])
    job_list = jobs(cfg)
    ex = run_jobs(job_list, out_dir, execution, progress=progress, family="boke")
    results = [_result_from(r.rows, r.info) for r in ex.records]
    if out_dir is not None:
        save_results(results, cfg, out_dir, execution=ex)
    return results


def _result_from(rows: pd.DataFrame, info: dict[str, Any]) -> RunResult:
    xcols = [c for c in rows.columns if c.startswith("x") and c[1:].isdigit()]
    return RunResult(
        benchmark=str(rows["benchmark"].iloc[0]),
        method=str(rows["method"].iloc[0]),
        seed=int(rows["seed"].iloc[0]),
        noisy=bool(rows["noisy"].iloc[0]),
        n_init=int(info["n_init"]),
        f_max=info["f_max"],
        f_values=rows["f"].astype(float).tolist(),
        y_values=rows["y"].astype(float).tolist(),
        acq_cpu=rows["acq_cpu"].astype(float).tolist(),
        steps={str(k): int(v) for k, v in info["steps"].items()},
        X=rows[xcols].to_numpy(dtype=float).tolist(),
    )


# ---------------------------------------------------------------------------------------------
# aggregation and persistence
# ---------------------------------------------------------------------------------------------
def reference_values(results: Iterable[RunResult]) -> dict[str, float]:
    """``f*`` per benchmark: the known optimum, else the best value found by any run."""
    ref: dict[str, float] = {}
    for r in results:
        if r.f_max is not None:
            ref[r.benchmark] = r.f_max
        else:
            ref[r.benchmark] = max(ref.get(r.benchmark, -np.inf), max(r.f_values))
    return ref


@dataclass
class SummaryRow:
    """Per method: median / quartiles of the final simple regret (known optimum only), of the
    best value found, and the total acquisition CPU.

    The regret fields are ``None`` for a problem without a known optimum: no regret is made up
    against the best value found.
    """

    benchmark: str
    noisy: bool
    method: str
    n_seeds: int
    budget: int
    regret_init_median: float | None
    regret_final_median: float | None
    regret_final_q25: float | None
    regret_final_q75: float | None
    best_final_median: float
    best_final_q25: float
    best_final_q75: float
    cpu_total_median_s: float
    exploit_fraction: float


def summarise(results: Sequence[RunResult]) -> list[SummaryRow]:
    """One :class:`SummaryRow` per (benchmark, noisy, method), in first-seen order."""
    groups: dict[tuple[str, bool, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.benchmark, r.noisy, r.method), []).append(r)
    rows = []
    for (b, noisy, m), rs in groups.items():
        best = np.array([max(r.f_values) for r in rs])
        q25b, medb, q75b = (float(v) for v in np.quantile(best, [0.25, 0.5, 0.75]))
        regret: tuple[float | None, ...] = (None, None, None, None)
        if all(r.f_max is not None for r in rs):
            reg = np.array([r.simple_regret() for r in rs])
            init = np.array([reg_i[r.n_init - 1] for reg_i, r in zip(reg, rs, strict=True)])
            regret = (
                float(np.median(init)),
                float(np.median(reg[:, -1])),
                float(np.quantile(reg[:, -1], 0.25)),
                float(np.quantile(reg[:, -1], 0.75)),
            )
        n_steps = sum(sum(r.steps.values()) for r in rs)
        n_exploit = sum(r.steps.get("exploit", 0) for r in rs)
        rows.append(
            SummaryRow(
                benchmark=b,
                noisy=noisy,
                method=m,
                n_seeds=len(rs),
                budget=len(rs[0].f_values),
                regret_init_median=regret[0],
                regret_final_median=regret[1],
                regret_final_q25=regret[2],
                regret_final_q75=regret[3],
                best_final_median=medb,
                best_final_q25=q25b,
                best_final_q75=q75b,
                cpu_total_median_s=float(np.median([r.acq_cpu[-1] for r in rs])),
                exploit_fraction=n_exploit / n_steps if n_steps else 0.0,
            )
        )
    return rows


def format_table(rows: Sequence[SummaryRow]) -> str:
    """Markdown table(s) of the summary rows.

    Problems with a known optimum get the regret table; problems without one (your own
    objectives unless they declare ``optimum``, the HPO benchmark) a table of the best value
    found, since a regret needs the optimum.
    """
    known = [r for r in rows if r.regret_final_median is not None]
    unknown = [r for r in rows if r.regret_final_median is None]
    out = ""
    if known:
        head = (
            "| benchmark | noisy | method | seeds | T | regret@n0 | final regret median "
            "[q25, q75] | acq CPU s | exploit frac |\n|---|---|---|---|---|---|---|---|---|\n"
        )
        lines = [
            f"| {r.benchmark} | {'yes' if r.noisy else 'no'} | {r.method} | {r.n_seeds} "
            f"| {r.budget} | {r.regret_init_median:.4g} | {r.regret_final_median:.4g} "
            f"[{r.regret_final_q25:.3g}, {r.regret_final_q75:.3g}] | {r.cpu_total_median_s:.3g} "
            f"| {r.exploit_fraction:.2f} |"
            for r in known
        ]
        out += head + "\n".join(lines) + "\n"
    if unknown:
        head = (
            "| objective (no known optimum) | noisy | method | seeds | T | best f median "
            "[q25, q75] | acq CPU s | exploit frac |\n|---|---|---|---|---|---|---|---|\n"
        )
        lines = [
            f"| {r.benchmark} | {'yes' if r.noisy else 'no'} | {r.method} | {r.n_seeds} "
            f"| {r.budget} | {r.best_final_median:.6g} [{r.best_final_q25:.6g}, "
            f"{r.best_final_q75:.6g}] | {r.cpu_total_median_s:.3g} | {r.exploit_fraction:.2f} |"
            for r in unknown
        ]
        out += ("\n" if out else "") + head + "\n".join(lines) + "\n"
    return out


def save_results(
    results: Sequence[RunResult],
    cfg: BOKERunConfig,
    out_dir: str | Path,
    *,
    execution: Execution | None = None,
    **extra: Any,
) -> Path:
    """Write ``results.csv`` (one row per evaluation) and ``manifest.json`` into ``out_dir``."""
    out = Path(out_dir)
    frames = [r.rows() for r in results]
    runs = {_run_id(r.benchmark, r.method, r.seed): r.facts() for r in results}
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    write_results(
        out,
        table,
        cfg,
        list(cfg.seeds),
        execution=execution,
        runs=runs,
        family="boke",
        summary=[asdict(r) for r in summarise(results)],
        **extra,
    )
    return out


def load_results(path: str | Path) -> list[RunResult]:
    """Read the runs of a folder written by :func:`save_results` (or its ``results.csv``)."""
    table, meta = read_results(path, "boke", ("benchmarks", "methods", "varsigma"),
                               ("benchmark", "method", "seed"))
    out = []
    for _, g in table.groupby(["benchmark", "method", "seed"], sort=False):
        rid = _run_id(str(g["benchmark"].iloc[0]), str(g["method"].iloc[0]), int(g["seed"].iloc[0]))
        if rid not in meta["runs"]:
            raise ConfigError(f"{path}: the table's run {rid} is not in its manifest (the "
                              "folder's files are from different runs)")
        out.append(_result_from(g.reset_index(drop=True), meta["runs"][rid]))
    return out
