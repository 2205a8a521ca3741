"""An exhaustive solver of the charging-stop problem of ``docs/charging.md``, for small instances.

It shares nothing with :mod:`ev_nav.trips.charging` but the problem's inputs: the model's
quantities of a path (mean, joint sd and noise through :func:`ev_nav.trips.battery.route_energy`)
and the charging-time table (:func:`ev_nav.trips.charging.charge_time_table`; the curve's integral
is tested elsewhere). Everything else is enumerated:

* **Legs**: every simple path (no segment twice) of the routing graph (turn restrictions obeyed)
  between every ordered pair of waypoints, by depth-first search, with the shares of
  ``docs/charging.md`` at its ends.
* **Stops**: every ordered sequence of distinct sites, 0 … ``max_stops`` long (at most 2 here).
* **Levels**: every charge-to level on the 1 % grid at every stop.
* **Risk**: the exact Boole constraint ``Σ_j Φ((r + μ_j − b_j)/σ_j) ≤ 1 − confidence``.

The only pruning is of leg paths that can never do better than another path of the same leg
(:func:`_dominated`), and of combinations by exact sorted-prefix minima (:func:`_prefix_min`);
both are argued where they are made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from scipy.special import ndtr

from ev_nav.energy import Vehicle
from ev_nav.gp.posterior import SegmentModel
from ev_nav.roads.network import RoadNetwork
from ev_nav.trips.battery import route_energy
from ev_nav.trips.charging import ChargeSettings, ChargingSite, charge_time_table

#: Slack on the risk budget, as the planner grants it (``risk ≤ budget · (1 + 1e-9)``).
RISK_SLACK = 1e-9
#: Slack [Wh] on "the level is at least the mean arrival" and "at most the top level".
LEVEL_SLACK = 1e-9


class ReferencePlan(NamedTuple):
    """The optimum: total time [min], the sites stopped at, each leg's path, each stop's level."""

    total_min: float
    stop_sites: tuple[int, ...]
    legs_paths: tuple[NDArray[np.int64], ...]
    levels: tuple[float, ...]


@dataclass
class _Leg:
    """Surviving paths of one ordered waypoint pair and their statistics."""

    paths: list[NDArray[np.int64]]
    minutes: NDArray[np.float64]
    mean: NDArray[np.float64]
    sd: NDArray[np.float64]
    enumerated: int


def leg_shares(path: NDArray[np.int64], f_from: float, f_to: float) -> NDArray[np.float64]:
    """Shares of a leg's segments: ``1 − f_from`` of the first, ``f_to`` of the last, 1 between
    (one segment: ``f_to − f_from``)."""
    h = np.ones(path.size)
    if path.size == 1:
        h[0] = f_to - f_from
    else:
        h[0] = 1.0 - f_from
        h[-1] = f_to
    return h


def simple_paths(net: RoadNetwork, a: int, f_a: float, b: int, f_b: float,
                 limit: int) -> list[NDArray[np.int64]]:
    """Every path of the routing graph from segment ``a`` to segment ``b`` with no repeated
    segment (``a == b``: the segment itself when ``f_b ≥ f_a``, as any longer path would drive
    ``a`` twice). Raises ``RuntimeError`` past ``limit`` paths (the instance is too large)."""
    if a == b:
        return [np.array([a], dtype=np.int64)] if f_b >= f_a else []
    indptr, indices = net.routing_graph()
    succ = [indices[indptr[e]:indptr[e + 1]].tolist() for e in range(net.n_segments)]
    out: list[NDArray[np.int64]] = []
    path = [a]
    on_path = np.zeros(net.n_segments, dtype=bool)
    on_path[a] = True
    stack = [iter(succ[a])]
    while stack:  # iterative depth-first search over successors not yet on the path
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            on_path[path.pop()] = False
            continue
        if on_path[nxt]:
            continue
        if nxt == b:
            out.append(np.array([*path, b], dtype=np.int64))
            if len(out) > limit:
                raise RuntimeError(f"more than {limit} simple paths from {a} to {b}")
            continue
        path.append(nxt)
        on_path[nxt] = True
        stack.append(iter(succ[nxt]))
    return out


def _dominated(minutes: NDArray, mean: NDArray, sd: NDArray, group: NDArray) -> NDArray[np.bool_]:
    """Paths some other path of the same ``group`` makes redundant: ``≤`` in time, mean and sd.

    Why this is exact. Take a feasible plan that drives path ``P`` on some leg, and a path ``Q``
    of the same leg with ``T_Q ≤ T_P``, ``μ_Q ≤ μ_P``, ``σ_Q ≤ σ_P``. Swap ``Q`` in, keeping every
    level:

    * time does not grow (``T_Q ≤ T_P``);
    * the leg's risk does not grow: the plan is feasible, so ``ε_P ≤ 1 − confidence < 0.5``, i.e.
      ``n_P = r + μ_P − b < 0``; then ``n_Q ≤ n_P < 0`` and ``n_Q/σ_Q ≤ n_P/σ_Q ≤ n_P/σ_P`` (a
      negative number divided by a larger positive one is closer to 0), and Φ is increasing;
    * on a leg ending at the goal nothing else depends on the path;
    * on a leg ending at a stop the mean arrival ``a = b − μ`` rises, which shortens the charge
      ``F(level) − F(max(a, 0))`` (F increases) — but could break "level ≥ mean arrival" or "arrive
      at most at the top level". ``group`` therefore holds, for a leg ending at a stop, the
      lowest admissible level index for every possible departure charge (``-1``: arrival above
      the top level): paths are compared only within equal groups, where every level admissible
      after ``P`` is admissible after ``Q``.

    So the swapped plan is feasible and no slower, and some optimum avoids ``P``. Exact ties
    (equal in all three) are kept only once: they are interchangeable.
    """
    ids: dict[bytes, int] = {}
    gid = np.array([ids.setdefault(row.tobytes(), len(ids)) for row in group], dtype=np.int64)
    # lexicographic order: no path can be dominated by (or equal to) a later one
    order = np.lexsort((sd, mean, minutes))
    m_o, s_o, g_o = mean[order], sd[order], gid[order]
    drop = np.zeros(minutes.size, dtype=bool)
    kept = np.zeros(0, dtype=np.int64)
    block = 256
    for lo in range(0, order.size, block):
        bm, bs, bg = m_o[lo:lo + block], s_o[lo:lo + block], g_o[lo:lo + block]
        # dominated by a kept path (earlier, so no slower) of the same group
        bad = ((m_o[kept][None, :] <= bm[:, None]) & (s_o[kept][None, :] <= bs[:, None])
               & (g_o[kept][None, :] == bg[:, None])).any(axis=1)
        # or by an earlier path of the same block (transitivity covers the rest)
        bad |= (np.tri(bm.size, k=-1, dtype=bool) & (bm[None, :] <= bm[:, None])
                & (bs[None, :] <= bs[:, None]) & (bg[None, :] == bg[:, None])).any(axis=1)
        kept = np.concatenate([kept, lo + np.flatnonzero(~bad)])
        drop[order[lo:lo + block][bad]] = True
    return drop


def _charge_fn(table: NDArray, cap: float, wh: NDArray) -> NDArray:
    """Minutes from empty to ``wh`` (clipped at 0): the table on the 1 % grid, linear between."""
    pct = 100.0 * np.maximum(wh, 0.0) / cap
    return np.interp(pct, np.arange(table.size, dtype=np.float64), table)


def _prefix_min(cost: NDArray, eps_sorted_order: NDArray) -> tuple[NDArray, NDArray]:
    """Running minimum of ``cost[..., order]`` and its argument along the last axis.

    With options sorted by risk, ``min cost over options with risk ≤ x`` is this running
    minimum at the last option of risk ≤ x: an exact minimum over all of them."""
    c = cost[..., eps_sorted_order]
    run = np.minimum.accumulate(c, axis=-1)
    pos = np.broadcast_to(np.arange(c.shape[-1]), c.shape)
    arg = np.maximum.accumulate(np.where(c <= run, pos, 0), axis=-1)
    return run, eps_sorted_order[arg]


def exhaustive_plan(
    net: RoadNetwork,
    model: SegmentModel,
    vehicle: Vehicle,
    sites: Sequence[ChargingSite],
    start: tuple[int, float],
    goal: tuple[int, float],
    settings: ChargeSettings,
    max_paths: int = 200_000,
    prune: bool = True,
) -> ReferencePlan | None:
    """The fastest plan meeting the risk budget, by exhaustive search; ``None`` when none does.

    ``settings.mode`` must be ``"chance"`` and ``settings.max_stops`` at most 2. Every site is
    considered (no corridor filter). Raises ``RuntimeError`` when a leg has more than
    ``max_paths`` simple paths. ``prune=False`` keeps dominated paths too (to check the pruning).
    """
    if settings.mode != "chance" or settings.max_stops > 2:
        raise ValueError("the exhaustive reference covers mode='chance' with at most 2 stops")
    cap = float(vehicle.battery_wh)
    gmax = int(settings.max_charge_pct)
    grid = np.arange(gmax + 1, dtype=np.float64) * cap / 100.0
    top = grid[-1]
    b0, r = float(settings.start_wh), float(settings.reserve_wh)
    budget = (1.0 - settings.confidence) * (1.0 + RISK_SLACK)
    ovh = float(settings.stop_overhead_min)
    sites = list(sites) if settings.max_stops > 0 else []
    c = len(sites)
    points = [start, *((s.segment, s.fraction) for s in sites), goal]
    tables = [charge_time_table(vehicle, s, gmax) for s in sites]

    minutes_seg = net.travel_time_s / 60.0
    mean_seg = model.posterior().mean
    n = net.n_segments
    cov = model.route_covariance(np.arange(n))
    noise_seg = np.array([model.noise_variance([e], [1.0]) for e in range(n)])

    def lowest_level(arrive: NDArray) -> NDArray[np.int64]:
        """Index of the lowest admissible level for each mean arrival; -1 above the top."""
        k = np.searchsorted(grid, arrive - LEVEL_SLACK, side="left")
        return np.where(arrive > top + LEVEL_SLACK, -1, k).astype(np.int64)

    legs: dict[tuple[int, int], _Leg] = {}
    for i in range(c + 1):
        for j in range(1, c + 2):
            if i == j:
                continue
            (a, fa), (b, fb) = points[i], points[j]
            paths = simple_paths(net, a, fa, b, fb, max_paths)
            if not paths:
                continue
            shares = [leg_shares(p, fa, fb) for p in paths]
            rows = np.repeat(np.arange(len(paths)), [p.size for p in paths])
            H = sp.csr_matrix((np.concatenate(shares), (rows, np.concatenate(paths))),
                              shape=(len(paths), n))
            minutes = H @ minutes_seg
            mean = H @ mean_seg
            var = np.einsum("ij,ij->i", (H @ cov), H.toarray()) + H @ noise_seg
            sd = np.sqrt(np.maximum(var, 0.0))
            if j == c + 1:
                group = np.zeros((len(paths), 1), dtype=np.int64)
            elif i == 0:
                group = lowest_level(b0 - mean)[:, None]
            else:
                group = lowest_level(grid[None, :] - mean[:, None])
            keep = np.flatnonzero(~_dominated(minutes, mean, sd, group) if prune
                                  else np.ones(len(paths), dtype=bool))
            kept = [paths[k] for k in keep]
            # the survivors' statistics through the model's own route_energy
            sd_k = np.empty(keep.size)
            for t, k in enumerate(keep):
                got = route_energy(model, paths[k], shares[k])
                if not (math.isclose(got.mean_wh, mean[k], rel_tol=1e-9, abs_tol=1e-6)
                        and math.isclose(got.sd_wh, sd[k], rel_tol=1e-6, abs_tol=1e-6)):
                    raise AssertionError(f"vectorised path statistics disagree with route_energy "
                                         f"on {paths[k].tolist()}: {got} vs {mean[k]}, {sd[k]}")
                sd_k[t] = got.sd_wh
            legs[(i, j)] = _Leg(kept, minutes[keep], mean[keep], sd_k, len(paths))

    best: ReferencePlan | None = None

    def offer(total: float, seq: tuple[int, ...], paths: list[NDArray], levels: list[float]):
        nonlocal best
        if np.isfinite(total) and (best is None or total < best.total_min):
            best = ReferencePlan(float(total), seq, tuple(paths), tuple(levels))

    def eps(leg: _Leg, depart: NDArray) -> NDArray:
        """Risk of every path (last axis) leaving with ``depart`` (leading axes)."""
        return ndtr((r + leg.mean - depart[..., None]) / leg.sd)

    # ---- no stop
    goal_w = c + 1
    if (0, goal_w) in legs:
        L = legs[(0, goal_w)]
        e = eps(L, np.array(b0))
        t = np.where(e <= budget, L.minutes, np.inf)
        k = int(np.argmin(t))
        offer(t[k], (), [L.paths[k]], [])

    # ---- one stop at site s: legs start → s (p0), s → goal (p1); level b1 on the grid.
    # leg 0 options sorted by risk (it departs with b0, fixed): the least cost over options of
    # risk ≤ x is an exact running minimum (_prefix_min); b1 and p1 are enumerated in full.
    def first_leg(s: int) -> tuple[_Leg, NDArray, NDArray, NDArray] | None:
        """Leg start → s: the leg, its risks sorted, and per level b (rows) the running minimum
        over risk-sorted paths of ``T0 − F_s(arrival)`` where admissible (inf elsewhere)."""
        L0 = legs.get((0, s + 1))
        if L0 is None:
            return None
        e0 = eps(L0, np.array(b0))
        order = np.argsort(e0, kind="stable")
        arrive = b0 - L0.mean
        lvl = lowest_level(arrive)
        ok = (lvl[None, :] >= 0) & (np.arange(gmax + 1)[:, None] >= lvl[None, :])
        cost = np.where(ok, (L0.minutes - _charge_fn(tables[s], cap, arrive))[None, :], np.inf)
        run, arg = _prefix_min(cost, order)
        return L0, e0[order], run, arg

    def best_first(fl, level_idx: NDArray, room: NDArray) -> tuple[NDArray, NDArray]:
        """Least leg-0 cost with risk ≤ ``room`` at levels ``level_idx`` (broadcast), and which."""
        _, e_sorted, run, arg = fl
        pos = np.searchsorted(e_sorted, room, side="right") - 1
        val = np.where(pos >= 0, run[level_idx, np.maximum(pos, 0)], np.inf)
        return val, np.where(pos >= 0, arg[level_idx, np.maximum(pos, 0)], -1)

    firsts = {s: first_leg(s) for s in range(c)} if settings.max_stops >= 1 else {}
    for s in range(c):
        fl, L1 = firsts[s], legs.get((s + 1, goal_w))
        if fl is None or L1 is None:
            continue
        e1 = eps(L1, grid)  # (level, p1)
        val, which = best_first(fl, np.arange(gmax + 1)[:, None], budget - e1)
        tot = val + L1.minutes[None, :] + ovh + _charge_fn(tables[s], cap, grid)[:, None]
        lv, p1 = np.unravel_index(int(np.argmin(tot)), tot.shape)
        if np.isfinite(tot[lv, p1]):
            offer(tot[lv, p1], (s,), [fl[0].paths[which[lv, p1]], L1.paths[p1]], [grid[lv]])

    # ---- two stops s → u: legs p0 (start → s), p1 (s → u), p2 (u → goal); levels b1, b2.
    # b1 is looped over, b2, p1 and p2 enumerated in full, leg 0 by its exact running minimum.
    if settings.max_stops >= 2:
        for s in range(c):
            for u in range(c):
                fl, L1, L2 = firsts[s], legs.get((s + 1, u + 1)), legs.get((u + 1, goal_w))
                if s == u or fl is None or L1 is None or L2 is None:
                    continue
                e2 = eps(L2, grid)  # (b2, p2)
                f_u = _charge_fn(tables[u], cap, grid)  # (b2,)
                f_s = _charge_fn(tables[s], cap, grid)  # (b1,)
                for i1 in range(gmax + 1):
                    b1 = grid[i1]
                    e1 = eps(L1, np.array(b1))  # (p1,)
                    arrive = b1 - L1.mean
                    lvl = lowest_level(arrive)
                    ok1 = (lvl[None, :] >= 0) & (np.arange(gmax + 1)[:, None] >= lvl[None, :])
                    c1 = np.where(ok1, (L1.minutes - _charge_fn(tables[u], cap, arrive))[None, :],
                                  np.inf)  # (b2, p1)
                    room = budget - e1[None, :, None] - e2[:, None, :]  # (b2, p1, p2)
                    val, which = best_first(fl, np.array(i1), room)
                    tot = (val + c1[:, :, None] + L2.minutes[None, None, :]
                           + (2 * ovh + f_s[i1]) + f_u[:, None, None])
                    flat = int(np.argmin(tot))
                    if not np.isfinite(tot.flat[flat]):
                        continue
                    i2, p1, p2 = np.unravel_index(flat, tot.shape)
                    offer(tot[i2, p1, p2], (s, u),
                          [fl[0].paths[which[i2, p1, p2]], L1.paths[p1], L2.paths[p2]],
                          [b1, grid[i2]])
    return best


def plan_stats(
    net: RoadNetwork,
    model: SegmentModel,
    vehicle: Vehicle,
    sites: Sequence[ChargingSite],
    start: tuple[int, float],
    goal: tuple[int, float],
    settings: ChargeSettings,
    stop_sites: Sequence[int],
    legs_paths: Sequence[NDArray[np.int64]],
    levels: Sequence[float],
) -> tuple[float, float, list[str]]:
    """Total time [min], Boole risk and rule violations of a plan, straight from the definitions.

    ``stop_sites`` index ``sites``; ``legs_paths`` are the legs' segment paths; ``levels`` the
    charge-to levels [Wh]. Each path is checked against the routing graph and its waypoints.
    """
    cap = float(vehicle.battery_wh)
    gmax = int(settings.max_charge_pct)
    indptr, indices = net.routing_graph()
    way = [start, *((sites[s].segment, sites[s].fraction) for s in stop_sites), goal]
    problems: list[str] = []
    if len(set(stop_sites)) != len(stop_sites):
        problems.append(f"stops repeat a site: {list(stop_sites)}")
    if len(stop_sites) > settings.max_stops:
        problems.append(f"{len(stop_sites)} stops, more than {settings.max_stops}")
    depart = float(settings.start_wh)
    total, risk = 0.0, 0.0
    for j, path in enumerate(legs_paths):
        (a, fa), (b, fb) = way[j], way[j + 1]
        path = np.asarray(path, dtype=np.int64)
        if path[0] != a or path[-1] != b:
            problems.append(f"leg {j} runs {path[0]}→{path[-1]}, not {a}→{b}")
        if np.unique(path).size != path.size:
            problems.append(f"leg {j} repeats a segment")
        for x, y in zip(path[:-1], path[1:], strict=True):
            if y not in indices[indptr[x]:indptr[x + 1]]:
                problems.append(f"leg {j}: {x}→{y} is not a connection of the routing graph")
        h = leg_shares(path, fa, fb)
        energy = route_energy(model, path, h)
        total += float(h @ (net.travel_time_s[path] / 60.0))
        risk += float(ndtr((settings.reserve_wh + energy.mean_wh - depart) / energy.sd_wh))
        if j < len(stop_sites):
            arrive = depart - energy.mean_wh
            level = float(levels[j])
            pct = 100.0 * level / cap
            if abs(pct - round(pct)) > 1e-6 or not 0 <= round(pct) <= gmax:
                problems.append(f"stop {j}: level {pct:g} % is not on the 1 % grid up to {gmax}")
            if level < arrive - LEVEL_SLACK:
                problems.append(f"stop {j}: level {level:g} Wh below the arrival {arrive:g} Wh")
            if arrive > gmax * cap / 100.0 + LEVEL_SLACK:
                problems.append(f"stop {j}: arrives at {arrive:g} Wh, above the top level")
            table = charge_time_table(vehicle, sites[stop_sites[j]], gmax)
            grid_pct = np.arange(gmax + 1, dtype=np.float64)
            charge = np.interp(pct, grid_pct, table) - np.interp(
                100.0 * max(arrive, 0.0) / cap, grid_pct, table)
            total += settings.stop_overhead_min + float(charge)
            depart = level
    return total, risk, problems
