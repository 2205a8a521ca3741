"""Routes between points part-way along a segment: how much of each segment a route drives.

A trip starts where its origin lies on a road and ends where its goal does, usually part-way
along the first and last segment. Every quantity summed over a route (length, time, energy, the
learner's trip-total observation) counts those two segments with the share driven. This module
is the one place that says which share that is; it imports nothing heavy, so the store can use
it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def driven_shares(n: int, start_fraction: float, end_fraction: float) -> NDArray[np.float64]:
    """Share of each of ``n`` route segments driven.

    Parameters
    ----------
    n : int
        Number of segments listed in the route.
    start_fraction : float
        Where along its first segment the route starts (0 = the segment's start node, 1 = its
        end node).
    end_fraction : float
        Where along its last segment the route ends.

    Returns
    -------
    ndarray of float64, shape (n,)
        1 for every segment but the first (``1 − start_fraction``) and the last
        (``end_fraction``); a one-segment route drives ``end_fraction − start_fraction``.
    """
    shares = np.ones(n)
    if n == 1:
        shares[0] = end_fraction - start_fraction
    elif n > 1:
        shares[0] = 1.0 - start_fraction
        shares[-1] = end_fraction
    return shares
