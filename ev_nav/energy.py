"""Deterministic per-segment energy model (spec §3, paper Eq. 8, Table 2).

The mechanical work to drive a segment of length ``ℓ`` [m] at constant speed ``v`` [m/s] up an
incline of angle ``α = atan(grade)`` is

    W = m g ℓ sin α + m g C_r ℓ cos α + ½ C_d A ρ ℓ v²        [J]

and the battery supplies ``W / η⁺`` when ``W > 0`` (traction) or receives ``|W| η⁻`` when
``W < 0`` (recuperation). Energies are returned in watt-hours (``W / 3600``).

Two terms the paper's model leaves out are added on top, each through a :class:`Vehicle` field
whose default (0) switches it off, so the presets reproduce the paper's numbers bit for bit:

* **auxiliary load** ``P_aux ℓ / v``: climate control, electronics and battery management draw
  power for as long as the car drives, whatever the road does;
* **stop-and-go** ``n ℓ · ½ m v² (1/η⁺ − η⁻)`` on urban segments (``v ≤ v_stop``): each of the
  ``n`` stops per km brakes the car from ``v`` (recovering ``η⁻`` of its kinetic energy) and
  accelerates it again (paying ``1/η⁺``). The EPA city cycle (FTP-75) has 23 stops in 11.04 mi
  (17.8 km), 1.3 stops per km; its highway cycle has none (fueleconomy.gov, "Detailed test
  information"). A steady drive at ``v_stop`` or faster has no such term.

The catalogue vehicles (:mod:`ev_nav.vehicles`) set both, and a drivetrain efficiency η⁺ and a
regeneration efficiency η⁻ from public figures; see ``docs/objective.md``.

Ambient temperature (optional, :class:`ClimateModel`): heating below ``t_heat_c`` and cooling
above ``t_cool_c`` draw a cabin power proportional to the degrees beyond the threshold for the
time the segment takes, and a cold battery (higher internal resistance) costs a share of the
traction energy per degree below ``t_heat_c``. The energy is linear in the coefficients of the
:func:`climate_basis` features, which is what lets the learners correct them from trips
(``docs/temperature.md``). Without a temperature nothing changes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import ConfigError, InvalidObservation, require_file

J_PER_WH = 3600.0

#: Plug types a vehicle can name (a charger is usable only with a matching connector): ``type1``
#: (SAE J1772 AC), ``type2`` (IEC 62196-2 AC), ``ccs1``/``ccs2`` (Combined Charging System DC on
#: type 1/2), ``chademo`` (DC), ``nacs`` (SAE J3400, Tesla's AC and DC plug).
CONNECTORS: tuple[str, ...] = ("type1", "type2", "ccs1", "ccs2", "chademo", "nacs")

#: Speed limit of an urban road [m/s] (50 km/h): the stop-and-go term acts at and below it.
URBAN_SPEED_MPS = 50.0 / 3.6


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
    aux_power_w : float
        Auxiliary electrical load while driving [W] (0: none, the paper's model).
    stops_per_km : float
        Stops per km on urban segments, each costing ``½ m v² (1/η⁺ − η⁻)`` (0: none).
    stop_speed_mps : float
        Segments at or below this speed [m/s] count as urban for ``stops_per_km``.
    connectors : tuple of str
        Plugs the car takes (names in :data:`CONNECTORS`); empty when unknown.
    ac_max_kw : float
        Largest AC charging power [kW] (0: unknown).
    dc_max_kw : float
        Largest DC charging power [kW] (0: unknown or none).
    charge_curve : tuple of (float, float)
        DC charging power over state of charge: ``(soc_pct, power_kw)`` points with strictly
        increasing ``soc_pct`` in 0..100, interpolated linearly (empty: unknown).
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
    aux_power_w: float = 0.0
    stops_per_km: float = 0.0
    stop_speed_mps: float = URBAN_SPEED_MPS
    connectors: tuple[str, ...] = ()
    ac_max_kw: float = 0.0
    dc_max_kw: float = 0.0
    charge_curve: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "name":
                if not isinstance(value, str):
                    raise ConfigError(f"vehicle name must be text, got {value!r}")
            elif f.name == "connectors":
                # frozen: a JSON/TOML list becomes the tuple the field holds (hashable, equal)
                object.__setattr__(self, f.name, _connectors(value))
            elif f.name == "charge_curve":
                object.__setattr__(self, f.name, _charge_curve(value))
            elif isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
                # a TOML string or boolean is a typo, not a number to convert
                raise ConfigError(f"vehicle parameter {f.name} must be a number, got {value!r}")
        positive = (
            "mass_kg", "frontal_area_m2", "gravity", "air_density", "battery_wh", "stop_speed_mps"
        )
        for field in positive:
            value = getattr(self, field)
            if not np.isfinite(value) or value <= 0:
                raise ConfigError(
                    f"vehicle parameter {field} must be a positive number, got {value}"
                )
        non_negative = (
            "rolling_coeff", "drag_coeff", "aux_power_w", "stops_per_km", "ac_max_kw", "dc_max_kw"
        )
        for field in non_negative:
            value = getattr(self, field)
            if not np.isfinite(value) or value < 0:
                raise ConfigError(f"vehicle parameter {field} must be >= 0, got {value}")
        if not 0 < self.eta_traction <= 1:
            raise ConfigError(f"eta_traction must be in (0, 1], got {self.eta_traction}")
        if not 0 <= self.eta_recuperation <= 1:
            raise ConfigError(f"eta_recuperation must be in [0, 1], got {self.eta_recuperation}")

    def charging_minutes(
        self, soc_from_pct: float, soc_to_pct: float, max_kw: float | None = None
    ) -> float:
        """Minutes to charge from one state of charge to another at a DC charger that delivers
        whatever the car's curve asks (:attr:`charge_curve`), or at most ``max_kw``.

        The battery gains ``dE = capacity · dSoC / 100`` at power ``P(SoC)``, so the time is
        ``∫ capacity / (100 · P(s)) ds`` over the SoC interval; with the curve linear between its
        points the integral is exact per piece (``ln`` of the power ratio, or ``ΔSoC / P`` where
        the power is flat). Outside the curve's SoC range the nearest end's power holds.

        Parameters
        ----------
        soc_from_pct, soc_to_pct : float
            States of charge [%] of the usable capacity, ``0 <= from <= to <= 100``.
        max_kw : float, optional
            The charger's power limit [kW]: the car draws ``min(P(s), max_kw)`` (still piecewise
            linear, with a breakpoint where the curve crosses the limit).

        Returns
        -------
        float
            Charging time [min] (0 when ``from == to``).

        Raises
        ------
        ConfigError
            If the vehicle has no charging curve, or the states of charge are out of order or
            outside 0..100.
        """
        lo, hi = float(soc_from_pct), float(soc_to_pct)
        if not (0.0 <= lo <= hi <= 100.0):
            raise ConfigError(
                f"charging needs 0 <= from <= to <= 100 % of charge, got {lo:g} % to {hi:g} %"
            )
        both = self.charging_minutes_from(lo, np.array([lo, hi]), max_kw)
        return float(both[1] - both[0])

    def charging_minutes_from(
        self, soc_from_pct: float, soc_to_pct: ArrayLike, max_kw: float | None = None
    ) -> NDArray[np.float64]:
        """Minutes to charge from ``soc_from_pct`` to each of ``soc_to_pct`` (vectorised form of
        :meth:`charging_minutes`, one integral for all targets: a charging-time table).

        Raises
        ------
        ConfigError
            If the vehicle has no charging curve, a target lies below the start or outside
            0..100, or ``max_kw`` is not a positive number.
        """
        if not self.charge_curve:
            raise ConfigError(f"vehicle {self.name} has no DC charging curve")
        lo = float(soc_from_pct)
        to = np.asarray(soc_to_pct, dtype=np.float64)
        if not (0.0 <= lo <= 100.0 and np.all(to >= lo) and np.all(to <= 100.0)):
            raise ConfigError(
                f"charging needs 0 <= from <= to <= 100 % of charge, got {lo:g} % to "
                f"{np.min(to) if to.size else lo:g}..{np.max(to) if to.size else lo:g} %"
            )
        soc = np.array([p[0] for p in self.charge_curve], dtype=np.float64)
        kw = np.array([p[1] for p in self.charge_curve], dtype=np.float64)
        if max_kw is not None:
            if not (np.isfinite(max_kw) and max_kw > 0):
                raise ConfigError(f"a charger's power must be a positive number, got {max_kw}")
            # where a curve piece crosses the limit, min(P, limit) has a corner: add it
            p0, p1 = kw[:-1], kw[1:]
            cross = (p0 - max_kw) * (p1 - max_kw) < 0
            at = soc[:-1][cross] + (max_kw - p0[cross]) * np.diff(soc)[cross] / (
                p1[cross] - p0[cross]
            )
            soc = np.concatenate([soc, at])
            order = np.argsort(soc, kind="stable")
            soc = soc[order]
            kw = np.minimum(np.concatenate([kw, np.full(at.size, max_kw)])[order], max_kw)
        # breakpoints from the start to the last target: the curve's own points and the targets
        top = float(to.max()) if to.size else lo
        s = np.unique(np.concatenate([[lo], to.reshape(-1), soc[(soc > lo) & (soc < top)]]))
        p = np.interp(s, soc, kw)  # flat beyond the ends
        ds, p0, p1 = np.diff(s), p[:-1], p[1:]
        flat = np.isclose(p0, p1, rtol=1e-12, atol=0.0)
        ratio = np.log(np.where(flat, 1.0, p1) / np.where(flat, 1.0, p0))
        slope = np.where(flat, 1.0, p1 - p0)
        # ∫ ds / P over a piece: Δs / P when flat, Δs · ln(P1/P0) / (P1 − P0) when linear
        pieces = np.where(flat, ds / p0, ds * ratio / slope)
        hours = self.battery_wh / 1000.0 / 100.0 * np.concatenate([[0.0], np.cumsum(pieces)])
        return 60.0 * hours[np.searchsorted(s, to)]  # kWh per % / kW → h → min

    def replace(self, **changes: Any) -> Vehicle:
        """A copy with some parameters changed (validated again)."""
        known = [f.name for f in dataclasses.fields(self)]
        unknown = set(changes) - set(known)
        if unknown:
            # the names are not guessable from the docs' symbols (η⁺ is eta_traction)
            raise ConfigError(
                f"unknown vehicle parameter(s): {', '.join(sorted(unknown))}; "
                f"known: {', '.join(known)}"
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of all parameters (for TOML/JSON)."""
        return dataclasses.asdict(self)


