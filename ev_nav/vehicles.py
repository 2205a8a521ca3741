"""The vehicle catalogue: current EV models as data, every value with its public source.

The catalogue ships as ``ev_nav/data/vehicles.json``, built by ``scripts/import_vehicles.py``
from Open EV Data (KilowattApp, MIT with attribution: battery, charging, plugs), the Open EV
Data Dataset (CDLA-Permissive-2.0: weights, dimensions) and TBTP fixed-speed consumption tests
(MIT), plus the cited fills in ``scripts/vehicle_fills.toml`` (drag coefficients, drivetrain
figures). ``ev-nav vehicles`` lists it; :func:`ev_nav.energy.get_vehicle` and
``ev-nav init --vehicle NAME`` accept its names beside the presets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ev_nav.energy import Vehicle, catalogue_document, get_vehicle, segment_energy_wh
from ev_nav.errors import ConfigError

__all__ = [
    "CatalogueVehicle", "catalogue", "catalogue_rows", "catalogue_vehicle", "steady_wh_per_km"
]

#: Speed of the catalogue's reference consumption [km/h] (a steady drive on a flat road).
REFERENCE_KMH = 100.0


@dataclass(frozen=True)
class CatalogueVehicle:
    """One catalogue model: its physics and where each value comes from.

    Attributes
    ----------
    vehicle : Vehicle
        The parameters the energy model uses (``vehicle.name`` is the catalogue name).
    label : str
        Make and model for display.
    market : str
        Where this variant is sold (``EU``, ``US``): decides its plugs.
    sources : dict of str to str
        Each parameter's source.
    reference_low_wh_per_km, reference_high_wh_per_km : float
        The range the sources state for its consumption at a steady 100 km/h on a flat road.
    reference_source : str
        Where that range comes from.
    """

    vehicle: Vehicle
    label: str
    market: str
    sources: dict[str, str]
    reference_low_wh_per_km: float
    reference_high_wh_per_km: float
    reference_source: str


def steady_wh_per_km(vehicle: Vehicle, speed_kmh: float = REFERENCE_KMH) -> float:
    """Battery energy per km [Wh/km] at a steady speed on a flat, windless road, from the same
    physics as every segment (:func:`ev_nav.energy.segment_energy_wh`)."""
    return float(segment_energy_wh(1000.0, speed_kmh / 3.6, 0.0, vehicle))


def _entry(name: str, doc: dict[str, Any]) -> CatalogueVehicle:
    params = doc["params"]
    ref = doc["reference_100kmh"]
    return CatalogueVehicle(
        vehicle=get_vehicle(name),
        label=str(doc["label"]),
        market=str(doc["market"]),
        sources={k: str(p["source"]) for k, p in params.items()},
        reference_low_wh_per_km=float(ref["low_wh_per_km"]),
        reference_high_wh_per_km=float(ref["high_wh_per_km"]),
        reference_source=str(ref["source"]),
    )


def catalogue() -> dict[str, CatalogueVehicle]:
    """Every catalogue model by name, in the file's (alphabetical) order."""
    return {name: _entry(name, v) for name, v in catalogue_document()["vehicles"].items()}


def catalogue_vehicle(name: str) -> CatalogueVehicle:
    """The catalogue model ``name``.

    Raises
    ------
    ConfigError
        If there is no such model (the message lists the valid names).
    """
    models = catalogue()
    try:
        return models[name]
    except KeyError:
        raise ConfigError(
            f"unknown catalogue vehicle {name!r}; choose one of: {', '.join(models)}"
        ) from None


#: How a charging curve's source says it is the dataset's default shape, not the car's own.
GENERIC_CURVE = "generic default shape"


def catalogue_rows() -> list[dict[str, object]]:
    """The rows ``ev-nav vehicles`` prints: name, label, battery, plugs, charging, Wh/km."""
    rows = []
    for name, c in catalogue().items():
        v = c.vehicle
        rows.append({
            "name": name,
            "label": c.label,
            "battery_kwh": round(v.battery_wh / 1000.0, 1),
            "connectors": list(v.connectors),
            "dc_max_kw": v.dc_max_kw,
            "ac_max_kw": v.ac_max_kw,
            "wh_per_km_100kmh": round(steady_wh_per_km(v), 1),
            "reference_wh_per_km": [c.reference_low_wh_per_km, c.reference_high_wh_per_km],
            # 10 -> 80 % at a charger of the car's full DC power: what a stop plan charges at
            "charge_10_80_min": round(v.charging_minutes(10, 80), 1),
            # the source's placeholder curve (Open EV Data's default shape): such a car's
            # charging times are rough (the i4's 10-80 % is about half the maker's 31 min)
            "generic_curve": GENERIC_CURVE in c.sources.get("charge_curve", ""),
        })
    return rows
