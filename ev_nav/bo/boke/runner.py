"""Experiment runner of the BOKE study: methods x benchmarks x seeds -> regret and CPU time.

Protocol (spec §6.5, §8 A10/A14/A15/A17):

* ``n0 = max(5, 2d)`` Latin-hypercube points, **shared by all methods** for a given seed;
  exactly ``T`` evaluations in total, initial design included.
* Simple regret ``f* - max_{s<=t} f(x_s)`` always uses the **noise-free** ``f`` at the queried
  points, also in noisy runs.
* CPU time is the process CPU time (``time.process_time``) of the acquisition step only,
  excluding the objective evaluations; it is recorded cumulatively per iteration.
* Every random draw comes from generators derived from ``(seed, benchmark)`` (design, noise)
  and ``(seed, benchmark, method)`` (acquisition candidates, BOKE+ coin flips).
"""

from __future__ import annotations

import contextlib
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import qmc
from tqdm.auto import tqdm

from ev_nav.bo.boke import BOKEConfig, BOKEMethod, DensityExploration, KRUCBConfig, KRUCBMethod
from ev_nav.bo.boke_baselines import GPConfig, GPEIMethod, GPUCBMethod, RandomSearch
from ev_nav.bo.boke_benchmarks import Benchmark, get_benchmark
from ev_nav.bo.boke_optim import AcqOptConfig
from ev_nav.errors import ConfigError, InvalidObservation
from ev_nav.provenance import atomic_write_json, atomic_write_text, run_metadata

#: Method names accepted by :func:`make_method`. ``gp-ucb`` uses the spec's default lengthscale
#: 0.2, ``gp-ucb-wide`` 0.5 (the spec asks for both, because the ranking flips).
METHOD_NAMES: tuple[str, ...] = (
    "boke", "boke+", "de", "kr-ucb", "gp-ucb", "gp-ucb-wide", "gp-ei", "random",
)
#: Methods that are not in paper v1 (reported, but labelled as extras).
EXTRA_METHODS: frozenset[str] = frozenset({"gp-ei", "random", "gp-ucb-wide"})


@dataclass
class ExperimentConfig:
    """Everything that defines one experiment (stored in ``metadata.json``).

    Attributes
    ----------
    benchmarks, methods : tuple of str
    seeds : tuple of int
    noisy : bool
        Add Gaussian noise of std ``0.1 std_X(f)`` to the observations.
    budget : int or None
        Total evaluations ``T`` (``None``: each benchmark's default, spec §6.5).
    varsigma, delta, c_h, bandwidth_rule, p_ucb : BOKE-family settings (see ``BOKEConfig``).
    gp_lengthscale, gp_sqrt_beta : GP-UCB settings; ``gp-ucb-wide`` uses lengthscale 0.5.
    opt : AcqOptConfig
        Acquisition optimiser budget shared by all methods.
    """

    benchmarks: tuple[str, ...] = ("sphere6",)
    methods: tuple[str, ...] = ("boke", "boke+", "gp-ucb", "kr-ucb", "random")
    seeds: tuple[int, ...] = (0, 1, 2)
    noisy: bool = False
    budget: int | None = None
    varsigma: float = 0.3
    delta: float = 0.1
    c_h: float = BOKEConfig().c_h
    bandwidth_rule: str = "scott"
    p_ucb: float = 0.5
    gp_lengthscale: float = 0.2
    gp_sqrt_beta: float = 2.0
    opt: AcqOptConfig = field(default_factory=AcqOptConfig)

    def __post_init__(self) -> None:
        bad = [m for m in self.methods if m not in METHOD_NAMES]
        if bad:
            raise ConfigError(f"unknown method(s) {bad}; choose from {', '.join(METHOD_NAMES)}")
        if not self.seeds:
            raise ConfigError("give at least one seed")
        for b in self.benchmarks:
            get_benchmark(b)  # raises ConfigError for unknown names
        if self.budget is not None and self.budget < 2:
            raise ConfigError("budget T must be >= 2 evaluations")


