"""Dijkstra vs networkx, the oracle vs brute force, error handling (issue 4 acceptance)."""

import itertools

import networkx as nx
import numpy as np
import pytest

from ev_nav.bandits.routing import _NO_LANDMARKS, _NO_LAZY, Oracle, Router
from ev_nav.errors import (
    InvalidObservation,
    NegativeCycleError,
    UnknownSegmentError,
    UnreachableError,
)
from ev_nav.roads.network import build_network
from ev_nav.roads.synthetic import synthetic_town


def _nx_node_weighted(net, w):
    g = nx.DiGraph()
    indptr, indices = net.routing_graph()  # Monaco's turn restrictions bind routes too
    src = np.repeat(np.arange(net.n_segments), np.diff(indptr))
    for a, b in zip(src.tolist(), indices.tolist(), strict=True):
        g.add_edge(a, b, weight=float(w[b]))
    return g


@pytest.mark.parametrize("seed", range(6))
def test_dijkstra_matches_networkx(seed):
    net = synthetic_town(300 + 150 * seed, seed=seed)
    rng = np.random.default_rng(seed)
    w = rng.exponential(5.0, net.n_segments)
    router = Router(net)
    g = _nx_node_weighted(net, w)
    for _ in range(10):
        s, t = rng.choice(net.n_segments, 2, replace=False)
        path = router.route(w, s, t)
        assert path[0] == s and path[-1] == t
        # consecutive segments are connected
        for a, b in itertools.pairwise(path.tolist()):
            assert b in net.lg_indices[net.lg_indptr[a] : net.lg_indptr[a + 1]]
        ref = nx.dijkstra_path_length(g, int(s), int(t))
        assert w[path[1:]].sum() == pytest.approx(ref, rel=1e-9)


def _tiny(seed):
    """A small random strongly connected network (two-way streets on a random planar-ish graph)."""
    rng = np.random.default_rng(seed)
    n = 6
    pts = rng.uniform(0, 0.01, (n, 2))
    pairs = [(i, i + 1) for i in range(n - 1)] + [(n - 1, 0)]
    extra = [
        p for p in itertools.combinations(range(n), 2) if p not in pairs and rng.random() < 0.3
    ]
    und = pairs + extra
    u = np.array([a for a, b in und] + [b for a, b in und])
    v = np.array([b for a, b in und] + [a for a, b in und])
    m = len(u)
    return build_network(
        name="tiny",
        node_lon=pts[:, 0],
        node_lat=pts[:, 1],
        node_elevation=np.zeros(n),
        node_osmid=np.arange(n),
        seg_u=u,
        seg_v=v,
        length_m=np.full(m, 100.0),
        speed_mps=np.full(m, 10.0),
        highway=np.zeros(m, dtype=np.int16),
        highway_classes=("residential",),
        speed_imputed=np.zeros(m, dtype=bool),
    )


@pytest.mark.parametrize("seed", range(8))
def test_oracle_matches_brute_force_with_negative_energies(seed):
    net = _tiny(seed)
    rng = np.random.default_rng(100 + seed)
    g = nx.DiGraph()
    src = np.repeat(np.arange(net.n_segments), np.diff(net.lg_indptr))
    g.add_edges_from(zip(src.tolist(), net.lg_indices.tolist(), strict=True))
    for _attempt in range(50):
        f = rng.normal(3.0, 4.0, net.n_segments)  # some segments regenerate energy
        try:
            oracle = Oracle(net, f)
            break
        except NegativeCycleError:
            continue
    else:
        pytest.fail("could not draw energies without a negative cycle")
    for s, t in itertools.permutations(range(min(net.n_segments, 7)), 2):
        path, cost = oracle.optimal(s, t)
        best = min(f[list(p)].sum() for p in nx.all_simple_paths(g, s, t))
        assert cost == pytest.approx(best, abs=1e-9)
        assert cost == pytest.approx(f[path].sum())


