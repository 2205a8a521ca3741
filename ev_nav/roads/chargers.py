"""Charging sites attached to a road network: the table a charging-stop planner chooses from.

A :class:`Chargers` table holds ``k`` sites as read-only NumPy arrays: where each site is, the
drivable segment it is reached from (the nearest one, found with :meth:`RoadNetwork.snap`, the
network's one snapping rule) and how far along that segment, and the largest power of each plug
type (:data:`ev_nav.energy.CONNECTORS`) it offers. :meth:`Chargers.for_vehicle` says which sites
a vehicle can use and at what power.

Three sources fill it:

* :func:`read_osm_chargers`: ``amenity=charging_station`` nodes and ways of an OSM file (XML or
  PBF), with their ``socket:*`` tags;
* :func:`read_charger_csv`: a user's table (``lat,lon,power_kw,name[,connectors]``);
* :func:`ev_nav.roads.synthetic.generated_chargers`: uniformly random sites at a stated
  density, for benchmarks.

The table travels in the network file (:meth:`RoadNetwork.save`) under its own hash, apart from
the road arrays: adding chargers to a network does not change
:attr:`RoadNetwork.arrays_hash`, so learned states stay bound to it.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ev_nav.energy import CONNECTORS, Vehicle
from ev_nav.errors import (
    ChargerDataError,
    ConfigError,
    InvalidNetworkData,
    NotOSMError,
    OutsideNetworkError,
    require_file,
)
from ev_nav.wording import plural

if TYPE_CHECKING:  # the network imports this module; only type hints go the other way
    from ev_nav.roads.network import RoadNetwork

#: Plugs that deliver direct current (the car's DC charging curve applies); the others
#: (``type1``, ``type2``) are AC, limited by the car's on-board charger.
DC_CONNECTORS: frozenset[str] = frozenset({"ccs1", "ccs2", "chademo", "nacs"})

#: OSM ``socket:<type>`` names read, and the plug each one is. ``tesla_supercharger_ccs`` is
#: the CCS2 plug of European superchargers (OSM wiki: "type2_combo with a brand addition");
#: ``tesla_supercharger`` is Tesla's own plug, read as NACS (its North American meaning).
OSM_SOCKETS: dict[str, str] = {
    "type1": "type1",
    "type2": "type2",
    "type2_cable": "type2",
    "type1_combo": "ccs1",
    "type2_combo": "ccs2",
    "tesla_supercharger_ccs": "ccs2",
    "chademo": "chademo",
    "tesla_supercharger": "nacs",
    "nacs": "nacs",
}

#: Power [kW] assumed for a socket mapped without ``socket:<type>:output``: what such a plug
#: commonly delivers at a public site, on the low side, so a plan never counts on power that
#: may not be there (type 1: 7.2 kW, 30 A at 240 V; type 2: 11 kW, 16 A three-phase; CCS and
#: CHAdeMO: 50 kW, the classic DC fast charger; NACS: 150 kW, a Tesla V2 supercharger).
DEFAULT_SOCKET_KW: dict[str, float] = {
    "type1": 7.2,
    "type2": 11.0,
    "ccs1": 50.0,
    "ccs2": 50.0,
    "chademo": 50.0,
    "nacs": 150.0,
}

#: Above this power [kW] a site given by its power alone (a CSV row without connectors, an OSM
#: station with only ``charging_station:output``) is taken as a DC fast charger; at or below it
#: (22 kW: the most a type 2 AC plug delivers) as a type 2 AC site.
AC_MAX_SITE_KW = 22.0

#: The range of a charger CSV's ``power_kw`` [kW]: a household socket gives 2.3 kW, and no car
#: charger gives 1 MW. A value outside was a slip of units (22000 for a 22 kW car park, read as
#: a 22 MW DC fast charger with every DC plug; 0.05 for 50 kW).
CSV_POWER_KW = (1.0, 1000.0)

#: Sites farther than this from every road of the network [m] are not attached (not counted as
#: reachable from it).
MAX_SNAP_M = 500.0

_POWER_RE = re.compile(r"^\s*([0-9]+(?:[.,][0-9]+)?)\s*(kw|kva|w|mw)?\s*$", re.IGNORECASE)


def _empty(dtype: Any, shape: tuple[int, ...] = (0,)) -> Any:
    return field(default_factory=lambda: np.empty(shape, dtype=dtype))


@dataclass(frozen=True, eq=False)
class Chargers:
    """``k`` charging sites, each attached to a segment of one network (read-only arrays).

    ``Chargers()`` is the empty table.

    Attributes
    ----------
    segment : ndarray of int64, shape (k,)
        The drivable segment a site is reached from (the nearest one; of a two-way street the
        direction with the site on its right).
    fraction : ndarray of float64, shape (k,)
        Where along that segment the point nearest the site lies (0 = its start, 1 = its end).
    lon, lat : ndarray of float64, shape (k,)
        The site's own position [degrees, WGS84].
    distance_m : ndarray of float64, shape (k,)
        From the site to that point of the segment [m].
    power_kw : ndarray of float64, shape (k, len(CONNECTORS))
        The largest power of each plug type at the site [kW], columns in the order of
        :data:`ev_nav.energy.CONNECTORS`; 0 = no such plug. A row of zeros is a site whose
        plugs are not known (never offered by :meth:`for_vehicle`).
    capacity : ndarray of int64, shape (k,)
        Vehicles that can charge at once (0 = unknown).
    name, operator : tuple of str
        Per site ("" = not known).
    """

    segment: NDArray[np.int64] = _empty(np.int64)
    fraction: NDArray[np.float64] = _empty(np.float64)
    lon: NDArray[np.float64] = _empty(np.float64)
    lat: NDArray[np.float64] = _empty(np.float64)
    distance_m: NDArray[np.float64] = _empty(np.float64)
    power_kw: NDArray[np.float64] = _empty(np.float64, (0, len(CONNECTORS)))
    capacity: NDArray[np.int64] = _empty(np.int64)
    name: tuple[str, ...] = ()
    operator: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        dtypes = {
            "segment": np.int64,
            "fraction": np.float64,
            "lon": np.float64,
            "lat": np.float64,
            "distance_m": np.float64,
            "power_kw": np.float64,
            "capacity": np.int64,
        }
        for key, dtype in dtypes.items():
            arr = np.array(getattr(self, key), dtype=dtype)  # a private copy, made read-only
            arr.setflags(write=False)
            object.__setattr__(self, key, arr)
        object.__setattr__(self, "name", tuple(str(s) for s in self.name))
        object.__setattr__(self, "operator", tuple(str(s) for s in self.operator))
        k = self.segment.shape[0]
        for key in ("segment", "fraction", "lon", "lat", "distance_m", "capacity"):
            if getattr(self, key).shape != (k,):
                raise InvalidNetworkData(
                    f"chargers: {key} has shape {getattr(self, key).shape}, expected ({k},)"
                )
        if self.power_kw.shape != (k, len(CONNECTORS)):
            raise InvalidNetworkData(
                f"chargers: power_kw has shape {self.power_kw.shape}, expected "
                f"({k}, {len(CONNECTORS)}) (one column per plug type)"
            )
        for key in ("name", "operator"):
            if len(getattr(self, key)) != k:
                raise InvalidNetworkData(
                    f"chargers: {len(getattr(self, key))} {key}s for {k} sites"
                )
        checks = (
            ("segment", self.segment >= 0, "a negative segment index"),
            ("fraction", (self.fraction >= 0) & (self.fraction <= 1), "a value outside 0..1"),
            ("lon", np.abs(self.lon) <= 180, "a longitude outside -180..180"),
            ("lat", np.abs(self.lat) <= 90, "a latitude outside -90..90"),
            ("distance_m", self.distance_m >= 0, "a negative or missing distance"),
            ("power_kw", (self.power_kw >= 0) & np.isfinite(self.power_kw),
             "a negative or infinite power"),
            ("capacity", self.capacity >= 0, "a negative capacity"),
        )
        for key, ok, what in checks:
            if not np.all(ok):  # NaN fails every comparison, so it is caught here too
                raise InvalidNetworkData(f"chargers: {key} holds {what}")

    def __len__(self) -> int:
        return int(self.segment.shape[0])

    # ------------------------------------------------------------------ use
    def for_vehicle(
        self, vehicle: Vehicle
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.bool_]]:
        """The sites ``vehicle`` can plug into, with the power it can draw at each.

        A site is usable when one of its plugs (nonzero :attr:`power_kw`) is one of
        ``vehicle.connectors``. The usable power of a plug is the site's power capped at the
        car's: ``vehicle.dc_max_kw`` for a DC plug (:data:`DC_CONNECTORS`),
        ``vehicle.ac_max_kw`` for an AC one (no cap where the car's figure is 0, unknown). Each
        site counts with its plug of the largest usable power (a DC plug on a tie).

        Returns
        -------
        indices : ndarray of int64
            Usable sites (rows of this table), ascending.
        power_kw : ndarray of float64
            The usable power at each [kW].
        dc : ndarray of bool
            Whether that plug is DC.

        Raises
        ------
        ConfigError
            When the vehicle's plugs are not known (``connectors`` empty, as for the
            ``sumo-default`` preset).
        """
        if not vehicle.connectors:
            raise ConfigError(
                f"vehicle {vehicle.name!r} has no known charging plugs, so no charger can be "
                "matched to it; plan for a catalogue model with --vehicle-model NAME, or on a "
                "state made with 'ev-nav init --vehicle NAME' ('ev-nav vehicles' lists the "
                "models)"
            )
        # DC plugs first: argmax takes the first of equal powers
        plugs = sorted(set(vehicle.connectors), key=lambda c: (c not in DC_CONNECTORS, c))
        dc = np.array([c in DC_CONNECTORS for c in plugs])
        site = self.power_kw[:, [CONNECTORS.index(c) for c in plugs]]
        cap = np.where(dc, vehicle.dc_max_kw, vehicle.ac_max_kw)
        usable = np.where(cap > 0, np.minimum(site, cap), site)
        if usable.shape[0] == 0:
            return np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, bool)
        best = usable.argmax(axis=1)
        power = usable[np.arange(usable.shape[0]), best]
        keep = np.flatnonzero(power > 0)
        return keep.astype(np.int64), power[keep], dc[best[keep]]

    def plugs(self, i: int) -> dict[str, float]:
        """Site ``i``'s plugs: ``{connector: kW}`` (for display)."""
        row = self.power_kw[i]
        return {c: float(row[j]) for j, c in enumerate(CONNECTORS) if row[j] > 0}

    # ------------------------------------------------------------------ combining
    def take(self, index: NDArray[np.int64]) -> Chargers:
        """The sites at ``index``, in that order."""
        idx = np.asarray(index, dtype=np.int64)
        return Chargers(
            **{key: getattr(self, key)[idx] for key in _ARRAY_KEYS},
            name=tuple(self.name[i] for i in idx),
            operator=tuple(self.operator[i] for i in idx),
        )

    def new_sites(self, existing: Chargers) -> NDArray[np.int64]:
        """Indices of this table's sites that ``existing`` does not already hold: the same
        place (to 1e-7°, about 1 cm), name and power per plug. A file added twice (a script run
        again) doubled every site, and with it the stop planner's and the counts' sites."""
        def key(t: Chargers, i: int) -> tuple[object, ...]:
            return (round(float(t.lon[i]), 7), round(float(t.lat[i]), 7), t.name[i],
                    tuple(np.round(t.power_kw[i], 6).tolist()))

        have = {key(existing, i) for i in range(len(existing))}
        fresh: list[int] = []
        for i in range(len(self)):
            k = key(self, i)
            if k not in have:
                have.add(k)  # (a file listing one site twice: kept once)
                fresh.append(i)
        return np.asarray(fresh, dtype=np.int64)

    def concat(self, other: Chargers) -> Chargers:
        """This table followed by ``other``'s sites (both attached to the same network)."""
        return Chargers(
            **{
                key: np.concatenate([getattr(self, key), getattr(other, key)])
                for key in _ARRAY_KEYS
            },
            name=self.name + other.name,
            operator=self.operator + other.operator,
        )

    # ------------------------------------------------------------------ persistence
    def arrays(self) -> dict[str, NDArray[Any]]:
        """The arrays by name (what :meth:`RoadNetwork.save` stores, prefixed ``chargers_``)."""
        return {key: getattr(self, key) for key in _ARRAY_KEYS}

    @property
    def sha256(self) -> str:
        """SHA-256 of the whole table: every array (name, dtype, shape, bytes), the plug
        columns, names and operators. Stored in the network file and checked on load."""
        h = hashlib.sha256()
        for key, arr in self.arrays().items():
            a = np.ascontiguousarray(arr)
            h.update(f"{key}:{a.dtype.str}:{a.shape};".encode())
            h.update(a.tobytes())
        text = json.dumps([list(CONNECTORS), list(self.name), list(self.operator)])
        h.update(text.encode())
        return h.hexdigest()