def make_method(name: str, cfg: ExperimentConfig, noise_std: float = 0.0):
    """Instantiate method ``name`` with the experiment's settings."""
    bcfg = BOKEConfig(
        varsigma=cfg.varsigma,
        delta=cfg.delta,
        c_h=cfg.c_h,
        bandwidth_rule=cfg.bandwidth_rule,  # type: ignore[arg-type]
        p_ucb=cfg.p_ucb,
    )
    if name == "boke":
        return BOKEMethod(bcfg, cfg.opt, plus=False, noise_std=noise_std)
    if name == "boke+":
        return BOKEMethod(bcfg, cfg.opt, plus=True, noise_std=noise_std)
    if name == "de":
        return DensityExploration(bcfg, cfg.opt)
    if name == "kr-ucb":
        kcfg = KRUCBConfig(bandwidth_rule=cfg.bandwidth_rule, c_h=cfg.c_h)  # type: ignore[arg-type]
        return KRUCBMethod(kcfg, cfg.opt)
    if name in ("gp-ucb", "gp-ucb-wide", "gp-ei"):
        ls = 0.5 if name == "gp-ucb-wide" else cfg.gp_lengthscale
        g = GPConfig(lengthscale=ls, sqrt_beta=cfg.gp_sqrt_beta)
        cls = GPEIMethod if name == "gp-ei" else GPUCBMethod
        return cls(g, cfg.opt, noise_std=noise_std)
    if name == "random":
        return RandomSearch()
    raise ConfigError(f"unknown method {name!r}; choose from {', '.join(METHOD_NAMES)}")


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


def _stable_seed(*parts: object) -> int:
    return zlib.crc32("|".join(str(p) for p in parts).encode())


def initial_design(bench: Benchmark, seed: int, n0: int | None = None) -> np.ndarray:
    """The shared LHS initial design (unit cube) of ``bench`` for ``seed``."""
    n = bench.n_init if n0 is None else n0
    rng = np.random.default_rng([seed, _stable_seed("design", bench.name)])
    return qmc.LatinHypercube(bench.dim, seed=rng).random(n)


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit NumPy/SciPy's own BLAS pools to one thread for the duration.

    SciPy's L-BFGS-B calls its bundled OpenBLAS on 5-30-dimensional problems thousands of times
    per run; with a multi-threaded pool each call pays a thread hand-off, which on a loaded
    machine made runs ~10x slower in wall time for the same CPU time. (torch's own pool is set
    separately with ``torch.set_num_threads``.)
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        yield
        return
    with threadpool_limits(limits=1):
        yield


def run_single(
    bench: Benchmark,
    method_name: str,
    seed: int,
    cfg: ExperimentConfig,
) -> RunResult:
    """Run one method on one benchmark for one seed (exactly ``T`` evaluations)."""
    with single_threaded_blas():
        return _run_single(bench, method_name, seed, cfg)


