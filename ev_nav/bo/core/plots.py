"""The regret plot of every BO family: one curve per method with a band over runs.

A family reduces its runs to :class:`Band` objects — mean ± k standard errors
(:func:`mean_band`) or median and quartiles (:func:`quantile_band`) on a common x grid (cost
spent, iteration, CPU seconds) — and draws them with :func:`plot_bands`; family-specific marks
(e.g. the ETC lock-on diamonds) are added to the returned axes. Matplotlib is imported only
here and only when a figure is drawn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.provenance import atomic_path

if TYPE_CHECKING:  # matplotlib is heavy; figures import it lazily
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Band:
    """A curve ``center`` over ``x`` with the band ``[lower, upper]`` (all of one length)."""

    x: NDArray[np.float64]
    center: NDArray[np.float64]
    lower: NDArray[np.float64]
    upper: NDArray[np.float64]


def standard_error(runs: ArrayLike) -> NDArray[np.float64]:
    """Standard error of the mean over runs (the rows of ``runs``): ``std(ddof=1) / sqrt(n)``.

    The sample standard deviation, as every family reports it (``ddof = 0`` understated the
    SE by ``sqrt((n - 1) / n)``, 11-18 % at 3-5 seeds). ``NaN`` for a single run, whose spread
    is unknown (not zero).

    Parameters
    ----------
    runs
        ``(n,)`` values of ``n`` runs, or ``(n, k)``: one column per point of a curve.

    Returns
    -------
    NDArray
        A scalar array for ``(n,)``, shape ``(k,)`` for ``(n, k)``.
    """
    M = np.asarray(runs, dtype=float)
    n = M.shape[0]
    if n < 2:
        return np.full(M.shape[1:], np.nan)
    return M.std(0, ddof=1) / np.sqrt(n)


def mean_band(x: ArrayLike, runs: ArrayLike, n_se: float = 1.0) -> Band:
    """Mean over runs (rows of ``runs``) ± ``n_se`` standard errors (:func:`standard_error`;
    a single run has no band: its bounds are ``NaN``, which draws nothing)."""
    M = np.atleast_2d(np.asarray(runs, dtype=float))
    mean = M.mean(0)
    se = standard_error(M)
    return Band(np.asarray(x, dtype=float), mean, mean - n_se * se, mean + n_se * se)


def quantile_band(x: ArrayLike, runs: ArrayLike) -> Band:
    """Median over runs with the inter-quartile band (robust to a run stuck in a local mode)."""
    q25, med, q75 = np.quantile(np.atleast_2d(np.asarray(runs, dtype=float)), [0.25, 0.5, 0.75], 0)
    return Band(np.asarray(x, dtype=float), med, q25, q75)


def plot_bands(
    ax: Axes,
    bands: Mapping[str, Band],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    floor: float | None = None,
    step: bool = False,
    band_alpha: float = 0.15,
    styles: Mapping[str, Mapping[str, object]] | None = None,
    legend: Mapping[str, object] | None = None,
) -> Axes:
    """Draw one line and band per method.

    Parameters
    ----------
    ax
        Target axes.
    bands
        Method label → :class:`Band`, drawn in this order.
    xlabel, ylabel, title
        Axis labels and title.
    logx, logy
        Logarithmic axes.
    floor
        Values below are drawn at ``floor`` (so a log axis shows exact hits).
    step
        Carry-forward steps (``where="post"``) instead of straight segments.
    band_alpha
        Opacity of the bands.
    styles
        Method label → keyword arguments of ``ax.plot`` (colour, width, dashes).
    legend
        Keyword arguments of ``ax.legend`` (default: small font); ``{}`` for the defaults.
    """
    styles = styles or {}
    for label, b in bands.items():
        lo, mid, hi = b.lower, b.center, b.upper
        if floor is not None:
            lo, mid, hi = (np.maximum(v, floor) for v in (lo, mid, hi))
        style = dict(styles.get(label, {}))
        if step:
            (line,) = ax.step(b.x, mid, where="post", label=label, **style)
            ax.fill_between(b.x, lo, hi, step="post", alpha=band_alpha, color=line.get_color())
        else:
            (line,) = ax.plot(b.x, mid, label=label, **style)
            ax.fill_between(b.x, lo, hi, alpha=band_alpha, color=line.get_color(), lw=0)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both", lw=0.4)
    ax.legend(**(legend if legend is not None else {"fontsize": 7}))
    return ax


def subplots(rows: int, cols: int, size: tuple[float, float]) -> tuple[Figure, np.ndarray]:
    """A figure with a ``rows × cols`` array of axes (non-interactive backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False)
    return fig, axes


def save_figure(fig: Figure, path: str | Path, dpi: int = 100) -> Path:
    """Write ``fig`` as a PNG atomically and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out = Path(path)
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    plt.close(fig)
    return out