_ARRAY_KEYS: tuple[str, ...] = (
    "segment", "fraction", "lon", "lat", "distance_m", "power_kw", "capacity"
)


@dataclass(frozen=True)
class ChargersRead:
    """Sites read from a source and attached to a network, with what the reading noticed.

    Attributes
    ----------
    chargers : Chargers
        The attached sites.
    notes : dict of str to int
        Counts: ``"stations"`` (sites in the source), ``"too_far"`` (farther than the
        attachment limit from every road: not attached), ``"default_power_sockets"`` (OSM
        sockets without an output tag, given :data:`DEFAULT_SOCKET_KW`), ``"power_only"`` (OSM
        sites with a power tag but no recognised socket: plugs assumed as for a CSV row),
        ``"no_plug_info"`` (OSM sites with neither: kept, never usable), ``"bad_values"``
        (unreadable output or capacity tags, ignored), ``"relations"`` (stations mapped as
        relations: skipped), and ``"unrecognised_socket:<type>"`` per OSM socket type not in
        :data:`OSM_SOCKETS` (ignored).
    """

    chargers: Chargers
    notes: dict[str, int]

    def describe(self) -> str:
        """One line for the command line: sites attached and what was noticed."""
        parts = []
        for key, n in self.notes.items():
            if not n or key == "stations":
                continue
            kind = key.partition(":")[2]
            text = _NOTE_TEXT.get(key, f"socket:{kind} (not a known plug) ignored")
            parts.append(f"{n:,} {text}")
        extra = f" ({'; '.join(parts)})" if parts else ""
        return f"{plural(len(self.chargers), 'charging site')} attached{extra}"


