"""Experiments of the cost-varying BO papers: seeds loop, tidy results, metadata and figures.

``run_experiment`` runs one benchmark/cost/variance setting for several methods and seeds and
returns a tidy table (one row per BO iteration). ``write_results`` stores it as CSV next to a
``metadata.json`` (config, seeds, versions, git commit). ``plot_regret`` / ``plot_evaluations``
draw the papers' figures: simple regret against cost spent (mean ± standard error over seeds on
the union of the seeds' cost points, log y-axis) and the number of evaluations against cost.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ev_nav.bo.acquisition import MaximizerConfig
from ev_nav.bo.cvs import POLICY_NAMES, Episode, LoopConfig, make_policy, run_episode, set_optima
from ev_nav.bo.problems import Problem, make_problem, regrets, target_set
from ev_nav.bo.ucvs import UCVS_METHODS, make_ucvs_policy
from ev_nav.errors import ConfigError
from ev_nav.provenance import atomic_path, atomic_write_json, run_metadata

SETTINGS = ("cvs", "ucvs")


@dataclass(frozen=True)
class ExperimentConfig:
    """One experimental cell: benchmark × costs × variance, several methods and seeds.

    ``setting="cvs"`` is Tay et al. (known deterministic costs); ``"ucvs"`` is Hoang et al.
    (random costs with unknown means, ``cost_noise_std`` > 0 by default).
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
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.setting not in SETTINGS:
            raise ConfigError(f"setting must be one of {SETTINGS}")
        known = POLICY_NAMES if self.setting == "cvs" else UCVS_METHODS
        bad = [m for m in self.methods if m not in known]
        if bad:
            raise ConfigError(f"unknown method(s) {bad} for {self.setting}; use {', '.join(known)}")
        if not self.seeds:
            raise ConfigError("need at least one seed")

    @property
    def cost_label(self) -> str:
        """The preset name, or the explicit cost vector joined with '/'."""
        if isinstance(self.costs, str):
            return self.costs
        return "/".join(f"{c:g}" for c in self.costs)

    def loop(self) -> LoopConfig:
        return LoopConfig(
            n_init=self.n_init,
            n_mc=self.n_mc,
            beta=self.beta,
            maximizer=MaximizerConfig(
                n_warmup=self.n_warmup,
                n_warmup_full=self.n_warmup_full,
                n_starts=self.n_starts,
                maxiter=self.maxiter,
            ),
        )


def build_problem(cfg: ExperimentConfig, seed: int) -> Problem:
    """The problem of one seed (the GP-sample objective is drawn from the seed)."""
    gen = torch.Generator().manual_seed(10_000 + int(seed))
    return make_problem(
        cfg.benchmark,
        costs=cfg.costs,
        variance=cfg.variance,
        cost_noise_std=cfg.cost_noise_std,
        generator=gen,
    )


def build_policy(cfg: ExperimentConfig, method: str, problem: Problem):
    if cfg.setting == "cvs":
        return make_policy(method, problem, ada_scale=cfg.ada_scale)
    return make_ucvs_policy(
        method,
        problem,
        etc_quota=cfg.etc_quota,
        tau=cfg.tau,
        alpha=cfg.alpha,
        explore_frac=cfg.explore_frac,
        clip_cost_lcb=cfg.clip_cost_lcb,
    )


def episode_frame(
    ep: Episode,
    problem: Problem,
    cfg: ExperimentConfig,
    set_values: Sequence[float],
    f_star: float,
) -> pd.DataFrame:
    """Tidy rows of one episode with its regrets (set indices are 1-based in the table)."""
    idx = [s.set_idx for s in ep.steps]
    tgt = (
        target_set(set_values, problem.costs.means, cfg.alpha)
        if len(set_values) == problem.m
        else None
    )
    r = regrets(
        [s.value for s in ep.steps],
        idx,
        [s.cost for s in ep.steps],
        f_star,
        problem.costs.means,
        target=tgt,
        alpha=cfg.alpha if cfg.setting == "ucvs" else 0.0,
    )
    return pd.DataFrame(
        {
            "setting": cfg.setting,
            "benchmark": cfg.benchmark,
            "costs": cfg.cost_label,
            "variance": cfg.variance,
            "method": ep.method,
            "seed": ep.seed,
            "t": [s.t for s in ep.steps],
            "set": [i + 1 for i in idx],
            "phase": [s.phase for s in ep.steps],
            "cost": [s.cost for s in ep.steps],
            "spent": r.spent,
            "y": [s.y for s in ep.steps],
            "value": r.value,
            "f_star": f_star,
            "simple_regret": r.simple,
            "cost_weighted_regret": r.cost_weighted,
            "quality_regret": r.quality,
            "cost_regret": r.cost,
            "target_set": (tgt + 1) if tgt is not None else 0,
            "n_sets": problem.m,
        }
    )


