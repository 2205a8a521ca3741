"""The embedded synthetic town: a hilly street grid with arterials and highways.

Deterministic from a seed, built entirely with array operations so that towns of a million
segments take seconds. It is the default network (a fresh clone needs no data files) and the
scale benchmark.

Layout: a jittered grid of intersections (block size ~120 m). Every 6th street is an arterial
(secondary, 50 km/h), every 18th a primary road (70 km/h), and two streets become highways
(motorway, 100 km/h) crossing the town. About a third of residential streets are one-way and a few
percent of blocks are closed, so that routes have many alternatives but the grid is irregular.
Elevation is a smooth random field of hills with wavelengths 2.5–9 km and a relief scale of 45 m, so
grades stay in a realistic range (a few percent, occasionally >10 %).

:func:`generated_chargers` scatters charging sites over any network the same way (seeded,
uniform), for benchmarks of charging-stop planning.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import asdict, dataclass

import numpy as np

from ev_nav.energy import CONNECTORS
from ev_nav.errors import ConfigError, require_seed
from ev_nav.roads.chargers import Chargers, attach_sites
from ev_nav.roads.network import EARTH_RADIUS_M, RoadNetwork, build_network

#: Sizes of town :func:`synthetic_town` builds [segments]: a smaller request gets the smallest
#: town; a larger one is refused (its arrays would not fit in memory: 2M segments take ~1 GB).
MIN_TOWN_SEGMENTS = 100
MAX_TOWN_SEGMENTS = 2_000_000

CLASSES: tuple[str, ...] = ("motorway", "primary", "secondary", "residential")
CLASS_SPEED_KMH = np.array([100.0, 70.0, 50.0, 30.0])


@dataclass(frozen=True)
class TownSpec:
    """Parameters of a synthetic town.

    Attributes
    ----------
    n_segments : int
        Approximate number of directed segments wanted (the grid side is chosen from it).
    seed : int
        Seed of every random choice (jitter, one-ways, closures, terrain).
    block_m : float
        Mean block edge length [m].
    relief_m : float
        Amplitude scale of the terrain [m].
    origin_lat, origin_lon : float
        Where the town is placed on the globe [degrees] (fictitious; only for maps).
    """

    n_segments: int = 2000
    seed: int = 0
    block_m: float = 120.0
    relief_m: float = 45.0
    origin_lat: float = 47.0
    origin_lon: float = 8.0


#: The :class:`TownSpec` fields ``synthetic_town`` takes: (low, high, low excluded).
_TOWN_RANGES: dict[str, tuple[float, float, bool]] = {
    "block_m": (0.0, 10_000.0, True),
    "relief_m": (0.0, 5_000.0, False),
    "origin_lat": (-85.0, 85.0, False),
    "origin_lon": (-180.0, 180.0, False),
}


def _terrain(x: np.ndarray, y: np.ndarray, spec: TownSpec, rng: np.random.Generator) -> np.ndarray:
    """Smooth elevation [m] at local coordinates (x, y) [m]: a sum of random plane waves."""
    n_modes = 24
    wavelength = rng.uniform(2500.0, 9000.0, n_modes)
    angle = rng.uniform(0.0, 2 * np.pi, n_modes)
    phase = rng.uniform(0.0, 2 * np.pi, n_modes)
    amp = spec.relief_m * rng.uniform(0.3, 1.0, n_modes) / np.sqrt(n_modes / 4)
    kx = 2 * np.pi / wavelength * np.cos(angle)
    ky = 2 * np.pi / wavelength * np.sin(angle)
    elev = np.zeros_like(x)
    for i in range(n_modes):  # a loop over 24 terrain modes, each vectorised over all nodes
        elev += amp[i] * np.cos(kx[i] * x + ky[i] * y + phase[i])
    return elev - elev.min() + 5.0


def synthetic_town(n_segments: int = 2000, seed: int = 0, **kwargs: float) -> RoadNetwork:
    """Build the synthetic town (see module docstring).

    Parameters
    ----------
    n_segments : int
        Approximate number of directed segments (fewer than :data:`MIN_TOWN_SEGMENTS` give
        the smallest town; more than :data:`MAX_TOWN_SEGMENTS` raise :class:`ConfigError`).
    seed : int
        Random seed in 0..2^63-1; the same seed always gives the same town.
    **kwargs
        Further :class:`TownSpec` fields (``block_m``, ``relief_m``, …).
    """
    if not (isinstance(n_segments, numbers.Integral) and not isinstance(n_segments, bool)):
        raise ConfigError(f"a synthetic town's size is a whole number of segments, got "
                          f"{n_segments!r}")
    if int(n_segments) > MAX_TOWN_SEGMENTS:
        raise ConfigError(
            f"a synthetic town has at most {MAX_TOWN_SEGMENTS:,} segments, got {int(n_segments):,}"
        )
    seed = require_seed(seed, "a synthetic town's seed")
    for key, value in kwargs.items():
        if key not in _TOWN_RANGES:
            continue  # TownSpec refuses a field it lacks, below
        low, high, low_open = _TOWN_RANGES[key]
        ok = (isinstance(value, numbers.Real) and not isinstance(value, bool)
              and (low < value if low_open else low <= value) and value <= high)
        if not ok:  # a NaN fails every comparison
            raise ConfigError(f"a synthetic town's {key} must be a number in "
                              f"{'(' if low_open else '['}{low:g}, {high:g}], got {value!r}")
    try:
        spec = TownSpec(n_segments=max(int(n_segments), MIN_TOWN_SEGMENTS), seed=seed, **kwargs)
    except TypeError:
        fields = ", ".join(f.name for f in dataclasses.fields(TownSpec)
                           if f.name not in ("n_segments", "seed"))
        raise ConfigError(f"a synthetic town takes {fields}; got "
                          f"{', '.join(sorted(kwargs))}") from None
    rng = np.random.default_rng(spec.seed)
    # ~4 directed segments per node in a two-way grid, minus one-ways and closures (~12 %).
    side = max(int(round(np.sqrt(spec.n_segments / (4 * 0.80)))), 6)
    nx_, ny_ = side, side
    ii, jj = np.meshgrid(np.arange(nx_), np.arange(ny_), indexing="ij")
    ii, jj = ii.ravel(), jj.ravel()
    n_nodes = ii.shape[0]
    jitter = 0.15 * spec.block_m
    x = ii * spec.block_m + rng.uniform(-jitter, jitter, n_nodes)
    y = jj * spec.block_m + rng.uniform(-jitter, jitter, n_nodes)
    elevation = _terrain(x, y, spec, rng)

    def node(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        return i * ny_ + j

    # Undirected streets: horizontal (i, j)-(i+1, j) and vertical (i, j)-(i, j+1).
    hi, hj = np.meshgrid(np.arange(nx_ - 1), np.arange(ny_), indexing="ij")
    vi, vj = np.meshgrid(np.arange(nx_), np.arange(ny_ - 1), indexing="ij")
    a = np.concatenate([node(hi.ravel(), hj.ravel()), node(vi.ravel(), vj.ravel())])
    b = np.concatenate([node(hi.ravel() + 1, hj.ravel()), node(vi.ravel(), vj.ravel() + 1)])
    # The street "line" index decides the class: horizontal streets run along a row j,
    # vertical ones along a column i.
    line = np.concatenate([hj.ravel(), vi.ravel()])
    n_lines = np.where(np.arange(a.shape[0]) < hi.size, ny_, nx_)
    cls = np.full(a.shape[0], 3, dtype=np.int16)  # residential
    cls[line % 6 == 3] = 2  # secondary
    cls[line % 18 == 9] = 1  # primary
    motorway_line = np.maximum(n_lines // 3, 1)
    cls[line == motorway_line] = 0

    # Close a few residential blocks and make ~1/3 of residential streets one-way.
    residential = cls == 3
    closed = residential & (rng.random(a.shape[0]) < 0.04)
    a, b, cls, residential = a[~closed], b[~closed], cls[~closed], residential[~closed]
    oneway = residential & (rng.random(a.shape[0]) < 0.33)
    flip = rng.random(a.shape[0]) < 0.5
    fwd_u = np.where(flip & oneway, b, a)
    fwd_v = np.where(flip & oneway, a, b)
    two = ~oneway
    seg_u = np.concatenate([fwd_u, b[two]])
    seg_v = np.concatenate([fwd_v, a[two]])
    seg_cls = np.concatenate([cls, cls[two]])

    dx = x[seg_v] - x[seg_u]
    dy = y[seg_v] - y[seg_u]
    length = np.hypot(dx, dy)
    lat0 = np.radians(spec.origin_lat)
    node_lat = spec.origin_lat + np.degrees(y / EARTH_RADIUS_M)
    node_lon = spec.origin_lon + np.degrees(x / (EARTH_RADIUS_M * np.cos(lat0)))
    return build_network(
        name=f"synthetic-{spec.n_segments}-s{spec.seed}",
        node_lon=node_lon,
        node_lat=node_lat,
        node_elevation=elevation,
        node_osmid=np.arange(n_nodes, dtype=np.int64),
        seg_u=seg_u,
        seg_v=seg_v,
        length_m=length,
        speed_mps=CLASS_SPEED_KMH[seg_cls] / 3.6,
        highway=seg_cls,
        highway_classes=CLASSES,
        speed_imputed=np.zeros(seg_u.shape[0], dtype=bool),
        meta={
            "elevation_source": "synthetic-terrain",
            "town_spec": asdict(spec),
            "source_hash": "synthetic-" + "-".join(str(v) for v in asdict(spec).values()),
        },
    )


def generated_chargers(
    net: RoadNetwork,
    per_km2: float,
    seed: int,
    power_kw: float = 150.0,
    connectors: tuple[str, ...] = ("ccs1", "ccs2", "nacs", "chademo", "type2"),
) -> Chargers:
    """Uniformly random charging sites over the network's bounding box, for benchmarks.

    ``round(per_km2 · area)`` sites (the box's area in km², on a sphere of the Earth's radius)
    at uniform longitudes and uniform latitudes drawn from ``np.random.default_rng(seed)``,
    each offering ``connectors`` at ``power_kw`` and attached to its nearest segment however
    far it lies (named ``generated-1``, ``generated-2``, …).

    Raises
    ------
    ConfigError
        A density that is negative or not finite, a power that is not positive, an unknown
        connector, or a seed that is not an integer in 0..2^63-1 (None would give other sites
        on every call).
    """
    if not (math.isfinite(per_km2) and per_km2 >= 0):
        raise ConfigError(f"charger density must be >= 0 sites per km², got {per_km2}")
    if not (math.isfinite(power_kw) and power_kw > 0):
        raise ConfigError(f"charger power must be a positive number of kW, got {power_kw}")
    bad = [c for c in connectors if c not in CONNECTORS]
    if bad or not connectors:
        raise ConfigError(f"connectors must be some of {', '.join(CONNECTORS)}, got {connectors}")
    lon0, lat0, lon1, lat1 = net.bounds()
    r_km = EARTH_RADIUS_M / 1000.0
    area = r_km**2 * math.radians(lon1 - lon0) * abs(
        math.sin(math.radians(lat1)) - math.sin(math.radians(lat0))
    )
    n = int(round(per_km2 * area))
    rng = np.random.default_rng(require_seed(seed, "generated chargers' seed"))
    lon = rng.uniform(lon0, lon1, n)
    lat = rng.uniform(lat0, lat1, n)
    row = np.zeros(len(CONNECTORS))
    row[[CONNECTORS.index(c) for c in connectors]] = power_kw
    table, _ = attach_sites(
        net, lon, lat, np.tile(row, (n, 1)), np.zeros(n, np.int64),
        [f"generated-{i + 1}" for i in range(n)], [""] * n, None,
    )
    return table
