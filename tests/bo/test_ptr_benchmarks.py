"""Benchmark landscapes against the spec's reference numbers (§4.7, §6.3) and the simulators."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from ev_nav.bo.ptr.problems import (
    TEST_FUNCTIONS,
    DegenerateProblemWarning,
    gamma_weights,
    make_problem,
    newsvendor_profit,
    sir_peak_infected,
)
from ev_nav.errors import ConfigError


def test_benchmarks_pose_the_shared_test_functions():
    """The grid values are the package's test functions (maximisation form) on the domains."""
    prob = make_problem("mccormick")
    spec = TEST_FUNCTIONS["mccormick"]
    a = -1.5 + (prob.x_points[7, 0] + 1.0) * (4 - -1.5) / 2.0
    b = -3.0 + (prob.w_points[11, 0] + 1.0) * (4 - -3.0) / 2.0
    assert prob.f_true[7, 11] == pytest.approx(float(spec.func.numpy([[a, b]])[0]), rel=1e-15)


@pytest.mark.parametrize(
    ("name", "max_p", "argmax", "h_size"),
    [
        ("mccormick", 0.812, 22, None),
        ("himmelblau", 0.980, 8, 23),
        ("rosenbrock", 0.611, 15, None),
        ("goldstein-price-a09", None, None, 34),
    ],
)
def test_reference_landscapes(name, max_p, argmax, h_size):
    prob = make_problem(name)
    p = prob.p_true
    if max_p is not None:
        assert round(float(p.max()), 3) == max_p
        assert int(np.argmax(p)) == argmax
    if h_size is not None:
        assert int(prob.true_level_set().sum()) == h_size


def test_mccormick_objectives_disagree():
    prob = make_problem("mccormick")
    p = prob.p_true
    x_g = int(np.argmax(prob.f_true @ prob.p_w))  # maximiser of E_w f
    x_ew = int(np.argmax(prob.f_true[:, prob.ew_index]))  # maximiser of f(x, E[w])
    assert round(float(p[x_g]), 3) == 0.780
    assert round(float(p[x_ew]), 3) == 0.741


def test_goldstein_price_alpha_half_is_flagged_degenerate():
    with pytest.warns(DegenerateProblemWarning, match="H"):
        prob = make_problem("goldstein-price")
    assert int(prob.true_level_set().sum()) == 50


def test_gamma_weights_conventions():
    w = np.linspace(-1, 1, 50)
    ps, pr = gamma_weights(w, "scale"), gamma_weights(w, "rate")
    assert ps[0] == 0 and pr[0] == 0
    assert np.argmax(ps) < np.argmax(pr)  # mode at -0.5 vs 1 (rate): scale puts mass lower
    with pytest.raises(ConfigError):
        gamma_weights(w, "shape")


def test_gp_test_draws_are_non_degenerate_and_seeded():
    a = make_problem("gp-test", seed=4, task="opt")
    b = make_problem("gp-test", seed=4, task="opt")
    np.testing.assert_array_equal(a.f_true, b.f_true)
    p = a.p_true
    assert p.max() < 0.999 and np.sum(p >= p.max() - 1e-12) == 1
    lse = make_problem("gp-test", seed=4, task="lse")
    assert 1 <= lse.true_level_set().sum() <= 49
    assert isinstance(a.info["rejected_draws"], int)


def test_sir_rk4_matches_solve_ivp():
    def rhs(_t, y, b, g):
        s, i = y
        return [-b * s * i / 1000.0, b * s * i / 1000.0 - g * i]

    for b, g in [(0.3, 0.15), (0.55, 0.11), (0.2, 0.4)]:
        sol = solve_ivp(
            rhs, (0, 100), [999.0, 1.0], args=(b, g), rtol=1e-9, atol=1e-9, dense_output=True
        )
        peak = sol.sol(np.linspace(0, 100, 20001))[1].max()
        assert sir_peak_infected(np.array(b), np.array(g)) == pytest.approx(peak, rel=1e-3)


def test_sir_reconstruction_landscape():
    prob = make_problem("sir")
    assert round(float(prob.p_true.max()), 3) == 0.996
    assert int(prob.true_level_set().sum()) == 15


def test_newsvendor_profit_basic_properties():
    rng = np.random.default_rng(0)
    x = np.array([[0.0, 0.0], [20.0, 25.0], [50.0, 50.0]])
    w = np.full((3, 2), 50.0)
    prof = newsvendor_profit(x, w, 300, rng)
    assert prof[0] == 0.0  # nothing stocked, nothing sold
    assert prof[1] > 300.0  # near the reported optimum region
    assert prof[2] < prof[1]  # overstocking costs
    # Each customer buys at most one unit: revenue bounded by 50 × the dearer price.
    assert np.all(prof <= 50 * 23.0)