_NOTE_TEXT = {
    "too_far": f"farther than {MAX_SNAP_M:,.0f} m from the roads, left out",
    "default_power_sockets": "socket(s) without an output tag, given a default power",
    "power_only": "with only a power tag, plugs assumed",
    "no_plug_info": "with no plug information, never usable",
    "bad_values": "unreadable tag value(s) ignored",
    "relations": "mapped as relations, skipped",
    "outside_extract": "mapped as ways whose nodes the file lacks, skipped",
}


# ============================================================================ attaching
def attach_sites(
    net: RoadNetwork,
    lon: NDArray[np.float64],
    lat: NDArray[np.float64],
    power_kw: NDArray[np.float64],
    capacity: NDArray[np.int64],
    name: list[str],
    operator: list[str],
    max_distance_m: float | None = MAX_SNAP_M,
) -> tuple[Chargers, int]:
    """Attach sites to their nearest segments: the table of those within ``max_distance_m``
    of a road (``None``: all), and how many were farther.

    Each site goes through :meth:`RoadNetwork.snap`, which asks the network's spatial index for
    the few polyline pieces near it (no scan over all segments per site).
    """
    k = len(name)
    seg = np.zeros(k, np.int64)
    frac = np.zeros(k)
    dist = np.zeros(k)
    kept = np.zeros(k, dtype=bool)
    for i in range(k):
        try:
            point = net.snap(float(lon[i]), float(lat[i]), max_distance_m)
        except OutsideNetworkError:
            continue
        seg[i], frac[i], dist[i], kept[i] = point.segment, point.fraction, point.distance_m, True
    idx = np.flatnonzero(kept)
    table = Chargers(
        segment=seg[idx],
        fraction=frac[idx],
        lon=np.asarray(lon, np.float64)[idx],
        lat=np.asarray(lat, np.float64)[idx],
        distance_m=dist[idx],
        power_kw=np.asarray(power_kw, np.float64).reshape(-1, len(CONNECTORS))[idx],
        capacity=np.asarray(capacity, np.int64)[idx],
        name=tuple(name[i] for i in idx),
        operator=tuple(operator[i] for i in idx),
    )
    return table, int(k - idx.shape[0])


