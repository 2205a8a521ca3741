"""scripts/bench_demo.py --quick times a small demo with one thread and with the default
settings beside a busy loop and prints the ratio (no timing is asserted: the README quotes a
full run); ``ev-nav demo --threads`` refuses a bad count in one line."""

import re
import subprocess
import sys
from pathlib import Path

from ev_nav.cli import main

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_demo.py"


def test_bench_demo_quick():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--busy", "1"],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for key in ("1 busy loop(s) beside the demo", "demo one-thread:", "demo default:"):
        assert key in proc.stdout
    ratio = re.search(r"demo default/one-thread ratio under load: (\d+\.\d\d)$", proc.stdout, re.M)
    assert ratio is not None and float(ratio.group(1)) > 0


def test_demo_refuses_a_bad_thread_count(capsys):
    assert main(["demo", "--threads", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ev-nav: error:") and "--threads" in err and err.count("\n") == 1


def test_demo_refuses_zero_counts_and_a_town_out_of_range(capsys):
    # a zero count was taken and failed after the town was built, advising '--resume' (which the
    # demo does not have); a town size out of range was silently built at another size
    for argv in (["--rounds", "0"], ["--vehicles", "0"], ["--seeds", "-1"], ["--segments", "5"]):
        assert main(["demo", *argv]) == 2, argv
        out, err = capsys.readouterr()
        assert out == "", argv  # refused before any work
        assert err.startswith("ev-nav: error:") and argv[0] in err and err.count("\n") == 1


def test_demo_refuses_a_town_too_small_for_its_trips(capsys):
    # it failed after the town's summary with "no origin–destination pair 1500.0 m apart"
    assert main(["demo", "--segments", "300"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("ev-nav: error: a town of 300 segments has too few places 1.5 km apart")
    assert "use a larger --segments" in err


def test_demo_refuses_a_file_as_its_folder(tmp_path, capsys):
    a_file = tmp_path / "maps"
    a_file.write_text("mine", encoding="utf-8")
    assert main(["demo", "--out", str(a_file)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"ev-nav: error: --out {a_file} is a file; give the folder to " \
        "write the demo in\n"
    assert a_file.read_text(encoding="utf-8") == "mine"


def test_demo_table_counts_only_its_own_runs(tmp_path, capsys):
    # two demos into one folder: the second table averaged the first one's runs into its own
    common = ["demo", "--quiet", "--segments", "600", "--vehicles", "2", "--out", str(tmp_path)]
    assert main([*common, "--rounds", "2", "--seeds", "2"]) == 0
    capsys.readouterr()
    assert main([*common, "--rounds", "3", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "Fleet of 2 vehicles, 3 rounds, 1 world:" in out
    rows = [line for line in out.splitlines() if line.startswith("| town |")]
    assert [r.split("|")[3].strip() for r in rows] == ["GP-TS", "BI-TS", "random"]
    assert all(r.rstrip(" |").split("|")[-1].strip() == "1" for r in rows), rows


def test_demo_regret_figure_counts_rounds_of_the_fleet(tmp_path, monkeypatch, capsys):
    # each round is one trip per vehicle, its regret summed over them: the x axis said "trip t"
    # and ticked round 1.2, 1.4, ... between the rounds
    import ev_nav.viz.regret as regret

    figures = []
    save = regret._save
    monkeypatch.setattr(regret, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    argv = ["demo", "--quiet", "--segments", "600", "--vehicles", "3", "--rounds", "2",
            "--seeds", "1", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    (ax,) = [a for a in figures[0].axes if a.get_visible()]
    assert ax.get_xlabel() == "round t (3 vehicles, a trip each)"
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert (tmp_path / "demo-regret.png").stat().st_size > 0


def test_demo_help_names_each_default(capsys):
    # the demo's help gave no default but --threads' (the README quotes the defaults' timings)
    assert main(["demo", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for fragment in ("[segments] (default 1200)", "rounds (default 30)", "round (default 4)",
                     "world (default 2)", "folder (default maps)", "(default 1:"):
        assert fragment in text, fragment