def test_negative_cycle_detected():
    net = _tiny(0)
    with pytest.raises(NegativeCycleError):
        Oracle(net, np.full(net.n_segments, -1.0))


def test_router_bad_input():
    net = synthetic_town(200, seed=0)
    router = Router(net)
    w = np.ones(net.n_segments)
    with pytest.raises(UnknownSegmentError):
        router.route(w, -1, 3)
    with pytest.raises(UnknownSegmentError):
        router.route(w, 0, net.n_segments)
    with pytest.raises(InvalidObservation):
        router.route(w[:-1], 0, 3)
    bad = w.copy()
    bad[4] = np.nan
    with pytest.raises(InvalidObservation):
        router.route(bad, 0, 3)
    bad[4] = -1
    with pytest.raises(InvalidObservation):
        router.route(bad, 0, 3)
    assert router.route(w, 5, 5).tolist() == [5]


def test_zero_weights_are_edges():
    net = synthetic_town(300, seed=1)
    router = Router(net)
    path = router.route(np.zeros(net.n_segments), 0, net.n_segments - 1)
    assert path[0] == 0 and path[-1] == net.n_segments - 1


def test_bidirectional_search_is_optimal_on_a_real_network():
    """Monaco (one-way streets), a third of the weights zero, one Router reused for all pairs:
    every route is a connected path whose cost equals networkx's single-source distance."""
    from ev_nav.gp.testing import MONACO_OSM, load_real

    net = load_real(MONACO_OSM)
    n = net.n_segments
    rng = np.random.default_rng(3)
    router = Router(net)
    checked = 0
    for _ in range(6):
        w = rng.exponential(5.0, n) * (rng.random(n) > 0.3)
        g = _nx_node_weighted(net, w)
        for s in rng.choice(n, 4, replace=False):
            dist = nx.single_source_dijkstra_path_length(g, int(s))
            for t in rng.choice(n, 8, replace=False):
                if t == s:
                    continue
                if int(t) not in dist:
                    with pytest.raises(UnreachableError):
                        router.route(w, s, t)
                    continue
                path = router.route(w, s, t)
                assert path[0] == s and path[-1] == t
                for a, b in itertools.pairwise(path.tolist()):
                    assert b in net.lg_indices[net.lg_indptr[a] : net.lg_indptr[a + 1]]
                assert w[path[1:]].sum() == pytest.approx(dist[int(t)], rel=1e-9, abs=1e-9)
                checked += 1
    assert checked > 150


def test_router_pickles_and_keeps_answering():
    """Routers travel with environments and agents to worker processes."""
    import pickle

    net = synthetic_town(300, seed=2)
    router = Router(net)
    w = np.random.default_rng(0).exponential(1.0, net.n_segments)
    first = router.route(w, 0, 120)
    clone = pickle.loads(pickle.dumps(router))
    assert clone.route(w, 0, 120).tolist() == first.tolist()
    assert router.route(w, 0, 120).tolist() == first.tolist()  # scratch reuse is harmless