def assumed_plugs(power_kw: float) -> NDArray[np.float64]:
    """The plug row of a site known only by its power [kW]: every DC plug at that power above
    :data:`AC_MAX_SITE_KW`, a type 2 AC plug at or below it."""
    row = np.zeros(len(CONNECTORS))
    names = DC_CONNECTORS if power_kw > AC_MAX_SITE_KW else {"type2"}
    for c in names:
        row[CONNECTORS.index(c)] = power_kw
    return row


# ============================================================================ OSM
def parse_power_kw(text: str) -> float | None:
    """A power tag's value in kW, or ``None`` when it cannot be read.

    ``"22 kW"``, ``"50kW"``, ``"11000 W"``, ``"0.05 MW"``, ``"22 kVA"`` (read as kW); several
    values separated by ``;`` (``"150 kW;50 kW"``) give the largest. A bare number is kW,
    except above 1,000 (more than any car charger), which is read as W (``"11000"``).
    """
    best: float | None = None
    for part in str(text).split(";"):
        if not part.strip():
            continue
        m = _POWER_RE.match(part)
        if m is None:
            return None
        value = float(m.group(1).replace(",", "."))
        unit = (m.group(2) or "").lower()
        if unit == "w" or (unit == "" and value > 1000.0):
            value /= 1000.0
        elif unit == "mw":
            value *= 1000.0
        if not math.isfinite(value):
            return None
        best = value if best is None else max(best, value)
    return best


