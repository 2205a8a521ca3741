"""The README's "Python API" section: its first ```python block runs as written (issue 16)."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_api_block_runs(tmp_path):
    text = README.read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "no python block in the README's Python API section"
    script = tmp_path / "readme_api.py"
    script.write_text(block.group(1))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"trip 1: \d+\.\d\d km, \d+ ± \d+ Wh", proc.stdout), proc.stdout
    assert "'observed_wh'" in proc.stdout


def test_readme_per_trip_example_output_is_current(tmp_path, capsys):
    """The README's per-trip example prints what the commands print today."""
    from ev_nav.cli import main

    text = README.read_text(encoding="utf-8")
    section = text.split("## The per-trip workflow", 1)[1].split("```", 2)[1]
    route_out = section.split("--policy ts\n", 1)[1].split("# 3.", 1)[0]
    expected = [ln[4:].rstrip() for ln in route_out.splitlines() if ln.startswith("#   ")]
    state = tmp_path / "mystate"
    assert main(["init", str(state), "--synthetic", "--model", "gp"]) == 0
    capsys.readouterr()
    assert main(["route", str(state), "--from", "47.0010,8.0020", "--to", "47.0240,8.0350",
                 "--policy", "ts"]) == 0
    printed = [ln.rstrip() for ln in capsys.readouterr().out.splitlines()]
    for line in expected:
        line = line.replace("mystate/", f"{state}/").replace("observe mystate", f"observe {state}")
        assert line in printed, f"README line not printed any more: {line!r}"
    assert main(["observe", str(state), "1", "--total-wh", "530"]) == 0
    out = capsys.readouterr().out
    ack = "trip 1: recorded the trip total (530.0 Wh; predicted 478.0 Wh, model sd 83.1 Wh)"
    assert ack in out and f"#   {ack}" in text


def test_route_json_and_clean_exports(tmp_path, capsys):
    import json as _json
    import xml.etree.ElementTree as ET

    from ev_nav.cli import main

    state = tmp_path / "s"
    assert main(["init", str(state), "--synthetic", "--model", "bi"]) == 0
    capsys.readouterr()
    assert main(["route", str(state), "--from", "47.0010,8.0020", "--to", "47.0240,8.0350",
                 "--no-map", "--json"]) == 0
    plan = _json.loads(capsys.readouterr().out)
    assert set(plan["routes"]) == {"planned", "best guess", "shortest", "fastest"}
    extra = plan["routes"]["planned"]["predicted_wh"] - plan["routes"]["best guess"][
        "predicted_wh"]
    assert plan["exploring_extra_wh"] == round(extra, 1) or abs(
        plan["exploring_extra_wh"] - extra) <= 0.11
    geo = _json.loads((state / "maps" / "trip-1.geojson").read_text())
    for feature in geo["features"]:
        coords = feature["geometry"]["coordinates"]
        assert all(a != b for a, b in zip(coords, coords[1:], strict=False)), "repeated point"
    gpx = ET.parse(state / "maps" / "trip-1.gpx").getroot()
    points = gpx.findall(".//{http://www.topografix.com/GPX/1/1}trkpt")
    planned = next(f for f in geo["features"] if f["properties"]["name"] == "planned")
    assert len(points) == len(planned["geometry"]["coordinates"])
    assert main(["observe", str(state), "1", "--total-wh",
                 str(plan["routes"]["planned"]["predicted_wh"]), "--json"]) == 0
    rec = _json.loads(capsys.readouterr().out.splitlines()[0])
    assert rec["trip"] == 1 and rec["recorded"] == "the trip total"


def test_readme_long_trip_example_output_is_current(tmp_path, capsys):
    """The README's charging-stop example (LuST Luxembourg, its CSV of sites, an ID.3) prints
    what the commands print today."""
    import pytest

    from ev_nav.cli import main

    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "lust_luxembourg.osm.gz"
    if not data.is_file():
        pytest.skip("the shared LuST extract is not beside the repository")
    text = README.read_text(encoding="utf-8")
    block = text.split("### Long trips: charging stops", 1)[1].split("```bash\n", 1)[1]
    block = block.split("```", 1)[0]
    csv = block.split("<<'CSV'\n", 1)[1].split("CSV\n", 1)[0]
    (tmp_path / "sites.csv").write_text(csv, encoding="utf-8")
    # the ID.3's own state, then a default-vehicle state planning for the ID.3 by name
    own, other = block.split("ev-nav init lux-default", 1)
    expected = [ln[4:].rstrip() for ln in own.splitlines() if ln.startswith("#   ")]
    expected_other = [ln[4:].rstrip() for ln in other.splitlines()
                      if ln.startswith("#   ") and ln[4:].strip() != "..."]
    assert len(expected) >= 6 and len(expected_other) >= 3
    net = tmp_path / "lux.npz"
    assert main(["network", "build", "--osm", str(data), "--chargers",
                 str(tmp_path / "sites.csv"), "--out", str(net)]) == 0
    trip = ["--from", "49.6100,6.0410", "--to", "49.6385,6.2150", "--soc", "10%", "--reserve",
            "8%", "--confidence", "0.95"]
    for name, vehicle, lines in [("lux-state", ["--vehicle", "volkswagen-id3-pro"], expected),
                                 ("lux-default", [], expected_other)]:
        state = tmp_path / name
        assert main(["init", str(state), "--network", str(net), *vehicle]) == 0
        capsys.readouterr()
        model = [] if vehicle else ["--vehicle-model", "volkswagen-id3-pro"]
        assert main(["route", str(state), *trip, *model]) == 0
        printed = [ln.rstrip() for ln in capsys.readouterr().out.splitlines()]
        for line in lines:
            line = line.replace(f"{name}/", f"{state}/")
            assert line in printed, f"README line not printed any more: {line!r}"
