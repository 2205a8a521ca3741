"""``scripts/diagnose_gp_ucb.py``: a short rerun of a Fig. 2 spec with a chosen inducing-set size.

The script is how the Luxembourg GP-UCB gap was traced to the inducing-set capacity; these
checks keep its ``--num-inducing`` option honest (the model really gets that M, and bad values
are refused before any work starts).
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "diagnose_gp_ucb.py"


def test_num_inducing_reaches_the_model():
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--variant",
            "default",
            "--network",
            "monaco",
            "--route",
            "A",
            "--horizon",
            "3",
            "--num-inducing",
            "40",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert re.search(r"default SVGP-UCB monaco A seed 0: cumulative -?[\d,]+ Wh", out)
    m = re.search(r"driven segments (\d+), of them outside Z (\d+) \(M = 40\)", out)
    assert m is not None, out
    # three trips along one route drive more than 40 distinct segments of Monaco, and the
    # inducing set holds at most M of them
    driven, outside = int(m.group(1)), int(m.group(2))
    assert driven > 40 and outside == driven - 40


@pytest.mark.parametrize("bad", ["0", "-5"])
def test_num_inducing_below_one_is_refused(bad):
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--num-inducing", bad],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert "--num-inducing must be >= 1" in res.stderr
    assert "Traceback" not in res.stderr


def test_algorithm_3_variants_are_refused_for_the_exact_learner():
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--agent", "GP-UCB", "--variant", "exact"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert "apply to Algorithm 3 (SVGP-*) agents only" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_run_of_no_fig2_spec_is_refused():
    # an agent, network or route of no Fig. 2 run used to print nothing and exit 0
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--agent", "GP-UCBX", "--horizon", "2"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no Fig. 2 run is GP-UCBX on monaco route A; agents: BI-BUCB" in proc.stderr
    assert "Traceback" not in proc.stderr
