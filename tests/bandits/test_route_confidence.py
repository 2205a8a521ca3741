"""UCB and Bayes-UCB on a route's total (``ucb-route``, ``bucb-route``): the truncated
variance against SciPy, the route search against brute force over every simple path, and the
agent's planning with the rule."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from scipy.stats import truncnorm

from ev_nav.bandits.agent import Agent
from ev_nav.bandits.indices import (
    CLIP_SHARE,
    BetaSchedule,
    RouteConfidenceIndex,
    make_index,
    route_confidence_path,
    truncated_variance,
)
from ev_nav.errors import ConfigError


@pytest.mark.parametrize("m, s", [(1.0, 1.0), (-2.0, 1.0), (5.0, 0.5), (0.0, 2.0), (-6.0, 0.3)])
def test_truncated_variance_matches_scipy(m, s):
    expected = truncnorm(-m / s, np.inf, loc=m, scale=s).var()
    assert truncated_variance(m, s) == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_truncated_variance_of_a_known_loss_is_zero():
    np.testing.assert_array_equal(truncated_variance([3.0, -1.0], [0.0, 0.0]), [0.0, 0.0])


def _segment_graph(seed: int, rows: int = 3, cols: int = 5) -> nx.DiGraph:
    """A directed grid of segments (each node is a segment; an edge says which may follow),
    from the top-left to the bottom-right corner, with a few diagonals."""
    rng = np.random.default_rng(seed)
    g = nx.DiGraph()
    idx = {(r, c): r * cols + c for r in range(rows) for c in range(cols)}
    for (r, c), i in idx.items():
        for dr, dc in ((0, 1), (1, 0), (-1, 1)):
            j = idx.get((r + dr, c + dc))
            if j is not None and rng.random() < 0.85:
                g.add_edge(i, j)
    g.add_nodes_from(idx.values())
    return g


def _router(g: nx.DiGraph, start: int, goal: int):
    """Shortest path under non-negative per-segment weights (the weight of moving onto a
    segment), as the production router defines it."""

    def route(w: np.ndarray) -> np.ndarray:
        path = nx.dijkstra_path(g, start, goal, weight=lambda u, v, d: float(w[v]))
        return np.asarray(path, dtype=np.int64)

    return route


def _objective(path, mean, var, sqrt_beta):
    return float(mean[path].sum()) - sqrt_beta * math.sqrt(float(var[path].sum()))


def test_route_search_finds_the_least_bound_of_every_simple_path():
    """On small random segment graphs with known and unknown segments, the search returns the
    route of least ``Σ mean − √β √Σ var`` among all simple paths (brute force, 125–4,250
    paths each), where the per-segment rule's route mostly does not."""
    per_segment_missed = 0
    for seed in range(12):
        g = _segment_graph(seed, rows=4, cols=7)
        start, goal = 0, g.number_of_nodes() - 1
        rng = np.random.default_rng(100 + seed)
        n = g.number_of_nodes()
        mean = rng.uniform(2.0, 10.0, n)
        known = rng.random(n) < 0.5  # driven often: little variance left
        var = np.where(known, 0.01, (0.3 * mean) ** 2)
        sqrt_beta = 3.0
        best = min(
            _objective(np.array(p), mean, var, sqrt_beta)
            for p in nx.all_simple_paths(g, start, goal)
        )
        route = _router(g, start, goal)
        path = route_confidence_path(route, mean, var, sqrt_beta)
        assert path[0] == start and path[-1] == goal
        assert _objective(path, mean, var, sqrt_beta) == pytest.approx(best, abs=1e-9)
        per_segment = route(np.maximum(mean - sqrt_beta * np.sqrt(var), CLIP_SHARE * mean))
        per_segment_missed += _objective(per_segment, mean, var, sqrt_beta) > best + 1e-9
    assert per_segment_missed >= 6


def test_route_search_is_never_worse_than_the_mean_or_the_per_segment_route():
    g = _segment_graph(3, rows=5, cols=8)
    start, goal = 0, g.number_of_nodes() - 1
    route = _router(g, start, goal)
    rng = np.random.default_rng(7)
    for _ in range(10):
        mean = rng.uniform(1.0, 10.0, g.number_of_nodes())
        var = (rng.uniform(0.0, 0.4, mean.size) * mean) ** 2
        sqrt_beta = float(rng.uniform(1.0, 6.0))
        value = _objective(route_confidence_path(route, mean, var, sqrt_beta), mean, var,
                           sqrt_beta)
        per_segment = route(np.maximum(mean - sqrt_beta * np.sqrt(var), CLIP_SHARE * mean))
        assert value <= _objective(route(mean), mean, var, sqrt_beta) + 1e-12
        assert value <= _objective(per_segment, mean, var, sqrt_beta) + 1e-12


def test_without_uncertainty_the_route_rule_is_the_expected_loss_route():
    g = _segment_graph(1)
    start, goal = 0, g.number_of_nodes() - 1
    mean = np.random.default_rng(1).uniform(1.0, 5.0, g.number_of_nodes())
    route = _router(g, start, goal)
    path = route_confidence_path(route, mean, np.zeros_like(mean), 4.0)
    np.testing.assert_array_equal(path, route(mean))


def test_make_index_names_and_schedules():
    ucb, bucb = make_index("ucb-route"), make_index("bucb-route", omega=1.0, xi=0.5)
    assert isinstance(ucb, RouteConfidenceIndex) and ucb.name == "ucb-route"
    assert bucb.schedule == BetaSchedule("bucb", omega=1.0, xi=0.5)
    # √β_t of the paper's schedules (Thm 3.1 for UCB)
    assert ucb.sqrt_beta(10, 2000) == pytest.approx(
        math.sqrt(2.0 * math.log(2000 * 100 / math.sqrt(2.0 * math.pi))))


def test_agent_plans_on_the_route_bound_and_needs_reduced_costs():
    from ev_nav.gp.independent import BIModel
    from ev_nav.potential import potential_change
    from ev_nav.roads.synthetic import synthetic_town

    net = synthetic_town(n_segments=300, seed=2)
    model = BIModel(net, segment_scale="loss")
    with pytest.raises(ConfigError, match="potential_change"):
        Agent(net, model, "ucb-route")
    dphi = potential_change(net)
    agent = Agent(net, model, "ucb-route", potential_change=dphi)
    start, goal = 0, net.n_segments - 1
    path = agent.plan(start, goal)
    assert path[0] == start and path[-1] == goal and agent.t == 1
    # deterministic: the same posterior and trip give the same route
    np.testing.assert_array_equal(Agent(net, model, "ucb-route", potential_change=dphi)
                                  .plan(start, goal), path)
