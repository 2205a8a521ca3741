"""The simulated world's ambient temperature: a seasonal cycle and its effect on consumption.

The effect is fixed from published measurements before anything is measured against it
(``docs/temperature.md``), and its form differs on purpose from the learners' physics prior
(:class:`ev_nav.energy.ClimateModel`: linear in degrees beyond 18 °C / 24 °C), so a learner has
something to learn.

Source: AAA, "AAA Electric Vehicle Range Testing" (AAA Automotive Research Center, February
2019), five EVs on a dynamometer against their range at 75 °F (23.9 °C): at 20 °F (−6.7 °C) the
range fell 12 % with climate control off and 41 % with the heater on; at 95 °F (35 °C) 4 % off
and 17 % with air conditioning on. A range loss ``x`` is a consumption factor ``1/(1 − x)``:

* battery and drivetrain alone (climate control off): ×1.136 at −6.7 °C, ×1.042 at 35 °C —
  here a factor on each segment's traction energy, growing with the square of the degrees
  below 23.9 °C (internal resistance rises ever faster in the cold) and linearly above;
* climate control: the rest, +0.559 (cold) and +0.163 (hot) of the consumption on the test
  drive. It is cabin power, so it acts per hour driven: power laws in the degrees from 23.9 °C
  (exponents 1.3 and 1.5: heating starts gently) times each segment's travel time, scaled so
  that on a reference drive — the EPA city cycle's mean speed, 34.1 km/h (fueleconomy.gov), on
  the flat — the simulated car's consumption changes by exactly AAA's percentages. (The
  paper's default car uses about 65 Wh/km there, less than the tested cars, so its heater
  draws 1.2 kW at −6.7 °C rather than the 2–3 kW of a car using 150–200 Wh/km: the
  percentages, which are what AAA measured, carry over.)
"""

from __future__ import annotations

import math
import zlib

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.energy import Vehicle, segment_energy_wh
from ev_nav.roads.network import RoadNetwork

#: AAA's reference temperature [°C] (75 °F): no climate effect.
REFERENCE_C = 23.9
#: AAA's cold and hot test temperatures [°C] (20 °F, 95 °F).
COLD_C, HOT_C = -6.7, 35.0
#: Cabin energy at the cold and hot test temperatures, as a share of the drive's consumption.
HEAT_SHARE_AT_COLD = 1.0 / 0.59 - 1.0 / 0.88
COOL_SHARE_AT_HOT = 1.0 / 0.83 - 1.0 / 0.96
#: Extra traction energy [share] at the cold and hot test temperatures, climate control off.
BATTERY_COLD = 1.0 / 0.88 - 1.0
BATTERY_HOT = 1.0 / 0.96 - 1.0
#: Speed of the reference drive [km/h]: the EPA city cycle's mean (FTP-75).
REFERENCE_KMH = 34.1


def reference_power_w(vehicle: Vehicle | None = None) -> float:
    """The car's mean battery power [W] on the reference drive: its consumption on a flat
    kilometre at :data:`REFERENCE_KMH`, times that speed."""
    wh_per_km = float(segment_energy_wh(1000.0, REFERENCE_KMH / 3.6, 0.0, vehicle))
    return wh_per_km * REFERENCE_KMH


def cabin_power_w(
    temperature_c: ArrayLike, vehicle: Vehicle | None = None
) -> NDArray[np.float64]:
    """The world's climate-control power [W] at ``temperature_c`` for ``vehicle`` (module
    doc)."""
    t = np.asarray(temperature_c, dtype=np.float64)
    cold = np.maximum(REFERENCE_C - t, 0.0) / (REFERENCE_C - COLD_C)
    hot = np.maximum(t - REFERENCE_C, 0.0) / (HOT_C - REFERENCE_C)
    share = HEAT_SHARE_AT_COLD * cold**1.3 + COOL_SHARE_AT_HOT * hot**1.5
    return reference_power_w(vehicle) * share


def battery_factor(temperature_c: ArrayLike) -> NDArray[np.float64]:
    """The world's extra share of traction energy at ``temperature_c`` (module doc)."""
    t = np.asarray(temperature_c, dtype=np.float64)
    cold = np.maximum(REFERENCE_C - t, 0.0) / (REFERENCE_C - COLD_C)
    hot = np.maximum(t - REFERENCE_C, 0.0) / (HOT_C - REFERENCE_C)
    return BATTERY_COLD * cold**2 + BATTERY_HOT * hot


def energy_at(
    net: RoadNetwork,
    energy_wh: NDArray[np.float64],
    temperature_c: float,
    vehicle: Vehicle | None = None,
) -> NDArray[np.float64]:
    """Segment energies [Wh] of ``vehicle`` at ``temperature_c`` from the world's energies at
    the reference temperature: ``E + battery·max(E, 0) + P_cabin·t``. Only adds energy, so a
    feasible node potential of ``energy_wh`` stays feasible."""
    hours = net.travel_time_s / 3600.0
    return (energy_wh + float(battery_factor(temperature_c)) * np.maximum(energy_wh, 0.0)
            + float(cabin_power_w(temperature_c, vehicle)) * hours)


def seasonal_temperature(
    t: int,
    *,
    mean_c: float,
    amplitude_c: float,
    period: int,
    noise_c: float,
    seed: int,
) -> float:
    """Ambient temperature [°C] of round (or trip) ``t``: ``mean − amplitude·cos(2π t/period)``
    (round 0 the coldest) plus the weather, a normal deviation of sd ``noise_c`` drawn from a
    generator seeded by ``(seed, t)`` alone (the same whatever else is drawn, and on resume)."""
    rng = np.random.default_rng(zlib.crc32(repr(("temperature", seed, t)).encode()))
    season = mean_c - amplitude_c * math.cos(2.0 * math.pi * t / period)
    return float(season + noise_c * rng.standard_normal())
