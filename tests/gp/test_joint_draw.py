"""Joint Thompson draws (issue 26 item 3, issue 27 item 3): the exact learner's joint draw has
the dense posterior's covariance, BI's equals the paper's independent draw bit for bit, and a
draw from a posterior the model has since updated is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ev_nav.bandits.indices import ThompsonIndex, make_index
from ev_nav.errors import ModelStateError
from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP
from ev_nav.gp.independent import BIModel
from ev_nav.gp.testing import load_real, random_route, subnetwork


@pytest.fixture(scope="module")
def learned():
    net = subnetwork(load_real(), 60, seed=3)
    model = IncrementalGP(net, config=IncrementalConfig(learn_hyperparameters=False), seed=0)
    rng = np.random.default_rng(7)
    for _ in range(4):
        path = random_route(net, 8, rng)
        model.update(path, model.prior_mean[path] + rng.normal(0.0, 5.0, path.size))
    return net, model


def test_joint_draws_have_the_dense_posterior_covariance(learned):
    net, model = learned
    n = net.n_segments
    # the dense posterior, independently: prior kernel conditioned on the same data
    with torch.no_grad():
        k = model.kernel.cross_all(np.arange(n)).numpy()
    cov = model.route_covariance(np.arange(n))
    post = model.posterior()
    draws = 20_000
    rng = np.random.default_rng(11)
    f = np.stack([post.mean + post.std * post.joint_scores(rng) for _ in range(draws)])
    emp = np.cov(f, rowvar=False)
    sd = np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    # sampling error of a covariance entry is ≈ sd_i sd_j √((1 + ρ²)/draws) ≤ √(2/draws)·sd
    assert np.all(np.abs(emp - cov) <= 5.0 * np.sqrt(2.0 / draws) * sd + 1e-9)
    # the correlations are real (not the independent form): some pair is strongly correlated
    rho = cov / sd
    np.fill_diagonal(rho, 0.0)
    assert np.abs(rho).max() > 0.5
    # and the data shrank it below the prior
    assert np.trace(cov) < np.trace(0.5 * (k + k.T))
    # each segment's draws are standard normal scores
    z = np.stack([post.joint_scores(rng) for _ in range(2000)])
    assert np.abs(z.mean(axis=0)).max() < 5.0 / np.sqrt(2000)
    assert np.abs(z.std(axis=0) - 1.0).max() < 0.1


def test_bi_joint_draw_is_the_independent_draw():
    net = subnetwork(load_real(), 40, seed=2)
    model = BIModel(net)
    post = model.posterior()
    ts, joint = make_index("ts"), make_index("ts-joint")
    assert isinstance(joint, ThompsonIndex) and joint.joint and joint.name == "ts-joint"
    a = ts.score(post, 1, np.random.default_rng(5))
    b = joint.score(post, 1, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)


def test_a_stale_posterior_refuses_to_draw(learned):
    net, model = learned
    post = model.posterior()
    post.joint_scores(np.random.default_rng(0))
    path = random_route(net, 5, np.random.default_rng(3))
    model.update(path, model.prior_mean[path])
    with pytest.raises(ModelStateError, match="updated"):
        post.joint_scores(np.random.default_rng(0))
    model.posterior().joint_scores(np.random.default_rng(0))  # the new one draws
