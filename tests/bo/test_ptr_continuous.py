"""BPT-TS (random Fourier features) and BPT-UCB over a continuous design interval."""

from __future__ import annotations

import numpy as np
import pytest

from ev_nav.bo.ptr.continuous import candidate_designs, run_continuous
from ev_nav.bo.ptr.measure import ptr_of_values
from ev_nav.errors import ConfigError

W = np.linspace(-1, 1, 21)
P_W = np.exp(-0.5 * (W / 0.5) ** 2) / np.exp(-0.5 * (W / 0.5) ** 2).sum()


def f(x: np.ndarray, w: np.ndarray) -> float:
    """p_upper(x) = P(w² < 0.8 − 4(x − 0.2)²): unique peak region around x = 0.2."""
    return 0.8 - 4.0 * (x[0] - 0.2) ** 2 - w[0] ** 2


def p_true(x: float) -> float:
    vals = np.array([[f(np.array([x]), np.array([w])) for w in W]])
    return float(ptr_of_values(vals, P_W, 0.0)[0])


@pytest.mark.parametrize("method", ["bpt-ts", "bpt-ucb"])
def test_continuous_methods_find_a_near_optimal_design(method):
    r = run_continuous(f, np.array([[-1.0, 1.0]]), W, P_W, 0.0, 15, method=method, seed=2)
    best = p_true(0.2)
    assert best - p_true(float(r.reported[-1, 0])) <= 0.05
    assert r.X.shape == (15, 1) and np.all(np.abs(r.X) <= 1.0)
    # Environment picks follow eq. 4, which ignores p(w): some are away from the mode.
    assert r.w_index.min() >= 0 and r.w_index.max() < 21


def test_continuous_run_is_deterministic():
    a = run_continuous(f, np.array([[-1.0, 1.0]]), W, P_W, 0.0, 5, seed=4)
    b = run_continuous(f, np.array([[-1.0, 1.0]]), W, P_W, 0.0, 5, seed=4)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.w_index, b.w_index)


def test_bad_inputs():
    with pytest.raises(ConfigError):
        candidate_designs(np.array([[1.0, 0.0]]), 4, 0)
    with pytest.raises(ConfigError):
        run_continuous(f, np.array([[-1.0, 1.0]]), W, P_W, 0.0, 2, method="gp-ucb")
