"""``[truth] kind = "file"``: a world from measured or externally modelled per-segment energies
and noise sds (issue 27 item 2), written by ``save_truth``, checked against the network."""

from __future__ import annotations

import numpy as np
import pytest

from ev_nav.errors import ConfigError
from ev_nav.sim.environment import Environment, TruthSpec, load_truth, save_truth
from ev_nav.sim.fleet import run_one, specs_from_toml


def test_truth_file_round_trips_through_a_fleet_config(town, tmp_path):
    world = Environment.create(town, seed=4, truth=TruthSpec(kind="physical"))
    save_truth(tmp_path / "truth.csv", world)
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(
        'horizon = 3\nseeds = [0]\n[network]\nkind = "synthetic"\nn_segments = 2000\n'
        '[trips]\nkind = "random"\nname = "r"\n[[agents]]\nmodel = "bi"\npolicy = "ts"\n'
        '[truth]\nkind = "file"\npath = "truth.csv"\n',
        encoding="utf-8",
    )
    specs, _ = specs_from_toml(cfg)
    res = run_one(specs[0])
    np.testing.assert_array_equal(res.env.true_energy, world.true_energy)
    np.testing.assert_array_equal(
        res.env.noise_sd(np.arange(town.n_segments)), world.noise_sd(np.arange(town.n_segments))
    )
    assert len(res.rows) == 3 and all(r["regret_wh"] >= -1e-9 for r in res.rows)


def test_bad_truth_files_are_refused(town, luxembourg, tmp_path):
    world = Environment.create(town, seed=4, truth=TruthSpec(kind="physical"))
    path = tmp_path / "truth.csv"
    save_truth(path, world)
    with pytest.raises(ConfigError, match="another network"):
        load_truth(path, luxembourg)
    lines = path.read_text(encoding="utf-8").splitlines()
    short = tmp_path / "short.csv"
    short.write_text("\n".join(lines[1:-1]) + "\n", encoding="utf-8")  # no header, a row short
    with pytest.raises(ConfigError, match="exactly one per segment"):
        load_truth(short, town)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([lines[1], "0,nan,1.0", *lines[3:]]) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="finite"):
        load_truth(bad, town)
    with pytest.raises(ConfigError, match="cannot read"):
        load_truth(tmp_path / "missing.csv", town)
    with pytest.raises(ConfigError, match="needs 'path'"):
        Environment.create(town, seed=0, truth=TruthSpec(kind="file"))


def test_a_truth_file_of_another_network_is_refused_before_any_run(town, tmp_path):
    """It failed every run separately ('FAILED ...' per run, exit 1)."""
    save_truth(tmp_path / "truth.csv", Environment.create(town, seed=4))
    cfg = tmp_path / "fleet.toml"
    cfg.write_text('horizon = 3\n[network]\nkind = "synthetic"\nn_segments = 2000\nseed = 1\n'
                   '[truth]\nkind = "file"\npath = "truth.csv"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"fleet\.toml: \[truth\] truth file .* was written "
                       r"for another network"):
        specs_from_toml(cfg)


def test_a_run_does_not_resume_in_a_changed_world(town, tmp_path):
    """The run id names the truth file, not its contents: a file replaced between an
    interruption and --resume gave one run two worlds (two optima for one fixed trip), and a
    finished run was reused as it was. Both are refused now; the same file resumes."""
    import shutil

    path = tmp_path / "truth.csv"
    save_truth(tmp_path / "a.csv", Environment.create(town, seed=0))
    save_truth(tmp_path / "b.csv", Environment.create(town, seed=7))
    shutil.copy(tmp_path / "a.csv", path)
    cfg = tmp_path / "fleet.toml"
    cfg.write_text('horizon = 6\n[network]\nkind = "synthetic"\nn_segments = 2000\n'
                   '[[routes]]\nname = "A"\nstart = 10\ngoal = 900\n[[agents]]\nmodel = "bi"\n'
                   '[truth]\nkind = "file"\npath = "truth.csv"\n', encoding="utf-8")
    spec = specs_from_toml(cfg)[0][0]
    run_dir = tmp_path / "run"
    run_one(spec, run_dir, checkpoint_every=1, stop_after=3)
    shutil.copy(tmp_path / "b.csv", path)
    with pytest.raises(ConfigError, match=r"was checkpointed at round 3 with other input files "
                       r"\(its truth file changed since\)"):
        run_one(spec, run_dir, checkpoint_every=1)
    shutil.copy(tmp_path / "a.csv", path)  # the same file again: the run goes on, and ends
    whole = run_one(spec, run_dir, checkpoint_every=1)
    assert len(whole.rows) == 6
    shutil.copy(tmp_path / "b.csv", path)
    with pytest.raises(ConfigError, match="was finished with other input files"):
        run_one(spec, run_dir)
    # a run of an earlier version recorded no input files: it is taken as it is
    meta = run_dir / "metadata.json"
    meta.write_text(meta.read_text().replace('"input_files_sha256"', '"other"'))
    assert len(run_one(spec, run_dir).rows) == 6


