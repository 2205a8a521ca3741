"""Figures of the BOKE study: simple regret vs iteration and vs acquisition CPU time.

Curves are the median over seeds with the inter-quartile band (the paper plots 30-seed averages;
medians are robust to the occasional run that never leaves a local optimum). The CPU-time panel
aggregates each seed's step function ``regret(cpu)`` on a common log-spaced grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ev_nav.bo.boke_runner import RunResult, reference_values

_COLORS = {
    "boke": "tab:blue",
    "boke+": "tab:orange",
    "gp-ucb": "tab:green",
    "gp-ucb-wide": "tab:olive",
    "kr-ucb": "tab:red",
    "gp-ei": "tab:purple",
    "random": "tab:gray",
    "de": "tab:brown",
}
_FLOOR = 1e-8  # regret values are floored here so that log axes show exact hits


def regret_matrix(results: Sequence[RunResult], f_star: float) -> np.ndarray:
    """Simple regret ``(n_seeds, T)`` of runs of one method on one benchmark."""
    return np.array([r.simple_regret(f_star) for r in results])


def regret_on_cpu_grid(
    results: Sequence[RunResult], f_star: float, grid: np.ndarray
) -> np.ndarray:
    """Regret of each run at each CPU time of ``grid`` (step function, ``(n_seeds, len(grid))``).

    Before the first acquisition finishes a run is at its initial-design regret.
    """
    out = np.empty((len(results), grid.size))
    for i, r in enumerate(results):
        reg = r.simple_regret(f_star)
        cpu = np.asarray(r.acq_cpu)
        idx = np.searchsorted(cpu, grid, side="right") - 1
        out[i] = reg[np.clip(idx, r.n_init - 1, None)]
    return out


def plot_benchmarks(
    results: Sequence[RunResult], path: str | Path, title: str = ""
) -> Path:
    """One row per (benchmark, noise) with regret-vs-iteration and regret-vs-CPU panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = reference_values(results)
    keys: list[tuple[str, bool]] = []
    for r in results:
        if (r.benchmark, r.noisy) not in keys:
            keys.append((r.benchmark, r.noisy))
    fig, axes = plt.subplots(len(keys), 2, figsize=(9, 2.6 * len(keys)), squeeze=False)
    for row, (b, noisy) in enumerate(keys):
        sub = [r for r in results if r.benchmark == b and r.noisy == noisy]
        methods = list(dict.fromkeys(r.method for r in sub))
        cpu_max = max(max(r.acq_cpu) for r in sub)
        cpu_min = min(
            (c for r in sub for c in r.acq_cpu if c > 0), default=1e-4
        )
        grid = np.geomspace(max(cpu_min, 1e-5), max(cpu_max, 2e-5), 200)
        ax_it, ax_cpu = axes[row]
        for m in methods:
            rs = [r for r in sub if r.method == m]
            color = _COLORS.get(m)
            reg = np.maximum(regret_matrix(rs, ref[b]), _FLOOR)
            it = np.arange(1, reg.shape[1] + 1)
            q25, med, q75 = np.quantile(reg, [0.25, 0.5, 0.75], axis=0)
            ax_it.plot(it, med, label=m, color=color, lw=1.3)
            ax_it.fill_between(it, q25, q75, color=color, alpha=0.15, lw=0)
            if m == "random":  # random search has no acquisition cost worth a curve
                continue
            regc = np.maximum(regret_on_cpu_grid(rs, ref[b], grid), _FLOOR)
            q25, med, q75 = np.quantile(regc, [0.25, 0.5, 0.75], axis=0)
            ax_cpu.plot(grid, med, color=color, lw=1.3)
            ax_cpu.fill_between(grid, q25, q75, color=color, alpha=0.15, lw=0)
        n0 = sub[0].n_init
        ax_it.axvline(n0 + 0.5, color="k", ls="--", lw=0.8)
        label = f"{b}{' (noisy)' if noisy else ''}"
        ax_it.set(yscale="log", xlabel="evaluations t", ylabel="simple regret", title=label)
        ax_cpu.set(
            xscale="log", yscale="log", xlabel="cumulative acquisition CPU time [s]",
            title=f"{label}: regret vs CPU",
        )
        ax_it.legend(fontsize=7, loc="lower left")
        for ax in (ax_it, ax_cpu):
            ax.grid(alpha=0.3, which="both", lw=0.4)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=70)
    plt.close(fig)
    return out
