"""Helpers of the CLI tests: run a command in process, name a segment by coordinates."""

from __future__ import annotations

import numpy as np
import pytest

from ev_nav.cli import main
from ev_nav.roads.network import RoadNetwork


def latlon(net: RoadNetwork, e: int) -> str:
    """``LAT,LON`` of segment ``e``'s anchor point, as the CLI's --from/--to take it."""
    lon, lat = net.segment_anchor(e)
    return f"{lat:.7f},{lon:.7f}"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """``ev-nav ARGV`` in this process: (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def driven_part(route: dict) -> np.ndarray:
    """The part of each segment of a route document driven (by hand from its end fractions,
    independently of ``ev_nav.roads.partial``)."""
    seg = np.asarray(route["segments"])
    fs, fg = route["start_fraction"], route["end_fraction"]
    h = np.ones(seg.size)
    h[0], h[-1] = (fg - fs, fg - fs) if seg.size == 1 else (1 - fs, fg)
    return h
