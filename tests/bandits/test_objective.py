"""The routing objective in reduced costs (issue 27 item 1): with the truth as the posterior every
rule plans the energy-optimal route; the weights are the truncated-normal functionals of the loss
posterior (checked against scipy); route length in segments does not bias them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ev_nav.bandits.indices import (
    make_index,
    rectified_weights,
    rectify,
    truncated_mean,
    truncated_quantile,
)
from ev_nav.bandits.routing import Router
from ev_nav.gp.posterior import SegmentPosterior
from ev_nav.potential import potential_change
from ev_nav.sim.environment import Environment, TruthSpec
from ev_nav.sim.fleet import TripGenerator, TripSpec

RULES = ("mean", "ts", "bucb", "ucb", "bucb-quantile")
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "oracle_regret.py"


@pytest.fixture(scope="module")
def srtm_monaco(network_cache, shared_file):
    from ev_nav.roads.load import load_osm

    return load_osm(
        shared_file("gh_monaco.osm.gz"), dems=[shared_file("N43E007.hgt.zip")],
        cache_dir=network_cache,
    )


@pytest.mark.parametrize("world", ["town", "srtm_monaco", "luxembourg"])
def test_oracle_weights_have_zero_regret(world, request):
    """A planner handed every segment's true expected energy (σ = 0) drives the exact optimum
    with every rule, on hilly (synthetic town, SRTM Monaco) and flat (Luxembourg) worlds."""
    net = request.getfixturevalue(world)
    env = Environment.create(net, seed=3, truth=TruthSpec(kind="physical"))
    truth = SegmentPosterior(
        mean=env.true_energy.copy(), std=np.zeros(net.n_segments), noise_std=1.0
    )
    dphi = potential_change(net)
    router = Router(net)
    gen = TripGenerator(TripSpec(kind="random", min_distance_m=300.0), net, seed=3)
    pairs = [gen.next() for _ in range(40)]
    for rule in RULES:
        w = rectified_weights(make_index(rule), truth, 7, np.random.default_rng(0), dphi)
        np.testing.assert_allclose(w, np.maximum(env.true_energy - dphi, 0.0), rtol=0, atol=0)
        regrets = [env.regret(router.route(w, s, g), s, g)[0] for s, g in pairs]
        assert max(abs(r) for r in regrets) <= 1e-6, (rule, max(regrets))


def test_equal_energy_routes_get_equal_weight_sums():
    """Two routes between the same points with the same true energy — two long segments
    against twelve short ones — weigh the same when μ̃ is the truth; the noise term the paper's
    rectification adds to every segment made the short-segment route dearer."""
    rng = np.random.default_rng(5)
    long_f = np.array([61.0, 38.5])
    long_dphi = np.array([-12.0, 7.0])  # the routes share endpoints: Σ ΔΦ is the same
    short_dphi = np.full(12, -5.0 / 12)
    short_f = short_dphi + rng.dirichlet(np.ones(12)) * (long_f - long_dphi).sum()
    assert short_f.sum() == pytest.approx(long_f.sum())
    f = np.concatenate([long_f, short_f])
    dphi = np.concatenate([long_dphi, short_dphi])
    truth = SegmentPosterior(mean=f, std=np.zeros(f.size), noise_std=5.0)
    for rule in RULES:
        w = rectified_weights(make_index(rule), truth, 3, np.random.default_rng(1), dphi)
        assert w[:2].sum() == pytest.approx(w[2:].sum(), rel=1e-12), rule
    before = rectify(f - dphi, truth.noise_std)
    assert before[2:].sum() - before[:2].sum() > 1.0  # the bias this design removes


@pytest.mark.parametrize("m", [-40.0, -3.0, -0.5, 0.0, 0.7, 4.0, 60.0])
@pytest.mark.parametrize("s", [0.3, 2.0])
def test_truncated_functionals_match_scipy(m, s):
    dist = stats.truncnorm(-m / s, np.inf, loc=m, scale=s)
    assert truncated_mean(m, s) == pytest.approx(dist.mean(), rel=1e-9, abs=1e-12)
    for z in (-4.5, -1.0, 0.0, 1.645):
        assert truncated_quantile(m, s, z) == pytest.approx(
            dist.ppf(stats.norm.cdf(z)), rel=1e-7, abs=1e-10
        )


def test_weights_are_the_rules_functionals_of_the_truncated_loss_posterior():
    """TS draws from the truncated posterior (a Kolmogorov–Smirnov test), UCB takes its lower
    quantile at level Φ(−√β_t), greedy its mean; all non-negative."""
    n = 4000
    post = SegmentPosterior(mean=np.full(n, 2.0), std=np.full(n, 1.5), noise_std=1.0)
    dphi = np.full(n, 1.0)  # loss posterior N(1, 1.5²), truncated at 0
    dist = stats.truncnorm(-1.0 / 1.5, np.inf, loc=1.0, scale=1.5)
    ts = rectified_weights(make_index("ts"), post, 5, np.random.default_rng(2), dphi)
    assert ts.min() >= 0
    assert stats.kstest(ts, dist.cdf).pvalue > 1e-3
    rule = make_index("ucb")
    beta = float(rule.schedule(9, n))
    ucb = rectified_weights(rule, post, 9, np.random.default_rng(2), dphi)
    np.testing.assert_allclose(ucb, dist.ppf(stats.norm.cdf(-np.sqrt(beta))), rtol=1e-7)
    greedy = rectified_weights(make_index("mean"), post, 9, np.random.default_rng(2), dphi)
    np.testing.assert_allclose(greedy, dist.mean(), rtol=1e-9)


def test_paper_mode_keeps_algorithm_2():
    """Without ΔΦ the weights stay the paper's E[max(0, μ̃ + ε)] (its reproductions)."""
    rng = np.random.default_rng(4)
    post = SegmentPosterior(
        mean=rng.normal(5, 4, 50), std=rng.uniform(0, 2, 50), noise_std=1.3
    )
    z = np.random.default_rng(8).standard_normal(50)
    w = rectified_weights(make_index("ts"), post, 2, np.random.default_rng(8))
    np.testing.assert_array_equal(w, rectify(post.mean + post.std * z, 1.3))


def test_oracle_regret_script_quick():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "max oracle regret: 0.0000 Wh" in proc.stdout
