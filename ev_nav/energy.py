"""Deterministic per-segment energy model (spec §3, paper Eq. 8, Table 2).

The mechanical work to drive a segment of length ``ℓ`` [m] at constant speed ``v`` [m/s] up an
incline of angle ``α = atan(grade)`` is

    W = m g ℓ sin α + m g C_r ℓ cos α + ½ C_d A ρ ℓ v²        [J]

and the battery supplies ``W / η⁺`` when ``W > 0`` (traction) or receives ``|W| η⁻`` when
``W < 0`` (recuperation). Energies are returned in watt-hours (``W / 3600``).
"""

from __future__ import annotations

import dataclasses
import numbers
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import ConfigError, NetworkFileNotFound

J_PER_WH = 3600.0


@dataclass(frozen=True)
class Vehicle:
    """Physical parameters of an electric vehicle (SI units).

    Defaults are SUMO's default electric vehicle as used in the paper (Table 2).

    Attributes
    ----------
    name : str
        Preset name, for display.
    mass_kg : float
        Vehicle mass including driver [kg].
    rolling_coeff : float
        Rolling-resistance coefficient C_r [-].
    frontal_area_m2 : float
        Frontal area A [m²].
    drag_coeff : float
        Aerodynamic drag coefficient C_d [-].
    eta_traction : float
        Drive-train efficiency η⁺ when the battery powers the motor, in (0, 1].
    eta_recuperation : float
        Recuperation efficiency η⁻ when braking energy returns to the battery, in [0, 1].
    gravity : float
        Gravitational acceleration g [m/s²] (the paper uses 9.82).
    air_density : float
        Air density ρ [kg/m³].
    battery_wh : float
        Usable battery capacity [Wh] (not in Table 2; used for reserve calculations).
    """

    name: str = "sumo-default"
    mass_kg: float = 1830.0
    rolling_coeff: float = 0.01
    frontal_area_m2: float = 2.6
    drag_coeff: float = 0.35
    eta_traction: float = 0.98
    eta_recuperation: float = 0.96
    gravity: float = 9.82
    air_density: float = 1.2
    battery_wh: float = 35_000.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "name":
                if not isinstance(value, str):
                    raise ConfigError(f"vehicle name must be text, got {value!r}")
            elif isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
                # a TOML string or boolean is a typo, not a number to convert
                raise ConfigError(f"vehicle parameter {f.name} must be a number, got {value!r}")
        positive = ("mass_kg", "frontal_area_m2", "gravity", "air_density", "battery_wh")
        for field in positive:
            value = getattr(self, field)
            if not np.isfinite(value) or value <= 0:
                raise ConfigError(
                    f"vehicle parameter {field} must be a positive number, got {value}"
                )
        for field in ("rolling_coeff", "drag_coeff"):
            value = getattr(self, field)
            if not np.isfinite(value) or value < 0:
                raise ConfigError(f"vehicle parameter {field} must be >= 0, got {value}")
        if not 0 < self.eta_traction <= 1:
            raise ConfigError(f"eta_traction must be in (0, 1], got {self.eta_traction}")
        if not 0 <= self.eta_recuperation <= 1:
            raise ConfigError(f"eta_recuperation must be in [0, 1], got {self.eta_recuperation}")

    def replace(self, **changes: Any) -> Vehicle:
        """A copy with some parameters changed (validated again)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown vehicle parameter(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of all parameters (for TOML/JSON)."""
        return dataclasses.asdict(self)


#: Built-in presets. ``sumo-default`` is the paper's vehicle.
VEHICLE_PRESETS: dict[str, Vehicle] = {
    "sumo-default": Vehicle(),
    # A heavier van-like EV, for users comparing vehicles (illustrative values).
    "van": Vehicle(
        name="van",
        mass_kg=2600.0,
        rolling_coeff=0.012,
        frontal_area_m2=4.0,
        drag_coeff=0.38,
        battery_wh=75_000.0,
    ),
}


def get_vehicle(preset: str = "sumo-default") -> Vehicle:
    """Look up a vehicle preset by name."""
    try:
        return VEHICLE_PRESETS[preset]
    except KeyError:
        names = ", ".join(sorted(VEHICLE_PRESETS))
        raise ConfigError(f"unknown vehicle preset {preset!r}; choose one of: {names}") from None


def load_vehicle(path: str | Path) -> Vehicle:
    """Read a vehicle from a TOML file: optional ``preset = "..."`` plus parameter overrides."""
    p = Path(path)
    if not p.is_file():
        raise NetworkFileNotFound(f"vehicle file not found: {p}")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"vehicle file {p} is not valid TOML: {exc}") from None
    base = get_vehicle(str(data.pop("preset", "sumo-default")))
    return base.replace(**data)


def segment_energy_wh(
    length_m: ArrayLike,
    speed_mps: ArrayLike,
    grade: ArrayLike,
    vehicle: Vehicle | None = None,
    *,
    headwind_mps: ArrayLike = 0.0,
) -> NDArray[np.float64]:
    """Battery energy to drive each segment (Eq. 8 with η⁺/η⁻), vectorised.

    Parameters
    ----------
    length_m : array_like
        Segment lengths [m].
    speed_mps : array_like
        Driving speeds [m/s].
    grade : array_like
        Rise over run [-] (0.05 = 5 % uphill; negative downhill).
    vehicle : Vehicle, optional
        Vehicle parameters; the paper's default EV when omitted.
    headwind_mps : array_like, optional
        Head-wind speed [m/s] added to the air speed (negative = tail wind).

    Returns
    -------
    numpy.ndarray
        Energy drawn from the battery [Wh] per segment; negative values are energy recovered.
    """
    veh = vehicle or Vehicle()
    length = np.asarray(length_m, dtype=np.float64)
    speed = np.asarray(speed_mps, dtype=np.float64)
    g = np.asarray(grade, dtype=np.float64)
    air = speed + np.asarray(headwind_mps, dtype=np.float64)
    alpha = np.arctan(g)
    weight = veh.mass_kg * veh.gravity
    work_j = (
        weight * length * np.sin(alpha)
        + weight * veh.rolling_coeff * length * np.cos(alpha)
        + 0.5 * veh.drag_coeff * veh.frontal_area_m2 * veh.air_density * length * air * np.abs(air)
    )
    mech_wh = work_j / J_PER_WH
    return np.where(mech_wh > 0, mech_wh / veh.eta_traction, mech_wh * veh.eta_recuperation)
