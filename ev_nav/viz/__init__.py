"""Maps and figures of road networks and routes.

``ev_nav.viz.maps`` writes interactive HTML maps (folium) and ``ev_nav.viz.plots`` static PNGs
(matplotlib). Both colour segments through the :class:`ColorScale` defined here, so an HTML map
and a PNG of the same values use the same colours and legend ticks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import InvalidNetworkData

__all__ = ["NO_DATA_COLOR", "ColorScale", "format_value"]

#: Colour of segments without a value (NaN), e.g. never-driven segments.
NO_DATA_COLOR = "#b8b8b8"


@dataclass(frozen=True)
class ColorScale:
    """A colormap over ``[vmin, vmax]``, linear or logarithmic.

    Attributes
    ----------
    cmap : str
        Matplotlib colormap name.
    vmin, vmax : float
        Value range; values outside are clipped to the end colours.
    log : bool
        Logarithmic scale (``vmin`` must then be > 0).
    """

    cmap: str
    vmin: float
    vmax: float
    log: bool = False

    @classmethod
    def fit(
        cls,
        values: ArrayLike,
        cmap: str = "viridis",
        vmin: float | None = None,
        vmax: float | None = None,
        log: bool = False,
    ) -> ColorScale:
        """A scale spanning the finite values (the 2nd–98th percentile unless given).

        Percentiles rather than min/max so that one extreme segment does not wash out the
        contrast of all the others.
        """
        v = np.asarray(values, dtype=np.float64)
        finite = v[np.isfinite(v) & (v > 0 if log else True)]
        if finite.size == 0:
            lo, hi = (1.0, 10.0) if log else (0.0, 1.0)
        else:
            lo, hi = np.percentile(finite, [2.0, 98.0])
        lo = float(lo if vmin is None else vmin)
        hi = float(hi if vmax is None else vmax)
        if log and lo <= 0:
            raise InvalidNetworkData(f"a logarithmic colour scale needs vmin > 0, got {lo}")
        if not hi > lo:  # constant values: widen symmetrically so the colour sits mid-scale
            pad = max(abs(lo) * 0.05, 1e-9)
            lo, hi = lo - pad, hi + pad
            if log:
                lo = max(lo, hi * 1e-3)
        import matplotlib

        matplotlib.colormaps[cmap]  # raises for an unknown name, early
        return cls(cmap=cmap, vmin=lo, vmax=hi, log=log)

    def normalise(self, values: ArrayLike) -> NDArray[np.float64]:
        """Position of each value on the scale in [0, 1] (NaN stays NaN)."""
        v = np.asarray(values, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.log:
                t = (np.log(v) - np.log(self.vmin)) / (np.log(self.vmax) - np.log(self.vmin))
            else:
                t = (v - self.vmin) / (self.vmax - self.vmin)
        return np.clip(t, 0.0, 1.0)

    def rgba(self, values: ArrayLike) -> NDArray[np.float64]:
        """RGBA rows in [0, 1]; NaN values get :data:`NO_DATA_COLOR`."""
        import matplotlib
        import matplotlib.colors as mcolors

        t = self.normalise(values)
        out = matplotlib.colormaps[self.cmap](np.nan_to_num(t, nan=0.0))
        out[np.isnan(t)] = mcolors.to_rgba(NO_DATA_COLOR)
        return out

    def hex(self, values: ArrayLike) -> list[str]:
        """``#rrggbb`` colour per value."""
        rgb = np.round(self.rgba(values)[:, :3] * 255).astype(np.int64)
        packed = (rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]
        return [f"#{p:06x}" for p in packed.tolist()]

    def ticks(self, n: int = 5) -> NDArray[np.float64]:
        """``n`` values evenly spaced on the scale (geometric for a log scale)."""
        if self.log:
            return np.geomspace(self.vmin, self.vmax, n)
        return np.linspace(self.vmin, self.vmax, n)


def format_value(x: float) -> str:
    """Compact number for legends and tooltips (3 significant digits, no exponent clutter)."""
    if not np.isfinite(x):
        return "n/a"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 10 or ax == 0:
        return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"
    return f"{x:.3g}"