def _socket_count(text: str) -> int | None:
    """How many sockets ``socket:<type>=<value>`` says (``None``: present, count unknown;
    0: none, as ``no`` or ``0``)."""
    value = str(text).strip().lower()
    if value in ("no", "0"):
        return 0
    try:
        return int(value)
    except ValueError:
        return None


def osm_site_plugs(tags: dict[str, str], notes: Counter[str]) -> NDArray[np.float64]:
    """The plug row (kW per :data:`CONNECTORS`) of one OSM ``amenity=charging_station``.

    A socket counts when ``socket:<type>`` is anything but ``no``/``0``, or when only its
    ``socket:<type>:output`` is given; its power is the largest value of that output tag, or
    :data:`DEFAULT_SOCKET_KW` without one (counted in ``notes["default_power_sockets"]``).
    Socket types outside :data:`OSM_SOCKETS` are counted (``unrecognised_socket:<type>``) and
    ignored. A station with no recognised socket but a ``charging_station:output`` or
    ``maxpower`` tag gets :func:`assumed_plugs` at that power (``notes["power_only"]``); one
    with neither keeps a row of zeros (``notes["no_plug_info"]``).
    """
    row = np.zeros(len(CONNECTORS))
    sockets: dict[str, dict[str, str]] = {}
    for key, value in tags.items():
        if not key.startswith("socket:"):
            continue
        kind, _, sub = key[len("socket:"):].partition(":")
        sockets.setdefault(kind, {})[sub] = value
    for kind, sub in sockets.items():
        plug = OSM_SOCKETS.get(kind)
        if plug is None:
            if "" in sub or "output" in sub:
                notes[f"unrecognised_socket:{kind}"] += 1
            continue
        count = _socket_count(sub[""]) if "" in sub else None
        if count == 0 or ("" not in sub and "output" not in sub):
            continue  # "socket:type2=no", or only e.g. socket:type2:current
        power = parse_power_kw(sub["output"]) if "output" in sub else None
        if power is None:
            if "output" in sub:
                notes["bad_values"] += 1
            notes["default_power_sockets"] += 1
            power = DEFAULT_SOCKET_KW[plug]
        j = CONNECTORS.index(plug)
        row[j] = max(row[j], power)
    if row.any():
        return row
    for key in ("charging_station:output", "maxpower"):
        if key in tags:
            power = parse_power_kw(tags[key])
            if power is not None and power > 0:
                notes["power_only"] += 1
                return assumed_plugs(power)
            notes["bad_values"] += 1
    notes["no_plug_info"] += 1
    return row


