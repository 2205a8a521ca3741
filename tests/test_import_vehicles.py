"""scripts/import_vehicles.py on miniature copies of the three datasets: what it imports from
each, the fills it adds, the plugs per market and the reference band it derives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ev_nav.energy import Vehicle

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "import_vehicles.py"

FILLS = """
[common.rolling_coeff]
value = 0.009
source = "tyre label"
[common.eta_traction]
value = 0.85
source = "drive loss"
[common.eta_recuperation]
value = 0.7
source = "twice"
[common.aux_power_w]
value = 300.0
source = "accessories"
[common.stops_per_km]
value = 1.3
source = "FTP-75"
[common.driver_kg]
value = 75.0
source = "driver"
[common.frontal_area_factor]
value = 0.85
source = "estimate"

[reference.tbtp_pairs]
"a.md" = "kw-a"
"b.md" = "kw-b"

[vehicles.eu-car]
label = "EU car"
market = "EU"
kilowatt = "kw-eu"
oed = "src/make/eu/2024/eu_long.json"
drag_coeff = { value = 0.27, source = "maker" }

[vehicles.us-car]
label = "US car"
market = "US"
kilowatt = "kw-us"
oed = "src/make/us/2024/us.json"
drag_coeff = { value = 0.3, source = "maker" }
frontal_area_m2 = { value = 2.46, source = "maker's area" }
reference_tbtp = "a.md"
"""


def _kw(mid: str, avg: float, ports_dc: list[str], ports_ac: list[str]) -> dict:
    return {
        "id": mid, "brand": "Make", "model": mid, "variant": "", "release_year": 2024,
        "usable_battery_size": 60.0,
        "ac_charger": {"usable_phases": 3, "ports": ports_ac, "max_power": 11},
        "dc_charger": {"ports": ports_dc, "max_power": 150, "is_default_charging_curve": False,
                       "charging_curve": [{"percentage": 0, "power": 150},
                                          {"percentage": 80, "power": 50},
                                          {"percentage": 100, "power": 10}]},
        "energy_consumption": {"average_consumption": avg},
    }


def _write(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc, encoding="utf-8")


@pytest.fixture
def datasets(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    kw, oed, tbtp = tmp_path / "kw", tmp_path / "oed", tmp_path / "tbtp"
    models = [_kw("kw-a", 16.0, ["ccs"], ["type2"]), _kw("kw-b", 20.0, ["ccs"], ["type2"]),
              _kw("kw-eu", 15.0, ["ccs"], ["type2"]), _kw("kw-us", 12.0, ["ccs"], ["type1"])]
    _write(kw / "data" / "v2" / "models" / "make.json", {"models": models})
    # the layered OED records: model base, year file, variant file (variant wins, objects merge)
    _write(oed / "src/make/eu/base.json", {"body": {"drag_coefficient_cd": 0.5},
                                          "dimensions": {"width_mm": 1800, "height_mm": 1500}})
    _write(oed / "src/make/eu/2024/eu.json", {"weights": {"curb_weight_kg": 1700}})
    _write(oed / "src/make/eu/2024/eu_long.json", {"weights": {"curb_weight_kg": 1800},
                                                   "dimensions": {"height_mm": 1600}})
    _write(oed / "src/make/us/base.json", {})
    _write(oed / "src/make/us/2024/us.json", {
        "weights": {"curb_weight_kg": 1600}, "dimensions": {"width_mm": 1750, "height_mm": 1550},
        "charge_ports": [{"kind": "combo", "connector": "ccs1"}]})
    # TBTP front matter: a = 128/192 Wh/km against 160 (0.8, 1.2); b = 170/- against 200 (0.85)
    _write(tbtp / "_tested_cars/a.md", "---\nsummer_consumption_90kmh_wh-km: 128\n"
           "summer_consumption_120kmh_wh-km: 192\n---\n")
    _write(tbtp / "_tested_cars/b.md", "---\nsummer_consumption_90kmh_wh-km: 170\n"
           "summer_consumption_120kmh_wh-km: \n---\n")
    fills = tmp_path / "fills.toml"
    fills.write_text(FILLS, encoding="utf-8")
    return kw, oed, tbtp, fills


def test_import_builds_the_catalogue_from_the_datasets(datasets, tmp_path):
    kw, oed, tbtp, fills = datasets
    out = tmp_path / "vehicles.json"
    args = [sys.executable, str(SCRIPT), "--kilowatt", str(kw), "--oed", str(oed),
            "--tbtp", str(tbtp), "--fills", str(fills), "--out", str(out)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    first = out.read_bytes()
    subprocess.run(args, capture_output=True, text=True, timeout=120, check=True)
    assert out.read_bytes() == first  # reproducible byte for byte
    doc = json.loads(first)
    eu = doc["vehicles"]["eu-car"]["params"]
    assert eu["mass_kg"]["value"] == 1875.0  # the variant's curb weight + the driver
    assert eu["frontal_area_m2"]["value"] == pytest.approx(0.85 * 1.8 * 1.6, abs=5e-4)
    assert eu["drag_coeff"] == {"value": 0.27, "source": "maker"}  # the fill, not the base's
    assert eu["battery_wh"]["value"] == 60_000.0 and "kw-eu" in eu["battery_wh"]["source"]
    assert eu["connectors"]["value"] == ["ccs2", "type2"]
    assert eu["charge_curve"]["value"] == [[0.0, 150.0], [80.0, 50.0], [100.0, 10.0]]
    assert eu["aux_power_w"] == {"value": 300.0, "source": "accessories"}
    us = doc["vehicles"]["us-car"]["params"]
    assert us["connectors"]["value"] == ["ccs1", "type1"]  # OED's port, J1772 AC with it
    # a published frontal area replaces the width x height estimate, source and all
    assert us["frontal_area_m2"] == {"value": 2.46, "source": "maker's area"}
    assert "1800 mm" in eu["frontal_area_m2"]["source"]  # the estimate names its dimensions
    # band: 90 km/h at least min(0.8, 0.85) x, 120 km/h at most 1.2 x the average (150 Wh/km)
    ref = doc["vehicles"]["eu-car"]["reference_100kmh"]
    assert (ref["low_wh_per_km"], ref["high_wh_per_km"]) == (120.0, 180.0)
    ref_us = doc["vehicles"]["us-car"]["reference_100kmh"]
    assert (ref_us["low_wh_per_km"], ref_us["high_wh_per_km"]) == (128.0, 192.0)
    # what it writes is what the package reads
    veh = Vehicle(name="eu-car", **{k: p["value"] for k, p in eu.items()})
    assert veh.connectors == ("ccs2", "type2") and veh.charging_minutes(0, 80) > 0
