"""Node potential, reduced costs, the physical ground truth and regeneration-aware routing
(issue 21), checked on the real networks against independent computations (Bellman–Ford)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import NegativeCycleError, bellman_ford

from ev_nav.bandits.indices import rectify
from ev_nav.bandits.routing import Oracle, Router
from ev_nav.energy import Vehicle, get_vehicle
from ev_nav.errors import NegativeCycleError as EvNegativeCycle
from ev_nav.gp.groundtruth import sample_ground_truth
from ev_nav.gp.prior import PriorSettings
from ev_nav.potential import node_potential, physical_potential, potential_change
from ev_nav.sim.environment import Environment, TruthSpec, physical_truth


@pytest.fixture(scope="module")
def srtm_monaco(network_cache, shared_file):
    from ev_nav.roads.load import load_osm

    return load_osm(
        shared_file("gh_monaco.osm.gz"), dems=[shared_file("N43E007.hgt.zip")],
        cache_dir=network_cache,
    )


@pytest.mark.parametrize("name", ["monaco", "luxembourg", "srtm_monaco", "town"])
@pytest.mark.parametrize("preset", ["sumo-default", "van"])
def test_reduced_costs_are_non_negative(request, name, preset):
    net = request.getfixturevalue(name)
    veh = get_vehicle(preset)
    phi = node_potential(net, veh)
    c = net.e_det(veh) - (phi[net.seg_v] - phi[net.seg_u])
    assert c.min() >= -1e-9
    # on these networks the physical potential itself is feasible: no correction was needed
    np.testing.assert_array_equal(phi, physical_potential(net, veh))


def test_correction_restores_feasibility_for_an_extreme_vehicle(srtm_monaco):
    # η⁺η⁻·√(1+0.3²) > 1: uphill segments at the grade limit would get c < 0 with Φ₀
    veh = Vehicle(eta_traction=1.0, eta_recuperation=1.0)
    phi0 = physical_potential(srtm_monaco, veh)
    c0 = srtm_monaco.e_det(veh) - (phi0[srtm_monaco.seg_v] - phi0[srtm_monaco.seg_u])
    assert c0.min() < 0
    phi = node_potential(srtm_monaco, veh)
    c = srtm_monaco.e_det(veh) - (phi[srtm_monaco.seg_v] - phi[srtm_monaco.seg_u])
    assert c.min() >= -1e-9 and (phi <= phi0 + 1e-12).all()
    # without any losses the energies themselves have negative cycles: a named error
    lossless = Vehicle(eta_traction=1.0, eta_recuperation=1.0, rolling_coeff=0.0, drag_coeff=0.0)
    with pytest.raises(EvNegativeCycle):
        node_potential(srtm_monaco, lossless)


def _line_graph_has_negative_cycle(net, f) -> bool:
    """Independent check: Bellman–Ford on the line graph from a virtual source."""
    n = net.n_segments
    src = np.repeat(np.arange(n), np.diff(net.lg_indptr))
    dst = np.asarray(net.lg_indices)
    rows = np.concatenate([src, np.full(n, n)])
    cols = np.concatenate([dst, np.arange(n)])
    aug = sp.csr_matrix((np.concatenate([f[dst], f]), (rows, cols)), shape=(n + 1, n + 1))
    try:
        bellman_ford(aug, directed=True, indices=n)
    except NegativeCycleError:
        return True
    return False


def test_physical_truth_never_has_a_negative_cycle(monaco):
    settings = PriorSettings.from_network(monaco)
    draws = sample_ground_truth(monaco, settings=settings, seed=11, size=500)
    phi = node_potential(monaco)
    dphi = phi[monaco.seg_v] - phi[monaco.seg_u]
    truths = np.stack(
        [physical_truth(monaco, None, phi, d, settings.outputscale, 0.25) for d in draws]
    )
    # every closed walk's energy is the sum of its reduced costs: all >= 0 means no negative
    # cycle in any of the 500 draws ...
    assert (truths - dphi).min() >= 0
    # ... confirmed by Bellman–Ford on a sample, where the paper's truth has negative cycles
    for k in range(0, 500, 100):
        assert not _line_graph_has_negative_cycle(monaco, truths[k])
    assert any(_line_graph_has_negative_cycle(monaco, draws[k]) for k in range(3))
    # the losses keep their expected value c_det (log-normal factor of mean 1)
    c_det = monaco.e_det() - dphi
    rel = (truths - dphi).mean(axis=0) / c_det
    assert abs(np.median(rel) - 1.0) < 0.05


def test_regeneration_aware_route_is_the_exact_optimum(srtm_monaco):
    env = Environment.create(srtm_monaco, seed=3, truth=TruthSpec())  # physical, exact
    f = env.true_energy
    exact = Oracle(srtm_monaco, f)  # Bellman–Ford potentials, independent of Φ
    router = Router(srtm_monaco)
    dphi = potential_change(srtm_monaco)
    reduced_w = rectify(f - dphi, 0.0)  # the index in reduced space, with the truth known
    paper_w = rectify(f, env.noise_std)  # the paper's rectification of the truth
    rng = np.random.default_rng(0)
    worse = 0
    for _ in range(100):
        s, g = (int(x) for x in rng.choice(srtm_monaco.n_segments, 2, replace=False))
        r_reduced = router.route(reduced_w, s, g)
        r_paper = router.route(paper_w, s, g)
        _, best = exact.optimal(s, g)
        e_reduced, e_paper = f[r_reduced].sum(), f[r_paper].sum()
        assert e_reduced == pytest.approx(best, abs=1e-6)
        assert e_reduced <= e_paper + 1e-6
        worse += e_paper > e_reduced + 1e-6
    assert worse > 0  # the paper's rectification really loses energy somewhere on this network


def test_fleet_run_in_the_physical_world_has_no_negative_regret(town):
    from ev_nav.sim.fleet import AgentSpec, NetworkSpec, RunSpec, TripSpec, run_one

    spec = RunSpec(
        network=NetworkSpec(kind="synthetic", n_segments=town.n_segments, seed=0),
        agent=AgentSpec(model="bi", policy="ts"),
        trips=TripSpec(kind="random", name="r", min_distance_m=500.0),
        horizon=30,
        seed=0,
    )
    rows = run_one(spec).rows
    assert min(r["regret_wh"] for r in rows) >= -1e-6


def test_network_info_says_flat_and_grade_share(luxembourg, monaco):
    flat = luxembourg.summary()
    assert flat["elevation_m"] is None  # no source: flat by construction, not 0-0 m
    hilly = monaco.summary()
    # numbers in the JSON (it was the printed text): the lowest and highest node [m]
    assert hilly["elevation_m"] == [round(float(monaco.node_elevation.min()), 1),
                                    round(float(monaco.node_elevation.max()), 1)]
    assert hilly["elevation_m"][0] < hilly["elevation_m"][1]
    # MoST Monaco: 13 of 2,584 segments were steeper than 0.3 and got limited
    assert hilly["grade_limited_share"] == pytest.approx(13 / 2584)
    assert hilly["max_grade"] == 0.3


def test_report_flags_negative_regret_instead_of_ranking_it_best():
    import pandas as pd

    from ev_nav.sim.report import NOT_OPTIMAL, summary_markdown

    summary = pd.DataFrame(
        {
            "network": ["m"] * 3,
            "route": ["B"] * 3,
            "agent": ["GP-TS", "BI-TS", "GP-UCB"],
            "final_cum_regret_mean": [-50.0, 20.0, 10.0],
            "se": [1.0, 2.0, 3.0],
            "runs": [5, 5, 5],
        }
    )
    rows = [ln for ln in summary_markdown(summary).splitlines() if ln.startswith("| m |")]
    assert [r.split("|")[3].strip() for r in rows] == ["GP-UCB", "BI-TS", "GP-TS"]
    assert NOT_OPTIMAL in rows[-1] and NOT_OPTIMAL not in rows[0]


def test_routes_pick_gives_distinct_snapping_routes(tmp_path, town, capsys):
    import tomllib

    from ev_nav.cli import main
    from ev_nav.roads.network import haversine_m
    from ev_nav.sim.routes import pick_routes

    routes = pick_routes(town, 3, min_separation_m=300.0)
    assert [r.name for r in routes] == ["A", "B", "C"]
    mid = town.segment_midpoints()
    for r in routes:  # the coordinates snap back to the picked segments
        assert town.nearest_segment(*r.start, 50.0) == r.start_segment
        assert town.nearest_segment(*r.goal, 50.0) == r.goal_segment
    for i, a in enumerate(routes):
        for b in routes[i + 1 :]:
            def d(x, y):
                return haversine_m(mid[x, 0], mid[x, 1], mid[y, 0], mid[y, 1])

            assert not (d(a.start_segment, b.goal_segment) <= 300
                        and d(a.goal_segment, b.start_segment) <= 300), "a reversed pair"
    path = tmp_path / "town.npz"
    town.save(path)
    out = tmp_path / "routes.toml"
    assert main(["routes", "pick", str(path), "--count", "2", "--min-separation", "300",
                 "--out", str(out)]) == 0
    cfg = tomllib.loads(out.read_text())
    assert [r["name"] for r in cfg["routes"]] == ["A", "B"]
    assert all(r["kind"] == "fixed" and len(r["start"]) == 2 for r in cfg["routes"])


@pytest.mark.parametrize(
    ("option", "fragment"),
    [
        (["--starts", "-3"], "start segments tried must be >= 1, got -3"),
        (["--starts", "0"], "start segments tried must be >= 1, got 0"),
        (["--min-separation", "nan"], "finite number of metres >= 0, got nan"),
        (["--min-separation", "-5"], "finite number of metres >= 0, got -5"),
        (["--out", "/proc/ev-nav-routes.toml"], "cannot write /proc/ev-nav-routes.toml"),
    ],
)
def test_routes_pick_bad_options_are_one_line(tmp_path, town, capsys, option, fragment):
    """--starts -3 and an unwritable --out were tracebacks; --starts 0 blamed the separation;
    a NaN or negative separation picked routes as if none was asked."""
    from ev_nav.cli import main

    path = tmp_path / "town.npz"
    town.save(path)
    assert main(["routes", "pick", str(path), *option]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and fragment in err


def test_routes_pick_never_writes_over_its_network(tmp_path, town, capsys):
    """'routes pick town.npz --out town.npz' replaced the network file with the TOML snippet;
    refused before anything is picked, the network left as it was."""
    from ev_nav.cli import main

    path = tmp_path / "town.npz"
    town.save(path)
    before = path.read_bytes()
    for out in (str(path), str(tmp_path / "." / "town.npz")):
        assert main(["routes", "pick", str(path), "--out", out]) == 2
        err = capsys.readouterr().err
        assert err == (f"ev-nav: error: --out {out} is the network file itself; give the "
                       "TOML snippet its own file, e.g. routes.toml\n")
    assert path.read_bytes() == before
    assert main(["routes", "pick", str(path), "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path} is a folder" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["srtm_monaco", "town"])
def test_loss_lower_bound_is_rolling_resistance_under_the_deterministic_loss(request, name):
    """The physical loss bound: η⁻ × rolling-resistance work, recomputed here from the vehicle's
    parameters, never above the deterministic loss and below it by air drag and drivetrain
    losses (a real fraction of it, not a vacuous 0)."""
    from ev_nav.potential import loss_lower_bound, loss_scale

    net = request.getfixturevalue(name)
    veh = get_vehicle("sumo-default")
    bound = loss_lower_bound(net, veh)
    cos = 1.0 / np.sqrt(1.0 + net.grade**2)
    rolling_wh = veh.eta_recuperation * veh.mass_kg * veh.gravity * veh.rolling_coeff \
        * net.length_m * cos / 3600.0
    c_det = net.e_det(veh) - potential_change(net, veh)
    np.testing.assert_allclose(bound, np.minimum(rolling_wh, c_det), rtol=1e-12, atol=1e-12)
    assert np.all(bound >= 0.0) and np.all(bound <= loss_scale(net, veh) + 1e-12)
    assert 0.4 < float(np.median(bound / np.maximum(c_det, 1e-12))) < 0.9