def read_osm_chargers(
    path: str | Path, net: RoadNetwork, max_distance_m: float | None = MAX_SNAP_M
) -> ChargersRead:
    """The ``amenity=charging_station`` sites of an OSM file, attached to ``net``.

    Reads XML (``.osm``, ``.osm.gz``, ``.osm.bz2``) and PBF alike with pyosmium, streaming:
    one pass hands only the tagged nodes and ways to Python (a tag filter in libosmium); a
    station mapped as a way (an area around its parking bays) stands at the mean of its nodes,
    whose coordinates a second pass reads (nodes only, filtered by id) when there are such
    ways. Stations mapped as relations are counted and skipped. Plugs and powers come from the
    ``socket:*`` tags (:func:`osm_site_plugs`); ``capacity``, ``name`` and ``operator`` from
    their tags. Sites farther than ``max_distance_m`` from every road are not attached.

    Raises
    ------
    NetworkFileNotFound, NotOSMError
    """
    import osmium
    import osmium.filter

    p = require_file(path, "OSM file")
    notes: Counter[str] = Counter()
    sites: list[tuple[float, float, dict[str, str]]] = []
    ways: list[tuple[list[int], dict[str, str]]] = []
    try:
        stations = osmium.FileProcessor(str(p)).with_filter(
            osmium.filter.TagFilter(("amenity", "charging_station"))
        )
        for obj in stations:
            tags = {t.k: t.v for t in obj.tags}
            if obj.is_node():
                sites.append((obj.location.lon, obj.location.lat, tags))
            elif obj.is_way():
                ways.append(([n.ref for n in obj.nodes], tags))
            else:
                notes["relations"] += 1
        if ways:
            needed = {ref for refs, _ in ways for ref in refs}
            coords: dict[int, tuple[float, float]] = {}
            nodes = osmium.FileProcessor(str(p), osmium.osm.NODE)
            if min(needed) >= 0:  # libosmium's id filter takes non-negative ids only
                nodes = nodes.with_filter(osmium.filter.IdFilter(needed))
            for obj in nodes:
                if obj.id in needed:
                    coords[obj.id] = (obj.location.lon, obj.location.lat)
            for refs, tags in ways:
                # a closed way lists its first node again at the end: count it once
                ring = refs[:-1] if len(refs) > 1 and refs[0] == refs[-1] else refs
                xy = np.array([coords[r] for r in ring if r in coords])
                if xy.shape[0] == 0:
                    notes["outside_extract"] += 1
                    continue
                sites.append((float(xy[:, 0].mean()), float(xy[:, 1].mean()), tags))
    except RuntimeError as exc:  # libosmium's error for unreadable or foreign input
        raise NotOSMError(f"{p} is not a readable OSM file ({exc})") from None
    notes["stations"] = len(sites)
    power = np.array([osm_site_plugs(tags, notes) for *_, tags in sites]).reshape(
        -1, len(CONNECTORS)
    )
    capacity = np.zeros(len(sites), np.int64)
    for i, (*_, tags) in enumerate(sites):
        if "capacity" in tags:
            try:
                capacity[i] = max(int(str(tags["capacity"]).strip()), 0)
            except ValueError:
                notes["bad_values"] += 1
    table, far = attach_sites(
        net,
        np.array([s[0] for s in sites], np.float64),
        np.array([s[1] for s in sites], np.float64),
        power,
        capacity,
        [s[2].get("name", "") for s in sites],
        [s[2].get("operator", "") for s in sites],
        max_distance_m,
    )
    notes["too_far"] = far
    return ChargersRead(table, _ordered(notes))


