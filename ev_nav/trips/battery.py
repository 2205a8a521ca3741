"""Will the car arrive with enough charge? Arrival state of charge from the route's joint
posterior.

The energy a route will take is, under the model, Gaussian with the route's predicted mean and a
variance from the *joint* posterior of its segments (``model.route_covariance``: segments of one
route are correlated through the graph and feature kernels, so their variances do not simply add;
an independent-segment model such as BI has a diagonal covariance) plus the observation noise of
each segment driven. Arrival charge is departure charge minus that energy, so its credible
interval and the probability of arriving above a reserve are closed-form.

Another car than the one the state learned for (a catalogue model, ``--vehicle-model`` /
``"vehicle_model"``) takes the learned energies moved by the two cars' deterministic energies:
:func:`e_det_shift` per segment, :func:`shifted_energy` per route. What the model learned
about the roads carries over; the difference in physics (mass, drag, auxiliaries, drivetrain) is
added, and the spread (what is not known about the roads) is kept. A reading of such a trip is
moved back by the same shift before the state learns it
(:func:`ev_nav.trips.observations.reading_shift`).
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ev_nav.errors import ConfigError
from ev_nav.wording import percent

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from ev_nav.bandits.agent import Route
    from ev_nav.energy import Vehicle
    from ev_nav.gp.posterior import SegmentModel
    from ev_nav.roads.network import RoadNetwork

__all__ = [
    "DEFAULT_RESERVE", "ArrivalForecast", "RouteEnergy", "arrival_forecast", "e_det_shift",
    "parse_charge", "reserve_warning", "route_energy", "route_shift_wh", "shifted_energy",
    "vehicle_model_entry",
]

#: Planned routes whose probability of arriving below the reserve exceeds this get a warning.
RISK_WARNING = 0.05

#: The arrival reserve when a departure charge is given without one.
DEFAULT_RESERVE = "10%"


def reserve_warning(
    p_reserve: float,
    departure_wh: float,
    reserve_wh: float,
    capacity_wh: float,
    *,
    lower: str,
    remedies: str,
) -> str | None:
    """The warning for a planned route whose probability ``p_reserve`` of arriving with the
    reserve is below ``1 - RISK_WARNING`` (``None``: no warning), in the caller's terms.

    Departing below the reserve [Wh], no other route or charging stop can keep it (only a route
    recovering charge downhill could end above it): the advice is to charge first or to lower
    the reserve (``lower``: the CLI's option, the API's field). Otherwise the risk is named and
    ``remedies`` suggested (the safe route, charging stops: what the caller offers).
    """
    risk = 1.0 - p_reserve
    if risk <= RISK_WARNING:
        return None
    if reserve_wh > departure_wh:
        return (
            f"the reserve ({percent(100 * reserve_wh / capacity_wh)}) is more than the departure "
            f"charge ({percent(100 * departure_wh / capacity_wh)}), so no other route or charging "
            f"stop can keep it; charge before leaving, or lower {lower}"
        )
    return f"the planned route misses the reserve with probability {100 * risk:.0f}%; {remedies}"

_CHARGE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(%|kwh|wh)?\s*$", re.IGNORECASE)


def parse_charge(text: str, capacity_wh: float) -> float:
    """A charge given as ``80%``, ``24.5kWh`` or ``24500Wh`` → Wh.

    A bare number is refused: read as kWh, ``--soc 0.8`` departed at 1 % and ``--reserve 10``
    kept 17 % of a 58 kWh battery, silently.

    Raises
    ------
    ConfigError
        If the text is not a charge with its unit or lies outside 0 .. the usable capacity.
    """
    m = _CHARGE.match(str(text))
    if m is None:
        raise ConfigError(f"expected a charge like 80% or 24.5kWh, got {text!r}")
    if m.group(2) is None:
        raise ConfigError(f"a charge needs its unit: {m.group(1)}% or {m.group(1)}kWh, got "
                          f"{text!r}")
    value, unit = float(m.group(1)), m.group(2).lower()
    wh = {"%": value / 100.0 * capacity_wh, "kwh": value * 1000.0, "wh": value}[unit]
    if not 0.0 <= wh <= capacity_wh * (1 + 1e-9):
        raise ConfigError(
            f"charge {text!r} is outside the battery's usable 0..{capacity_wh / 1000:g} kWh"
        )
    return wh


@dataclass(frozen=True)
class RouteEnergy:
    """Predicted energy of a route [Wh]: mean, joint sd, and the sd if segments were independent."""

    mean_wh: float
    sd_wh: float
    independent_sd_wh: float


def route_energy(
    model: SegmentModel, segments: ArrayLike, shares: ArrayLike | None = None
) -> RouteEnergy:
    """The route's energy distribution under the model's joint posterior, observation noise
    included (what the battery will actually deliver). ``shares`` is the part of each segment
    driven (default 1; a trip between two points drives part of its first and last segment)."""
    seg = np.asarray(segments, dtype=np.int64)
    h = np.ones(seg.size) if shares is None else np.asarray(shares, dtype=np.float64)
    post = model.posterior()
    noise = float(model.noise_variance(seg, h))
    cov = model.route_covariance(seg)
    joint = float(h @ cov @ h)
    indep = float((h * h) @ np.diagonal(cov))
    return RouteEnergy(
        float(h @ post.mean[seg]), math.sqrt(max(joint, 0.0) + noise), math.sqrt(indep + noise)
    )


#: :func:`e_det_shift` per network object (held weakly: it goes with its network) and pair of
#: cars: a server plans and records for a fleet of a few models on one network, and E_det over
#: every segment is computed once per model, not per request.
_SHIFTS: weakref.WeakKeyDictionary[RoadNetwork, dict[tuple[Vehicle, Vehicle], NDArray[np.float64]]]
_SHIFTS = weakref.WeakKeyDictionary()
_SHIFTS_LOCK = threading.Lock()


def e_det_shift(net: RoadNetwork, car: Vehicle, learned_for: Vehicle) -> NDArray[np.float64]:
    """Per-segment ``E_det(car) − E_det(learned_for)`` [Wh], shape (n_segments,): what moves
    energies learned for one vehicle to another car (each at the segment's speed limit,
    :meth:`~ev_nav.roads.network.RoadNetwork.e_det`). Read-only, computed once per network
    object and pair of cars (networks and vehicles are frozen)."""
    from ev_nav.energy import require_vehicle  # here: history imports this module, not physics
    from ev_nav.roads.network import require_network

    require_network(net, "e_det_shift")
    require_vehicle(car, "e_det_shift", optional=False)
    require_vehicle(learned_for, "e_det_shift", optional=False)
    with _SHIFTS_LOCK:
        shift = _SHIFTS.setdefault(net, {}).get((car, learned_for))
    if shift is None:
        shift = net.e_det(car) - net.e_det(learned_for)
        shift.setflags(write=False)
        with _SHIFTS_LOCK:  # a racing duplicate computed the same array: keep the first
            shift = _SHIFTS.setdefault(net, {}).setdefault((car, learned_for), shift)
    return shift


def route_shift_wh(
    shift: NDArray[np.float64], segments: ArrayLike, shares: ArrayLike | None = None
) -> float:
    """What ``shift`` (from :func:`e_det_shift`) adds to a route's energy [Wh]: its sum over
    the part of each segment driven (``shares``, default 1)."""
    seg = np.asarray(segments, dtype=np.int64)
    h = np.ones(seg.size) if shares is None else np.asarray(shares, dtype=np.float64)
    return float(h @ shift[seg])


def shifted_energy(
    energy: RouteEnergy,
    shift: NDArray[np.float64] | None,
    segments: ArrayLike,
    shares: ArrayLike | None = None,
) -> RouteEnergy:
    """A route's energy for another car: ``energy``'s mean moved by :func:`route_shift_wh`, the
    spread kept (the shift is known; what is not known about the roads is not).
    ``shift=None`` (the state's own vehicle) returns ``energy`` unchanged."""
    if shift is None:
        return energy
    return RouteEnergy(
        energy.mean_wh + route_shift_wh(shift, segments, shares), energy.sd_wh,
        energy.independent_sd_wh,
    )


@dataclass(frozen=True)
class ArrivalForecast:
    """Arrival state of charge of one route (percentages of the usable capacity).

    Attributes
    ----------
    soc_pct : float
        Predicted (mean) arrival state of charge [%].
    low_pct, high_pct : float
        The central credible interval of ``level`` [%].
    level : float
        Its probability (e.g. 0.9).
    p_reserve : float
        Probability of arriving with at least the reserve.
    """

    soc_pct: float
    low_pct: float
    high_pct: float
    level: float
    p_reserve: float

    def to_dict(self) -> dict[str, object]:
        """The ``arrival`` entry of a route in ``ev-nav route --json`` and ``POST /api/routes``."""
        return {
            "soc_pct": round(self.soc_pct, 2),
            "interval_pct": [round(self.low_pct, 2), round(self.high_pct, 2)],
            "level": self.level,
            "p_reserve": round(self.p_reserve, 4),
        }


def arrival_forecast(
    departure_wh: float,
    reserve_wh: float,
    capacity_wh: float,
    energy: RouteEnergy,
    level: float = 0.9,
) -> ArrivalForecast:
    """Arrival charge for a departure charge and a route energy distribution (all in Wh)."""
    # stdlib normal, imported here: `history` imports this module and pays for neither
    # scipy's import nor statistics' (decimal, fractions, random)
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + level / 2)
    mean = departure_wh - energy.mean_wh
    sd = max(energy.sd_wh, 1e-12)
    pct = 100.0 / capacity_wh
    p = NormalDist().cdf((mean - reserve_wh) / sd)
    return ArrivalForecast(mean * pct, (mean - z * sd) * pct, (mean + z * sd) * pct, level, p)