def test_interpreted_and_compiled_kernels_return_the_same_paths():
    """The Dijkstra source runs interpreted (a process's first queries) or numba-compiled (after
    that): the same floating-point operations in the same order, so the same path, ties
    included. Monaco with random weights, lengths and times (equal-length alternatives exist
    there), plus a synthetic town with a third of the weights zero."""
    from ev_nav.bandits import _dijkstra
    from ev_nav.bandits.routing import compiled_kernel
    from ev_nav.gp.testing import MONACO_OSM, load_real

    kernel = compiled_kernel()
    for net in (load_real(MONACO_OSM), synthetic_town(800, seed=4)):
        n = net.n_segments
        router = Router(net)
        graph = (router._indptr, router._indices, router._rindptr, router._rindices)
        heap = 2 * (router._indices.size + 1)
        rng = np.random.default_rng(7)
        for q in range(60):
            w = [rng.exponential(5.0, n) * (rng.random(n) > 0.3), net.length_m,
                 net.travel_time_s][q % 3]
            s, t = (int(x) for x in rng.choice(n, 2, replace=False))
            paths = []
            for run, as_lists in ((kernel, False), (_dijkstra.shortest_path, True),
                                  (_dijkstra.shortest_path, False)):
                scratch = [np.empty(2 * n), np.empty(2 * n, dtype=np.int64),
                           np.zeros(2 * n, dtype=np.int64), np.empty(heap),
                           np.empty(heap, dtype=np.int64)]
                args = [*graph, np.asarray(w, dtype=np.float64)]
                if as_lists:
                    args, scratch = [a.tolist() for a in args], [a.tolist() for a in scratch]
                paths.append(run(*args, 1e-12, s, t, *scratch[:3], 1, *scratch[3:],
                                 *_NO_LANDMARKS, 0.0, 0.0, *_NO_LAZY, run is kernel).tolist())
            assert paths[0] == paths[1] == paths[2], (q, s, t)


def _goal_directed_case(n_segments=3000, seed=1):
    """A synthetic town, its physical loss bound, and a weight draw that respects it: the bound
    plus a truncated-normal excess scaled like the model's losses (some excesses are 0)."""
    from ev_nav.bandits.indices import truncated_quantile
    from ev_nav.potential import loss_lower_bound, loss_scale

    net = synthetic_town(n_segments, seed=seed)
    lower, scale = loss_lower_bound(net), loss_scale(net)
    rng = np.random.default_rng(seed)

    def draw():
        excess = truncated_quantile(scale - lower - 0.3 * scale, 0.3 * scale,
                                    rng.standard_normal(net.n_segments))
        return lower + excess * (rng.random(net.n_segments) > 0.1)

    return net, lower, draw, rng