def _ordered(notes: Counter[str]) -> dict[str, int]:
    first = ("stations", "too_far")
    return {
        **{k: int(notes.get(k, 0)) for k in first},
        **{k: int(v) for k, v in sorted(notes.items()) if k not in first},
    }


# ============================================================================ CSV
#: Columns of a charger CSV: required, then optional.
CSV_REQUIRED: tuple[str, ...] = ("lat", "lon", "power_kw", "name")
CSV_OPTIONAL: tuple[str, ...] = ("connectors", "operator", "capacity")


@dataclass(frozen=True)
class ChargerRows:
    """The sites of a charger CSV file as read, not yet attached to a network
    (:func:`parse_charger_csv`; :meth:`attach`)."""

    lon: NDArray[np.float64]  # [deg]
    lat: NDArray[np.float64]  # [deg]
    power_kw: NDArray[np.float64]  # one row per site, one column per connector [kW]
    capacity: NDArray[np.int64]  # vehicles at once
    names: list[str]
    operators: list[str]

    def attach(self, net: RoadNetwork, max_distance_m: float | None = MAX_SNAP_M) -> ChargersRead:
        """The sites attached to ``net``'s roads (:func:`attach_sites`)."""
        table, far = attach_sites(net, self.lon, self.lat, self.power_kw, self.capacity,
                                  self.names, self.operators, max_distance_m)
        return ChargersRead(table, {"stations": len(self.names), "too_far": far})


def read_charger_csv(
    path: str | Path, net: RoadNetwork, max_distance_m: float | None = MAX_SNAP_M
) -> ChargersRead:
    """Charging sites from a CSV file (:func:`parse_charger_csv`), attached to ``net``."""
    return parse_charger_csv(path).attach(net, max_distance_m)