def route_forecasts(
    model: SegmentModel,
    routes: Mapping[str, Route],
    *,
    shift: NDArray[np.float64] | None,
    departure_wh: float | None,
    reserve_wh: float,
    capacity_wh: float,
) -> tuple[dict[str, RouteEnergy], dict[str, ArrivalForecast]]:
    """Each planned route's energy for the car that drives it and its arrival forecast.

    The energies [Wh] (:func:`route_energy`, moved by :func:`shifted_energy` when ``shift`` is
    another car's :func:`e_det_shift`) are computed only where something needs them: another
    car's figures or a departure charge ``departure_wh`` [Wh]; the arrival forecasts only with
    a departure charge. ``ev-nav route`` and the server's route request share this, so both
    report the same figures for the same request.
    """
    if shift is None and departure_wh is None:
        return {}, {}
    energies = {
        name: shifted_energy(route_energy(model, r.segments, r.shares), shift, r.segments, r.shares)
        for name, r in routes.items()
    }
    arrivals = (
        {}
        if departure_wh is None
        else {
            name: arrival_forecast(departure_wh, reserve_wh, capacity_wh, e)
            for name, e in energies.items()
        }
    )
    return energies, arrivals


def vehicle_model_entry(
    name: str, battery_wh: float, doc: Mapping[str, object], energies: Mapping[str, RouteEnergy]
) -> dict[str, object]:
    """The ``vehicle_model`` entry of a route document planned for another car: its name,
    battery [Wh] and, where the document has an exploring cost, that car's
    (``exploring_extra_wh``: its planned route's energy less its best guess's, the figure the
    route table prints; the document's own ``exploring_extra_wh`` is the state's vehicle's)."""
    entry: dict[str, object] = {"name": name, "battery_wh": battery_wh}
    if doc.get("exploring_extra_wh") is not None and "best guess" in energies:
        entry["exploring_extra_wh"] = round(
            energies["planned"].mean_wh - energies["best guess"].mean_wh, 1)
    return entry


def add_forecasts(
    routes_doc: Mapping[str, MutableMapping[str, object]],
    energies: Mapping[str, RouteEnergy],
    arrivals: Mapping[str, ArrivalForecast],
    *,
    other_car: bool,
) -> None:
    """Add :func:`route_forecasts`' figures to a route document's ``routes`` entries, as
    ``ev-nav route --json`` and ``POST /api/routes`` give them: ``vehicle_model_wh`` and
    ``vehicle_model_sd_wh`` [Wh] for another car (the latter one drive's spread, noise included,
    as :func:`route_energy` gives it; the model sd is the route's ``predicted_sd_wh``),
    ``arrival`` with a departure charge."""
    for name, entry in routes_doc.items():
        if other_car:
            entry["vehicle_model_wh"] = round(energies[name].mean_wh, 1)
            entry["vehicle_model_sd_wh"] = round(energies[name].sd_wh, 1)
        if name in arrivals:
            entry["arrival"] = arrivals[name].to_dict()
