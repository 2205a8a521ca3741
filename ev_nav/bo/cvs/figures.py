"""The papers' figures for the cost-varying-subset family, drawn with the shared regret plot.

Simple regret against cost spent (mean ± standard error over seeds on the union of the seeds'
cost points, log y; a diamond marks ETC's mean lock-on spend) and the number of evaluations
against cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ev_nav.bo.core.plots import Band, plot_bands, save_figure, subplots
from ev_nav.bo.cvs.runner import CVSRunConfig, aggregate, lock_on_spend

if TYPE_CHECKING:
    from matplotlib.axes import Axes

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
_FLOOR = 1e-4


def _styles(methods: object) -> dict[str, dict[str, object]]:
    return {m: {"color": _COLORS.get(str(m), "tab:gray")} for m in methods}  # type: ignore[attr-defined]


def plot_regret(
    df: pd.DataFrame, budget: float, ax: Axes, title: str = "", diamonds: bool = True
) -> Axes:
    """Simple regret vs cost spent: mean ± SE over seeds, log y; diamond = lock-on spend."""
    agg = aggregate(df, "simple_regret", budget)
    bands = {m: Band(g, mean, mean - se, mean + se) for m, (g, mean, se, _) in agg.items()}
    plot_bands(
        ax,
        bands,
        xlabel="cost spent",
        ylabel="simple regret",
        title=title,
        logy=True,
        floor=_FLOOR,
        step=True,
        band_alpha=0.2,
        styles=_styles(bands),
    )
    m_last = int(df["n_sets"].max())
    for method, (grid, mean, _, _) in agg.items():
        if not (diamonds and str(method).startswith("etc")):
            continue
        g = df[df["method"] == method]
        spends = [lock_on_spend(s, m_last) for _, s in g.groupby("seed")]
        if np.isfinite(spends).any():
            x = float(np.nanmean(spends))
            y = float(np.interp(x, grid, np.maximum(mean, _FLOOR)))
            ax.plot([x], [y], marker="D", color=_COLORS.get(str(method), "tab:gray"), markersize=6)
    ax.set_xlim(0, budget)
    return ax


def plot_evaluations(df: pd.DataFrame, budget: float, ax: Axes, title: str = "") -> Axes:
    """Number of function evaluations vs cost spent (mean ± SE over seeds)."""
    df = df.assign(n_evals=df["t"].astype(float))
    # every run starts at (cost 0, 0 evaluations); the free initial points are not counted
    starts = df.groupby(["method", "seed"], sort=False, as_index=False).first()
    starts = starts.assign(spent=0.0, n_evals=0.0, t=0)
    # method order of first appearance is kept, so colours match the regret panel
    df = pd.concat([starts, df], ignore_index=True)
    return _mean_se_vs_spend(df, "n_evals", budget, ax, "function evaluations", title)


def plot_best_observed(df: pd.DataFrame, budget: float, ax: Axes, title: str = "") -> Axes:
    """Best observation so far vs cost spent (mean ± SE over seeds): the progress curve of an
    objective whose optimum, and hence regret, is unknown (a user objective)."""
    df = df.assign(best_y=df.sort_values("t").groupby(["method", "seed"])["y"].cummax())
    return _mean_se_vs_spend(df, "best_y", budget, ax, "best observed y", title)


def _mean_se_vs_spend(
    df: pd.DataFrame, column: str, budget: float, ax: Axes, ylabel: str, title: str
) -> Axes:
    """One step line and ± SE band per method of ``column`` against the cost spent."""
    agg = aggregate(df, column, budget)
    bands = {m: Band(g, mean, mean - se, mean + se) for m, (g, mean, se, _) in agg.items()}
    plot_bands(
        ax,
        bands,
        xlabel="cost spent",
        ylabel=ylabel,
        title=title,
        step=True,
        band_alpha=0.2,
        styles=_styles(bands),
    )
    ax.set_xlim(0, budget)
    return ax


def save_figures(df: pd.DataFrame, cfg: CVSRunConfig, out_dir: str | Path) -> list[Path]:
    """``regret.png`` (``best_observed.png`` when the optimum is unknown, as for a user
    objective) and ``evaluations.png`` of one experiment."""
    out = Path(out_dir)
    title = f"{cfg.problem_label}, {cfg.cost_label} costs, var {cfg.variance}"
    progress = (
        ("regret.png", plot_regret)
        if df["simple_regret"].notna().any()
        else ("best_observed.png", plot_best_observed)
    )
    paths = []
    for name, fn in (progress, ("evaluations.png", plot_evaluations)):
        fig, axes = subplots(1, 1, (5, 3.6))
        fn(df, cfg.budget, ax=axes[0, 0], title=title)
        paths.append(save_figure(fig, out / name, dpi=110))
    return paths


def save_panel_figure(
    frames: Mapping[str, pd.DataFrame], budget: float, path: str | Path, title: str
) -> Path:
    """One figure: a column per cost setting, simple regret (top) and evaluations (bottom)."""
    fig, axes = subplots(2, len(frames), (4.2 * len(frames), 6.4))
    for j, (label, df) in enumerate(frames.items()):
        plot_regret(df, budget, ax=axes[0, j], title=f"{title}: {label} costs")
        plot_evaluations(df, budget, ax=axes[1, j], title="")
    return save_figure(fig, path, dpi=90)