def test_goal_directed_search_costs_what_scipy_dijkstra_costs_on_1000_pairs():
    """ALT with the physical loss bound against SciPy's one-to-all Dijkstra (independent code) on
    the same weights: 1,000 random pairs, the same cost every time (pairs an unreachable goal
    are refused), and it explores less than plain bidirectional search. Every path is a walk of
    the network's connections. The same for a lazy Thompson draw (``LossDraw`` with
    ``SeededScores``: scores and weights computed in the kernel where it reaches) against SciPy
    on that draw's vectorised weights, on another 1,000 pairs."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra

    from ev_nav.bandits.routing import LossDraw, SeededScores, compiled_kernel
    from ev_nav.potential import loss_scale

    compiled_kernel()
    net, lower, draw, rng = _goal_directed_case()
    n = net.n_segments
    scale = loss_scale(net)
    fast, plain = Router(net, lower), Router(net)
    settled = np.zeros(2)
    unreachable = 0
    successors = [set(net.lg_indices[net.lg_indptr[e]:net.lg_indptr[e + 1]].tolist())
                  for e in range(n)]
    for batch in range(8):
        lazy = None
        if batch % 2:  # a Thompson draw of the loss posterior truncated at the bound
            lazy = LossDraw(scale, 0.3 * scale, SeededScores(int(rng.integers(2**63))))
            w = lazy.weights(lower)
        else:
            w = draw()
        matrix = sp.csr_matrix((w[net.lg_indices], net.lg_indices, net.lg_indptr), shape=(n, n))
        starts = rng.choice(n, 25, replace=False)
        dist = dijkstra(matrix, indices=starts)
        for i, s in enumerate(starts):
            for t in rng.choice(n, 10, replace=False):
                if not np.isfinite(dist[i, t]):
                    with pytest.raises(UnreachableError):
                        fast.route(w if lazy is None else lazy, s, t)
                    unreachable += 1
                    continue
                path = fast.route(w if lazy is None else lazy, s, t)
                assert path[0] == s and path[-1] == t
                assert all(b in successors[a] for a, b in zip(path[:-1], path[1:], strict=True))
                assert w[path[1:]].sum() == pytest.approx(dist[i, t], rel=1e-9, abs=1e-9)
                if lazy is not None:
                    continue
                settled[0] += fast.settled_count()
                plain.route(w, s, t)
                settled[1] += plain.settled_count()
    assert fast.fallbacks == 0
    assert unreachable < 200
    assert settled[0] < 0.7 * settled[1]


def test_goal_directed_and_plain_agree_on_ties_and_ends():
    """Zero weights (everything at its bound of 0), equal-cost alternatives, start = goal, and
    a goal right next to the start: the goal-directed router answers as plain search does."""
    net = synthetic_town(800, seed=5)
    n = net.n_segments
    lower = np.zeros(n)
    lower[::3] = 1.0
    fast, plain = Router(net, lower), Router(net)
    rng = np.random.default_rng(2)
    for w in (lower.copy(), lower + 1.0, lower + rng.integers(0, 2, n)):
        for s, t in rng.integers(0, n, (60, 2)):
            try:
                ref = plain.route(w, s, t)
            except UnreachableError:
                with pytest.raises(UnreachableError):
                    fast.route(w, s, t)
                continue
            path = fast.route(w, s, t)
            assert w[path[1:]].sum() == pytest.approx(w[ref[1:]].sum(), abs=1e-9)
    assert fast.route(lower, 7, 7).tolist() == [7]
    nxt = int(net.lg_indices[net.lg_indptr[7]])
    assert fast.route(lower, 7, nxt).tolist() == [7, nxt]
    assert fast.fallbacks == 0


def test_a_weight_below_its_bound_falls_back_to_plain_search():
    """The bound is checked on every query: weights under it would make the potentials
    inconsistent (a wrong route), so that query is routed by plain search, and counted."""
    net, lower, draw, rng = _goal_directed_case(1500, seed=3)
    fast, plain = Router(net, lower), Router(net)
    w = draw()
    # make one segment far cheaper than its bound, on a corridor the optimum will then use
    s, t = 0, net.n_segments // 2
    ref = plain.route(w, s, t)
    cheap = w.copy()
    cheap[ref[len(ref) // 2]] = 0.0
    cheap[rng.choice(net.n_segments, 50)] = 0.0
    for weights in (cheap, w):
        expected = plain.route(weights, s, t)
        got = fast.route(weights, s, t)
        assert weights[got[1:]].sum() == pytest.approx(weights[expected[1:]].sum(), rel=1e-12)
    assert fast.fallbacks == 1
    with pytest.raises(InvalidObservation):
        Router(net, lower[:-1])
    with pytest.raises(InvalidObservation):
        Router(net, -lower)


def test_goal_directed_kernel_is_the_same_interpreted_and_compiled():
    """With landmarks too, the interpreted and compiled forms return the same path."""
    from ev_nav.bandits import routing

    net, lower, draw, rng = _goal_directed_case(1200, seed=6)
    routing.compiled_kernel()
    router = Router(net, lower)
    w = draw()
    pairs = rng.integers(0, net.n_segments, (40, 2))
    compiled = [router.route(w, s, t).tolist() for s, t in pairs if s != t]
    saved = routing._Kernel.compiled
    try:
        routing._Kernel.compiled = None
        routing._Kernel.interpreted_s = -1e9  # stay interpreted for this test
        interpreted = [router.route(w, s, t).tolist() for s, t in pairs if s != t]
    finally:
        routing._Kernel.compiled = saved
        routing._Kernel.interpreted_s = 0.0
    assert compiled == interpreted


def test_lazy_loss_draw_routes_like_its_vectorised_weights():
    """A LossDraw is evaluated only where the compiled search reaches, to the same numbers as
    its vectorised form: the same path as routing on all weights, every query. Bad draws are
    refused with a named error, and a plain router does not take one."""
    from ev_nav.bandits.routing import LossDraw, compiled_kernel
    from ev_nav.potential import loss_lower_bound, loss_scale

    compiled_kernel()
    net = synthetic_town(2500, seed=8)
    n = net.n_segments
    lower, a = loss_lower_bound(net), loss_scale(net)
    router = Router(net, lower)
    rng = np.random.default_rng(4)
    compared = 0
    for _ in range(60):
        draw = LossDraw(a, 0.3 * a, rng.standard_normal(n))
        s, t = (int(x) for x in rng.integers(0, n, 2))
        w = draw.weights(lower)
        assert np.all(w >= lower)
        try:
            eager = router.route(w, s, t)
        except UnreachableError:
            with pytest.raises(UnreachableError):
                router.route(draw, s, t)
            continue
        assert router.route(draw, s, t).tolist() == eager.tolist()
        compared += 1
    assert compared > 40 and router.fallbacks == 0
    broken = LossDraw(a.copy(), 0.3 * a, rng.standard_normal(n))
    broken.mean[:] = np.nan
    with pytest.raises(InvalidObservation, match="not finite"):
        router.route(broken, 0, n // 2)
    # the router is usable after the fault
    assert router.route(draw, 0, n // 2).tolist() == router.route(w, 0, n // 2).tolist()
    with pytest.raises(InvalidObservation, match="goal-directed"):
        Router(net).route(draw, 0, 5)
    with pytest.raises(InvalidObservation, match="means, sds and scores"):
        router.route(LossDraw(a[:-1], a[:-1], a[:-1]), 0, 5)


def test_seeded_scores_drawn_lazily_are_the_vectorised_draw():
    """Counter-based scores: the kernel draws a segment's score only when its search reaches it,
    and gets the numbers the vectorised form gives for all segments at once (bit for bit), so a
    lazy draw routes like its vectorised weights. The draw depends on the seed only, and its
    scores are standard normal and uncorrelated between neighbouring segments and seeds. Both
    evaluate the quantile from the score's ``log Φ(−z) = log(1 − u)``: that is the draw of the
    score form ``truncated_quantile(…, z)`` to rounding (checked against it, weight by weight)."""
    from scipy import stats
    from scipy.special import log_ndtr

    from ev_nav.bandits.indices import truncated_quantile
    from ev_nav.bandits.routing import LossDraw, SeededScores, _Kernel, compiled_kernel
    from ev_nav.potential import loss_lower_bound, loss_scale

    compiled_kernel()
    z = SeededScores(7).values(np.arange(100_000))
    assert np.array_equal(z, SeededScores(7).values(np.arange(100_000)))  # no hidden state
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < 0.02
    assert abs(np.corrcoef(z, SeededScores(8).values(np.arange(100_000)))[0, 1]) < 0.02
    # the scores' tails: log(1 - u) is log Φ(-z) to rounding
    tails = SeededScores(7).log_tails(np.arange(100_000))
    np.testing.assert_allclose(tails, log_ndtr(-z), rtol=1e-13, atol=0.0)
    # the kernel's compiled tail, one segment at a time, in a shuffled order
    _, _, counter_tail = _Kernel.lazy_excess()
    ids = np.random.default_rng(0).permutation(5000)
    one_by_one = np.array([counter_tail(np.uint64(7), int(e)) for e in ids])
    assert np.array_equal(one_by_one, tails[ids])

    net = synthetic_town(2500, seed=8)
    n = net.n_segments
    lower, a = loss_lower_bound(net), loss_scale(net)
    router = Router(net, lower)
    rng = np.random.default_rng(5)
    compared = 0
    for _ in range(60):
        draw = LossDraw(a, 0.3 * a, SeededScores(int(rng.integers(2**63))))
        s, t = (int(x) for x in rng.integers(0, n, 2))
        w = draw.weights(lower)
        assert np.array_equal(draw.scores(), draw.score.values(np.arange(n)))
        # the same draw as the score form of the quantile, to rounding
        by_score = lower + truncated_quantile(a - lower, 0.3 * a, draw.scores())
        np.testing.assert_allclose(w, by_score, rtol=1e-12, atol=0.0)
        try:
            eager = router.route(w, s, t)
        except UnreachableError:
            continue
        lazy = router.route(draw, s, t)
        assert lazy.tolist() == eager.tolist()
        # every weight the search computed is the vectorised weight, bit for bit (the router's
        # scratch is in its internal order)
        reached = router._lazy[1] == router._stamp
        assert reached.sum() > 0
        assert np.array_equal(router._lazy[0][reached], w[router._order][reached])
        compared += 1
    assert compared > 40 and router.fallbacks == 0
    with pytest.raises(InvalidObservation, match="seed"):
        SeededScores(-1)


def test_scratch_stamps_wrap_around_without_stale_entries():
    """The 32-bit query stamps: when they run out the scratch is cleared once and numbering
    starts again; queries on both sides of that point (plain, goal-directed, lazy, one-to-many)
    answer what a fresh router answers."""
    from ev_nav.bandits import routing
    from ev_nav.bandits.routing import LossDraw, SeededScores, compiled_kernel
    from ev_nav.potential import loss_scale

    compiled_kernel()
    net, lower, draw, rng = _goal_directed_case(1500, seed=3)
    n, scale = net.n_segments, loss_scale(net)
    old, fresh = Router(net, lower), Router(net, lower)
    pairs = rng.integers(0, n, (12, 2))
    lazy = LossDraw(scale, 0.3 * scale, SeededScores(11))
    w = draw()
    for i, (s, t) in enumerate(pairs.tolist()):
        if i == 2:  # entries from the stamps before the wrap stay in the scratch
            old._stamp = routing._STAMP_LIMIT - 3
        for weights in (w, lazy):
            try:
                expected = fresh.route(weights, s, t).tolist()
            except UnreachableError:
                with pytest.raises(UnreachableError):
                    old.route(weights, s, t)
                continue
            assert old.route(weights, s, t).tolist() == expected
        expected_tree = fresh.tree(w, s, pairs[:, 1])
        got_tree = old.tree(w, s, pairs[:, 1])
        assert np.array_equal(got_tree[1], expected_tree[1])
    assert 0 < old._stamp < 100


def test_agent_with_a_loss_bound_plans_goal_directed_and_exactly():
    """The learner's hook: an agent given the physical loss bound truncates its loss posterior
    there (every weight at least its bound, a TS draw otherwise as before) and routes with a
    goal-directed router that never has to fall back; its routes cost what plain search finds."""
    from ev_nav.bandits.agent import Agent
    from ev_nav.errors import ConfigError
    from ev_nav.gp.posterior import SegmentPosterior
    from ev_nav.potential import loss_lower_bound, loss_scale, potential_change

    net = synthetic_town(2000, seed=9)
    dphi, bound, a = potential_change(net), loss_lower_bound(net), loss_scale(net)

    class Model:  # a fixed loss posterior around the physics model
        def posterior(self):
            return SegmentPosterior(mean=dphi + a, std=0.3 * a, noise_std=1.0)

        def update(self, segments, energies):
            pass

    agent = Agent(net, Model(), "ts", seed=1, potential_change=dphi, loss_bound=bound)
    assert agent.router.lower is not None
    plain = Router(net)
    rng = np.random.default_rng(5)
    for _ in range(15):
        s, g = (int(x) for x in rng.integers(0, net.n_segments, 2))
        w = agent.weights()
        assert np.all(w >= bound)
        try:
            ref = plain.route(w, s, g)
        except UnreachableError:
            continue
        assert w[agent.router.route(w, s, g)[1:]].sum() == pytest.approx(w[ref[1:]].sum())
    assert agent.router.fallbacks == 0
    with pytest.raises(ConfigError):
        Agent(net, Model(), "ts", loss_bound=bound)


def test_tree_paths_cost_what_scipy_dijkstra_costs_and_honour_the_limit():
    """One-to-many search (``Router.tree``): every target's cost equals SciPy's full Dijkstra
    on the same node weights, each path is a chain of legal connections whose weights sum to
    that cost, and a limit leaves out exactly the targets beyond it."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import dijkstra

    net = synthetic_town(3000, seed=2)
    router = Router(net)
    indptr, indices = net.routing_graph()
    n = net.n_segments
    rng = np.random.default_rng(5)
    for trial in range(5):
        w = rng.exponential(1.0, n) * (trial > 0)  # trial 0: zero weights (ties everywhere)
        m = sp.csr_matrix((w[indices] + 1e-12, indices, indptr), shape=(n, n))
        start = int(rng.integers(n))
        targets = rng.integers(0, n, 40)
        targets[0] = start  # a target at the start: a path of one segment, cost 0
        targets[1] = targets[2]  # a repeated target
        paths, cost = router.tree(w, start, targets)
        ref = dijkstra(m, indices=start)
        np.testing.assert_allclose(cost, ref[targets], rtol=1e-12, atol=1e-9)
        for t, p, c in zip(targets, paths, cost, strict=True):
            assert p[0] == start and p[-1] == t
            for a, b in zip(p[:-1], p[1:], strict=True):
                assert b in indices[indptr[a]:indptr[a + 1]]
            assert w[p[1:]].sum() == pytest.approx(c, abs=1e-6)
        limit = float(np.median(ref[targets]))
        paths, cost = router.tree(w, start, targets, limit)
        inside = ref[targets] <= limit
        assert np.isfinite(cost[inside]).all() and not np.isfinite(cost[~inside]).any()
        assert all(p.size == 0 for p, ok in zip(paths, inside, strict=True) if not ok)
    with pytest.raises(UnknownSegmentError):
        router.tree(np.ones(n), 0, np.array([n]))