def _connectors(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"vehicle parameter connectors must be a list of names, got {value!r}")
    for c in value:
        if c not in CONNECTORS:
            raise ConfigError(
                f"unknown connector {c!r}; choose from: {', '.join(CONNECTORS)}"
            )
    return tuple(value)


def _charge_curve(value: object) -> tuple[tuple[float, float], ...]:
    """``[[soc_pct, kw], …]`` checked: numbers, SoC strictly increasing in 0..100, power > 0."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(
            f"vehicle parameter charge_curve must be [[soc_pct, kW], ...], got {value!r}"
        )
    points: list[tuple[float, float]] = []
    for point in value:
        if (
            not isinstance(point, list | tuple)
            or len(point) != 2
            or any(isinstance(x, bool) or not isinstance(x, numbers.Real) for x in point)
        ):
            raise ConfigError(f"charge_curve point must be [soc_pct, kW] numbers, got {point!r}")
        soc, kw = float(point[0]), float(point[1])
        if not (0.0 <= soc <= 100.0) or not (np.isfinite(kw) and kw > 0):
            raise ConfigError(
                f"charge_curve point needs 0 <= soc_pct <= 100 and kW > 0, got {list(point)}"
            )
        if points and soc <= points[-1][0]:
            raise ConfigError(
                f"charge_curve states of charge must increase, got {points[-1][0]:g} then {soc:g}"
            )
        points.append((soc, kw))
    return tuple(points)


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


@functools.cache
def catalogue_document() -> dict[str, Any]:
    """The vehicle catalogue file (``ev_nav/data/vehicles.json``) as read, once per process:
    ``{"sources": …, "vehicles": {name: {"params": {field: {"value", "source"}}, …}}}``.
    :mod:`ev_nav.vehicles` presents it; :func:`get_vehicle` builds its cars."""
    from importlib import resources  # here: most commands never read the catalogue

    text = resources.files("ev_nav").joinpath("data", "vehicles.json").read_text("utf-8")
    return json.loads(text)


def require_vehicle(vehicle: object, what: str, *, optional: bool = True) -> Vehicle:
    """``vehicle`` if it is a :class:`Vehicle` (None, where ``optional``: the paper's default
    EV), else a TypeError naming ``what`` (the function) and, for a name, how to look it up: a
    catalogue name where a Vehicle belongs failed deep inside on a missing attribute."""
    if vehicle is None and optional:
        return Vehicle()
    if isinstance(vehicle, Vehicle):
        return vehicle
    hint = (f" {vehicle[:60]!r}: look it up first (ev_nav.get_vehicle({vehicle[:60]!r}))"
            if isinstance(vehicle, str) else "")
    raise TypeError(f"{what} takes a Vehicle, got {type(vehicle).__name__}{hint}")


def get_vehicle(preset: str = "sumo-default") -> Vehicle:
    """Look up a vehicle by name: a preset (:data:`VEHICLE_PRESETS`) or a catalogue model
    (:func:`ev_nav.vehicles.catalogue`; ``ev-nav vehicles`` lists them)."""
    if preset in VEHICLE_PRESETS:
        return VEHICLE_PRESETS[preset]
    models = catalogue_document()["vehicles"]
    if preset in models:
        params = models[preset]["params"]
        return Vehicle(name=preset, **{k: p["value"] for k, p in params.items()})
    names = ", ".join([*sorted(VEHICLE_PRESETS), *models])
    raise ConfigError(f"unknown vehicle {preset!r}; choose one of: {names}")


def load_vehicle(path: str | Path) -> Vehicle:
    """Read a vehicle from a TOML file: optional ``preset = "..."`` (a preset or catalogue
    model) plus parameter overrides, e.g. ``aux_power_w = 400`` or
    ``charge_curve = [[0, 120], [80, 50], [100, 10]]``. A file that overrides any parameter
    names the car after itself (``my-car.toml``: ``my-car``) unless it gives ``name``."""
    import tomllib  # here: only a vehicle file is TOML

    p = require_file(path, "vehicle file")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"vehicle file {p} is not valid TOML: {exc}") from None
    known = [f.name for f in dataclasses.fields(Vehicle)]
    unknown = sorted(set(data) - {"preset", *known})
    if unknown:
        # Vehicle.replace's list lacked 'preset', the one key a file has beyond the parameters
        raise ConfigError(
            f"unknown key(s) in vehicle file {p}: {', '.join(unknown)}; known: "
            f"{', '.join(known)}, and preset (the preset or catalogue model the file starts from)"
        )
    base = get_vehicle(str(data.pop("preset", "sumo-default")))
    if data and "name" not in data:
        # a car of one's own is not the preset it starts from: it was stored, and named by init,
        # 'route' and the charging notes, as "sumo-default" with another mass and plugs
        data["name"] = p.stem
    vehicle = base.replace(**data)
    check_road_vehicle(vehicle, f"vehicle file {p}")
    return vehicle


#: The range [low, high] of each parameter a road vehicle can have, generous (a lorry's mass,
#: a megawatt charger, a mountain pass's thin air): a value outside is a typo or a unit slip
#: (kg for t, W for kW), which :func:`check_road_vehicle` refuses before it turns forecasts
#: into nonsense (a mass of 1e12 kg forecast 1.9e11 Wh and an arrival charge of -7e8 %).
ROAD_VEHICLE_RANGES: dict[str, tuple[float, float]] = {
    "mass_kg": (50.0, 100_000.0),
    "rolling_coeff": (0.0, 0.2),
    "frontal_area_m2": (0.2, 20.0),
    "drag_coeff": (0.0, 3.0),
    "gravity": (9.5, 10.0),  # on Earth 9.76-9.83 m/s²
    "air_density": (0.3, 2.0),  # kg/m³: 0.7 at 5,000 m, 1.5 at -40 °C
    "battery_wh": (100.0, 5_000_000.0),
    "aux_power_w": (0.0, 100_000.0),
    "stops_per_km": (0.0, 50.0),
    "stop_speed_mps": (0.5, 70.0),
    "ac_max_kw": (0.0, 100.0),
    "dc_max_kw": (0.0, 5_000.0),
}


def check_road_vehicle(vehicle: Vehicle, source: str = "vehicle") -> None:
    """Refuse a vehicle no road vehicle can be (:data:`ROAD_VEHICLE_RANGES`, a charge curve
    above the fastest charger, an empty name), naming the parameter and ``source``.

    Applied where a user describes a car (a vehicle file); :class:`Vehicle` itself keeps to
    sign and finiteness, so a state written by an earlier version always opens.

    Raises
    ------
    ConfigError
        For the first parameter outside its range.
    """
    if not vehicle.name.strip():
        raise ConfigError(f"{source}: the vehicle's name is empty; give it a name")
    for field, (low, high) in ROAD_VEHICLE_RANGES.items():
        value = float(getattr(vehicle, field))
        if not low <= value <= high:
            raise ConfigError(
                f"{source}: {field} = {value:g} is outside what a road vehicle can have "
                f"({low:g} to {high:g}); check the value and its unit"
            )
    top = ROAD_VEHICLE_RANGES["dc_max_kw"][1]
    fast = [kw for _, kw in vehicle.charge_curve if kw > top]
    if fast:
        raise ConfigError(f"{source}: charge_curve power {fast[0]:g} kW is above any charger "
                          f"({top:g} kW); give kW")


#: Lowest and highest ambient temperature [°C] a trip may carry (beyond the records of inhabited
#: places: a value outside is a unit or typing error).
TEMPERATURE_RANGE_C = (-60.0, 60.0)


@dataclass(frozen=True)
class ClimateModel:
    """The physics model's temperature terms (the prior the learners start from).

    ``E(T) = E + P_heat·h_T·t + P_cool·c_T·t + b·h_T·E⁺`` per segment, with the heating degrees
    ``h_T = max(0, t_heat_c − T)``, cooling degrees ``c_T = max(0, T − t_cool_c)`` [K], the
    travel time ``t`` [h] and the traction energy ``E⁺ = max(E, 0)`` [Wh].

    Defaults are round figures of the right size, not a fit: a resistive cabin heater drawing
    about 2.5 kW at −7 °C (100 W/K below 18 °C), air conditioning about 0.5 kW at 34 °C (50 W/K
    above 24 °C), and 0.5 % more traction energy per kelvin below 18 °C for a cold battery. The
    learners treat each coefficient as unknown with a Gaussian prior of relative standard
    deviation ``coefficient_sd`` around these values (``docs/temperature.md``).

    How heating and the battery grow in the cold is not known to be linear, so the learners
    also get *shape* features: for each knot ``k`` of ``shape_knots_c`` the degrees below it,
    ``max(0, k − T)``, times the travel time and times the traction energy, with coefficients of
    prior mean 0 (the physics above) and the prior spread of the heating and battery
    coefficients. Together the features make piecewise-linear heating-power and battery curves
    with kinks at ``t_heat_c`` and the knots; the physics energy uses only the first three.

    Attributes
    ----------
    t_heat_c, t_cool_c : float
        Thresholds [°C] below which the car heats (and the battery is cold) and above which it
        cools.
    heat_w_per_k, cool_w_per_k : float
        Cabin power [W] per kelvin below ``t_heat_c`` / above ``t_cool_c``.
    battery_per_k : float
        Extra share of the traction energy [1/K] per kelvin below ``t_heat_c``.
    coefficient_sd : float
        Prior standard deviation of each coefficient, relative to its value.
    shape_knots_c : tuple of float
        Knots [°C] of the learners' shape features (empty: the three physics features only).
    """

    t_heat_c: float = 18.0
    t_cool_c: float = 24.0
    heat_w_per_k: float = 100.0
    cool_w_per_k: float = 50.0
    battery_per_k: float = 0.005
    coefficient_sd: float = 1.0
    shape_knots_c: tuple[float, ...] = (24.0, 8.0)

    def __post_init__(self) -> None:
        for name in ("t_heat_c", "t_cool_c", "heat_w_per_k", "cool_w_per_k", "battery_per_k",
                     "coefficient_sd"):
            value = getattr(self, name)
            if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
                raise ConfigError(f"climate parameter {name} must be a number, got {value!r}")
        knots = self.shape_knots_c
        if isinstance(knots, str | bytes) or not all(
            isinstance(k, numbers.Real) and not isinstance(k, bool | np.bool_) for k in knots
        ):
            raise ConfigError(f"climate shape knots must be numbers [°C], got {knots!r}")
        object.__setattr__(self, "shape_knots_c", tuple(float(k) for k in self.shape_knots_c))
        if not all(np.isfinite(k) for k in self.shape_knots_c):
            raise ConfigError(f"climate shape knots must be finite, got {self.shape_knots_c}")
        for name in ("heat_w_per_k", "cool_w_per_k", "battery_per_k", "coefficient_sd"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ConfigError(f"climate parameter {name} must be a positive number, "
                                  f"got {value}")
        if not (np.isfinite(self.t_heat_c) and np.isfinite(self.t_cool_c)
                and self.t_heat_c <= self.t_cool_c):
            raise ConfigError(
                f"climate thresholds need t_heat_c <= t_cool_c, got {self.t_heat_c} and "
                f"{self.t_cool_c}"
            )

    @property
    def coefficients(self) -> NDArray[np.float64]:
        """``[heat_w_per_k, cool_w_per_k, battery_per_k, 0, 0, …]``: the physics weights of
        :func:`climate_basis`'s columns (the shape features' are 0)."""
        base = [self.heat_w_per_k, self.cool_w_per_k, self.battery_per_k]
        return np.array(base + [0.0, 0.0] * len(self.shape_knots_c))

    @property
    def scales(self) -> NDArray[np.float64]:
        """Each coefficient's typical size (its prior sd is ``coefficient_sd`` times it): the
        physics values, and for each knot the heating and battery ones."""
        base = [self.heat_w_per_k, self.cool_w_per_k, self.battery_per_k]
        return np.array(base + [self.heat_w_per_k, self.battery_per_k] * len(self.shape_knots_c))


def check_temperature(temperature_c: ArrayLike, n: int | None = None) -> NDArray[np.float64]:
    """Ambient temperature(s) [°C] as a float array (a scalar broadcast to ``n`` values).

    Raises
    ------
    InvalidObservation
        If a value is not a finite number within :data:`TEMPERATURE_RANGE_C`, or the array does
        not have one value per reading.
    """
    try:
        t = np.asarray(temperature_c, dtype=np.float64)
    except (TypeError, ValueError):
        msg = f"temperature must be a number [°C], got {temperature_c!r}"
        raise InvalidObservation(msg) from None
    lo, hi = TEMPERATURE_RANGE_C
    if not (np.all(np.isfinite(t)) and np.all(t >= lo) and np.all(t <= hi)):
        raise InvalidObservation(
            f"temperature must be a number of degrees Celsius in {lo:g}..{hi:g}, got "
            f"{temperature_c!r}"
        )
    if n is not None:
        if t.ndim == 0:
            t = np.full(n, float(t))
        elif t.shape != (n,):
            raise InvalidObservation(
                f"{n} readings but temperatures of shape {t.shape}: one temperature per trip "
                "or per reading"
            )
    return t


def climate_basis(
    temperature_c: ArrayLike,
    hours: ArrayLike,
    traction_wh: ArrayLike,
    climate: ClimateModel | None = None,
) -> NDArray[np.float64]:
    """The temperature features of readings, shape ``(k, 3 + 2·knots)``: heating degrees ×
    hours [K·h], cooling degrees × hours [K·h], heating degrees × traction energy [K·Wh], then
    per shape knot the degrees below it × hours and × traction energy (:class:`ClimateModel`);
    their product with ``climate.coefficients`` is the physics model's extra energy [Wh].
    ``temperature_c``, ``hours`` (travel time) and ``traction_wh`` broadcast together."""
    c = climate or ClimateModel()
    t = np.asarray(temperature_c, dtype=np.float64)
    heat = np.maximum(c.t_heat_c - t, 0.0)
    cool = np.maximum(t - c.t_cool_c, 0.0)
    hours_a = np.asarray(hours, dtype=np.float64)
    trac = np.asarray(traction_wh, dtype=np.float64)
    cols = [heat * hours_a, cool * hours_a, heat * trac]
    for knot in c.shape_knots_c:
        below = np.maximum(knot - t, 0.0)
        cols += [below * hours_a, below * trac]
    return np.stack(np.broadcast_arrays(*cols), axis=-1).reshape(-1, len(cols))


def segment_energy_wh(
    length_m: ArrayLike,
    speed_mps: ArrayLike,
    grade: ArrayLike,
    vehicle: Vehicle | None = None,
    *,
    headwind_mps: ArrayLike = 0.0,
    temperature_c: float | None = None,
    climate: ClimateModel | None = None,
) -> NDArray[np.float64]:
    """Battery energy to drive each segment (Eq. 8 with η⁺/η⁻, plus the vehicle's auxiliary
    load and urban stop-and-go terms when it sets them; module docstring), vectorised.

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
    temperature_c : float, optional
        Ambient temperature [°C]: adds the cabin climate and cold-battery terms of ``climate``
        (:class:`ClimateModel`; its defaults when omitted). None: no temperature terms.
    climate : ClimateModel, optional
        The temperature model (used only with ``temperature_c``).

    Returns
    -------
    numpy.ndarray
        Energy drawn from the battery [Wh] per segment; negative values are energy recovered.
    """
    veh = require_vehicle(vehicle, "segment_energy_wh")
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
    battery_wh = np.where(mech_wh > 0, mech_wh / veh.eta_traction, mech_wh * veh.eta_recuperation)
    # the two terms below are skipped at their defaults so the paper's presets stay bit-exact
    if veh.aux_power_w:
        hours = np.divide(length, speed, out=np.zeros(np.broadcast(length, speed).shape),
                          where=speed > 0) / 3600.0
        battery_wh = battery_wh + veh.aux_power_w * hours
    if veh.stops_per_km:
        # each stop: braking returns η⁻ of ½ m v², pulling away costs ½ m v² / η⁺
        per_stop_wh = (
            0.5 * veh.mass_kg * speed * speed / J_PER_WH
            * (1.0 / veh.eta_traction - veh.eta_recuperation)
        )
        # tolerance: a 50 km/h limit converted to m/s another way must still count as urban
        urban = speed <= veh.stop_speed_mps * (1.0 + 1e-9)
        battery_wh = battery_wh + np.where(
            urban, veh.stops_per_km * length / 1000.0 * per_stop_wh, 0.0
        )
    if temperature_c is not None:
        t = check_temperature(temperature_c)
        hours = np.divide(length, speed, out=np.zeros(np.broadcast(length, speed).shape),
                          where=speed > 0) / 3600.0
        basis = climate_basis(t, hours, np.maximum(battery_wh, 0.0), climate)
        extra = basis @ (climate or ClimateModel()).coefficients
        battery_wh = battery_wh + extra.reshape(np.shape(battery_wh))
    return battery_wh
