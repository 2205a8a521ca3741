"""Run ids: a whole number in a real-valued field is the same run as the real number, and the
folders earlier versions wrote under the other id are taken over by a resumed grid."""

import pandas as pd
import pytest

from ev_nav.cli import main
from ev_nav.sim.environment import TruthSpec
from ev_nav.sim.fleet import (
    CHECKPOINT_NAME,
    AgentSpec,
    NetworkSpec,
    RunSpec,
    TripSpec,
    _load_checkpoint,
    _save_checkpoint,
    run_dir_for,
    run_one,
)
from ev_nav.sim.grid import make_executor, run_grid

NET = NetworkSpec(kind="synthetic", n_segments=300, seed=5)
TRIPS = TripSpec(kind="random", vehicles=2, min_distance_m=400.0, name="rnd")


def _spec(lengthscale, beta_scale) -> RunSpec:
    return RunSpec(
        network=NET,
        agent=AgentSpec(model="bi", policy="ucb", beta_scale=beta_scale),
        trips=TRIPS,
        truth=TruthSpec(lengthscale=lengthscale),
        horizon=8,
        seed=1,
    )


def test_whole_and_real_numbers_are_one_run():
    whole, real = _spec(2, 1), _spec(2.0, 1.0)
    assert whole.run_id == real.run_id
    # the id earlier versions gave each: the real-valued spec's is unchanged (its folders keep
    # their names), the whole-number spec's was another one
    assert real.legacy_run_id == real.run_id
    assert whole.legacy_run_id != whole.run_id
    assert _spec(3.0, 1.0).run_id != real.run_id  # a different value is still a different run
    # a segment id is a whole number in a field that also takes coordinates: not normalised;
    # coordinates are real numbers, written whole or not
    a = RunSpec(trips=TripSpec(start=3, goal=9))
    b = RunSpec(trips=TripSpec(start=(3.0, 0.0), goal=9))
    assert a.run_id != b.run_id
    c = RunSpec(trips=TripSpec(start=(3, 0), goal=9))
    assert c.run_id == b.run_id and c.legacy_run_id != c.run_id
    assert b.legacy_run_id == b.run_id


def test_a_config_with_1_and_1_0_makes_one_run_and_is_refused_as_a_repeat(tmp_path, capsys):
    cfg = tmp_path / "grid.toml"
    cfg.write_text(
        "horizon = 2\n[network]\nkind = 'synthetic'\nn_segments = 300\nseed = 5\n"
        "[[agents]]\nmodel = 'bi'\npolicy = 'ucb'\nbeta_scale = 1\n"
        "[[agents]]\nmodel = 'bi'\npolicy = 'ucb'\nbeta_scale = 1.0\n"
    )
    assert main(["fleet", "grid", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "twice" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "runs").exists()


def _as_written_before(run_dir, spec: RunSpec) -> None:
    """Turn a run folder into what an earlier version left: the legacy id in its files and in
    its name."""
    legacy = spec.legacy_run_id
    for name in ("trips.csv", "metadata.json"):
        path = run_dir / name
        if path.is_file():
            path.write_text(path.read_text().replace(spec.run_id, legacy))
    state = _load_checkpoint(run_dir / CHECKPOINT_NAME)
    if state is not None:
        for row in state.rows:
            row["run_id"] = legacy
        _save_checkpoint(run_dir / CHECKPOINT_NAME, state)
    run_dir.rename(run_dir.parent / legacy)


def _grid(spec: RunSpec, out) -> tuple[str, pd.DataFrame]:
    res = run_grid([spec], out, executor=make_executor("inprocess"), progress=False)
    assert not res.failed, res.failed
    return res.outcomes[0].status, pd.read_csv(out / "results.csv")


@pytest.mark.parametrize("finished", [True, False], ids=["finished", "half-way"])
def test_a_resumed_grid_takes_over_the_folder_an_earlier_version_wrote(tmp_path, finished):
    spec = _spec(2, 1)
    status, reference = _grid(spec, tmp_path / "ref")
    assert status == "done"

    out = tmp_path / "old"
    run_dir = run_dir_for(out, spec.run_id)
    part = run_one(spec, run_dir, checkpoint_every=2, stop_after=None if finished else 5)
    assert part.finished == finished
    _as_written_before(run_dir, spec)
    legacy_dir = run_dir_for(out, spec.legacy_run_id)
    assert legacy_dir.is_dir() and not run_dir.exists()

    expected = reference.copy()
    if not finished:
        # mark the checkpoint's first trip: the marked row in the results shows that the run
        # went on from the checkpoint instead of driving its first rounds again
        state = _load_checkpoint(legacy_dir / CHECKPOINT_NAME)
        state.rows[0]["regret_wh"] += 1000.0
        _save_checkpoint(legacy_dir / CHECKPOINT_NAME, state)
        expected.loc[0, "regret_wh"] += 1000.0
        expected["cum_regret_wh"] += 1000.0

    status, results = _grid(spec, out)
    assert status == ("skipped" if finished else "done")
    pd.testing.assert_frame_equal(results, expected, check_exact=finished, rtol=1e-12)
    assert not legacy_dir.exists() and (run_dir / "trips.csv").is_file()
    for path in run_dir.iterdir():
        if path.suffix in (".csv", ".json"):
            assert spec.legacy_run_id not in path.read_text(), path.name


def test_a_grid_without_resume_leaves_the_old_folder_alone(tmp_path):
    spec = _spec(2, 1)
    out = tmp_path / "o"
    run_dir = run_dir_for(out, spec.run_id)
    run_one(spec, run_dir)
    _as_written_before(run_dir, spec)
    res = run_grid(
        [spec], out, executor=make_executor("inprocess"), progress=False, resume=False
    )
    assert [o.status for o in res.outcomes] == ["done"]
    assert run_dir_for(out, spec.legacy_run_id).is_dir()


def test_an_adoption_that_fails_is_tried_again_on_the_next_resume(tmp_path, monkeypatch):
    # it made the run's new folder to hold error.txt: the next resume saw the folder, never
    # adopted, and ran the run over beside the old one (which a report then counted twice)
    import ev_nav.sim.grid as grid

    spec = _spec(2, 1)
    _, reference = _grid(spec, tmp_path / "ref")
    out = tmp_path / "o"
    run_dir = run_dir_for(out, spec.run_id)
    run_one(spec, run_dir)
    _as_written_before(run_dir, spec)

    def refuse(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(grid, "adopt_legacy_run", refuse)
    res = run_grid([spec], out, executor=make_executor("inprocess"), progress=False)
    (outcome,) = res.outcomes
    assert outcome.status == "failed" and "Permission denied" in outcome.error
    assert not run_dir.exists() and run_dir_for(out, spec.legacy_run_id).is_dir()
    monkeypatch.undo()
    status, results = _grid(spec, out)
    assert status == "skipped" and not run_dir_for(out, spec.legacy_run_id).exists()
    pd.testing.assert_frame_equal(results, reference, check_exact=True)