def parse_charger_csv(path: str | Path) -> ChargerRows:
    """Read and check a charger CSV file, before any network is at hand (``network build``
    reads its ``--chargers`` files first, so that a bad row is said before minutes of
    building).

    The header names the columns ``lat,lon,power_kw,name`` (any order), and optionally
    ``connectors`` (plug names of :data:`ev_nav.energy.CONNECTORS` separated by ``;``, e.g.
    ``ccs2;type2``), ``operator`` and ``capacity`` (vehicles at once). Every listed plug offers
    ``power_kw``. **Without connectors** (no column, or an empty cell) a site is taken to offer
    every DC plug (``ccs1``, ``ccs2``, ``chademo``, ``nacs``) at ``power_kw`` when that is
    above 22 kW, and a type 2 AC plug otherwise (:func:`assumed_plugs`). Blank lines are
    skipped; the file is UTF-8 (a spreadsheet's byte-order mark is fine).

    Raises
    ------
    NetworkFileNotFound
        No such file.
    ChargerDataError
        A missing or unknown column, or a row with a bad number, coordinates out of range, a
        power outside :data:`CSV_POWER_KW`, or an unknown connector (the message names the
        line).
    """
    p = require_file(path, "charger file")
    lon, lat, power, capacity, names, operators = [], [], [], [], [], []
    try:
        with open(p, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise ChargerDataError(f"{p} is empty; expected a header {','.join(CSV_REQUIRED)}")
            columns = [h.strip().lower() for h in header]
            missing = [c for c in CSV_REQUIRED if c not in columns]
            unknown = [c for c in columns if c not in CSV_REQUIRED + CSV_OPTIONAL]
            if missing or unknown:
                what = (f"lacks column(s) {', '.join(missing)}" if missing
                        else f"has unknown column(s) {', '.join(unknown)}")
                raise ChargerDataError(
                    f"{p} line 1: the header {what}; expected {','.join(CSV_REQUIRED)} and "
                    f"optionally {', '.join(CSV_OPTIONAL)}"
                )
            col = {c: columns.index(c) for c in columns}
            for row in reader:
                if not any(cell.strip() for cell in row):
                    continue
                line = reader.line_num
                if len(row) != len(columns):
                    raise ChargerDataError(
                        f"{p} line {line}: {len(row)} fields, the header has {len(columns)}"
                    )
                cell = {c: row[i].strip() for c, i in col.items()}
                y, x = _csv_number(p, line, cell, "lat"), _csv_number(p, line, cell, "lon")
                kw = _csv_number(p, line, cell, "power_kw")
                if not -90 <= y <= 90 or not -180 <= x <= 180:
                    raise ChargerDataError(
                        f"{p} line {line}: lat {y:g}, lon {x:g} is not a position on Earth "
                        "(lat -90..90, lon -180..180)"
                    )
                low, high = CSV_POWER_KW
                if not low <= kw <= high:
                    hint = (f" ({kw:g} W is {kw / 1000:g} kW)" if kw > high
                            else f" ({kw:g} MW is {kw * 1000:g} kW)" if kw > 0 else "")
                    raise ChargerDataError(
                        f"{p} line {line}: power_kw is in kW, {low:g}..{high:g}, got {kw:g}"
                        f"{hint}"
                    )
                lat.append(y)
                lon.append(x)
                power.append(_csv_plugs(p, line, cell.get("connectors", ""), kw))
                capacity.append(_csv_capacity(p, line, cell.get("capacity", "")))
                names.append(cell["name"])
                operators.append(cell.get("operator", ""))
    except UnicodeDecodeError as exc:
        raise ChargerDataError(f"{p} is not UTF-8 text ({exc.reason})") from None
    except csv.Error as exc:
        raise ChargerDataError(f"{p} is not a readable CSV file ({exc})") from None
    return ChargerRows(
        np.array(lon, np.float64),
        np.array(lat, np.float64),
        np.array(power, np.float64).reshape(-1, len(CONNECTORS)),
        np.array(capacity, np.int64),
        names,
        operators,
    )


def _csv_number(p: Path, line: int, cell: dict[str, str], key: str) -> float:
    try:
        value = float(cell[key])
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ChargerDataError(f"{p} line {line}: {key} must be a number, got {cell[key]!r}")
    return value


def _csv_plugs(p: Path, line: int, text: str, kw: float) -> NDArray[np.float64]:
    names = [c.strip().lower() for c in text.split(";") if c.strip()]
    if not names:
        return assumed_plugs(kw)
    row = np.zeros(len(CONNECTORS))
    for c in names:
        if c not in CONNECTORS:
            raise ChargerDataError(
                f"{p} line {line}: unknown connector {c!r}; choose from {', '.join(CONNECTORS)}"
            )
        row[CONNECTORS.index(c)] = kw
    return row


def _csv_capacity(p: Path, line: int, text: str) -> int:
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ChargerDataError(
            f"{p} line {line}: capacity must be a whole number of vehicles, got {text!r}"
        )
    return value
