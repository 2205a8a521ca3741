"""Figures of the BOKE study: simple regret vs iteration and vs acquisition CPU time.

Curves (the package's regret plot, :mod:`ev_nav.bo.core.plots`) are the median over seeds with
the inter-quartile band (the paper plots 30-seed averages;
medians are robust to the occasional run that never leaves a local optimum). The CPU-time panel
aggregates each seed's step function ``regret(cpu)`` on a common log-spaced grid. A problem
without a known optimum (your own objective without ``optimum``) is drawn as the best value found
so far instead: a regret needs the optimum.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ev_nav.bo.boke.runner import RunResult
from ev_nav.bo.core.plots import plot_bands, quantile_band, save_figure, subplots

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


def regret_on_cpu_grid(results: Sequence[RunResult], f_star: float, grid: np.ndarray) -> np.ndarray:
    """Regret of each run at each CPU time of ``grid`` (step function, ``(n_seeds, len(grid))``).

    Before the first acquisition finishes a run is at its initial-design regret.
    """
    return _on_cpu_grid(results, [r.simple_regret(f_star) for r in results], grid)


def _on_cpu_grid(
    results: Sequence[RunResult], curves: Sequence[np.ndarray], grid: np.ndarray
) -> np.ndarray:
    """Each run's per-evaluation curve read at the CPU times of ``grid`` (step function)."""
    out = np.empty((len(results), grid.size))
    for i, (r, curve) in enumerate(zip(results, curves, strict=True)):
        cpu = np.asarray(r.acq_cpu)
        idx = np.searchsorted(cpu, grid, side="right") - 1
        out[i] = np.asarray(curve)[np.clip(idx, r.n_init - 1, None)]
    return out


def plot_benchmarks(results: Sequence[RunResult], path: str | Path, title: str = "") -> Path:
    """One row per (benchmark, noise) with regret-vs-iteration and regret-vs-CPU panels (best
    value found, on a linear axis, where the optimum is unknown)."""
    keys: list[tuple[str, bool]] = []
    for r in results:
        if (r.benchmark, r.noisy) not in keys:
            keys.append((r.benchmark, r.noisy))
    fig, axes = subplots(len(keys), 2, (9, 2.6 * len(keys)))
    for row, (b, noisy) in enumerate(keys):
        sub = [r for r in results if r.benchmark == b and r.noisy == noisy]
        methods = list(dict.fromkeys(r.method for r in sub))
        cpu_max = max(max(r.acq_cpu) for r in sub)
        cpu_min = min((c for r in sub for c in r.acq_cpu if c > 0), default=1e-4)
        grid = np.geomspace(max(cpu_min, 1e-5), max(cpu_max, 2e-5), 200)
        known = all(r.f_max is not None for r in sub)
        what = "simple regret" if known else "best f found"
        by_it, by_cpu = {}, {}
        for m in methods:
            rs = [r for r in sub if r.method == m]
            curves = [r.simple_regret() if known else np.maximum.accumulate(r.f_values) for r in rs]
            mat = np.array(curves)
            by_it[m] = quantile_band(np.arange(1, mat.shape[1] + 1), mat)
            if m != "random":  # random search has no acquisition cost worth a curve
                by_cpu[m] = quantile_band(grid, _on_cpu_grid(rs, curves, grid))
        styles = {m: {"color": _COLORS.get(m), "lw": 1.3} for m in methods}
        label = f"{b}{' (noisy)' if noisy else ''}"
        ax_it, ax_cpu = axes[row]
        plot_bands(
            ax_it,
            by_it,
            xlabel="evaluations t",
            ylabel=what,
            title=label,
            logy=known,
            floor=_FLOOR if known else None,
            styles=styles,
            legend={"fontsize": 7, "loc": "lower left" if known else "lower right"},
        )
        ax_it.axvline(sub[0].n_init + 0.5, color="k", ls="--", lw=0.8)
        plot_bands(
            ax_cpu,
            by_cpu,
            xlabel="cumulative acquisition CPU time [s]",
            ylabel=what,
            title=f"{label}: {'regret' if known else 'best f'} vs CPU",
            logx=True,
            logy=known,
            floor=_FLOOR if known else None,
            styles=styles,
        )
    if title:
        fig.suptitle(title)
    return save_figure(fig, path, dpi=70)