def test_a_checkpoint_of_an_earlier_version_resumes(town, tmp_path):
    """Checkpoints written before the input files were recorded (no "inputs") still resume, to
    the result of an uninterrupted run."""
    from ev_nav.checkpoints import decode, encode
    from ev_nav.sim.fleet import CHECKPOINT_NAME

    save_truth(tmp_path / "truth.csv", Environment.create(town, seed=0))
    cfg = tmp_path / "fleet.toml"
    cfg.write_text('horizon = 6\n[network]\nkind = "synthetic"\nn_segments = 2000\n'
                   '[[routes]]\nname = "A"\nstart = 10\ngoal = 900\n[[agents]]\nmodel = "bi"\n'
                   '[truth]\nkind = "file"\npath = "truth.csv"\n', encoding="utf-8")
    spec = specs_from_toml(cfg)[0][0]
    whole = run_one(spec, tmp_path / "whole", checkpoint_every=1)
    run_dir = tmp_path / "run"
    run_one(spec, run_dir, checkpoint_every=1, stop_after=3)
    data = decode((run_dir / CHECKPOINT_NAME).read_bytes())
    assert data.pop("inputs") is not None
    (run_dir / CHECKPOINT_NAME).write_bytes(encode(data))
    resumed = run_one(spec, run_dir, checkpoint_every=1)
    assert [r["energy_wh"] for r in resumed.rows] == [r["energy_wh"] for r in whole.rows]


def test_a_truth_file_with_a_negative_cycle_is_refused_before_any_run(tmp_path, capsys):
    """It passed the checks, then every run failed with a NegativeCycleError traceback in its
    error.txt; now one line with the hint drawn worlds give (optimum = 'rectified')."""
    from ev_nav.cli import main
    from ev_nav.sim.fleet import NetworkSpec, load_network

    world = Environment.create(load_network(NetworkSpec(n_segments=400)), seed=0)
    world.true_energy = world.true_energy - 10.0 * np.abs(world.true_energy).max()  # all < 0
    save_truth(tmp_path / "truth.csv", world)
    cfg = tmp_path / "fleet.toml"
    text = ('horizon = 2\n[network]\nn_segments = 400\n[[routes]]\nstart = 3\ngoal = 40\n'
            '[truth]\nkind = "file"\npath = "truth.csv"\n')
    cfg.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"fleet\.toml: \[truth\] path: the energies of .*"
                       r"truth\.csv on synthetic-400 have a negative-energy cycle .* use "
                       r"optimum = 'rectified' in \[truth\]$"):
        specs_from_toml(cfg)
    assert main(["fleet", "run", str(cfg), "--quiet", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    cfg.write_text(text + 'optimum = "rectified"\n', encoding="utf-8")  # the hint works
    assert len(specs_from_toml(cfg)[0]) == 1


def test_the_advice_after_a_changed_truth_file_leads_somewhere(town, tmp_path, capsys):
    """It said "rerun into another folder (or without --resume)", but without --resume the
    command refuses a folder that holds runs; the advice given now works."""
    import shutil

    from ev_nav.cli import main

    save_truth(tmp_path / "a.csv", Environment.create(town, seed=0))
    save_truth(tmp_path / "b.csv", Environment.create(town, seed=7))
    shutil.copy(tmp_path / "a.csv", tmp_path / "truth.csv")
    cfg = tmp_path / "fleet.toml"
    cfg.write_text('horizon = 2\n[network]\nkind = "synthetic"\nn_segments = 2000\n'
                   '[[routes]]\nname = "A"\nstart = 10\ngoal = 900\n[[agents]]\nmodel = "bi"\n'
                   '[truth]\nkind = "file"\npath = "truth.csv"\n', encoding="utf-8")
    out = str(tmp_path / "out")
    spec = specs_from_toml(cfg)[0][0]  # interrupted after round 1:
    run_one(spec, tmp_path / "out" / "runs" / spec.run_id, checkpoint_every=1, stop_after=1)
    shutil.copy(tmp_path / "b.csv", tmp_path / "truth.csv")
    assert main(["fleet", "run", str(cfg), "--quiet", "--out", out, "--resume"]) == 1
    said = capsys.readouterr().out
    assert "restore the file, or run the config into a new folder (--out NEW_FOLDER)" in said
    assert "without --resume" not in said
    assert main(["fleet", "run", str(cfg), "--quiet", "--out", str(tmp_path / "new")]) == 0
