"""Energy model against hand calculations (spec §3)."""

import math

import numpy as np
import pytest

from ev_nav.energy import Vehicle, get_vehicle, load_vehicle, segment_energy_wh
from ev_nav.errors import ConfigError

M, G, CR, CD, A, RHO = 1830.0, 9.82, 0.01, 0.35, 2.6, 1.2


def hand(length, v, grade, eta_p=0.98, eta_m=0.96):
    alpha = math.atan(grade)
    w = (
        M * G * length * math.sin(alpha)
        + M * G * CR * length * math.cos(alpha)
        + 0.5 * CD * A * RHO * length * v * v
    ) / 3600.0
    return w / eta_p if w > 0 else w * eta_m


def test_flat_road():
    # 1 km at 50 km/h: rolling 1830*9.82*0.01*1000 = 179,706 J; drag 0.5*0.35*2.6*1.2*1000*13.889^2
    v = 50 / 3.6
    rolling = 1830 * 9.82 * 0.01 * 1000
    drag = 0.5 * 0.35 * 2.6 * 1.2 * 1000 * v**2
    expected = (rolling + drag) / 3600 / 0.98
    got = segment_energy_wh(1000.0, v, 0.0)
    assert got == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(80.79, abs=0.01)  # (179,706 J + 105,327 J) / 3600 / 0.98


def test_uphill_five_percent():
    got = segment_energy_wh(500.0, 15.0, 0.05)
    assert got == pytest.approx(hand(500.0, 15.0, 0.05), rel=1e-12)
    assert got > segment_energy_wh(500.0, 15.0, 0.0)


def test_downhill_five_percent_recuperates_with_eta_minus():
    got = float(segment_energy_wh(500.0, 10.0, -0.05))
    alpha = math.atan(-0.05)
    mech = (
        M * G * 500 * math.sin(alpha)
        + M * G * CR * 500 * math.cos(alpha)
        + 0.5 * CD * A * RHO * 500 * 100
    ) / 3600
    assert mech < 0
    assert got == pytest.approx(mech * 0.96, rel=1e-12)  # battery receives W·η⁻


def test_vectorised_and_headwind():
    lengths = np.array([100.0, 200.0, 300.0])
    out = segment_energy_wh(lengths, 10.0, 0.0)
    assert out.shape == (3,)
    np.testing.assert_allclose(out, [hand(float(x), 10.0, 0.0) for x in lengths], rtol=1e-12)
    assert segment_energy_wh(100.0, 10.0, 0.0, headwind_mps=5.0) > out[0]


def test_vehicle_validation_and_files(tmp_path):
    with pytest.raises(ConfigError):
        Vehicle(mass_kg=-1)
    with pytest.raises(ConfigError):
        Vehicle(eta_traction=1.5)
    with pytest.raises(ConfigError):
        get_vehicle("spaceship")
    with pytest.raises(ConfigError):
        get_vehicle().replace(wings=2)
    f = tmp_path / "v.toml"
    f.write_text('preset = "sumo-default"\nmass_kg = 2000.0\n')
    assert load_vehicle(f).mass_kg == 2000.0
    f.write_text("mass_kg = = 3")
    with pytest.raises(ConfigError):
        load_vehicle(f)
