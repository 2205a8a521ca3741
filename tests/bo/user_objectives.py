"""Objectives a user writes (loaded by the tests as ``module:function`` and ``file.py:function``).

``bowl`` has its maximum 2 at (0.5, 1.2); its partial control sets average the other input over
the environment's spread, which costs at least 0.64 of value, so the full set is the one to
recommend. ``robust`` maximises ``P_w[f(x, w) > 0]`` = 0.5 for every design with
``|x - 0.3| < 0.115`` (``4 (x - 0.3)² < 1/19``, the smallest positive ``w`` on the grid).
"""

from __future__ import annotations

import numpy as np

from ev_nav.bo import Categorical, Integer, objective

BOWL_OPTIMUM = (0.5, 1.2)
ROBUST_OPTIMA = (0.3 - 0.115, 0.3 + 0.115)


@objective(
    bounds=[(-2.0, 2.0), (-1.0, 3.0)],
    control_sets=[[0], [1], [0, 1]],
    costs=[0.1, 0.1, 1.0],
)
def bowl(x: np.ndarray) -> float:
    return 2.0 - (x[0] - 0.5) ** 2 - (x[1] - 1.2) ** 2


@objective(bounds=[(0.0, 1.0)], environment=[[-1 + 2 * i / 19] for i in range(20)], threshold=0.0)
def robust(x: np.ndarray, w: np.ndarray) -> float:
    return w[0] - 4.0 * (x[0] - 0.3) ** 2


def undeclared(x: np.ndarray) -> float:
    return float(x[0])


# --- cost-varying subsets: a known optimum (regret is reported), its 1e4-scaled copy, and a
# mixed objective (continuous, integer and categorical inputs).
CVS_CONTROL = {"control_sets": [[0], [1], [0, 1]], "costs": [0.1, 0.1, 1.0]}


@objective(bounds=[(-2.0, 2.0), (-1.0, 3.0)], optimum=BOWL_OPTIMUM, **CVS_CONTROL)
def cvs_bowl(x: np.ndarray) -> float:
    return 2.0 - (x[0] - 0.5) ** 2 - (x[1] - 1.2) ** 2


@objective(bounds=[(-2.0, 2.0), (-1.0, 3.0)], optimum=BOWL_OPTIMUM, **CVS_CONTROL)
def cvs_bowl_1e4(x: np.ndarray) -> float:
    return 1e4 * cvs_bowl(x)


MIXED_BONUS = {"a": 0.0, "b": 0.5, "c": 0.2}
MIXED_OPTIMUM = (0.3, 4, "b")


@objective(
    bounds=[(0.0, 1.0), Integer(1, 6), Categorical(["a", "b", "c"])],
    control_sets=[[0], [1, 2], [0, 1, 2]],
    costs=[0.1, 0.1, 1.0],
    optimum=MIXED_OPTIMUM,
    uncontrolled=["uniform", {"mean": 2.0, "std": 1.5}, {"probs": [0.6, 0.2, 0.2]}],
)
def cvs_mixed(x: np.ndarray) -> float:
    """Maximum 0.5 at (0.3, 4, "b"); ``x`` holds a float, an int and a string."""
    assert isinstance(x[1], int) and x[2] in MIXED_BONUS
    return -4.0 * (x[0] - 0.3) ** 2 - 0.1 * (x[1] - 4) ** 2 + MIXED_BONUS[x[2]]
