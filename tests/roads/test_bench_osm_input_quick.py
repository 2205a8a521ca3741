"""The OSM input benchmark runs (its --quick form) and finds PBF and XML builds identical."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_osm_input.py"


def test_bench_osm_input_quick():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, check=True
    ).stdout
    assert "XML (.osm.gz)" in out and "PBF" in out
    assert "same nodes, segments and turns as XML: True" in out
    assert "identical arrays: True" in out
