"""The CLI imports only the module of the command being run (issue 16: fast commands).

``--version``, ``--help`` and ``history`` must not import torch or scipy (seconds of
start-up the user waits for); the static command table must match what the modules register.
"""

import subprocess
import sys

from ev_nav.cli import COMMANDS, build_parser


def test_command_table_matches_the_modules():
    full = build_parser()  # imports every module and registers it in full
    sub = next(a for a in full._actions if a.__class__.__name__ == "_SubParsersAction")
    assert set(sub.choices) == set(COMMANDS)
    for name, parser in sub.choices.items():
        assert parser.add_help, f"{name}: only a stub was registered; its module lacks it"


def _modules_after(argv: list[str]) -> set[str]:
    code = (
        "import sys\n"
        "from ev_nav.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    return set(out.split()[-1:]) | set(out.split())


def test_light_commands_import_no_heavy_module(tmp_path):
    from ev_nav.cli import main

    state = tmp_path / "s"
    assert main(["init", str(state), "--synthetic", "--segments", "300", "--model", "bi"]) == 0
    for argv in (["--version"], ["--help"], ["history", str(state)],
                 ["nonsense"]):
        loaded = _modules_after(argv)
        heavy = {m for m in ("torch", "scipy", "gpytorch", "osmnx", "folium", "matplotlib")
                 if m in loaded}
        assert not heavy, f"{argv}: imported {heavy}"
    # nor what only other commands use: the physics and vehicle catalogue, the plausibility
    # rule's recording machinery, hashing, statistics and temporary files (each a few ms of
    # the start-up that scripts/bench_cli.py holds to 1.5 x numpy's import)
    loaded = _modules_after(["history", str(state)])
    extra = {m for m in ("ev_nav.energy", "ev_nav.trips.observations", "ev_nav.trips.changes",
                         "hashlib", "statistics", "tempfile", "tomllib") if m in loaded}
    assert not extra, f"history imported {extra}"


def test_route_plans_without_torch(tmp_path):
    """Planning (issue 29): ``route`` on a GP state restores the posterior without the learner,
    so it imports neither torch nor gpytorch, nor numba (a few queries run interpreted), nor the
    mapping stack; and it still plans and records the trip."""
    import json

    import numpy as np

    from ev_nav.cli import main
    from ev_nav.roads.synthetic import synthetic_town
    from tests.cli_helpers import latlon

    state = tmp_path / "s"
    assert main(["init", str(state), "--synthetic", "--segments", "300"]) == 0  # model gp
    net = synthetic_town(300, seed=0)
    mid = net.segment_midpoints()
    s, g = int(np.argmin(mid.sum(axis=1))), int(np.argmax(mid.sum(axis=1)))
    argv = ["route", str(state), "--from", latlon(net, s), "--to", latlon(net, g), "--no-map",
            "--json", "--soc", "80%"]
    loaded = _modules_after(argv)
    heavy = {m for m in ("torch", "gpytorch", "numba", "osmnx", "geopandas", "pandas", "folium",
                         "matplotlib") if m in loaded}
    assert not heavy, f"route imported {heavy}"
    assert "ev_nav.gp.incremental_state" in loaded and "ev_nav.gp.incremental" not in loaded
    from ev_nav.trips.session import trip_history

    (trip,) = trip_history(state)
    assert trip["trip"] == 1 and trip["km"] > 0
    assert json.loads((state / "maps" / "trip-1.geojson").read_text())["features"]


def test_observe_on_an_independent_state_loads_no_torch(tmp_path):
    """``observe`` of a BI state updates a NumPy model: it imported torch through the prior
    settings (1.4 s of its 2.3 s), which now live in a module of their own."""
    import numpy as np

    from ev_nav.cli import main
    from ev_nav.roads.synthetic import synthetic_town
    from ev_nav.store import Store
    from tests.cli_helpers import latlon

    state = tmp_path / "s"
    assert main(["init", str(state), "--synthetic", "--segments", "300", "--model", "bi"]) == 0
    net = synthetic_town(300, seed=0)
    mid = net.segment_midpoints()
    s, g = int(np.argmin(mid.sum(axis=1))), int(np.argmax(mid.sum(axis=1)))
    assert main(["route", str(state), "--from", latlon(net, s), "--to", latlon(net, g),
                 "--no-map", "--policy", "mean"]) == 0
    loaded = _modules_after(["observe", str(state), "1", "--total-wh", "500", "--force"])
    heavy = {m for m in ("torch", "gpytorch") if m in loaded}
    assert not heavy, f"observe imported {heavy}"
    with Store.open(state) as store:
        (batch,) = store.observations()
        assert batch.trip_id == 1 and batch.kind == "total" and batch.energy_wh.tolist() == [500]
