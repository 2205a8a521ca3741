"""Charging stops planned on the learned model, with a bounded risk of arriving below a reserve.

The problem (``docs/charging.md``): choose chargers to stop at, a path for every leg and a
charge-to level at every stop (1 % steps) that minimise the total time — driving, charging along
the vehicle's curve capped at each charger's power, and a fixed overhead per stop — subject to
``Σ_j P[arrival_j < reserve] ≤ 1 − confidence`` over every arrival (each stop and the
destination). A leg's energy is Gaussian under the model's joint posterior of its segments plus the
observation noise of driving them (:func:`ev_nav.trips.battery.route_energy`), and with charge-to
levels fixed each arrival depends on its own leg only, so the sum (Boole's inequality) bounds the
probability that any arrival misses, whatever the correlation between legs.

How it is solved:

1. **Candidate chargers**: those the car can plug into, nearest the corridor (driving time from
   the start plus to the goal within ``detour`` × the direct time), at most ``max_candidates``.
2. **Leg routes**: for every pair of waypoints (start, candidates, goal), the paths that minimise
   ``time + π · loss`` for a few prices π of energy in time (0: fastest; the chargers' rate;
   ∞: least energy) — one single-source search per waypoint and price. Each distinct path gets
   its exact mean, joint sd and driving time.
3. **Stops and levels**: a dynamic programme over (charger, departure level) states, layer by
   number of stops, minimising time + λ · risk; λ is bisected to the least value whose plan meets
   the risk budget (a Lagrangian relaxation of the constraint).
4. **Exact levels per stop sequence**: each distinct stop sequence the search met is re-solved
   exactly for its levels and leg routes under the constraint itself (risk in buckets of
   1/``RISK_BUCKETS`` of the budget, rounded up, so the result always satisfies it); the fastest
   feasible one is the plan.

Everything per trip is vectorised over states and options; no Python loop runs over segments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from scipy.sparse.csgraph import dijkstra
from scipy.special import ndtr

from ev_nav.bandits.routing import SAME_PLACE, Router, same_place
from ev_nav.energy import Vehicle, require_vehicle
from ev_nav.errors import ConfigError, RouteOptionError, UnknownSegmentError, UnreachableError
from ev_nav.gp.posterior import SegmentModel
from ev_nav.potential import node_potential
from ev_nav.roads.network import RoadNetwork, require_network
from ev_nav.trips.battery import route_energy
from ev_nav.wording import percent, plural

__all__ = [
    "ChargeSettings",
    "ChargingPlan",
    "ChargingSite",
    "PlannedLeg",
    "PlannedStop",
    "charge_time_table",
    "plan_charging",
]

#: Risk resolution of the exact level search: the budget ``1 − confidence`` in this many buckets.
RISK_BUCKETS = 400
#: z of the 5th percentile of arrival charge shown to drivers.
Z_P5 = 1.6448536269514722
#: Plans the exact level search re-solves (the best by Lagrangian cost at the final λ first).
REFINE_SEQUENCES = 12
#: Bisection steps on λ (log scale between 1e-4 and 1e8 minutes per unit of probability): λ only
#: has to find good stop sequences; their levels are then solved exactly (step 4).
LAMBDA_STEPS = 10


@dataclass(frozen=True)
class ChargeSettings:
    """What the driver asks of a long trip.

    Attributes
    ----------
    start_wh : float
        Charge at departure [Wh].
    reserve_wh : float
        Charge every arrival (each stop and the destination) must keep [Wh].
    confidence : float
        Required probability that every arrival keeps the reserve, in (0.5, 1).
    stop_overhead_min : float
        Time a stop costs besides charging (detour into the site, plugging in, paying) [min].
    max_stops : int
        Most stops a plan may make.
    max_charge_pct : int
        Highest charge-to level [%] (charging slows near full; 100 allows it).
    mode : str
        ``"chance"`` (the constraint above), ``"mean"`` (a deterministic planner: arrive with
        the reserve on the posterior mean) or ``"buffer"`` (plan each leg at
        ``(1 + buffer) ×`` its mean energy) — the last two are the references the benchmark
        compares with.
    buffer : float
        The fixed buffer of ``mode="buffer"`` (0.2: 20 %).
    route_prices : tuple of float, optional
        Prices of energy in time [min/Wh] whose time-plus-energy paths are each leg's
        candidates, besides the least-energy path (always one). Default: 0 (fastest) and the
        candidate chargers' median rate.
    max_candidates : int
        Most chargers considered: all usable ones up to this many, else those of least detour.
    detour : float
        With more usable chargers than ``max_candidates``, only those within this multiple of
        the direct driving time (start → charger → goal) are ranked.
    pareto_labels : int
        On networks of at most ``pareto_max_segments`` segments, each leg's candidates are all
        its time–energy trade-offs (a bicriteria search keeping up to this many per segment)
        instead of the ``route_prices`` paths: route choice is then exact, e.g. a route slower
        than the fastest but using less energy where the risk budget binds.
    pareto_max_segments : int
        Larger networks use the priced paths (a bicriteria search there costs seconds).
    """

    start_wh: float
    reserve_wh: float
    confidence: float = 0.95
    stop_overhead_min: float = 5.0
    max_stops: int = 4
    max_charge_pct: int = 100
    mode: str = "chance"
    buffer: float = 0.2
    route_prices: tuple[float, ...] | None = None
    max_candidates: int = 24
    detour: float = 1.5
    pareto_labels: int = 6
    pareto_max_segments: int = 20_000

    def check(self, capacity_wh: float) -> None:
        """Raise :class:`ConfigError` on settings no plan can honour."""
        def both(wh: float) -> str:  # (the user gave a % or kWh: say it both ways)
            return f"{wh:g} Wh ({100 * wh / capacity_wh:.3g}% of {capacity_wh:g} Wh)"

        if not 0.0 <= self.start_wh <= capacity_wh * (1 + 1e-9):
            raise ConfigError(f"start charge {both(self.start_wh)} is outside 0..100%")
        if not 0.0 <= self.reserve_wh < capacity_wh:
            raise ConfigError(
                f"reserve {both(self.reserve_wh)} must be >= 0 and below the capacity"
            )
        if not 0.5 < self.confidence < 1.0:
            raise ConfigError(f"confidence must be in (0.5, 1), got {self.confidence}")
        if self.mode not in ("chance", "mean", "buffer"):
            raise ConfigError(f"unknown planning mode {self.mode!r}; use chance, mean or buffer")
        if not (math.isfinite(self.stop_overhead_min) and self.stop_overhead_min >= 0):
            raise ConfigError("the stop overhead must be a finite number of minutes >= 0")
        if not 0 <= int(self.max_stops) <= 10:
            raise ConfigError(f"max_stops must be in 0..10, got {self.max_stops}")
        if not 1 <= int(self.max_charge_pct) <= 100:
            raise ConfigError(f"max_charge_pct must be in 1..100, got {self.max_charge_pct}")
        if 100 * self.reserve_wh >= self.max_charge_pct * capacity_wh:
            raise ConfigError("the reserve is at or above the highest charge-to level")
        if not (math.isfinite(self.buffer) and self.buffer >= 0):
            raise ConfigError(f"buffer must be a number >= 0, got {self.buffer}")


@dataclass(frozen=True)
class ChargingSite:
    """A charger as the planner sees it for one vehicle.

    Attributes
    ----------
    segment : int
        The drivable segment it is reached from.
    fraction : float
        Where along that segment (0..1).
    power_kw : float
        The power this vehicle can draw there [kW] (the charger's, within the car's limits).
    dc : bool
        DC (the car's charging curve, capped at ``power_kw``) or AC (flat ``power_kw``).
    name : str
        For display.
    index : int
        Its row in the network's charger table (-1: not from a table).
    """

    segment: int
    fraction: float
    power_kw: float
    dc: bool
    name: str = ""
    index: int = -1


@dataclass(frozen=True)
class PlannedLeg:
    """One leg of a plan: a path between waypoints and what the model expects of it.

    ``start_fraction`` and ``end_fraction`` are where along its first and last segment the leg
    starts and ends (the waypoints' fractions; a leg within one segment drives
    ``end_fraction − start_fraction`` of it, so its share alone cannot place it).
    """

    segments: NDArray[np.int64]
    shares: NDArray[np.float64]
    drive_min: float
    mean_wh: float
    sd_wh: float
    start_fraction: float = 0.0
    end_fraction: float = 1.0


@dataclass(frozen=True)
class PlannedStop:
    """A charging stop: where, the arrival charge expected, and what to do there."""

    site: ChargingSite
    arrival_mean_wh: float
    arrival_p5_wh: float
    charge_to_wh: float
    charge_min: float
    overhead_min: float


@dataclass(frozen=True)
class ChargingPlan:
    """A trip with its charging stops.

    Attributes
    ----------
    legs : tuple of PlannedLeg
        ``len(stops) + 1`` legs.
    stops : tuple of PlannedStop
    drive_min, stop_min, total_min : float
        Driving time, time at the stops (charging plus each stop's overhead), and their sum
        [min].
    risk : float
        ``Σ_j P[arrival_j < reserve]``: an upper bound on the probability that any arrival misses
        the reserve (``1 − risk`` bounds the probability that the plan holds from below).
    feasible : bool
        Whether ``risk ≤ 1 − confidence``; when not, this is the plan of least risk found.
    goal_arrival_mean_wh, goal_arrival_p5_wh : float
        Expected and 5th-percentile charge at the destination [Wh].
    settings : ChargeSettings
    capacity_wh : float
    """

    legs: tuple[PlannedLeg, ...]
    stops: tuple[PlannedStop, ...]
    drive_min: float
    stop_min: float
    total_min: float
    risk: float
    feasible: bool
    goal_arrival_mean_wh: float
    goal_arrival_p5_wh: float
    settings: ChargeSettings
    capacity_wh: float
    notes: tuple[str, ...] = field(default=())

    @property
    def probability(self) -> float:
        """Lower bound on P[every arrival keeps the reserve] (``1 − risk``, at least 0)."""
        return max(0.0, 1.0 - self.risk)

    def pct(self, wh: float) -> float:
        """A charge as a percentage of the usable capacity."""
        return 100.0 * wh / self.capacity_wh

    def levels_wh(self) -> NDArray[np.float64]:
        """Departure charge of every leg [Wh]: the start charge, then each stop's level."""
        return np.array(
            [self.settings.start_wh, *(s.charge_to_wh for s in self.stops)], dtype=np.float64
        )


# ----------------------------------------------------------------------------- charging time
def charge_time_table(vehicle: Vehicle, site: ChargingSite, max_pct: int = 100) -> NDArray:
    """Minutes to charge from empty to each level ``0, 1, …, max_pct`` % at ``site``.

    DC: the vehicle's curve capped at the site's power (:meth:`Vehicle.charging_minutes`);
    AC: flat at the site's power. Between the 1 % points the planner interpolates linearly.
    """
    grid = np.arange(max_pct + 1, dtype=np.float64)
    if site.dc:
        if not vehicle.charge_curve:
            raise ConfigError(
                f"vehicle {vehicle.name} has no DC charging curve: plan for a catalogue model "
                "with --vehicle-model NAME ('ev-nav vehicles' lists the models) or give "
                "charge_curve in its vehicle file"
            )
        return vehicle.charging_minutes_from(0.0, grid, max_kw=site.power_kw)
    hours_per_pct = vehicle.battery_wh / 1000.0 / 100.0 / site.power_kw
    return 60.0 * hours_per_pct * grid


def _interp_rows(tables: NDArray, pct: NDArray) -> NDArray:
    """Row-wise linear interpolation of ``tables[i]`` (on 0..G %) at ``pct[i, …]`` (clipped)."""
    g = tables.shape[1] - 1
    x = np.clip(pct, 0.0, float(g))
    lo = np.minimum(np.floor(x).astype(np.int64), g - 1)
    frac = x - lo
    rows = np.arange(tables.shape[0]).reshape((-1,) + (1,) * (pct.ndim - 1))
    return tables[rows, lo] * (1 - frac) + tables[rows, lo + 1] * frac


# ----------------------------------------------------------------------------- legs
@dataclass
class _Options:
    """Every candidate leg: source and target waypoint, and its path's statistics."""

    src: NDArray[np.int64]
    dst: NDArray[np.int64]
    mean: NDArray[np.float64]
    sd: NDArray[np.float64]
    minutes: NDArray[np.float64]
    paths: list[tuple[NDArray[np.int64], NDArray[np.float64]]]


def _leg_shares(path: NDArray[np.int64], f_from: float, f_to: float) -> NDArray[np.float64]:
    h = np.ones(path.size)
    if path.size == 1:
        h[0] = f_to - f_from
    else:
        h[0] = 1.0 - f_from
        h[-1] = f_to
    return h


def _graph(net: RoadNetwork) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    indptr, indices = net.routing_graph()
    return np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64)


def _leg_options(
    net: RoadNetwork,
    mean: NDArray[np.float64],
    router: Router,
    points: list[tuple[int, float]],
    n_sources: int,
    weights: list[NDArray[np.float64]],
    energy_limit: float,
    pareto_labels: int = 0,
) -> _Options:
    """Paths between waypoints for every weight vector: sources are ``points[:n_sources]``,
    targets ``points[1:]`` (the start is never a target, the goal never a source).

    ``weights[-1]`` are the energy weights (losses): each source's search under them stops at
    ``energy_limit`` [Wh of losses] — a target further than that cannot be reached on one
    charge. The other searches only look for the targets it reached, and stop at the largest
    cost any of them has along its least-energy path (the cheapest path under those weights
    costs no more, so none is cut off). With ``pareto_labels`` > 0 the candidates are the
    least-energy path and every path no other beats in both time and energy (up to that many
    per segment) instead of the priced ones."""
    minutes = net.travel_time_s / 60.0
    seen: set[tuple[int, int, bytes]] = set()
    src, dst, mu, tm, paths = [], [], [], [], []

    def add(i: int, j: int, path: NDArray[np.int64]) -> None:
        key = (i, j, path.tobytes())
        if key in seen:
            return
        seen.add(key)
        h = _leg_shares(path, points[i][1], points[j][1])
        src.append(i)
        dst.append(j)
        mu.append(float(h @ mean[path]))
        tm.append(float(h @ minutes[path]))
        paths.append((path, h))

    seg = np.array([p[0] for p in points], dtype=np.int64)
    for i in range(n_sources):
        a, fa = points[i]
        js = np.array([j for j in range(1, len(points)) if j != i], dtype=np.int64)
        same = seg[js] == a
        for j in js[same]:
            if points[j][1] >= fa:  # further along the same segment: no search needed
                add(i, int(j), np.array([a], dtype=np.int64))
        js = js[~same]  # behind on the same segment would be a loop: not a leg
        found, cost = router.tree(weights[-1], a, seg[js], energy_limit)
        ok = np.isfinite(cost)
        for j, path in zip(js[ok], [p for p, k in zip(found, ok, strict=True) if k],
                           strict=True):
            add(i, int(j), path)
        js_ok = js[ok]
        if not js_ok.size:
            continue
        if pareto_labels:
            # every time–energy trade-off (bicriteria search): exact route choice; the
            # least-energy path above stays a candidate where a full label list dropped it
            fronts = router.pareto(minutes, weights[-1], a, seg[js_ok], energy_limit,
                                   pareto_labels)
            for j, front in zip(js_ok, fronts, strict=True):
                for path in front:
                    add(i, int(j), path)
            continue
        for w in weights[:-1]:
            bound = max(float(w[path[1:]].sum()) for path, k in zip(found, ok, strict=True) if k)
            got, cost = router.tree(w, a, seg[js_ok], bound * (1 + 1e-9) + 1e-9)
            for j, path, c in zip(js_ok, got, cost, strict=True):
                if np.isfinite(c):
                    add(i, int(j), path)
    return _Options(
        np.asarray(src, dtype=np.int64),
        np.asarray(dst, dtype=np.int64),
        np.asarray(mu, dtype=np.float64),
        np.full(len(src), np.nan),  # sds: filled only where a leg can matter
        np.asarray(tm, dtype=np.float64),
        paths,
    )


def _car_energies(
    net: RoadNetwork,
    model: SegmentModel,
    vehicle: Vehicle,
    mean_shift: NDArray[np.float64] | None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The car's expected energy per segment (the model's mean, moved by ``mean_shift``) [Wh],
    its potential per node [Wh] and each segment's expected loss against it, at least 0 [Wh]:
    what :func:`trip_ends` and :func:`plan_charging` route on."""
    mean = model.posterior().mean
    if mean_shift is not None:
        mean = mean + np.asarray(mean_shift, dtype=np.float64)
    phi = node_potential(net, vehicle)
    return mean, phi, np.maximum(mean - (phi[net.seg_v] - phi[net.seg_u]), 0.0)


def trip_ends(
    net: RoadNetwork,
    model: SegmentModel,
    vehicle: Vehicle,
    start: Sequence[tuple[int, float]],
    goal: Sequence[tuple[int, float]],
    router: Router | None = None,
    mean_shift: NDArray[np.float64] | None = None,
) -> tuple[tuple[int, float], tuple[int, float]]:
    """Where a long trip starts and ends among the positions its two points snapped to
    (:attr:`~ev_nav.roads.network.SnapPoint.candidates`: both directions of a two-way street,
    every road at a junction): those the least-loss direct route takes, as ``ev-nav route``
    would. :func:`plan_charging` plans from one position each; the first candidate alone made
    a trip from a junction drive the one road snapped to and loop back.

    Returns the first candidates when the points are the same place or not connected (the
    planner then says so).
    """
    if len(start) == 1 and len(goal) == 1:
        return (int(start[0][0]), float(start[0][1])), (int(goal[0][0]), float(goal[0][1]))
    _, _, loss = _car_energies(net, model, vehicle, mean_shift)
    try:
        path = (router or Router(net)).route_between(loss, start, goal)
    except (RouteOptionError, UnreachableError):
        return (int(start[0][0]), float(start[0][1])), (int(goal[0][0]), float(goal[0][1]))
    return ((int(path.segments[0]), float(path.start_fraction)),
            (int(path.segments[-1]), float(path.end_fraction)))


# ----------------------------------------------------------------------------- the planner
def plan_charging(
    net: RoadNetwork,
    model: SegmentModel,
    vehicle: Vehicle,
    sites: Sequence[ChargingSite],
    start: tuple[int, float],
    goal: tuple[int, float],
    settings: ChargeSettings,
    router: Router | None = None,
    mean_shift: NDArray[np.float64] | None = None,
) -> ChargingPlan:
    """The fastest plan whose arrivals all keep the reserve with the required confidence.

    Parameters
    ----------
    net : RoadNetwork
    model : SegmentModel
        The learned model (its posterior mean, joint covariance and noise).
    vehicle : Vehicle
        Battery capacity and charging curve.
    sites : sequence of ChargingSite
        Chargers the vehicle can use.
    start, goal : (segment, fraction)
        Where the trip starts and ends (fraction along the segment, 0..1).
    settings : ChargeSettings
    router : Router, optional
        A router of ``net`` to reuse (its scratch memory); one is made otherwise.
    mean_shift : ndarray, optional
        Per-segment energy [Wh] added to the model's mean: planning for another car than the
        one the model learned for (the cars' ``E_det`` difference; the spread is kept).

    Returns
    -------
    ChargingPlan
        ``feasible`` False when no plan meets the confidence (the plan found least likely to
        run empty, then to miss the reserve).

    Raises
    ------
    ConfigError
        On settings no plan can honour.
    RouteOptionError
        When the start and the goal are the same place on the road.
    UnreachableError
        When the goal cannot be reached from the start.
    """
    require_network(net, "plan_charging")
    vehicle = require_vehicle(vehicle, "plan_charging", optional=False)
    if not callable(getattr(model, "posterior", None)):
        raise TypeError(f"plan_charging takes a learner (a model with posterior()), got "
                        f"{type(model).__name__}")
    if mean_shift is not None:
        shift = np.asarray(mean_shift, dtype=np.float64)
        if shift.shape != (net.n_segments,):
            raise ConfigError(f"mean_shift is one energy [Wh] per segment of {net.name} "
                              f"({net.n_segments:,}), got an array of shape {shift.shape}")
        if not np.isfinite(shift).all():
            raise ConfigError("mean_shift must be finite [Wh]; "
                              f"{int((~np.isfinite(shift)).sum()):,} of its values are not")
    cap = float(vehicle.battery_wh)
    settings.check(cap)
    for what, (e, f) in (("start", start), ("goal", goal)):
        if not 0 <= int(e) < net.n_segments or not 0.0 <= float(f) <= 1.0:
            raise UnknownSegmentError(
                f"{what} must be a segment in 0..{net.n_segments - 1} and a fraction along it "
                f"in 0..1, got ({e}, {f})"
            )
    if same_place(start, goal):
        raise RouteOptionError(SAME_PLACE)  # as a route request: not a 0 km "feasible" plan
    gmax = int(settings.max_charge_pct)
    budget = 1.0 - settings.confidence
    minutes = net.travel_time_s / 60.0
    mean, phi, loss = _car_energies(net, model, vehicle, mean_shift)
    sites = list(sites)
    notes: list[str] = []
    # a plan that cannot hold from the start: said with the plan, not left for the user to find
    if settings.start_wh < settings.reserve_wh:
        notes.append(f"the departure charge ({percent(100 * settings.start_wh / cap)}) is below "
                     f"the reserve ({percent(100 * settings.reserve_wh / cap)}): the first arrival "
                     "cannot keep it unless the road regains charge")

    # 1. candidate chargers near the corridor (fastest-time trees from the start and to the goal)
    indptr, indices = _graph(net)
    n = net.n_segments
    fwd = sp.csr_matrix((minutes[indices], indices, indptr), shape=(n, n))
    t_from = dijkstra(fwd, directed=True, indices=start[0])
    # the reverse search's cost already counts the goal segment (entering it), not the charger's
    t_to = dijkstra(fwd.T.tocsr(), directed=True, indices=goal[0])
    if not np.isfinite(t_from[goal[0]]):
        raise UnreachableError(f"no route from segment {start[0]} to segment {goal[0]}")
    direct = float(t_from[goal[0]])
    if sites:
        seg = np.array([s.segment for s in sites], dtype=np.int64)
        via = t_from[seg] + t_to[seg]
        ok = np.isfinite(via)
        if ok.sum() > settings.max_candidates:  # too many: those near the corridor
            ok &= via <= settings.detour * direct + 1.0
        order = np.argsort(np.where(ok, via, np.inf), kind="stable")
        keep = order[: min(int(ok.sum()), settings.max_candidates)]
        if ok.sum() > settings.max_candidates:
            notes.append(f"{int(ok.sum())} chargers near the route, the "
                         f"{settings.max_candidates} with the least detour considered")
        cands = [sites[i] for i in sorted(keep)]
    else:
        cands = []
    if settings.max_stops == 0:
        cands = []
    c = len(cands)
    points = [start, *((s.segment, s.fraction) for s in cands), goal]

    # 2. leg candidates: paths minimising time + π·loss for each price π
    if settings.route_prices is not None:
        prices = tuple(settings.route_prices)
    else:
        typical_kw = float(np.median([s.power_kw for s in cands])) if cands else 50.0
        prices = (0.0, 60.0 / (1000.0 * typical_kw), math.inf)
    # the least-energy weights last: they bound every other search (see _leg_options)
    weights = [np.maximum(minutes + p * loss, 0.0) for p in prices if not math.isinf(p)]
    weights.append(loss + 1e-9 * minutes)
    energy_limit = cap + float(phi.max() - phi.min())  # losses of a leg one charge covers
    router = router if router is not None else Router(net)
    labels = settings.pareto_labels if net.n_segments <= settings.pareto_max_segments else 0
    opts = _leg_options(net, mean, router, points, 1 + c, weights, energy_limit, labels)
    usable = opts.mean <= cap  # no level covers a leg of more than the battery
    for k in np.flatnonzero(usable):
        path, h = opts.paths[k]
        opts.sd[k] = route_energy(model, path, h).sd_wh
    keep_opt = np.flatnonzero(usable)

    tables = np.stack([charge_time_table(vehicle, s, gmax) for s in cands]) if c else np.zeros(
        (0, gmax + 1)
    )
    solver = _Solver(opts, keep_opt, tables, c, settings, cap, gmax)
    result = solver.solve()
    if result is None:
        raise UnreachableError(
            f"no leg from segment {start[0]} reaches the goal or a charger within the battery's "
            f"{cap / 1000:g} kWh"
        )
    seq, legs_idx, levels, risk = result
    feasible = risk <= budget * (1 + 1e-9)
    return _assemble(opts, points, cands, tables, seq, legs_idx, levels, risk, feasible,
                     settings, cap, tuple(notes))


def _assemble(
    opts: _Options,
    points: list[tuple[int, float]],
    cands: list[ChargingSite],
    tables: NDArray,
    seq: list[int],
    legs_idx: list[int],
    levels: list[float],
    risk: float,
    feasible: bool,
    settings: ChargeSettings,
    cap: float,
    notes: tuple[str, ...],
) -> ChargingPlan:
    legs = []
    for k in legs_idx:
        path, h = opts.paths[k]
        legs.append(PlannedLeg(path, h, float(opts.minutes[k]), float(opts.mean[k]),
                               float(opts.sd[k]), float(points[opts.src[k]][1]),
                               float(points[opts.dst[k]][1])))
    stops = []
    depart = settings.start_wh
    for j, site_idx in enumerate(seq):
        leg = legs[j]
        arrive = depart - leg.mean_wh
        level = levels[j]
        table = tables[site_idx]
        lo = float(_interp_rows(table[None], np.array([[100 * max(arrive, 0) / cap]]))[0, 0])
        hi = float(_interp_rows(table[None], np.array([[100 * level / cap]]))[0, 0])
        stops.append(PlannedStop(cands[site_idx], arrive, arrive - Z_P5 * leg.sd_wh, level,
                                 hi - lo, settings.stop_overhead_min))
        depart = level
    last = legs[-1]
    drive = sum(leg.drive_min for leg in legs)
    at_stops = sum(s.charge_min + s.overhead_min for s in stops)
    arrive = depart - last.mean_wh
    return ChargingPlan(
        legs=tuple(legs), stops=tuple(stops), drive_min=drive, stop_min=at_stops,
        total_min=drive + at_stops, risk=float(risk), feasible=bool(feasible),
        goal_arrival_mean_wh=arrive, goal_arrival_p5_wh=arrive - Z_P5 * last.sd_wh,
        settings=settings, capacity_wh=cap, notes=notes,
    )


class _Solver:
    """Stops and levels for fixed leg options (steps 3 and 4 of the module doc)."""

    def __init__(
        self,
        opts: _Options,
        keep: NDArray[np.int64],
        tables: NDArray,
        c: int,
        settings: ChargeSettings,
        cap: float,
        gmax: int,
        empty_weight: float = 0.0,
    ) -> None:
        self.o, self.keep, self.tables, self.c = opts, keep, tables, c
        self.s, self.cap, self.gmax = settings, cap, gmax
        #: weight of the risk of running empty added to each leg's reserve risk (the fallback)
        self.empty_weight = empty_weight
        self.budget = 1.0 - settings.confidence
        self.grid_wh = np.arange(gmax + 1) * cap / 100.0
        goal = c + 1
        k = keep
        self.first = k[opts.src[k] == 0]  # legs leaving the start
        self.first_stop = self.first[opts.dst[self.first] != goal]
        self.first_goal = self.first[opts.dst[self.first] == goal]
        mid = k[opts.src[k] != 0]
        self.mid = mid[opts.dst[mid] != goal]  # charger → charger
        self.last = mid[opts.dst[mid] == goal]  # charger → goal

    # risk of arriving below the reserve when leaving with charge ``b`` on leg ``k`` (plus,
    # weighted, of arriving empty)
    def risk(self, k: NDArray[np.int64], b: NDArray) -> NDArray:
        r = self._below(k, b, self.s.reserve_wh)
        if self.empty_weight:
            r = r + self.empty_weight * self._below(k, b, 0.0)
        return r

    def _below(self, k: NDArray[np.int64], b: NDArray, floor_wh: float) -> NDArray:
        o, s = self.o, self.s
        mu = o.mean[k].reshape((-1,) + (1,) * (b.ndim - 1))
        if s.mode == "chance":
            sd = np.maximum(o.sd[k], 1e-9).reshape(mu.shape)
            return ndtr((floor_wh + mu - b) / sd)
        need = mu + (s.buffer * np.abs(mu) if s.mode == "buffer" else 0.0)
        return np.where(b + 1e-9 >= floor_wh + need, 0.0, 1.0)

    # ------------------------------------------------------------------ Lagrangian search
    def _lagrangian(self, lam: float) -> list[tuple[float, list[int], list[int], list[int]]]:
        """Best plan per number of stops for time + λ·risk: ``(cost, sites, legs, levels)``."""
        o, s, g = self.o, self.s, self.grid_wh
        b0 = s.start_wh
        G = self.gmax + 1
        ends: list[tuple[float, list[int], list[int], list[int]]] = []
        # direct legs
        for k in self.first_goal:
            r = float(self.risk(np.array([k]), np.array([b0]))[0])
            ends.append((o.minutes[k] + lam * r, [], [int(k)], []))
        if self.c == 0 or s.max_stops == 0:
            return ends
        tab = self.tables
        # layer 1: start → charger j, leave at level g'
        k1 = self.first_stop
        j1 = o.dst[k1] - 1
        arrive = b0 - o.mean[k1]
        r1 = self.risk(k1, np.full(k1.size, b0))
        f_arr = _interp_rows(tab[j1], (100.0 * np.maximum(arrive, 0) / self.cap)[:, None])[:, 0]
        cost = (o.minutes[k1] + lam * r1 + s.stop_overhead_min - f_arr)[:, None] + tab[j1]
        cost = np.where(g[None, :] >= arrive[:, None] - 1e-9, cost, np.inf)
        cost[arrive > g[-1] + 1e-9] = np.inf  # arriving above the top level: no stop needed
        V, back = self._collapse(cost, j1)
        backs = [(back, None)]
        if self.mid.size:
            km = self.mid
            im, jm = o.src[km] - 1, o.dst[km] - 1
            a_m = g[None, :] - o.mean[km][:, None]  # mean arrival for each departure level
            r_m = self.risk(km, np.broadcast_to(g, (km.size, G)))
            f_m = _interp_rows(tab[jm], 100.0 * np.maximum(a_m, 0) / self.cap)
            # departure level g may feed level g' when its arrival is ≤ g': g ≤ g' + 100μ/cap
            shift = np.floor(np.arange(G)[None, :] + 100.0 * o.mean[km][:, None] / self.cap
                             + 1e-9).astype(np.int64)
            shift_ok = shift >= 0
            shift = np.clip(shift, 0, G - 1)
            above = a_m > g[-1] + 1e-9
        kl = self.last
        il = o.src[kl] - 1
        r_l = self.risk(kl, np.broadcast_to(g, (kl.size, G))) if kl.size else None
        for layer in range(1, s.max_stops + 1):
            # terminate: charger → goal
            if kl.size:
                tot = V[il] + (o.minutes[kl][:, None] + lam * r_l)
                best = np.unravel_index(np.argmin(tot), tot.shape)
                if np.isfinite(tot[best]):
                    ends.append((float(tot[best]), *self._trace(backs, layer, int(kl[best[0]]),
                                                               int(il[best[0]]), int(best[1]))))
            if layer == s.max_stops or not self.mid.size:
                break
            a = V[im] + o.minutes[km][:, None] + lam * r_m + s.stop_overhead_min - f_m
            a = np.where(above, np.inf, a)
            pref = np.minimum.accumulate(a, axis=1)
            idx = np.arange(G)[None, :]
            arg = np.maximum.accumulate(np.where(a <= pref, idx, 0), axis=1)
            pick = np.take_along_axis(pref, shift, axis=1)
            from_level = np.take_along_axis(arg, shift, axis=1)
            cost = np.where(shift_ok, pick + tab[jm], np.inf)
            V_new, back = self._collapse(cost, jm)
            backs.append((back, from_level))
            if not np.isfinite(V_new).any():
                break
            V = V_new
        return ends

    def _collapse(self, cost: NDArray, dest: NDArray[np.int64]) -> tuple[NDArray, NDArray]:
        """Minimum over options per (charger, level) and which option gave it."""
        G = self.gmax + 1
        V = np.full((self.c, G), np.inf)
        back = np.full((self.c, G), -1, dtype=np.int64)
        if cost.shape[0] == 0:
            return V, back
        order = np.lexsort((np.zeros(dest.size), dest))
        d_sorted = dest[order]
        starts = np.flatnonzero(np.r_[True, d_sorted[1:] != d_sorted[:-1]])
        for st, en in zip(starts, np.r_[starts[1:], d_sorted.size], strict=True):
            block = cost[order[st:en]]
            arg = np.argmin(block, axis=0)
            j = int(d_sorted[st])
            V[j] = block[arg, np.arange(G)]
            back[j] = order[st:en][arg]
        return V, back

    def _trace(
        self, backs: list, layer: int, k_last: int, site: int, level: int
    ) -> tuple[list[int], list[int], list[int]]:
        """Sites, legs and levels of the plan ending with leg ``k_last`` from ``site``."""
        sites, legs, levels = [site], [k_last], [level]
        for depth in range(layer - 1, -1, -1):
            back, from_level = backs[depth]
            row = int(back[site, level])
            if depth == 0:
                legs.append(int(self.first_stop[row]))
                break
            legs.append(int(self.mid[row]))
            prev_level = int(from_level[row, level])
            site = int(self.o.src[self.mid[row]] - 1)
            sites.append(site)
            levels.append(prev_level)
            level = prev_level
        return sites[::-1], legs[::-1], levels[::-1]

    # ------------------------------------------------------------------ exact levels
    def _exact(self, seq: list[int]) -> tuple[float, list[int], list[float], float] | None:
        """Fastest legs and levels for a fixed stop sequence under the risk budget itself
        (risk counted in buckets of ``budget / RISK_BUCKETS``, rounded up)."""
        o, s, g = self.o, self.s, self.grid_wh
        G = self.gmax + 1
        K = RISK_BUCKETS
        delta = self.budget / K
        way = [0, *(j + 1 for j in seq), self.c + 1]
        legs_per = []
        for a, b in zip(way[:-1], way[1:], strict=True):
            ks = self.keep[(o.src[self.keep] == a) & (o.dst[self.keep] == b)]
            if ks.size == 0:
                return None
            legs_per.append(ks)

        def buckets(k: int, dep: NDArray) -> NDArray[np.int64]:
            r = self.risk(np.array([k]), dep[None, :])[0]
            q = np.minimum(np.ceil(r / delta - 1e-9), K + 1)
            return np.where(r <= 0, 0, q).astype(np.int64)

        def shifted(base: NDArray, q: NDArray[np.int64]) -> NDArray:
            # out[d, x] = base[d, x - q[d]] (inf where x < q[d]): leg risk added to the budget
            idx = np.arange(K + 1)[None, :] - q[:, None]
            out = np.take_along_axis(base, np.clip(idx, 0, K), axis=1)
            return np.where(idx >= 0, out, np.inf)

        # W[d, q]: least time departing the current waypoint at level d with q buckets spent
        dep = np.array([s.start_wh])
        W = np.full((1, K + 1), np.inf)
        W[0, 0] = 0.0
        traces = []
        for j, ks in enumerate(legs_per[:-1]):
            tab = self.tables[seq[j]]
            new = np.full((G, K + 1), np.inf)
            arg_k = np.full((G, K + 1), -1, dtype=np.int64)
            arg_d = np.full((G, K + 1), -1, dtype=np.int64)
            for k in ks:
                arr = dep - o.mean[k]
                f_arr = np.interp(100 * np.maximum(arr, 0) / self.cap, np.arange(G), tab)
                S = shifted(W, buckets(int(k), dep)) + (
                    o.minutes[k] + s.stop_overhead_min - f_arr
                )[:, None]
                S[arr > g[-1] + 1e-9] = np.inf  # arriving above the top level: no stop
                P = np.minimum.accumulate(S, axis=0)
                argp = np.maximum.accumulate(
                    np.where(S <= P, np.arange(dep.size)[:, None], 0), axis=0
                )
                # departures whose mean arrival is at or below level g' (a prefix: arrival
                # rises with the departure level)
                dmax = np.searchsorted(arr, g + 1e-9, side="right") - 1
                ok = dmax >= 0
                cand = np.where(ok[:, None], P[np.maximum(dmax, 0)], np.inf) + tab[:, None]
                from_d = argp[np.maximum(dmax, 0)]
                better = cand < new
                new = np.where(better, cand, new)
                arg_k = np.where(better, k, arg_k)
                arg_d = np.where(better, from_d, arg_d)
            traces.append((arg_k, arg_d, dep))
            W, dep = new, g
        best = (np.inf, -1, -1, -1)
        for k in legs_per[-1]:
            S = shifted(W, buckets(int(k), dep))
            flat = int(np.argmin(S))
            d, q = divmod(flat, K + 1)
            val = float(S[d, q] + o.minutes[k])
            if val < best[0]:
                best = (val, int(k), d, q - int(buckets(int(k), dep)[d]))
        if not np.isfinite(best[0]):
            return None
        total, k, d, q = best
        legs, levels = [k], []
        for arg_k, arg_d, prev_dep in reversed(traces):
            levels.append(float(g[d]))
            kk, dd = int(arg_k[d, q]), int(arg_d[d, q])
            q -= int(buckets(kk, prev_dep)[dd])
            legs.append(kk)
            d = dd
        legs, levels = legs[::-1], levels[::-1]
        return total, legs, levels, self._plan_risk(legs, levels)

    def _plan_risk(self, legs: list[int], levels: list[float]) -> float:
        dep = np.array([self.s.start_wh, *levels])
        return float(sum(self.risk(np.array([k]), dep[i:i + 1])[0]
                         for i, k in enumerate(legs)))

    def _least_at(self, lam: float) -> tuple[float, list[int], list[int], list[int]] | None:
        """The plan of least time + ``lam``·risk that visits no site twice."""
        ends = [e for e in self._lagrangian(lam) if len(set(e[1])) == len(e[1])]
        return min(ends, key=lambda e: e[0]) if ends else None

    def _fallback(
        self, best_hi: tuple[float, list[int], list[int], list[int]], lam: float
    ) -> tuple[float, list[int], list[int], list[int]]:
        """Where no plan meets the budget: the plan least likely to run empty, then least
        likely to miss the reserve.

        The reserve risk alone does not rank such plans: leaving below the reserve, every plan
        misses it on its first leg about surely, so each plan's summed risk is about 1 and time
        broke the tie — for a plan predicted to run empty, where a stop 1 km away got there.
        """
        if self.s.reserve_wh <= 0:
            return best_hi
        # each leg's risk of running empty outweighs a thousand legs' risks of missing the
        # reserve: the search then keeps the reserve after a stop wherever it can
        safer = _Solver(self.o, self.keep, self.tables, self.c, self.s, self.cap, self.gmax,
                        empty_weight=1e3)
        alt = safer._least_at(lam)

        def rank(plan: tuple[float, list[int], list[int], list[int]]) -> tuple[float, float]:
            _, _, legs, lv = plan
            dep = np.array([self.s.start_wh, *(float(self.grid_wh[x]) for x in lv)])
            empty = sum(float(self._below(np.array([k]), dep[i:i + 1], 0.0)[0])
                        for i, k in enumerate(legs))
            return empty, self._plan_risk(legs, list(dep[1:]))

        return best_hi if alt is None else min((best_hi, alt), key=rank)

    # ------------------------------------------------------------------ driver
    def solve(self) -> tuple[list[int], list[int], list[float], float] | None:
        budget = self.budget
        seen: dict[tuple[int, ...], float] = {}

        def run(lam: float) -> tuple[float, list[int], list[int], list[int]] | None:
            ends = self._lagrangian(lam)
            for cost, sites, _, _ in ends:
                key = tuple(sites)
                if len(set(key)) == len(key):
                    seen[key] = min(seen.get(key, np.inf), cost)
            ends = [e for e in ends if len(set(e[1])) == len(e[1])]
            return min(ends, key=lambda e: e[0]) if ends else None

        def risk_of(plan: tuple[float, list[int], list[int], list[int]]) -> float:
            _, _, legs, lv = plan
            return self._plan_risk(legs, [float(self.grid_wh[x]) for x in lv])

        lo_l, hi_l = -4.0, 8.0  # log10 λ
        top = 10**hi_l
        best_hi = run(top)
        if best_hi is None:
            return None
        if risk_of(best_hi) <= budget:
            lo_plan = run(10**lo_l)
            if lo_plan is not None and risk_of(lo_plan) <= budget:
                pass
            else:
                for _ in range(LAMBDA_STEPS):
                    mid = 0.5 * (lo_l + hi_l)
                    plan = run(10**mid)
                    if plan is not None and risk_of(plan) <= budget:
                        hi_l = mid
                    else:
                        lo_l = mid
        # exact levels for the most promising stop sequences
        ranked = sorted(seen.items(), key=lambda kv: kv[1])[:REFINE_SEQUENCES]
        best: tuple[float, list[int], list[int], list[float], float] | None = None
        for key, _ in ranked:
            got = self._exact(list(key))
            if got is not None and got[3] <= budget * (1 + 1e-9) and (
                best is None or got[0] < best[0]
            ):
                best = (got[0], list(key), got[1], got[2], got[3])
        if best is not None:
            return best[1], best[2], best[3], best[4]
        # nothing meets the budget: the safest plan the search found
        _, sites, legs, lv = self._fallback(best_hi, top)
        levels = [float(self.grid_wh[x]) for x in lv]
        return sites, legs, levels, self._plan_risk(legs, levels)


# ----------------------------------------------------------------------------- the product
def vehicle_sites(net: RoadNetwork, vehicle: Vehicle) -> list[ChargingSite]:
    """The network's chargers (``net.chargers``) that ``vehicle`` can plug into, with the power
    it can draw at each (a loop over chargers, not segments)."""
    require_network(net, "vehicle_sites")
    vehicle = require_vehicle(vehicle, "vehicle_sites", optional=False)
    table = net.chargers
    idx, power, dc = table.for_vehicle(vehicle)
    return [
        ChargingSite(int(table.segment[i]), float(table.fraction[i]), float(p), bool(d),
                     table.name[i] or f"charger {int(i)}", int(i))
        for i, p, d in zip(idx.tolist(), power.tolist(), dc.tolist(), strict=True)
    ]


def plan_to_dict(plan: ChargingPlan, net: RoadNetwork) -> dict[str, object]:
    """JSON-ready form of a plan (charges in Wh and % of the usable capacity)."""

    def pct(wh: float) -> float:
        return round(plan.pct(wh), 2)

    legs = []
    for leg in plan.legs:
        coords = [net.segment_point(int(leg.segments[0]), leg.start_fraction),
                  net.segment_point(int(leg.segments[-1]), leg.end_fraction)]
        legs.append({
            "segments": leg.segments.tolist(),
            "km": round(float(leg.shares @ net.length_m[leg.segments]) / 1000, 3),
            "drive_min": round(leg.drive_min, 2),
            "energy_wh": round(leg.mean_wh, 1),
            "energy_sd_wh": round(leg.sd_wh, 1),
            "from_lonlat": [round(c, 7) for c in coords[0]],
            "to_lonlat": [round(c, 7) for c in coords[1]],
        })
    stops = [
        {
            "charger": s.site.name,
            "charger_index": s.site.index,
            "segment": s.site.segment,
            "lonlat": [round(c, 7) for c in net.segment_point(s.site.segment, s.site.fraction)],
            "power_kw": round(s.site.power_kw, 2),
            "dc": s.site.dc,
            "arrival_pct": pct(s.arrival_mean_wh),
            "arrival_p5_pct": pct(s.arrival_p5_wh),
            "charge_to_pct": pct(s.charge_to_wh),
            "charge_min": round(s.charge_min, 2),
            "overhead_min": round(s.overhead_min, 2),
        }
        for s in plan.stops
    ]
    st = plan.settings
    return {
        "feasible": plan.feasible,
        "probability_at_least": round(plan.probability, 4),
        "confidence": st.confidence,
        "start_pct": pct(st.start_wh),
        "reserve_pct": pct(st.reserve_wh),
        "capacity_wh": plan.capacity_wh,
        "total_min": round(plan.total_min, 2),
        "drive_min": round(plan.drive_min, 2),
        # charge_min in the sense of each stop's (charging only); stop_min adds the overheads
        "charge_min": round(sum(s.charge_min for s in plan.stops), 2),
        "stop_min": round(plan.stop_min, 2),
        "arrival_pct": pct(plan.goal_arrival_mean_wh),
        "arrival_p5_pct": pct(plan.goal_arrival_p5_wh),
        "legs": legs,
        "stops": stops,
        "notes": list(plan.notes),
    }


def plan_table(plan: ChargingPlan, net: RoadNetwork, add_sites: str | None = None) -> list[str]:
    """The route table of a plan with stops, as ``ev-nav route`` prints it.

    ``add_sites``: how to add charging sites, given when the car can use none on the network
    (the first thing to advise when no plan reaches the confidence).
    """
    st = plan.settings

    def arrive(wh: float) -> str:
        # below 0% of the usable capacity the battery has run out on the way: say so, a
        # negative charge is no charge anyone can arrive with
        pct = plan.pct(wh)
        return f"{'empty':>9}" if pct < 0 else f"{pct:>8.1f}%"

    lines = [
        # the last column is the time at the stop: charging plus the stop's fixed minutes
        f"{'step':<34}{'km':>7}{'min':>7}{'arrive':>9}{'5th pct':>9}{'charge to':>11}"
        f"{'at stop':>10}",
    ]
    for j, leg in enumerate(plan.legs):
        km = float(leg.shares @ net.length_m[leg.segments]) / 1000
        if j < len(plan.stops):
            s = plan.stops[j]
            where = f"to {s.site.name} ({s.site.power_kw:.0f} kW)"
            lines.append(
                f"{where[:33]:<34}{km:>7.1f}{leg.drive_min:>7.1f}"
                f"{arrive(s.arrival_mean_wh)}{arrive(s.arrival_p5_wh)}"
                f"{plan.pct(s.charge_to_wh):>10.0f}%{s.charge_min + s.overhead_min:>7.1f} min"
            )
        else:
            lines.append(
                f"{'to the destination':<34}{km:>7.1f}{leg.drive_min:>7.1f}"
                f"{arrive(plan.goal_arrival_mean_wh)}{arrive(plan.goal_arrival_p5_wh)}"
            )
    n = len(plan.stops)
    if n:
        lines.append(
            f"total {plan.total_min:.0f} min: driving {plan.drive_min:.0f}, charging and stops "
            f"{plan.stop_min:.0f} ({plural(n, 'stop')}, {st.stop_overhead_min:g} min each "
            "besides charging)"
        )
    else:
        lines.append(f"total {plan.total_min:.0f} min: driving, no charging stop")
    arrivals = [s.arrival_mean_wh for s in plan.stops] + [plan.goal_arrival_mean_wh]
    short = -min(plan.pct(wh) for wh in arrivals)
    if short > 0:
        lines.append(f"the battery is predicted to run empty on the way ({short:.1f}% of it "
                     "short at the worst arrival)")
    keep = f"every arrival keeps the {plan.pct(st.reserve_wh):.0f}% reserve"
    if plan.feasible:
        lines.append(f"{keep} with probability >= {100 * plan.probability:.1f}% "
                     f"(asked: {100 * st.confidence:g}%)")
    else:
        # what the user can change; more stops only where the limit, not the chargers, held
        # the plan back
        stops = (
            "allow charging stops (--max-stops N), " if st.max_stops == 0
            else "allow more stops (--max-stops), " if n == st.max_stops < 10 else ""
        )
        sites = f"add charging sites the car can use ({add_sites}), " if add_sites else ""
        lines.append(
            f"no plan reaches {100 * st.confidence:g}%: this is the one found least likely "
            "to run empty, then to miss the reserve; "
            f"{keep} with probability >= {100 * plan.probability:.1f}% — {sites}charge more "
            f"before leaving, {stops}lower the reserve or the confidence"
        )
    return lines