def _run_single(
    bench: Benchmark, method_name: str, seed: int, cfg: ExperimentConfig
) -> RunResult:
    T = cfg.budget if cfg.budget is not None else bench.budget
    U0 = initial_design(bench, seed)
    n0 = min(U0.shape[0], T)
    U0 = U0[:n0]
    noise_std = bench.noise_std if cfg.noisy else 0.0
    noise_rng = np.random.default_rng([seed, _stable_seed("noise", bench.name)])
    method = make_method(method_name, cfg, noise_std)
    gen = torch.Generator().manual_seed(_stable_seed("method", bench.name, method_name, seed))

    def observe(U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        f = bench.f_unit(U)
        if not np.all(np.isfinite(f)):
            raise InvalidObservation(f"{bench.name} returned a non-finite value at {U.tolist()}")
        y = f + noise_std * noise_rng.standard_normal(f.shape) if noise_std > 0 else f.copy()
        return f, y

    f0, y0 = observe(U0)
    X = torch.as_tensor(U0, dtype=torch.float64)
    y = torch.as_tensor(y0, dtype=torch.float64)
    f_values, y_values = f0.tolist(), y0.tolist()
    acq_cpu = [0.0] * n0
    steps: dict[str, int] = {}
    cpu = 0.0
    while X.shape[0] < T:
        t0 = time.process_time()
        prop = method.propose(X, y, gen)
        cpu += time.process_time() - t0
        x = prop.x.clamp(0.0, 1.0).reshape(1, -1)
        if not torch.isfinite(x).all():
            raise InvalidObservation(f"{method_name} proposed a non-finite point")
        f1, y1 = observe(x.numpy())
        X = torch.cat([X, x])
        y = torch.cat([y, torch.as_tensor(y1, dtype=torch.float64)])
        f_values.append(float(f1[0]))
        y_values.append(float(y1[0]))
        acq_cpu.append(cpu)
        steps[prop.step] = steps.get(prop.step, 0) + 1
    return RunResult(
        benchmark=bench.name,
        method=method_name,
        seed=seed,
        noisy=cfg.noisy,
        n_init=n0,
        f_max=bench.f_max,
        f_values=f_values,
        y_values=y_values,
        acq_cpu=acq_cpu,
        steps=steps,
        X=X.tolist(),
    )


def run_experiment(
    cfg: ExperimentConfig,
    *,
    progress: bool | None = None,
    on_result: Callable[[list[RunResult]], None] | None = None,
) -> list[RunResult]:
    """All (benchmark, method, seed) runs of ``cfg``, with a tqdm bar on a TTY.

    ``on_result(results_so_far)`` is called after every run (e.g. to checkpoint to disk, so an
    interrupted experiment keeps its finished runs).
    """
    # seed-major order: a run cut short still holds complete seeds for every method
    jobs = [(b, m, s) for b in cfg.benchmarks for s in cfg.seeds for m in cfg.methods]
    show = sys.stderr.isatty() if progress is None else progress
    out: list[RunResult] = []
    with tqdm(jobs, disable=not show, desc="boke runs", unit="run") as bar:
        for b, m, s in bar:
            bar.set_postfix_str(f"{b} {m} seed={s}")
            out.append(run_single(get_benchmark(b), m, s, cfg))
            if on_result is not None:
                on_result(out)
    return out


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
    """Median / quartiles of the final simple regret and total acquisition CPU per method."""

    benchmark: str
    noisy: bool
    method: str
    n_seeds: int
    budget: int
    regret_init_median: float
    regret_final_median: float
    regret_final_q25: float
    regret_final_q75: float
    cpu_total_median_s: float
    exploit_fraction: float


def summarise(results: Sequence[RunResult]) -> list[SummaryRow]:
    """One :class:`SummaryRow` per (benchmark, noisy, method), in first-seen order."""
    ref = reference_values(results)
    groups: dict[tuple[str, bool, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.benchmark, r.noisy, r.method), []).append(r)
    rows = []
    for (b, noisy, m), rs in groups.items():
        reg = np.array([r.simple_regret(ref[b]) for r in rs])
        init = np.array([reg_i[r.n_init - 1] for reg_i, r in zip(reg, rs, strict=True)])
        n_steps = sum(sum(r.steps.values()) for r in rs)
        n_exploit = sum(r.steps.get("exploit", 0) for r in rs)
        rows.append(
            SummaryRow(
                benchmark=b,
                noisy=noisy,
                method=m,
                n_seeds=len(rs),
                budget=reg.shape[1],
                regret_init_median=float(np.median(init)),
                regret_final_median=float(np.median(reg[:, -1])),
                regret_final_q25=float(np.quantile(reg[:, -1], 0.25)),
                regret_final_q75=float(np.quantile(reg[:, -1], 0.75)),
                cpu_total_median_s=float(np.median([r.acq_cpu[-1] for r in rs])),
                exploit_fraction=n_exploit / n_steps if n_steps else 0.0,
            )
        )
    return rows


def format_table(rows: Sequence[SummaryRow]) -> str:
    """Markdown table of the summary rows."""
    head = (
        "| benchmark | noisy | method | seeds | T | regret@n0 | final regret median [q25, q75] "
        "| acq CPU s | exploit frac |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r.benchmark} | {'yes' if r.noisy else 'no'} | {r.method} | {r.n_seeds} | {r.budget} "
        f"| {r.regret_init_median:.4g} | {r.regret_final_median:.4g} "
        f"[{r.regret_final_q25:.3g}, {r.regret_final_q75:.3g}] | {r.cpu_total_median_s:.3g} "
        f"| {r.exploit_fraction:.2f} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def save_results(
    results: Sequence[RunResult], cfg: ExperimentConfig, out_dir: str | Path, **extra: Any
) -> Path:
    """Write ``results.json``, ``metadata.json`` and ``summary.md`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "results.json", [asdict(r) for r in results])
    atomic_write_json(
        out / "metadata.json",
        run_metadata(cfg, seeds=list(cfg.seeds), torch_threads=torch.get_num_threads(), **extra),
    )
    atomic_write_text(out / "summary.md", format_table(summarise(results)))
    return out


def load_results(path: str | Path) -> list[RunResult]:
    """Read ``results.json`` written by :func:`save_results` (file or its folder)."""
    import json

    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    if not p.exists():
        raise ConfigError(f"no results file at {p}; run `ev-nav bo boke run --out DIR` first")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
        return [RunResult(**r) for r in raw]
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{p} is not a BOKE results file ({exc})") from exc
