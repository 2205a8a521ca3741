"""Regret figures of fleet-learning experiments (paper Figs. 2–5), with matplotlib (Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ev_nav.provenance import atomic_path

#: Stable colours per agent so every figure reads the same way.
AGENT_COLOURS = {
    "GP-TS": "#1b9e77",
    "GP-BUCB": "#7570b3",
    "GP-UCB": "#d95f02",
    "BI-TS": "#66c2a5",
    "BI-BUCB": "#8da0cb",
    "BI-UCB": "#fc8d62",
    "SVGP-TS": "#0b5e46",
    "SVGP-BUCB": "#45408a",
    "SVGP-UCB": "#8f3f02",
    "random": "#999999",
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    target = Path(path)
    with atomic_path(target, suffix=target.suffix) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format=target.suffix.lstrip(".") or "png")
    return target


def cumulative_regret_figure(results, path: str | Path, title: str = "") -> Path:
    """Cumulative regret (mean ± 1 SE over seeds) per agent, one panel per (network, route);
    an agent of one run has its line and no band.

    Parameters
    ----------
    results : pandas.DataFrame
        The aggregated table of :func:`ev_nav.sim.grid.aggregate` (``cum_regret_wh`` column).
    """
    plt = _plt()
    from matplotlib.ticker import MaxNLocator

    # per run (two runs of one label and seed, e.g. a sweep's, are two curves, not one sum)
    per_round = (
        results.groupby(["network", "route", "agent", "run_id", "t"])["regret_wh"].sum()
        .reset_index()
    )
    per_round["cum"] = per_round.groupby(["network", "route", "agent", "run_id"])[
        "regret_wh"
    ].cumsum()
    # a fleet's round is one trip per vehicle, and the regret above is summed over them: the
    # axis counts rounds (it said "trip t" for a fleet of 4, whose round 2 was its 8th trip)
    per_vehicle = int(results.groupby(["run_id", "t"])["vehicle"].nunique().max())
    x_label = "trip t" if per_vehicle == 1 else f"round t ({per_vehicle} vehicles, a trip each)"
    panels = sorted(per_round.groupby(["network", "route"]).groups)
    ncol = min(len(panels), 2)
    nrow = int(np.ceil(len(panels) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(6 * ncol, 4 * nrow), squeeze=False)
    for ax, (network, route) in zip(axes.ravel(), panels, strict=False):
        sub = per_round[(per_round.network == network) & (per_round.route == route)]
        for agent, g in sub.groupby("agent"):
            stats = g.groupby("t")["cum"].agg(["mean", "std", "count"])
            colour = AGENT_COLOURS.get(str(agent))
            (line,) = ax.plot(stats.index, stats["mean"], label=str(agent), color=colour)
            # a band only where there is an SE: one run has none (a zero-width band, drawn
            # before, read as certainty)
            seeds = stats[stats["count"] > 1]
            if len(seeds):
                se = seeds["std"] / np.sqrt(seeds["count"])
                # the band takes the line's colour, also where the label has no fixed colour
                ax.fill_between(seeds.index, seeds["mean"] - se, seeds["mean"] + se,
                                alpha=0.2, color=line.get_color())
        ax.set_title(f"{network} — route {route}")
        ax.set_xlabel(x_label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no round 1.2
        ax.set_ylabel("cumulative regret [Wh]")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes.ravel()[len(panels) :]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = _save(fig, path)
    plt.close(fig)
    return out


def beta_figure(
    schedules: dict[str, np.ndarray], t: np.ndarray, path: str | Path, title: str = ""
) -> Path:
    """√β_t over trips for named schedules (paper Fig. 3, right)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, beta in schedules.items():
        ax.plot(t, np.sqrt(np.maximum(beta, 0.0)), label=name)
    ax.set_xlabel("trip t")
    ax.set_ylabel(r"$\sqrt{\beta_t}$")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    out = _save(fig, path)
    plt.close(fig)
    return out


def final_regret_vs_parameter(
    table, parameter: str, path: str | Path, panels: Sequence[str] = ("network", "route")
) -> Path:
    """Final cumulative regret (mean ± 1 SE) against a swept parameter (paper Figs. 4–5).

    ``table`` has columns ``agent``, ``parameter``, ``final_cum_regret_mean``, ``se`` and the
    panel columns.
    """
    plt = _plt()
    keys = sorted(table.groupby(list(panels)).groups)
    ncol = min(len(keys), 2)
    nrow = int(np.ceil(len(keys) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(6 * ncol, 4 * nrow), squeeze=False)
    for ax, key in zip(axes.ravel(), keys, strict=False):
        mask = np.ones(len(table), dtype=bool)
        for col, val in zip(panels, key if isinstance(key, tuple) else (key,), strict=True):
            mask &= (table[col] == val).to_numpy()
        sub = table[mask]
        for agent, g in sub.groupby("agent"):
            g = g.sort_values(parameter)
            ax.errorbar(
                g[parameter],
                g["final_cum_regret_mean"],
                yerr=g["se"],
                label=str(agent),
                marker="o",
                capsize=3,
                color=AGENT_COLOURS.get(str(agent)),
            )
        ax.set_title(" — ".join(str(k) for k in (key if isinstance(key, tuple) else (key,))))
        ax.set_xlabel(parameter)
        ax.set_ylabel("final cumulative regret [Wh]")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes.ravel()[len(keys) :]:
        ax.set_visible(False)
    fig.tight_layout()
    out = _save(fig, path)
    plt.close(fig)
    return out
