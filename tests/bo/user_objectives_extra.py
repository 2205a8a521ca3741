"""More objectives a user writes: a known optimum, a scaled copy, a mixed space, PTR scaled.

``bowl_known`` is ``user_objectives.bowl`` declaring its maximiser; ``bowl_1e4`` is the same
function times 1e4 (the standardisation must make the runs identical in all but units).
``mixed`` has a continuous, an integer and a categorical input; its maximum 1 is at
``(0.3, 3, "b")``. ``robust_1e4`` is ``user_objectives.robust`` with ``f`` and ``h`` times 1e4,
shifted by 5e4 (the PTR is unchanged: ``P[1e4 f + 5e4 > 1e4 h + 5e4] = P[f > h]``).
"""

from __future__ import annotations

import numpy as np

from ev_nav.bo import Categorical, Integer, objective

BOWL_OPTIMUM = (0.5, 1.2)
MIXED_OPTIMUM = (0.3, 3, "b")
_BONUS = {"a": 0.0, "b": 0.5, "c": 0.25}
_W = [[-1 + 2 * i / 19] for i in range(20)]


def _bowl(x: np.ndarray) -> float:
    return 2.0 - (x[0] - 0.5) ** 2 - (x[1] - 1.2) ** 2


@objective(bounds=[(-2.0, 2.0), (-1.0, 3.0)], optimum=BOWL_OPTIMUM)
def bowl_known(x: np.ndarray) -> float:
    return _bowl(x)


@objective(bounds=[(-2.0, 2.0), (-1.0, 3.0)], optimum=BOWL_OPTIMUM)
def bowl_1e4(x: np.ndarray) -> float:
    return 1e4 * _bowl(x)


@objective(bounds=[(0.0, 1.0), Integer(1, 6), Categorical(["a", "b", "c"])], optimum=MIXED_OPTIMUM)
def mixed(x: np.ndarray) -> float:
    assert isinstance(x[1], int) and x[2] in _BONUS  # the objective sees the user's values
    return 0.5 - (float(x[0]) - 0.3) ** 2 - 0.05 * (x[1] - 3) ** 2 + _BONUS[x[2]]


@objective(bounds=[(0.0, 1.0)], environment=_W, threshold=0.0)
def robust(x: np.ndarray, w: np.ndarray) -> float:
    return w[0] - 4.0 * (x[0] - 0.3) ** 2


@objective(bounds=[(0.0, 1.0)], environment=_W, threshold=5e4)
def robust_1e4(x: np.ndarray, w: np.ndarray) -> float:
    return 1e4 * (w[0] - 4.0 * (x[0] - 0.3) ** 2) + 5e4
