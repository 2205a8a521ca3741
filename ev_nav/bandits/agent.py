"""The Algorithm 1 loop as an object: posterior → rectified indices → Dijkstra → drive → update."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.bandits.indices import (
    IndexRule,
    Posterior,
    RouteConfidenceIndex,
    ThompsonIndex,
    make_index,
    rectified_weights,
    rectify,
    route_confidence_path,
    truncated_mean,
    truncated_variance,
)
from ev_nav.bandits.routing import PartialPath, Router
from ev_nav.errors import ConfigError
from ev_nav.roads.network import RoadNetwork
from ev_nav.roads.partial import driven_shares


@dataclass(frozen=True)
class Route:
    """A planned route.

    Attributes
    ----------
    segments : ndarray of int64
        Segment ids from start to goal (both included).
    predicted_wh : float
        Posterior mean of the route's total energy [Wh].
    predicted_sd_wh : float
        Posterior standard deviation of the total energy [Wh] (from the model's joint posterior
        over the route's segments when it offers one, else assuming independent segments).
    length_m : float
        Route length [m].
    time_s : float
        Free-flow driving time at the speed limits [s].
    policy : str
        Index rule that planned it.
    start_fraction, end_fraction : float
        Where along its first segment the route starts and along its last it ends (0 = the
        segment's start node, 1 = its end node): a trip between two points drives only part of
        them, and length, time and energy count only that part.
    """

    segments: NDArray[np.int64]
    predicted_wh: float
    predicted_sd_wh: float
    length_m: float
    time_s: float
    policy: str
    extra: dict[str, Any] = field(default_factory=dict)
    start_fraction: float = 0.0
    end_fraction: float = 1.0

    @property
    def shares(self) -> NDArray[np.float64]:
        """The share of each listed segment driven (1 but at the two ends)."""
        return driven_shares(self.segments.size, self.start_fraction, self.end_fraction)


def describe_route(
    net: RoadNetwork,
    segments: ArrayLike | PartialPath,
    model: Any | None = None,
    policy: str = "",
) -> Route:
    """Build a :class:`Route` with predicted energy from ``model`` (or E_det without one).

    ``segments`` is a list of whole segments or a :class:`PartialPath` between two points, whose
    first and last segments count with the share driven.
    """
    if isinstance(segments, PartialPath):
        seg, fs, fg = segments.segments, segments.start_fraction, segments.end_fraction
    else:
        seg, fs, fg = np.asarray(segments, dtype=np.int64), 0.0, 1.0
    shares = driven_shares(seg.size, fs, fg)
    if model is None:
        mean, sd = float(shares @ net.e_det()[seg]), 0.0
    else:
        mean, sd = route_prediction(model, seg, shares)
    return Route(
        segments=seg,
        predicted_wh=mean,
        predicted_sd_wh=sd,
        length_m=float(shares @ net.length_m[seg]),
        time_s=float(shares @ net.travel_time_s[seg]),
        policy=policy,
        start_fraction=fs,
        end_fraction=fg,
    )


def route_prediction(
    model: Any, segments: NDArray[np.int64], shares: NDArray[np.float64] | None = None
) -> tuple[float, float]:
    """Mean and sd [Wh] of ``Σ shares·f(segments)`` (shares default 1), from the model's joint
    posterior (``model.predict_sum``, correlations included)."""
    mean, var = model.predict_sum(segments, shares)
    return float(mean), float(np.sqrt(max(float(var), 0.0)))


class Agent:
    """A learning navigator: one model, one index rule, one router.

    Parameters
    ----------
    net : RoadNetwork
        The road network.
    model : SegmentModel
        Anything with ``posterior()`` and ``update(segment_ids, energies)`` (GP or BI).
    rule : IndexRule or str
        Index rule (``"ts"``, ``"bucb"``, ``"ucb"``, ``"ucb-route"``, ``"bucb-route"``,
        ``"mean"``, or an object); the ``-route`` rules bound each route's total
        (:class:`~ev_nav.bandits.indices.RouteConfidenceIndex`) and need ``potential_change``.
    seed : int
        Seed of the agent's own generator (Thompson draws).
    potential_change : ndarray, optional
        ``ΔΦ`` per segment [Wh] (:func:`ev_nav.potential.potential_change`): rectify in
        reduced-cost space, keeping regeneration (the product default). ``None``: the paper's
        per-segment rectification.
    loss_bound : ndarray, optional
        A physical lower bound of each segment's loss [Wh] (with ``potential_change``; e.g.
        :func:`ev_nav.potential.loss_lower_bound`): the weights truncate the loss posterior at
        it instead of at 0, and the default router is goal-directed on it (``Router(net,
        loss_bound)``), which settles a fraction of what plain search settles on large
        networks. ``None`` (the default): truncation at 0 and plain bidirectional search.
    """

    def __init__(
        self,
        net: RoadNetwork,
        model: Any,
        rule: IndexRule | str = "ts",
        *,
        seed: int = 0,
        router: Router | None = None,
        potential_change: NDArray[np.float64] | None = None,
        loss_bound: NDArray[np.float64] | None = None,
    ) -> None:
        self.net = net
        self.potential_change = potential_change
        if loss_bound is not None and potential_change is None:
            raise ConfigError("a loss bound applies to weights in loss space: give "
                              "potential_change too")
        self.loss_bound = loss_bound
        self.model = model
        self.rule = make_index(rule) if isinstance(rule, str) else rule
        if isinstance(self.rule, RouteConfidenceIndex) and (
            potential_change is None or loss_bound is not None
        ):
            raise ConfigError(
                f"policy {self.rule.name!r} bounds each route's total loss: it needs "
                "potential_change (rectification 'reduced') and no loss_bound"
            )
        self.router = router or Router(net, loss_bound)
        self.rng = np.random.default_rng(seed)
        self.t = 0  # trips planned so far
        #: ambient temperature [°C] of the trips planned now (None: not known, or a model
        #: without temperature): the posterior is read at it
        self.temperature: float | None = None

    def weights(self, t: int | None = None) -> NDArray[np.float64]:
        """Rectified per-segment weights for trip ``t`` (default: the next trip)."""
        t = self.t + 1 if t is None else t
        sample = getattr(self.model, "sample", None)
        if (sample is not None and self.potential_change is None
                and isinstance(self.rule, ThompsonIndex) and self.rule.joint):
            # a joint Thompson draw from a model that draws without variances (the regional
            # learner): Algorithm 2 on the draw, as ``μ + √scale·σ·joint_scores`` would give,
            # from the same random numbers, without computing every segment's σ
            draw = sample(self.rng, temperature=self.temperature)
            if self.rule.scale != 1.0:
                mean = self.model.posterior_mean(temperature=self.temperature)
                draw = mean + math.sqrt(self.rule.scale) * (draw - mean)
            return rectify(draw, self.model.noise_std)
        return rectified_weights(
            self.rule, self._posterior(), t, self.rng, self.potential_change, self.loss_bound
        )

    def _posterior(self) -> Posterior:
        """The model's posterior, at the trips' temperature when one is set."""
        if self.temperature is None:
            return self.model.posterior()
        return self.model.posterior(temperature=self.temperature)

    def plan(self, start: int, goal: int, t: int | None = None) -> NDArray[np.int64]:
        """Choose the route for the next trip (Algorithm 1, lines 3–5); advances the trip count."""
        t = self.t + 1 if t is None else t
        if isinstance(self.rule, RouteConfidenceIndex):
            path = self._plan_route_confidence(start, goal, t)
        else:
            path = self.router.route(self.weights(t), start, goal)
        self.t = max(self.t, t)
        return path

    def _plan_route_confidence(self, start: int, goal: int, t: int) -> NDArray[np.int64]:
        """:class:`~ev_nav.bandits.indices.RouteConfidenceIndex`: the route whose total loss
        has the least lower confidence bound, over the posterior of non-negative losses."""
        post = self._posterior()
        loss = post.mean - self.potential_change
        mean = truncated_mean(loss, post.std)
        var = truncated_variance(loss, post.std)
        sqrt_beta = self.rule.sqrt_beta(t, self.net.n_segments)
        return route_confidence_path(
            lambda w: self.router.route(w, start, goal), mean, var, sqrt_beta
        )

    def observe(self, segments: ArrayLike, energies: ArrayLike) -> None:
        """Feed the observed per-segment energies [Wh] of a driven route to the model."""
        self.model.update(np.asarray(segments, dtype=np.int64), np.asarray(energies, dtype=float))

    def state(self) -> dict[str, Any]:
        """Agent state apart from the model (for checkpoints)."""
        return {"t": self.t, "rng": self.rng.bit_generator.state}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state`."""
        self.t = int(state["t"])
        self.rng.bit_generator.state = state["rng"]
