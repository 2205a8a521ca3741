"""The shared test functions: one sign convention (maximise), known optima, used by every family."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ev_nav.bo.boke.problems import get_benchmark
from ev_nav.bo.core.functions import FUNCTIONS, HARTMANN3, HARTMANN6, SPHERE6_RESCALED, get_function
from ev_nav.bo.cvs.benchmarks import make_problem
from ev_nav.bo.ptr.problems import TEST_FUNCTIONS
from ev_nav.errors import ConfigError

D = torch.float64


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_optimal_value_is_reached_at_every_optimizer_and_never_beaten(name):
    f = FUNCTIONS[name]
    X = torch.tensor(f.optimizers, dtype=D)
    np.testing.assert_allclose(f(X).numpy(), f.optimal_value, atol=1e-6, rtol=1e-7)
    u = torch.rand(20_000, f.dim, dtype=D, generator=torch.Generator().manual_seed(0))
    assert float(f.unit(u).max()) <= f.optimal_value + 1e-9
    # the unit-cube front end is the affine map onto the box
    x = f.lower + (f.upper - f.lower) * u[:5]
    torch.testing.assert_close(f.unit(u[:5]), f(x), rtol=0, atol=0)


def test_maximisation_sign_and_textbook_minima():
    assert FUNCTIONS["goldstein-price"].optimal_value == -3.0  # textbook minimum +3
    assert HARTMANN3.optimal_value == pytest.approx(3.86278, abs=1e-5)  # textbook -3.86278
    assert FUNCTIONS["mccormick"].optimal_value == pytest.approx(1.9133, abs=1e-4)


def test_gradients_are_finite_at_the_optima():
    for f in FUNCTIONS.values():
        x = torch.tensor(f.optimizers[:1], dtype=D, requires_grad=True)
        f(x).sum().backward()
        assert torch.isfinite(x.grad).all(), f.name


def test_embedding_and_shift():
    h = HARTMANN6.embedded(12)
    u = torch.rand(10, 12, dtype=D, generator=torch.Generator().manual_seed(1))
    v = u.clone()
    v[:, 6:] = 0.0
    torch.testing.assert_close(h.unit(u), h.unit(v))
    s = SPHERE6_RESCALED.shifted(0.37)
    assert float(s(torch.full((1, 6), 0.37, dtype=D))[0]) == pytest.approx(s.optimal_value)
    with pytest.raises(ConfigError):
        HARTMANN6.embedded(3)
    with pytest.raises(ConfigError):
        get_function("branin")
    with pytest.raises(ConfigError):
        HARTMANN3(torch.zeros(2, 4, dtype=D))


def test_every_family_uses_the_shared_functions():
    """One copy of each formula: the families' benchmarks evaluate the shared functions."""
    u = torch.rand(7, 3, dtype=D, generator=torch.Generator().manual_seed(2))
    cvs = make_problem("hartmann3")
    torch.testing.assert_close(cvs.objective(u), HARTMANN3.unit(u), rtol=0, atol=0)
    assert cvs.f_max == HARTMANN3.optimal_value
    boke = get_benchmark("hartmann3")
    np.testing.assert_array_equal(boke.f_unit(u.numpy()), HARTMANN3.unit(u).numpy())
    assert boke.f_max == HARTMANN3.optimal_value
    assert TEST_FUNCTIONS["himmelblau"].func is FUNCTIONS["himmelblau"]