def run_experiment(
    cfg: ExperimentConfig, *, progress: bool | None = None
) -> tuple[pd.DataFrame, dict]:
    """Run every (method, seed) of ``cfg``; return the tidy table and per-seed reference values."""
    show = sys.stderr.isatty() if progress is None else progress
    loop = cfg.loop()
    frames, refs = [], {}
    jobs = [(s, m) for s in cfg.seeds for m in cfg.methods]
    for seed, method in tqdm(jobs, desc=f"{cfg.benchmark} {cfg.cost_label}", disable=not show):
        problem = build_problem(cfg, seed)
        policy = build_policy(cfg, method, problem)
        ep, S = run_episode(
            problem,
            policy,
            cfg.budget,
            seed,
            loop,
            hide_costs=method.startswith("ucvs"),
            progress=show,
        )
        if seed not in refs:
            refs[seed] = _reference(problem, S, seed, cfg.setting == "ucvs")
        vals, f_star = refs[seed]
        frames.append(episode_frame(ep, problem, cfg, vals, f_star))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return df, {s: {"set_optima": v, "f_star": f} for s, (v, f) in refs.items()}


def _reference(problem: Problem, S, seed: int, all_sets: bool) -> tuple[list[float], float]:
    """``F*`` (and every set's optimum when needed) with the run's MC matrix."""
    if problem.f_max is not None and problem.full_set is not None and not all_sets:
        return [], float(problem.f_max)
    vals, _ = set_optima(problem, S, torch.Generator().manual_seed(777 + seed))
    return vals, max(vals)


def write_results(
    df: pd.DataFrame, cfg: ExperimentConfig, out_dir: str | Path, references: dict | None = None
) -> dict[str, Path]:
    """Write ``results.csv`` and ``metadata.json`` into ``out_dir`` (atomically)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"results": out / "results.csv", "metadata": out / "metadata.json"}
    with atomic_path(paths["results"], suffix=".csv") as tmp:
        df.to_csv(tmp, index=False)
    atomic_write_json(
        paths["metadata"],
        run_metadata(
            asdict(cfg),
            seeds=list(cfg.seeds),
            references=references or {},
            summary=summarise(df, cfg.budget).to_dict(orient="records") if len(df) else [],
        ),
    )
    return paths


# --------------------------------------------------------------------------- aggregation


def step_on_grid(spent: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Carry-forward step function of ``values`` at cost points ``spent``, read at ``grid``.

    Before its first point a run takes its first value (the official plotting convention).
    """
    pos = np.searchsorted(spent, grid, side="right") - 1
    return values[np.clip(pos, 0, len(values) - 1)]


def aggregate(df: pd.DataFrame, column: str = "simple_regret", budget: float | None = None):
    """Per method: union cost grid, mean and standard error (ddof 0) of ``column`` over seeds."""
    out = {}
    for method, g in df.groupby("method", sort=False):
        runs = [(r["spent"].to_numpy(), r[column].to_numpy()) for _, r in g.groupby("seed")]
        grid = np.unique(np.concatenate([s for s, _ in runs]))
        if budget is not None:
            grid = grid[grid <= budget + 1e-9]
        M = np.stack([step_on_grid(s, v, grid) for s, v in runs])
        out[method] = (grid, M.mean(0), M.std(0) / np.sqrt(M.shape[0]), M)
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
    """Final simple regret at C/4, C/2, C (mean, SE, median), evaluations and lock-on spend."""
    rows = []
    m_last = int(df["n_sets"].max()) if len(df) else 7
    for method, g in df.groupby("method", sort=False):
        row: dict = {"method": method, "seeds": g["seed"].nunique()}
        for frac, tag in ((0.25, "C/4"), (0.5, "C/2"), (1.0, "C")):
            r = regret_at(g, frac * budget)["simple_regret"].to_numpy()
            row[f"regret@{tag}"] = float(r.mean())
            row[f"se@{tag}"] = float(r.std() / np.sqrt(len(r)))
            row[f"median@{tag}"] = float(np.median(r))
        row["evals"] = float(g.groupby("seed")["t"].max().mean())
        spends = np.array([lock_on_spend(s, m_last) for _, s in g.groupby("seed")])
        row["lock_on_spend"] = (
            float(spends[np.isfinite(spends)].mean()) if np.isfinite(spends).any() else float("nan")
        )
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- figures

