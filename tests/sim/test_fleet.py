"""Fleet runs: determinism, resume == uninterrupted, results files, config parsing."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from ev_nav.cli import main
from ev_nav.errors import ConfigError, EvNavError
from ev_nav.sim.environment import Environment, TruthSpec
from ev_nav.sim.fleet import (
    AgentSpec,
    NetworkSpec,
    RunSpec,
    TripSpec,
    load_network,
    run_one,
    specs_from_toml,
)

NET = NetworkSpec(kind="synthetic", n_segments=400, seed=3)
SMALL_GP = dict(num_inducing=200, batch_size=300)


def _spec(agent: AgentSpec, horizon=12, seed=0, vehicles=2):
    trips = TripSpec(kind="random", vehicles=vehicles, min_distance_m=500.0, name="rnd")
    return RunSpec(network=NET, agent=agent, trips=trips, horizon=horizon, seed=seed)


def test_environment_truth_and_feedback():
    net = load_network(NET)
    env = Environment.create(net, seed=0)
    assert env.true_energy.shape == (net.n_segments,)
    assert np.isfinite(env.true_energy).all()
    # the truth is a draw around E_det, not E_det itself
    assert not np.allclose(env.true_energy, net.e_det())
    path, best = env.oracle.optimal(0, net.n_segments - 1)
    regret, energy, opt = env.regret(path, 0, net.n_segments - 1)
    assert regret == pytest.approx(0.0, abs=1e-9) and opt == pytest.approx(best)
    obs = env.drive(path, np.random.default_rng(0))
    assert obs.shape == path.shape
    resid = obs - env.true_energy[path]
    assert np.all(np.abs(resid) < 6 * env.noise_sd(path))
    again = Environment.create(net, seed=0)
    np.testing.assert_array_equal(again.true_energy, env.true_energy)


@pytest.mark.parametrize(
    "agent",
    [AgentSpec(model="bi", policy="ts"), AgentSpec(model="gp", policy="bucb", **SMALL_GP)],
    ids=["BI-TS", "GP-BUCB"],
)
def test_resume_equals_uninterrupted(agent, tmp_path):
    spec = _spec(agent)
    full = run_one(spec, tmp_path / "full", checkpoint_every=4)
    part = run_one(spec, tmp_path / "part", checkpoint_every=4, stop_after=7)
    assert len(part.rows) == 7 * 2 and not part.finished
    assert not (tmp_path / "part" / "trips.csv").exists()
    resumed = run_one(spec, tmp_path / "part", checkpoint_every=4)
    a, b = pd.DataFrame(full.rows), pd.DataFrame(resumed.rows)
    pd.testing.assert_frame_equal(a, b)
    np.testing.assert_array_equal(
        np.load(tmp_path / "full" / "visits.npy"), np.load(tmp_path / "part" / "visits.npy")
    )
    meta = json.loads((tmp_path / "full" / "metadata.json").read_text())
    assert meta["config"]["seed"] == 0 and meta["versions"]["numpy"]


def test_runs_are_deterministic_and_share_worlds(tmp_path):
    a = pd.DataFrame(run_one(_spec(AgentSpec(model="bi", policy="ts"), horizon=5)).rows)
    b = pd.DataFrame(run_one(_spec(AgentSpec(model="bi", policy="ts"), horizon=5)).rows)
    pd.testing.assert_frame_equal(a, b)
    c = pd.DataFrame(run_one(_spec(AgentSpec(model="bi", policy="ucb"), horizon=5)).rows)
    # common random numbers: other agents see the same trips and the same optimum
    np.testing.assert_array_equal(a[["start", "goal"]], c[["start", "goal"]])
    np.testing.assert_allclose(a["optimal_wh"], c["optimal_wh"])
    assert (a["regret_wh"] >= -1e-9).all()


def test_toml_config(tmp_path):
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(
        """
