"""``ev-nav routes pick``: what it writes, and what it says (issues found in the fleet audit)."""

from __future__ import annotations

import tomllib

from ev_nav.cli import main


def test_routes_pick_does_not_replace_an_existing_file(tmp_path, town, capsys):
    """'--out fleet.toml' replaced the user's fleet config with the snippet, silently; refused
    now, before anything is picked, the file left as it was; --force replaces it."""
    path = tmp_path / "town.npz"
    town.save(path)
    config = tmp_path / "fleet.toml"
    config.write_text("horizon = 200\n", encoding="utf-8")
    pick = ["routes", "pick", str(path), "--count", "1", "--min-separation", "300"]
    assert main([*pick, "--out", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"--out {config} exists; give a new file" in err and "--force" in err
    assert config.read_text(encoding="utf-8") == "horizon = 200\n"
    assert main([*pick, "--out", str(config), "--force"]) == 0
    assert [r["name"] for r in tomllib.loads(config.read_text())["routes"]] == ["A"]


def test_routes_pick_on_a_flat_osm_file_names_an_option_that_exists(tmp_path, capsys):
    """The warning said "no --dem", an option 'routes pick' has not; it says how to get grades
    now (build the network with a DEM and pick on the .npz)."""
    from tests.test_route_options import write_grid_osm

    osm = write_grid_osm(tmp_path / "grid.osm")
    assert main(["routes", "pick", str(osm), "--count", "1", "--min-separation", "10"]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "elevation" in ln]
    assert len(lines) == 1 and "--dem)" not in lines[0]
    assert lines[0].startswith("ev-nav: warning: grid: no elevation source (no OSM 'ele' tags, "
                               "no DEM): grades are 0 (flat); for grades, build it with "
                               f"'ev-nav network build --osm {osm} --dem TILE --out NET.npz'")
