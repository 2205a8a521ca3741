"""Static PNG maps of a road network (matplotlib): segments coloured by a per-segment value.

The counterpart of :mod:`ev_nav.viz.maps` for papers and reports: the same colour scale
(:class:`ev_nav.viz.ColorScale`), all segments drawn as one ``LineCollection`` (no per-segment
artists), optional routes on top, written atomically.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import InvalidNetworkData
from ev_nav.provenance import atomic_path
from ev_nav.roads.network import RoadNetwork
from ev_nav.viz import NO_DATA_COLOR, ColorScale, format_value

#: Route colours (planned route first), shared with the HTML maps.
ROUTE_COLORS: tuple[str, ...] = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def segment_polylines(net: RoadNetwork) -> list[NDArray[np.float64]]:
    """Each segment's polyline as a (k, 2) array of (lon, lat) rows (views, no copies)."""
    off = net.geom_offsets
    return np.split(net.geom_lonlat, off[1:-1]) if net.n_segments > 1 else [net.geom_lonlat]


def network_png(
    net: RoadNetwork,
    values: ArrayLike | None,
    path: str | Path,
    *,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    log_scale: bool = False,
    label: str = "",
    title: str | None = None,
    routes: Mapping[str, ArrayLike] | None = None,
    linewidth: float | ArrayLike = 1.2,
    figsize: tuple[float, float] | None = None,
    dpi: int = 150,
) -> Path:
    """Draw the network coloured by ``values`` (NaN = grey) into a PNG file; return its path.

    Parameters
    ----------
    net : RoadNetwork
        The network.
    values : array_like, shape (n_segments,), or None
        Per-segment value (e.g. posterior mean [Wh], sd [Wh], visits, Wh/km); ``None`` draws all
        segments grey and no colour bar.
    path : path
        Output PNG (written atomically; parent folders are created).
    cmap, vmin, vmax, log_scale
        Colour scale (default range: 2nd–98th percentile of the finite values).
    label : str
        Colour-bar label (include units).
    title : str, optional
        Axes title.
    routes : mapping name -> segment ids, optional
        Routes drawn on top (first one thickest) with a legend.
    linewidth : float or array_like
        Segment line width [pt], scalar or per segment.
    figsize, dpi
        Figure size [inch] (default: 7 inch wide, height following the network's shape) and
        resolution.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.colors import LogNorm, Normalize

    lines = segment_polylines(net)
    scale: ColorScale | None = None
    if values is not None:
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if v.shape[0] != net.n_segments:
            raise InvalidNetworkData(
                f"values has {v.shape[0]} entries but the network has {net.n_segments} segments"
            )
        scale = ColorScale.fit(v, cmap=cmap, vmin=vmin, vmax=vmax, log=log_scale)
        colors = scale.rgba(v)
    else:
        colors = np.tile(matplotlib.colors.to_rgba(NO_DATA_COLOR), (net.n_segments, 1))
    lw = np.broadcast_to(np.asarray(linewidth, dtype=np.float64), (net.n_segments,))

    lon0, lat0, lon1, lat1 = net.bounds()
    if figsize is None:
        ground_aspect = (lat1 - lat0 or 1e-3) / (
            (lon1 - lon0 or 1e-3) * np.cos(np.radians(0.5 * (lat0 + lat1)))
        )
        figsize = (7.0, float(np.clip(5.6 * ground_aspect + 1.0, 3.0, 10.0)))
    fig, ax = plt.subplots(figsize=figsize, constrained_layout=True)
    try:
        # Draw no-data first and high values last: the two directions of a street overlap, and
        # the driven / extreme one should be the one that shows.
        order = (
            np.argsort(np.nan_to_num(v, nan=-np.inf), kind="stable")
            if values is not None
            else np.arange(net.n_segments)
        )
        ax.add_collection(
            LineCollection(
                [lines[e] for e in order],
                colors=colors[order],
                linewidths=lw[order],
                capstyle="round",
            )
        )
        for k, (name, segs) in reversed(list(enumerate((routes or {}).items()))):
            seg = np.asarray(segs, dtype=np.int64).reshape(-1)
            if seg.size == 0 or seg.min() < 0 or seg.max() >= net.n_segments:
                raise InvalidNetworkData(f"route {name!r} has segment ids outside the network")
            pts = np.concatenate([lines[e] for e in seg])
            ax.plot(
                pts[:, 0],
                pts[:, 1],
                color=ROUTE_COLORS[k % len(ROUTE_COLORS)],
                lw=3.0 if k == 0 else 2.0,
                ls="-" if k == 0 else "--",
                label=name,
                zorder=3 + (k == 0),
            )
        pad_x, pad_y = 0.02 * (lon1 - lon0 or 1e-3), 0.02 * (lat1 - lat0 or 1e-3)
        ax.set_xlim(lon0 - pad_x, lon1 + pad_x)
        ax.set_ylim(lat0 - pad_y, lat1 + pad_y)
        # Equal ground distances on both axes: one degree of longitude is cos(lat) as long.
        ax.set_aspect(1.0 / np.cos(np.radians(0.5 * (lat0 + lat1))))
        ax.set_xlabel("longitude [°]")
        ax.set_ylabel("latitude [°]")
        if title:
            ax.set_title(title)
        if routes:
            ax.legend(loc="best", fontsize="small")
        if scale is not None:
            norm = (
                LogNorm(scale.vmin, scale.vmax) if scale.log else Normalize(scale.vmin, scale.vmax)
            )
            mappable = plt.cm.ScalarMappable(norm=norm, cmap=scale.cmap)
            cbar = fig.colorbar(mappable, ax=ax, shrink=0.8, label=label)
            ticks = scale.ticks(5)
            cbar.set_ticks(ticks, labels=[format_value(t) for t in ticks])
            cbar.minorticks_off()
        target = Path(path)
        with atomic_path(target, suffix=".png") as tmp:
            fig.savefig(tmp, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    return target


def visits_png(
    net: RoadNetwork,
    visits: ArrayLike,
    path: str | Path,
    *,
    highlight: Mapping[str, ArrayLike] | None = None,
    title: str | None = None,
    label: str = "times driven",
    cmap: str = "plasma",
    **kwargs: object,
) -> Path:
    """Exploration figure: segments coloured (log scale) and thickened by how often they were
    driven; never-driven segments thin and grey; ``highlight`` routes (e.g. the optimum) on top.
    Extra keyword arguments go to :func:`network_png`."""
    counts = np.asarray(visits, dtype=np.float64).reshape(-1)
    if counts.shape[0] != net.n_segments:
        raise InvalidNetworkData(
            f"visits has {counts.shape[0]} entries but the network has {net.n_segments} segments"
        )
    if np.any(counts < 0) or not np.all(np.isfinite(counts)):
        raise InvalidNetworkData("visit counts must be finite and >= 0")
    vmax = max(float(counts.max()), 2.0)
    width = np.where(counts > 0, 1.0 + 2.5 * np.log1p(counts) / np.log1p(vmax), 0.5)
    return network_png(
        net,
        np.where(counts > 0, counts, np.nan),
        path,
        cmap=cmap,
        vmin=1.0,
        vmax=vmax,
        log_scale=True,
        label=label,
        title=title,
        routes=highlight,
        linewidth=width,
        **kwargs,  # type: ignore[arg-type]
    )
