"""Experiment reports: per-seed tables and the GP-vs-BI comparison of Fig. 2 (issue 15)."""

import re

import pandas as pd

from ev_nav.sim.report import model_comparison, per_seed_markdown


def _results():
    rows = []
    finals = {("GP-TS", 0): 10.0, ("GP-TS", 1): 30.0, ("BI-TS", 0): 50.0, ("BI-TS", 1): 70.0,
              ("GP-UCB", 0): 90.0, ("GP-UCB", 1): 110.0, ("BI-UCB", 0): 80.0, ("BI-UCB", 1): 100.0}
    for (agent, seed), total in finals.items():
        for t in (1, 2):  # the final regret is the sum over trips
            rows.append({"network": "m", "route": "A", "agent": agent, "seed": seed, "t": t,
                         "regret_wh": total / 2, "run_id": f"{agent}-s{seed}"})
    return pd.DataFrame(rows)


def test_per_seed_table_sums_each_run():
    table = per_seed_markdown(_results())
    assert "| m | A | GP-TS | 10 | 30 |" in table
    assert "| m | A | BI-UCB | 80 | 100 |" in table
    assert table.splitlines()[0].endswith("seed 0 | seed 1 |")


def test_per_seed_table_averages_runs_of_one_label_and_seed():
    """Two runs with one label and seed (a sweep whose labels do not name what it varies) were
    added up: 'seed 0 = 21' for two runs of 10 and 11 Wh."""
    other = _results()
    other = other[other["agent"] == "GP-TS"].assign(
        regret_wh=lambda d: d["regret_wh"] + 1.0, run_id=lambda d: d["run_id"] + "-other")
    table = per_seed_markdown(pd.concat([_results(), other], ignore_index=True))
    assert "| m | A | GP-TS | 11 | 31 |" in table  # (10 + 12) / 2 and (30 + 32) / 2


def test_model_comparison_counts_orderings_and_the_ts_ratio():
    final = _results().groupby(["network", "route", "agent", "seed"])["regret_wh"].sum()
    summary = final.groupby(["network", "route", "agent"]).agg(["mean", "std", "count"])
    summary = summary.reset_index().rename(columns={"mean": "final_cum_regret_mean"})
    summary["se"] = summary["std"] / summary["count"] ** 0.5
    text = model_comparison(summary)
    assert "| m | A | TS | 20 ± 10 | 60 ± 10 | yes |" in text
    assert "| m | A | UCB | 100 ± 10 | 90 ± 10 | **no** |" in text
    assert "GP below BI: 1 of 2 (route, rule) pairs." in text
    assert "20 / 60 = 0.33" in text


def test_a_cell_of_one_run_has_no_standard_error(tmp_path, capsys, monkeypatch):
    """One run showed '413.2 ± 0.0 | 1' and a zero-width band, as if certain; its SE is
    undefined: 'n/a' in the tables, empty in summary.csv, no band (two runs still get one)."""
    import matplotlib.axes

    from ev_nav.cli import main

    bands = []
    draw = matplotlib.axes.Axes.fill_between
    monkeypatch.setattr(matplotlib.axes.Axes, "fill_between",
                        lambda ax, *a, **k: bands.append(a) or draw(ax, *a, **k))
    for seeds in ("[0]", "[0, 1]"):
        cfg = tmp_path / "fleet.toml"
        cfg.write_text(f'horizon = 2\nseeds = {seeds}\n[network]\nn_segments = 400\n'
                       '[[routes]]\nstart = 3\ngoal = 40\n[[agents]]\nmodel = "bi"\n',
                       encoding="utf-8")
        out = tmp_path / f"out{len(seeds)}"
        assert main(["fleet", "run", str(cfg), "--quiet", "--out", str(out)]) == 0
        row = next(ln for ln in (out / "summary.md").read_text().splitlines() if "BI-TS" in ln)
        se = pd.read_csv(out / "summary.csv")["se"]
        if seeds == "[0]":
            assert re.search(r"\| [\d,.]+ ± n/a \| 1 \|$", row) and se.isna().all()
            assert not bands
            assert row in capsys.readouterr().out
        else:
            assert re.search(r"\| [\d,.]+ ± [\d,.]+ \| 2 \|$", row) and se.notna().all()
            assert len(bands) == 1


def test_model_comparison_of_single_runs_says_the_se_is_undefined():
    final = _results().groupby(["network", "route", "agent", "seed"])["regret_wh"].sum()
    one = final.xs(0, level="seed").reset_index().rename(
        columns={"regret_wh": "final_cum_regret_mean"}).assign(se=float("nan"))
    assert "| m | A | TS | 10 ± n/a | 50 ± n/a | yes |" in model_comparison(one)