def test_pareto_paths_are_the_time_energy_front_of_all_simple_paths():
    """``Router.pareto`` returns, per target, exactly the (time, energy) Pareto front of every
    simple path (enumerated by networkx), each as a legal path whose sums are its label's."""
    from tests.trips.test_charging_optimality import grid_town

    net = grid_town(4)
    router = Router(net)
    indptr, indices = net.routing_graph()
    g = nx.DiGraph()
    for a in range(net.n_segments):
        g.add_edges_from((a, int(b)) for b in indices[indptr[a]:indptr[a + 1]])
    rng = np.random.default_rng(1)
    sizes = []
    for _ in range(3):
        tw = rng.uniform(0.5, 2.0, net.n_segments)
        ew = 2.5 - tw + rng.uniform(0.0, 0.3, net.n_segments)  # fast roads cost energy
        start = int(rng.integers(net.n_segments))
        targets = [t for t in rng.choice(net.n_segments, 4, replace=False) if t != start]
        fronts = router.pareto(tw, ew, start, targets, max_labels=10_000)
        for t, front in zip(targets, fronts, strict=True):
            pts = np.array([(tw[p[1:]].sum(), ew[p[1:]].sum())
                            for p in map(np.array, nx.all_simple_paths(g, start, int(t)))])
            best = {(round(a, 9), round(b, 9)) for a, b in pts
                    if not np.any((pts[:, 0] <= a + 1e-12) & (pts[:, 1] <= b + 1e-12)
                                  & ((pts[:, 0] < a - 1e-12) | (pts[:, 1] < b - 1e-12)))}
            got = {(round(tw[p[1:]].sum(), 9), round(ew[p[1:]].sum(), 9)) for p in front}
            assert got == best
            for p in front:
                assert p[0] == start and p[-1] == t
                for a, b in zip(p[:-1], p[1:], strict=True):
                    assert b in indices[indptr[a]:indptr[a + 1]]
            sizes.append(len(front))
    assert max(sizes) >= 3  # the fronts had trade-offs to find
