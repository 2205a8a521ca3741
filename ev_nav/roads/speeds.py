"""Speed limits from OSM ``maxspeed`` values, imputed by highway class when missing."""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

KMH_PER_MPH = 1.609344

#: Default speed limits [km/h] by highway class, used when ``maxspeed`` is missing or unparsable
#: (typical urban European limits).
DEFAULT_CLASS_SPEEDS_KMH: dict[str, float] = {
    "motorway": 110.0,
    "motorway_link": 60.0,
    "trunk": 90.0,
    "trunk_link": 50.0,
    "primary": 50.0,
    "primary_link": 40.0,
    "secondary": 50.0,
    "secondary_link": 40.0,
    "tertiary": 50.0,
    "tertiary_link": 40.0,
    "unclassified": 40.0,
    "residential": 30.0,
    "living_street": 20.0,
    "service": 20.0,
    "road": 40.0,
}
FALLBACK_SPEED_KMH = 30.0

_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(km/h|kmh|kph|mph|knots)?\s*$", re.IGNORECASE)


def parse_maxspeed(value: object) -> float | None:
    """Parse one OSM ``maxspeed`` value to km/h.

    Handles plain numbers (``"50"``), units (``"30 mph"``, ``"50 km/h"``), lists separated by ``;``
    or ``|`` and lists produced by graph simplification (their mean). Symbolic values (``"none"``,
    ``"walk"``, ``"DE:urban"``, ``"signals"``) return ``None``, to be imputed.
    """
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        parts: Iterable[object] = value
    else:
        if isinstance(value, float) and np.isnan(value):
            return None
        parts = re.split(r"[;|]", str(value))
    speeds = []
    for part in parts:
        m = _NUMBER.match(str(part))
        if not m:
            continue
        speed = float(m.group(1))
        unit = (m.group(2) or "").lower()
        if unit == "mph":
            speed *= KMH_PER_MPH
        elif unit == "knots":
            speed *= 1.852
        if speed > 0:
            speeds.append(speed)
    # sorted: simplification's lists come in set order, which the last bit of a mean of three
    # or more values would otherwise follow
    return float(np.mean(sorted(speeds))) if speeds else None


def class_speed_kmh(highway: str, table: dict[str, float] | None = None) -> float:
    """Default speed [km/h] for a highway class."""
    table = DEFAULT_CLASS_SPEEDS_KMH if table is None else table
    return table.get(highway, table.get(highway.removesuffix("_link"), FALLBACK_SPEED_KMH))
