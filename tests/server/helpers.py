"""Helpers shared by the fleet-service tests."""

from __future__ import annotations

import numpy as np


def far_points(net) -> tuple[tuple[float, float], tuple[float, float]]:
    """Two (lat, lon) points near opposite corners of ``net``."""
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    a, b = order[3], order[-3]
    return (mid[a, 1], mid[a, 0]), (mid[b, 1], mid[b, 0])