horizon = 3
seeds = [0, 1]
[network]
kind = "synthetic"
n_segments = 300
[[routes]]
name = "A"
kind = "fixed"
start = 0
goal = 100
[[agents]]
model = "bi"
policy = "ts"
[[agents]]
model = "gp"
policy = "ts"
[output]
dir = "out"
"""
    )
    specs, output = specs_from_toml(cfg)
    assert len(specs) == 4 and output["dir"] == "out"
    assert {s.agent.label for s in specs} == {"BI-TS", "GP-TS"}
    cfg.write_text('horizon = 3\n[[agents]]\nmodel = "gp"\nflavour = "x"\n')
    with pytest.raises(ConfigError, match="flavour"):
        specs_from_toml(cfg)
    cfg.write_text("horizon = = 3")
    with pytest.raises(ConfigError):
        specs_from_toml(cfg)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('horizon = "ten"', "horizon must be a whole number, got 'ten'"),
        ("horizon = 10.7", "horizon must be a whole number, got 10.7"),
        ("horizon = 0", "horizon must be >= 1"),
        ("seeds = 3", "seeds must be a non-empty list"),
        ("seeds = []", "seeds must be a non-empty list"),
        ('seeds = ["a"]', "each seed must be a whole number, got 'a'"),
        ("seeds = [0, -1]", "each seed must be >= 0, got -1"),
        ('[output]\ncheckpoint_every = "x"', "checkpoint_every must be a whole number"),
        ("[output]\ndir = 5", "dir must be a folder name, got 5"),
        # 'the grid contains duplicate runs (identical specs)', after creating the output folder
        ("seeds = [0, 0]", "makes run synthetic-2000_random_GP-TS_s0_"),
        ('[[agents]]\nmodel = "gp"\n[[agents]]\nmodel = "gp"', "twice (a repeated seed, or "
         "two identical [[networks]], [[routes]] or [[agents]] tables)"),
    ],
)
def test_toml_config_refuses_bad_top_level_values(tmp_path, capsys, line, fragment):
    """Each was a ValueError/TypeError traceback, a silently truncated horizon, a grid of no
    runs that exited 0, or a run failing at its first trip; now one line before any run."""
    _refused_before_any_run(tmp_path, capsys, f"{line}\n", fragment, ConfigError)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("horizn = 5", "unknown top-level key(s): horizn"),
        ("[output]\ndirr = 'x'", "unknown [output] key(s): dirr"),
        ("[output]\ncheckpoint_evry = 3", "unknown [output] key(s): checkpoint_evry"),
        ('network = "x"', "network must be a table ([network]), got 'x'"),
        ('truth = "gp"', "truth must be a table ([truth]), got 'gp'"),
        ("output = 3", "output must be a table ([output]), got 3"),
        ("agents = 5", "agents must be tables ([[agents]]), got 5"),
        ('routes = ["A"]', "routes must be tables ([[routes]]), got ['A']"),
        ("agents = []", "agents must be tables ([[agents]]), got []"),
        ("networks = []", "networks must be tables ([[networks]]), got []"),
    ],
)
def test_toml_config_refuses_unknown_or_misshapen_top_level_keys(tmp_path, capsys, text, fragment):
    """A misspelt top-level or [output] key was ignored (the run went on with the default
    horizon, output folder or checkpoint interval); a table given as a plain value was a
    ValueError/TypeError traceback; 'agents = []' ran no run and exited 0."""
    _refused_before_any_run(tmp_path, capsys, f"{text}\n", fragment, ConfigError)


def _refused_before_any_run(tmp_path, capsys, text, fragment, error) -> None:
    """The config ``text`` is refused by the loader (``error`` naming ``fragment``) and by
    ``fleet run`` with one line on stderr, exit 2, nothing run or written."""
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(text)
    with pytest.raises(error, match=re.escape(fragment)):
        specs_from_toml(cfg)
    code = main(["fleet", "run", str(cfg), "--quiet", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and fragment in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ('[[agents]]\nmodel = "gpx"', "[[agents]] model must be one of gp, bi, got 'gpx'"),
        ('[[agents]]\npolicy = "xx"', "policy must be one of ts, ts-joint, bucb, bucb-quantile, "
                                     "ucb, bucb-route, ucb-route, mean, safe, random, got 'xx'"),
        ('[[agents]]\nsegment_scale = "x"', "[[agents]] segment_scale must be one of uniform, "
                                           "loss, got 'x'"),
        ('[[agents]]\nlengthscale = "x"', "[[agents]] lengthscale must be a number, got 'x'"),
        ("[[agents]]\ndetect_changes = 1", "detect_changes must be true or false, got 1"),
        # failed each run at its first trip
        ('[[agents]]\npolicy = "ucb-route"\nrectification = "paper"',
         "[[agents]] policy = 'ucb-route' bounds each route's total loss and needs "
         "rectification = 'reduced', not 'paper'"),
        ('[truth]\nkind = "foo"', "[truth] kind must be one of physical, gp, det-noise, file"),
        ('[truth]\nkind = "file"', "[truth] kind = 'file' needs 'path'"),
        ("[truth]\ngraph_share = 1.5", "graph_share must lie in [0, 1], got 1.5"),
        ('[truth]\nkind = "file"\npath = "no.csv"', "[truth] path: file not found"),
        ('[network]\nkind = "osm"\npath = "no.osm"', "[network] path: file not found"),
        ('[network]\nkind = "file"', "[network] kind = 'file' needs 'path'"),
        ('[network]\nkind = "net"', "[network] kind must be one of synthetic, osm, file"),
        # a file that is not a network failed every run separately (exit 1)
        ('[network]\nkind = "file"\npath = "fleet.toml"',
         "fleet.toml is not an ev-nav network file"),
        # keys the network's kind does not use were ignored: the run used another network
        ('[network]\nkind = "synthetic"\npath = "town.npz"',
         "[network] path is not used by kind = 'synthetic' (it uses n_segments, seed, name)"),
        ('[network]\nkind = "file"\npath = "fleet.toml"\nn_segments = 300',
         "[network] n_segments is not used by kind = 'file' (it uses path, name)"),
        ('[network]\nkind = "osm"\npath = "fleet.toml"\nseed = 3',
         "[network] seed is not used by kind = 'osm' (it uses path, dems, name)"),
        # keys that shape drawn worlds were accepted beside a truth file, and ignored
        ('[truth]\nkind = "file"\npath = "fleet.toml"\nlengthscale = 2.0',
         "[truth] lengthscale is not used by kind = 'file' (it uses path, optimum)"),
        ('[truth]\nkind = "file"\npath = "fleet.toml"\nnoise_spread = 0.5',
         "[truth] noise_spread is not used by kind = 'file' (it uses path, optimum)"),
        ('[truth]\nkind = "gp"\nloss_spread = 0.5',
         "[truth] loss_spread is not used by kind = 'gp' (it uses lengthscale, graph_share, "
         "max_redraws, optimum)"),
        ('[truth]\npath = "fleet.toml"', "[truth] path is not used by kind = 'physical'"),
        ('[truth]\nkind = "det-noise"\ndrift_size = 1.0',
         "[truth] drift_size is not used by kind = 'det-noise' (it uses max_redraws, optimum)"),
        ('[[routes]]\nkind = "random"\nstart = 3\ngoal = 40',
         "[[routes]] start is not used by kind = 'random' (it uses vehicles, min_distance_m, "
         "name)"),
        ('[[routes]]\nstart = 3\ngoal = 40\nmin_distance_m = 500.0',
         "[[routes]] min_distance_m is not used by kind = 'fixed' (it uses start, goal, "
         "vehicles, name)"),
        # a town smaller than the smallest one built: a different town than asked, every run
        # failed finding trips
        ('[network]\nn_segments = 5', "[network] n_segments must be in 100..2,000,000, got 5"),
        ('[[routes]]\nname = "A"\nstart = 3', "[[routes]] 'A': a fixed route needs start and goal"),
        ('[[routes]]\nstart = [1, "x"]\ngoal = 2', "[[routes]] start must be a whole number or"),
        ('[[routes]]\nkind = "loop"', "[[routes]] kind must be one of fixed, random"),
        # numbers outside their range, and paths of the wrong type: each failed every run
        # (or, for a path, gave a TypeError traceback, or read a string's characters as files)
        ("[truth]\nlengthscale = -1.0", "[truth] lengthscale must be a number > 0, got -1.0"),
        ("[truth]\nnoise_spread = -0.2", "[truth] noise_spread must be a number > 0 and <= 3, "
         "got -0.2"),
        ("[truth]\nloss_spread = -3.0", "[truth] loss_spread must be a number >= 0 and <= 3, "
         "got -3.0"),
        ("[[agents]]\nbeta_scale = -5", "[[agents]] beta_scale must be a number >= 0, got -5"),
        ('[[agents]]\nlearner = "svgp"\nnum_inducing = -5',
         "[[agents]] num_inducing must be a whole number >= 1, got -5"),
        ("[network]\nseed = -4", "[network] seed must be >= 0, got -4"),
        ('[[routes]]\nkind = "random"\nmin_distance_m = -5.0',
         "min_distance_m must be >= 0, got -5.0"),
        ("[[routes]]\nstart = -3\ngoal = 3", "start is a segment id, >= 0; got -3"),
        ("[[routes]]\nstart = 3\ngoal = 3", "start and goal are the same (3); no trip"),
        # the town asked for 300 segments has 303
        ("[network]\nn_segments = 300\n[[routes]]\nstart = 3\ngoal = 303",
         "goal = 303 is no segment of synthetic-300 (it has 303: ids 0..302)"),
        ('[network]\nkind = "osm"\npath = 5', "[network] path must be a string, got 5"),
        ('[network]\nkind = "osm"\npath = "fleet.toml"\ndems = "x.hgt"',
         "[network] dems must be a list of strings, got 'x.hgt'"),
        ('[truth]\nkind = "file"\npath = 7', "[truth] path must be a string, got 7"),
        # known from the config alone, each failed every run separately (or ran meaninglessly)
        ("[truth]\nnoise_spread = 0.0", "[truth] noise_spread must be a number > 0 and <= 3, "
         "got 0.0"),
        ("[truth]\nloss_spread = inf", "[truth] loss_spread must be a number >= 0 and <= 3, "
         "got inf"),
        ("[truth]\nloss_spread = 1e300", "loss_spread must be a number >= 0 and <= 3, got 1e+300"),
        ('[truth]\ndrift_rounds = [1]\ndrift_size = inf', "drift_size must be a number (finite)"),
        ('[[agents]]\npolicy = "ucb"\nbeta_scale = inf',
         "[[agents]] beta_scale must be a number >= 0, got inf"),
        ('[[agents]]\npolicy = "random"\ndetect_changes = true',
         "detect_changes needs a learning agent, not policy = 'random'"),
        ("[[agents]]\ntemperature = true",
         "temperature = true needs a world with a temperature cycle"),
        ("[truth]\ndrift_rounds = [5]", "drift_rounds [5] come after the last round (2)"),
        ('[[routes]]\nkind = "random"\nmin_distance_m = 1e7',
         "[[routes]] 'route' on synthetic-2000: no origin–destination pair 10000000.0 m apart"),
        ("[[routes]]\nstart = [0.0, 0.0]\ngoal = [8.0, 47.0]",
         "[[routes]] 'route' on synthetic-2000: "),
        # two routes with one name: the tables averaged them as seeds of one route
        ("[[routes]]\nstart = 3\ngoal = 40\n[[routes]]\nstart = 5\ngoal = 60",
         "would be one row of the tables (network synthetic-2000, route 'route', agent GP-TS, "
         "seed 0)"),
        # the one table was ignored
        ('[network]\nn_segments = 300\n[[networks]]\nn_segments = 400',
         "give either [network] or [[networks]], not both"),
        ('[trips]\nvehicles = 3\n[[routes]]\nkind = "random"',
         "give either [trips] or [[routes]], not both"),
    ],
)
def test_toml_config_refuses_bad_tables_before_any_run(tmp_path, capsys, table, fragment):
    """Each made every run of the grid FAIL at its first trip (exit 1; a lengthscale string
    showed a raw TypeError per run); now one line naming the key before any run, exit 2."""
    _refused_before_any_run(tmp_path, capsys, f"horizon = 2\n{table}\n", fragment, EvNavError)


def test_toml_config_accepts_every_documented_choice(tmp_path):
    cfg = tmp_path / "fleet.toml"
    agents = "".join(f'[[agents]]\npolicy = "{p}"\n' for p in
                     ("ts", "ts-joint", "bucb", "bucb-quantile", "ucb", "bucb-route",
                      "ucb-route", "mean", "safe", "random"))
    cfg.write_text(f'horizon = 2\n{agents}[[agents]]\nmodel = "bi"\nsegment_scale = "loss"\n'
                   '[truth]\nkind = "det-noise"\noptimum = "rectified"\n')
    specs, _ = specs_from_toml(cfg)
    assert len(specs) == 11


def test_truth_kinds():
    net = load_network(NET)
    env = Environment.create(net, seed=1, truth=TruthSpec(kind="det-noise"))
    assert np.corrcoef(env.true_energy, net.e_det())[0, 1] > 0.5
    with pytest.raises(ConfigError):
        Environment.create(net, seed=1, truth=TruthSpec(kind="magic"))


def test_rectified_optimum_and_truth_cache(tmp_path):
    from ev_nav.bandits.indices import rectify
    from ev_nav.bandits.routing import Router

    net = load_network(NET)
    truth = TruthSpec(optimum="rectified")
    env = Environment.create(net, seed=4, truth=truth, cache_dir=tmp_path)
    assert env.redraws == 0 and len(list(tmp_path.glob("truth-*.npy"))) == 1
    path, energy = env.oracle.optimal(3, 250)
    expected = Router(net).route(rectify(env.true_energy, env.noise_std), 3, 250)
    np.testing.assert_array_equal(path, expected)
    assert energy == pytest.approx(env.true_energy[path].sum())
    again = Environment.create(net, seed=4, truth=truth, cache_dir=tmp_path)
    np.testing.assert_array_equal(again.true_energy, env.true_energy)
    with pytest.raises(ConfigError):
        Environment.create(net, seed=4, truth=TruthSpec(optimum="best"))


def test_make_model_gp_overrides():
    from ev_nav.gp.incremental import IncrementalGP
    from ev_nav.gp.svgp import SVGPModel
    from ev_nav.sim.fleet import make_model

    net = load_network(NET)
    svgp = AgentSpec(model="gp", policy="ucb", learner="svgp", **SMALL_GP)
    assert make_model(svgp, net, seed=0).m == 200
    model = make_model(svgp, net, seed=0, num_inducing=57, learn_hyperparameters=False)
    assert isinstance(model, SVGPModel) and model.m == 57
    assert model.config.learn_hyperparameters is False
    # the spec's other fields are kept
    assert model.config.batch_size == 300
    exact = make_model(AgentSpec(model="gp", policy="ucb", lengthscale=0.7), net, seed=0,
                       first_fit=3)
    assert isinstance(exact, IncrementalGP)
    assert (exact.config.first_fit, exact.config.lengthscale) == (3, 0.7)
    with pytest.raises(ConfigError, match="not a setting of the exact learner"):
        make_model(AgentSpec(model="gp", policy="ucb"), net, seed=0, num_inducing=57)
    with pytest.raises(ConfigError, match="unknown learner"):
        make_model(AgentSpec(model="gp", policy="ucb", learner="magic"), net, seed=0)
    with pytest.raises(ConfigError, match="BI models take no GP settings"):
        make_model(AgentSpec(model="bi", policy="ucb"), net, seed=0, num_inducing=57)


@pytest.mark.parametrize("policy", ["ts", "bucb"])
def test_past_the_exact_learners_size_the_regional_learner_runs_and_resumes_exactly(
    policy, tmp_path, monkeypatch
):
    """Above MAX_EXACT_SEGMENTS a GP agent gets the regional learner (issue 26 item 5), fitting
    its hyperparameters on the exact learner's schedule, and a run resumed from a checkpoint
    gives the very rows of an uninterrupted one (its per-trip updates restart from the
    statistics at each checkpoint; the fits' rows come from the checkpointed generator)."""
    import ev_nav.sim.fleet as fleet
    from ev_nav.gp.regional import RegionalGP

    monkeypatch.setattr(fleet, "MAX_EXACT_SEGMENTS", 300)  # NET has 400 segments
    spec = _spec(AgentSpec(model="gp", policy=policy), horizon=16)
    full = run_one(spec, tmp_path / "full", checkpoint_every=4)
    assert isinstance(full.model, RegionalGP)
    assert [f["update"] for f in full.model.fits] == [10, 15]
    part = run_one(spec, tmp_path / "part", checkpoint_every=4, stop_after=6)
    assert not part.finished
    resumed = run_one(spec, tmp_path / "part", checkpoint_every=4)
    pd.testing.assert_frame_equal(pd.DataFrame(full.rows), pd.DataFrame(resumed.rows))
    np.testing.assert_array_equal(full.model.posterior().mean, resumed.model.posterior().mean)
    np.testing.assert_array_equal(full.model.posterior().std, resumed.model.posterior().std)
    # and it learned: the driven segments' posterior left the prior
    post = full.model.posterior()
    driven = np.flatnonzero(full.model.n_obs > 0)
    assert driven.size and np.all(post.std[driven] < 0.99 * RegionalGP(
        full.model.net, config=full.model.config).posterior().std[driven])
    still = fleet.make_model(AgentSpec(model="gp", learn_hyperparameters=False),
                             load_network(NET), 0)
    assert not still.config.learn_hyperparameters


def test_a_segment_id_of_the_town_built_is_accepted(tmp_path):
    # the town asked for 300 segments has 303: id 301 is one of its roads (it was refused
    # against the size asked for)
    cfg = tmp_path / "fleet.toml"
    cfg.write_text("horizon = 2\n[network]\nn_segments = 300\n[[routes]]\nstart = 3\ngoal = 301\n")
    (spec,), _ = specs_from_toml(cfg)
    assert spec.trips.goal == 301 and load_network(spec.network).n_segments == 303


@pytest.mark.filterwarnings("ignore:West-Oakland. no elevation source")  # (flat: no matter)
@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ("[[routes]]\nstart = 3\ngoal = 50",
         "[[routes]] 'route' goal = 50 is no segment of West-Oakland (it has 50: ids 0..49)"),
        ("[[routes]]\nstart = [8.0, 47.0]\ngoal = 40", "[[routes]] 'route' on West-Oakland: "),
        ('[[routes]]\nkind = "random"\nmin_distance_m = 5000.0',
         "[[routes]] 'route' on West-Oakland: no origin–destination pair 5000.0 m apart"),
        ('[[routes]]\nstart = 3\ngoal = 40\n[truth]\nkind = "file"\npath = "truth.csv"',
         "was written for another network"),
        # (the default random route: 1000 m apart, the extract is 911 m across)
        ('[truth]\nkind = "file"\npath = "truth.csv"', "[[routes]] 'random' on West-Oakland"),
    ],
)
def test_routes_and_truth_file_are_checked_on_an_osm_network_before_any_run(
    tmp_path, capsys, monkeypatch, network_cache, shared_file, table, fragment
):
    """The checks ran on town and file networks only: on an OSM extract each of these failed
    every run separately (FAILED lines, error.txt, run folders left behind)."""
    monkeypatch.setenv("EV_NAV_CACHE", str(network_cache))
    from ev_nav.sim.environment import save_truth

    save_truth(tmp_path / "truth.csv", Environment.create(load_network(NET), seed=0))
    osm = shared_file("West-Oakland.osm.bz2")
    text = f'horizon = 2\n[network]\nkind = "osm"\npath = "{osm}"\n{table}\n'
    _refused_before_any_run(tmp_path, capsys, text, fragment, ConfigError)