_COLORS = {
    "ts-psq": "tab:orange",
    "ucb-psq": "tab:blue",
    "etc50": "tab:green",
    "etc100": "tab:red",
    "etcada": "tab:purple",
    "ucvs": "tab:brown",
    "ucvs-paper": "tab:pink",
    "ucb-cvs": "tab:olive",
    "ucb-per-cost": "tab:cyan",
    "ts-per-cost": "tab:gray",
    "ei-per-cost": "black",
}


def method_color(method: str) -> str:
    """A fixed colour per method, so every panel uses the same legend."""
    return _COLORS.get(method, "tab:gray")


def plot_regret(df: pd.DataFrame, budget: float, ax=None, title: str = "", diamonds: bool = True):
    """Simple regret vs cost spent: mean ± SE over seeds, log y; diamond = lock-on spend."""
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    m_last = int(df["n_sets"].max())
    for method, (grid, mean, se, _) in aggregate(df, "simple_regret", budget).items():
        floor = 1e-4
        c = method_color(method)
        ax.step(grid, np.maximum(mean, floor), where="post", label=method, color=c)
        ax.fill_between(
            grid,
            np.maximum(mean - se, floor),
            np.maximum(mean + se, floor),
            step="post",
            alpha=0.2,
            color=c,
        )
        if diamonds and method.startswith("etc"):
            g = df[df["method"] == method]
            spends = [lock_on_spend(s, m_last) for _, s in g.groupby("seed")]
            if np.isfinite(spends).any():
                x = float(np.nanmean(spends))
                y = float(np.interp(x, grid, np.maximum(mean, floor)))
                ax.plot([x], [y], marker="D", color=c, markersize=6)
    ax.set_yscale("log")
    ax.set_xlim(0, budget)
    ax.set_xlabel("cost spent")
    ax.set_ylabel("simple regret")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return ax


def plot_evaluations(df: pd.DataFrame, budget: float, ax=None, title: str = ""):
    """Number of function evaluations vs cost spent (mean over seeds)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    df = df.assign(n_evals=df["t"].astype(float))
    # every run starts at (cost 0, 0 evaluations); the 5 free initial points are not counted
    starts = df.groupby(["method", "seed"], sort=False, as_index=False).first()
    starts = starts.assign(spent=0.0, n_evals=0.0, t=0)
    # method order of first appearance is kept, so colours match the regret panel
    df = pd.concat([starts, df], ignore_index=True)
    for method, (grid, mean, se, _) in aggregate(df, "n_evals", budget).items():
        c = method_color(method)
        ax.step(grid, mean, where="post", label=method, color=c)
        ax.fill_between(grid, mean - se, mean + se, step="post", alpha=0.2, color=c)
    ax.set_xlim(0, budget)
    ax.set_xlabel("cost spent")
    ax.set_ylabel("function evaluations")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return ax


def save_figures(df: pd.DataFrame, cfg: ExperimentConfig, out_dir: str | Path) -> list[Path]:
    """``regret.png`` and ``evaluations.png`` of one experiment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = f"{cfg.benchmark}, {cfg.cost_label} costs, var {cfg.variance}"
    paths = []
    for name, fn in (("regret.png", plot_regret), ("evaluations.png", plot_evaluations)):
        fig, ax = plt.subplots(figsize=(5, 3.6))
        fn(df, cfg.budget, ax=ax, title=title)
        fig.tight_layout()
        with atomic_path(out / name, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110, format="png")
        plt.close(fig)
        paths.append(out / name)
    return paths


def save_panel_figure(
    frames: dict[str, pd.DataFrame], budget: float, path: str | Path, title: str
) -> Path:
    """One figure: a column per cost setting, simple regret (top) and evaluations (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(frames)
    fig, axes = plt.subplots(2, n, figsize=(4.2 * n, 6.4), squeeze=False)
    for j, (label, df) in enumerate(frames.items()):
        plot_regret(df, budget, ax=axes[0, j], title=f"{title}: {label} costs")
        plot_evaluations(df, budget, ax=axes[1, j], title="")
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)
    return Path(path)