@pytest.mark.parametrize("goal", ["on-start", "a-metre-off"])
def test_a_fixed_route_whose_ends_are_one_segment_is_refused(tmp_path, capsys, goal):
    """A segment id and a coordinate on that segment (or two coordinates a metre apart) passed
    the check of equal start and goal: every run drove no trip, with regret 0 throughout."""
    net = load_network(NetworkSpec())
    lon, lat = (float(x) for x in net.segment_midpoints()[3])
    # (a two-way road's other direction has the same midpoint: this side of it is segment 3)
    assert net.nearest_segment(lon, lat) == net.nearest_segment(lon - 1e-5, lat) == 3
    start, end = ("3", f"[{lon}, {lat}]") if goal == "on-start" else (
        f"[{lon}, {lat}]", f"[{lon - 1e-5}, {lat}]")
    text = f'horizon = 2\n[[routes]]\nname = "A"\nstart = {start}\ngoal = {end}\n'
    with pytest.raises(ConfigError, match=r"fleet\.toml: \[\[routes\]\] 'A' on synthetic-2000: "
                       r"start .+ and goal .+ are the same segment \(3\); no trip"):
        (tmp_path / "fleet.toml").write_text(text)
        specs_from_toml(tmp_path / "fleet.toml")
    _refused_before_any_run(tmp_path, capsys, text, "are the same segment (3); no trip",
                            ConfigError)


def test_a_damaged_checkpoint_says_how_to_restart_its_run(tmp_path):
    """A truncated checkpoint gave "checkpoint damaged or not readable" on every resume, with
    no way on; it names the file to set aside, and doing so restarts that run from round 1."""
    from ev_nav.errors import ModelStateError
    from ev_nav.sim.fleet import CHECKPOINT_NAME

    spec = _spec(AgentSpec(model="bi"), horizon=4)
    run_dir = tmp_path / "run"
    run_one(spec, run_dir, checkpoint_every=1, stop_after=2)
    ckpt = run_dir / CHECKPOINT_NAME
    ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    with pytest.raises(ModelStateError, match=re.escape(
            f"{ckpt}: checkpoint damaged or not readable") + r".*; move that file out of the "
            r"way \(or delete it\) and resume: run " + re.escape(spec.run_id)
            + " then starts again from round 1"):
        run_one(spec, run_dir)
    ckpt.unlink()
    assert [r["t"] for r in run_one(spec, run_dir).rows][::2] == [1, 2, 3, 4]
