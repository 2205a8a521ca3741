"""Fleet-learning runs: agents drive trips in a simulated environment; regret is recorded.

One *run* = one network × one trip generator × one agent × one seed over T rounds. In each round
``vehicles`` vehicles plan with the same posterior, drive, and the shared model is updated once
with all their observations (fleet learning). Runs are deterministic from their seed, checkpoint
every K rounds (atomically) and resume from the last checkpoint with results identical to an
uninterrupted run.

Seeds: the ground truth, the trip sequence and the observation noise depend only on the run's
seed (common random numbers across agents, so agents are compared on the same worlds and
trips); the agent's own draws (Thompson samples, SVGP mini-batches) on seed and agent.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import numbers
import os
import tomllib
import typing
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ev_nav import settings
from ev_nav.bandits.agent import Agent
from ev_nav.bandits.indices import ROUTE_POLICIES, make_index
from ev_nav.bandits.routing import Router
from ev_nav.checkpoints import decode as decode_checkpoint
from ev_nav.checkpoints import encode as encode_checkpoint
from ev_nav.errors import (
    ConfigError,
    ModelStateError,
    NegativeCycleError,
    OutsideNetworkError,
    UnreachableError,
    require_file,
    require_number,
    require_seed,
)
from ev_nav.faults import crash_point
from ev_nav.gp.changes import ChangeDetector
from ev_nav.gp.incremental_state import MAX_EXACT_SEGMENTS
from ev_nav.gp.posterior import SegmentModel
from ev_nav.potential import potential_change
from ev_nav.provenance import atomic_path, atomic_write_json, atomic_write_text, run_metadata
from ev_nav.roads.network import RoadNetwork
from ev_nav.sim.environment import PAPER_GRAPH_SHARE, Environment, TruthSpec

RESULT_COLUMNS = (
    "run_id",
    "network",
    "route",
    "agent",
    "seed",
    "t",
    "vehicle",
    "start",
    "goal",
    "regret_wh",
    "energy_wh",
    "optimal_wh",
    "path_segments",
    "length_m",
)

#: The result columns that hold names: a route called ``NA`` or ``null`` is that name, not a
#: missing value (pandas reads those words as missing unless told otherwise).
TEXT_COLUMNS = ("run_id", "network", "route", "agent")


#: The result columns of real numbers (the other number columns are counts and ids).
_REAL_COLUMNS = ("regret_wh", "energy_wh", "optimal_wh", "length_m")


def read_trips_csv(path: str | Path):
    """A run's ``trips.csv`` as a DataFrame, its name columns read as the text written."""
    import pandas as pd

    # every number column is read as numbers (a word there fails the read, so a damaged file
    # is found out), an empty field in one as missing
    numeric = [c for c in RESULT_COLUMNS if c not in TEXT_COLUMNS]
    return pd.read_csv(
        path,
        dtype={**{c: str for c in TEXT_COLUMNS}, **{c: "float64" for c in _REAL_COLUMNS}},
        keep_default_na=False,
        na_values={c: ["", "nan", "NaN"] for c in numeric},
    )


# ----------------------------------------------------------------------------- specifications
@dataclass(frozen=True)
class NetworkSpec:
    """Which road network a run uses.

    ``kind="synthetic"`` builds the embedded town (``n_segments``, ``seed``); ``kind="osm"``
    loads ``path`` (OSM XML, optional ``dems``); ``kind="file"`` loads a network saved by
    ``ev-nav network build``. Relative paths are resolved against ``base_dir``.
    """

    kind: str = "synthetic"
    path: str | None = None
    dems: tuple[str, ...] = ()
    n_segments: int = 2000
    seed: int = 0
    name: str | None = None

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind == "synthetic":
            return f"synthetic-{self.n_segments}"
        return Path(self.path or "network").name.split(".")[0]


_NETWORKS: dict[tuple, RoadNetwork] = {}


def load_network(spec: NetworkSpec, cache_dir: str | Path | None = None) -> RoadNetwork:
    """Build or load the network of ``spec``, memoised per process (workers build it once)."""
    key = (spec.kind, spec.path, spec.dems, spec.n_segments, spec.seed)
    if key not in _NETWORKS:
        if spec.kind == "synthetic":
            from ev_nav.roads.synthetic import synthetic_town

            net = synthetic_town(spec.n_segments, seed=spec.seed)
        elif spec.kind == "osm":
            from ev_nav.roads.load import load_osm

            if spec.path is None:
                raise ConfigError("an OSM network spec needs 'path'")
            cache = cache_dir or settings.network_cache_dir()
            net = load_osm(spec.path, dems=list(spec.dems), cache_dir=cache)
        elif spec.kind == "file":
            if spec.path is None:
                raise ConfigError("a file network spec needs 'path'")
            net = RoadNetwork.load(spec.path)
        else:
            raise ConfigError(f"unknown network kind {spec.kind!r}; use synthetic, osm or file")
        _NETWORKS[key] = net
    return _NETWORKS[key]


@dataclass(frozen=True)
class AgentSpec:
    """A learning agent: a model (``gp``/``bi``) and an index rule, or ``random`` routing.

    ``policy``: ``ts``, ``ts-joint``, ``bucb``, ``bucb-quantile``, ``ucb``, ``bucb-route``,
    ``ucb-route`` (Bayes-UCB and UCB on each route's total, rectification ``"reduced"``
    only: :class:`~ev_nav.bandits.indices.RouteConfidenceIndex`), ``mean`` or
    ``random`` (uniform random routes between the endpoints: Dijkstra on i.i.d. exponential
    weights, the baseline of the CI check). ``lengthscale`` is the agent's initial
    feature-kernel lengthscale.
    ``rectification``: ``"reduced"`` (the product default) rectifies the index in reduced-cost
    space and so keeps downhill regeneration (:func:`ev_nav.bandits.indices.rectified_weights`);
    ``"paper"`` rectifies each segment's energy as the paper's Algorithm 2 does.
    ``learner`` (GP agents): ``"exact"`` (:class:`~ev_nav.gp.incremental.IncrementalGP`, the
    product default: exact posterior, rank-k updates, hyperparameters on a schedule; on
    networks past its :data:`~ev_nav.gp.incremental_state.MAX_EXACT_SEGMENTS` the regional
    learner :class:`~ev_nav.gp.regional.RegionalGP` instead, on the same fit schedule),
    ``"regional"`` (the regional learner at any size, e.g. to compare it with the exact one
    where both run) or ``"svgp"`` (the paper's Algorithm 3, :class:`~ev_nav.gp.svgp.SVGPModel`;
    the paper mode, labelled ``SVGP-…``). ``num_inducing``, ``batch_size``, ``steps_per_trip`` and
    ``kernel_mode`` configure the SVGP only. ``segment_scale`` (GP with the exact learner, BI):
    ``"uniform"`` (the paper's one prior and noise variance) or ``"loss"`` (both scale with
    each segment's deterministic loss, the physical world's model; ``docs/objective.md``).
    ``detect_changes``: run the change detector (:mod:`ev_nav.gp.changes`) on every reading
    and let the model forget a changed road's old readings (labelled ``…+detect``).
    ``temperature``: in a world with a temperature cycle, give the model each round's ambient
    temperature with its readings and plan with the posterior at it (labelled ``…+temp``).
    """

    model: str = "gp"
    policy: str = "ts"
    beta_scale: float = 1.0
    omega: float = 1.0
    xi: float = 1.0
    lengthscale: float = 1.0
    num_inducing: int = 1000
    batch_size: int = 2500
    steps_per_trip: int = 1
    learn_hyperparameters: bool = True
    kernel_mode: str = "auto"
    name: str | None = None
    rectification: str = "reduced"
    learner: str = "exact"
    segment_scale: str = "uniform"
    detect_changes: bool = False
    temperature: bool = False

    def __post_init__(self) -> None:
        for name, strict in (("beta_scale", False), ("omega", True), ("xi", True),
                             ("lengthscale", True)):  # (inf passed as ">= 0")
            require_number(getattr(self, name), name, low=0, low_open=strict)
        for name in ("num_inducing", "batch_size", "steps_per_trip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.detect_changes and self.policy == "random":  # failed every run
            raise ConfigError("detect_changes needs a learning agent, not policy = 'random'")
        if self.policy in ROUTE_POLICIES and self.rectification == "paper":
            # caught when the spec is made, not in every run at its first trip
            raise ConfigError(
                f"policy = {self.policy!r} bounds each route's total loss and needs "
                "rectification = 'reduced', not 'paper'"
            )

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.policy == "random":
            return "random"
        model = "SVGP" if self.model == "gp" and self.learner == "svgp" else self.model.upper()
        label = f"{model}-{self.policy.upper()}"
        if self.policy.startswith("bucb") and (self.omega, self.xi) != (1.0, 1.0):
            label += f"(w={self.omega:g},xi={self.xi:g})"
        if self.beta_scale != 1.0:
            label += f"(beta x{self.beta_scale:g})"
        if self.detect_changes:
            label += "+detect"
        if self.temperature:
            label += "+temp"
        return label


@dataclass(frozen=True)
class TripSpec:
    """Which trips are driven.

    ``kind="fixed"``: every trip from ``start`` to ``goal`` (segment ids or ``(lon, lat)``
    coordinates); ``kind="random"``: random origin–destination pairs at least
    ``min_distance_m`` apart. ``vehicles`` vehicles drive per round and share one model.
    """

    kind: str = "fixed"
    start: int | tuple[float, float] | None = None
    goal: int | tuple[float, float] | None = None
    vehicles: int = 1
    min_distance_m: float = 1000.0
    name: str = "route"

    def __post_init__(self) -> None:
        # from Python these failed inside a run (vehicles = 0: "need at least one array to
        # concatenate"); a config says where (load_config)
        if isinstance(self.vehicles, bool) or not isinstance(self.vehicles, numbers.Integral) or (
            self.vehicles < 1
        ):
            raise ConfigError(f"vehicles must be a whole number >= 1, got {self.vehicles!r}")
        d = self.min_distance_m
        if isinstance(d, bool) or not isinstance(d, numbers.Real) or not 0 <= d < math.inf:
            raise ConfigError(f"min_distance_m must be >= 0, got {d!r}")
        for key in ("start", "goal"):
            value = getattr(self, key)
            if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value < 0:
                raise ConfigError(f"{key} is a segment id, >= 0; got {value}")


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines one run (and nothing else does)."""

    network: NetworkSpec = field(default_factory=NetworkSpec)
    agent: AgentSpec = field(default_factory=AgentSpec)
    trips: TripSpec = field(default_factory=TripSpec)
    truth: TruthSpec = field(default_factory=TruthSpec)
    horizon: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        # from Python a negative seed failed inside NumPy and a horizon < 1 ran nothing, silently
        h = self.horizon
        if isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1:
            raise ConfigError(f"horizon must be a whole number of rounds >= 1, got {h!r}")
        require_seed(self.seed, "a run's seed")

    @property
    def run_id(self) -> str:
        """Readable, unique id: network, route, agent, seed and a short hash of the rest.

        A number given as a whole number where the spec takes a real one (a TOML
        ``lengthscale = 1``) hashes as that real number, so ``1`` and ``1.0`` are one run.
        """
        return self._id(canonical=True)

    @property
    def legacy_run_id(self) -> str:
        """The id earlier versions gave this run: whole numbers in real-valued fields hashed as
        written (``1`` and ``1.0`` were two runs). Equal to :attr:`run_id` for every spec whose
        real-valued fields hold real numbers; :func:`adopt_legacy_run` moves such a folder."""
        return self._id(canonical=False)

    def _id(self, *, canonical: bool) -> str:
        fields = dataclasses.asdict(self)
        if canonical:
            for name, cls in _SPEC_PARTS.items():
                for key in _real_fields(cls):
                    value = fields[name][key]
                    if isinstance(value, int) and not isinstance(value, bool):
                        fields[name][key] = float(value)
            for key in ("start", "goal"):  # (lon, lat): real numbers; a bare int: a segment id
                value = fields["trips"][key]
                if isinstance(value, list | tuple):
                    fields["trips"][key] = [float(v) for v in value]
        # Fields added after results were published are left out of the hash while they hold the
        # value that reproduces the old behaviour, so existing run folders keep their ids.
        if fields["agent"]["rectification"] == "paper":
            del fields["agent"]["rectification"]
        if fields["agent"]["learner"] == "svgp" or fields["agent"]["model"] != "gp":
            del fields["agent"]["learner"]
        if fields["truth"]["kind"] != "physical":
            del fields["truth"]["loss_spread"]
            del fields["truth"]["noise_spread"]
        if fields["truth"]["path"] is None:
            del fields["truth"]["path"]
        if fields["truth"]["graph_share"] == PAPER_GRAPH_SHARE:
            del fields["truth"]["graph_share"]
        if fields["agent"]["segment_scale"] == "uniform":
            del fields["agent"]["segment_scale"]
        if not fields["agent"]["detect_changes"]:
            del fields["agent"]["detect_changes"]
        if not fields["agent"]["temperature"]:
            del fields["agent"]["temperature"]
        if fields["truth"]["temperature_mean_c"] is None:
            for key in [k for k in fields["truth"] if k.startswith("temperature_")]:
                del fields["truth"][key]
        if not fields["truth"]["drift_rounds"]:
            for key in ("drift_rounds", "drift_size", "drift_segments"):
                del fields["truth"][key]
        digest = hashlib.sha256(
            json.dumps(fields, sort_keys=True, default=str).encode()
        ).hexdigest()[:8]
        parts = (self.network.label, self.trips.name, self.agent.label)
        return "_".join(safe_name(p) for p in parts) + f"_s{self.seed}_{digest}"


#: The parts of a :class:`RunSpec` whose real-valued fields :attr:`RunSpec.run_id` normalises.
_SPEC_PARTS: dict[str, type] = {
    "network": NetworkSpec, "agent": AgentSpec, "trips": TripSpec, "truth": TruthSpec,
}


@functools.cache
def _real_fields(cls: type) -> tuple[str, ...]:
    """Names of ``cls``'s fields whose type is ``float`` or ``float | None`` (resolved, so it
    does not depend on how the annotation is written)."""
    hints = typing.get_type_hints(cls)
    return tuple(
        f.name for f in dataclasses.fields(cls)
        if hints[f.name] is float or set(typing.get_args(hints[f.name])) == {float, type(None)}
    )


def safe_name(text: str) -> str:
    """``text`` reduced to a file-name component that cannot leave its folder.

    Config strings (network, route and agent names) become folder names; anything but letters,
    digits, ``-``, ``_`` and inner dots is replaced, and leading dots are dropped (so neither
    ``..`` nor a hidden name nor a path separator can come through).
    """
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))
    return cleaned.lstrip(".") or "_"


def run_dir_for(out_dir: str | Path, run_id: str) -> Path:
    """``out_dir/runs/<run_id>``, checked to stay inside ``out_dir`` (raises ConfigError)."""
    base = Path(out_dir).resolve()
    run_dir = (base / "runs" / run_id).resolve()
    if run_dir.parent != base / "runs" or run_id != safe_name(run_id):
        raise ConfigError(f"run id {run_id!r} would leave the output folder {base}")
    return run_dir


def adopt_legacy_run(out_dir: str | Path, spec: RunSpec) -> Path:
    """``spec``'s run folder in ``out_dir``, taking over the folder an earlier version wrote.

    Earlier versions hashed a whole number in a real-valued field as written
    (:attr:`RunSpec.legacy_run_id`), so a config with ``lengthscale = 1`` left its runs under
    another id. Such a folder, finished or half-way, is renamed to :attr:`RunSpec.run_id` with
    the id inside its files rewritten (the ids first, the rename last, so an interruption at any
    point leaves a folder that a later call finishes adopting), so a resumed grid continues it
    instead of starting over. Nothing happens when the ids agree or the new folder exists.
    """
    run_dir = run_dir_for(out_dir, spec.run_id)
    legacy = spec.legacy_run_id
    if legacy == spec.run_id or run_dir.exists():
        return run_dir
    old = run_dir_for(out_dir, legacy)
    if not old.is_dir():
        return run_dir
    # an id is a file-name-safe word ending in its hash, so replacing it as text touches nothing
    # else and keeps every number as written
    for name in ("trips.csv", "metadata.json"):
        path = old / name
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            if legacy in text:
                atomic_write_text(path, text.replace(legacy, spec.run_id))
    try:
        state = _load_checkpoint(old / CHECKPOINT_NAME)
    except ModelStateError:  # damaged or unsafe: resuming the run reports it
        state = None
    if state is not None and any(row.get("run_id") == legacy for row in state.rows):
        for row in state.rows:
            row["run_id"] = spec.run_id
        _save_checkpoint(old / CHECKPOINT_NAME, state)
    old.rename(run_dir)
    return run_dir


# ----------------------------------------------------------------------------- construction
def _seed(*parts: Any) -> int:
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


#: Fleet GP agents take the spectral prior variances up to this many segments.
FLEET_SPECTRAL_MAX = 6000


def svgp_config(spec: AgentSpec, **overrides: Any) -> Any:
    """The :class:`~ev_nav.gp.svgp.SVGPConfig` of a GP agent (``overrides``: other fields)."""
    from ev_nav.gp.svgp import SVGPConfig

    fields = {
        "num_inducing": spec.num_inducing,
        "batch_size": spec.batch_size,
        "steps_per_trip": spec.steps_per_trip,
        "lengthscale": spec.lengthscale,
        "learn_hyperparameters": spec.learn_hyperparameters,
        "kernel_mode": spec.kernel_mode,
    }
    return SVGPConfig(**{**fields, **overrides})


def _regional_model(
    spec: AgentSpec, net: RoadNetwork, seed: int, gp_overrides: dict[str, object]
) -> SegmentModel:
    """The product's GP above the exact learner's size: the regional learner
    (:class:`~ev_nav.gp.regional.RegionalGP`), fitting its hyperparameters on the exact
    learner's schedule when the spec learns them."""
    from ev_nav.gp.regional import RegionalConfig, RegionalGP

    if spec.kernel_mode not in ("auto", "sparse"):
        raise ConfigError("the regional learner computes the graph kernel sparsely: "
                          f"kernel_mode {spec.kernel_mode!r} does not apply")
    fields = {"lengthscale": spec.lengthscale, "segment_scale": spec.segment_scale,
              "learn_hyperparameters": spec.learn_hyperparameters}
    try:
        config = RegionalConfig(**{**fields, **gp_overrides})
    except TypeError as exc:
        raise ConfigError(f"not a setting of the regional learner: {exc}") from None
    return RegionalGP(net, config=config, seed=seed)


def make_model(
    spec: AgentSpec, net: RoadNetwork, seed: int, **gp_overrides: object
) -> SegmentModel:
    """The agent's model with the spec §4 prior (σ0², ς² from the network's E_det).

    ``gp_overrides`` are further config fields of a GP agent's learner
    (:class:`~ev_nav.gp.incremental.IncrementalConfig` or, for ``learner="svgp"``,
    :class:`~ev_nav.gp.svgp.SVGPConfig`); a BI agent has none and refuses them.
    """
    if spec.model == "bi":
        from ev_nav.gp.independent import BIModel

        if gp_overrides:
            raise ConfigError(f"BI models take no GP settings: {sorted(gp_overrides)}")
        return BIModel(net, segment_scale=spec.segment_scale)
    if spec.model != "gp":
        raise ConfigError(f"unknown model {spec.model!r}; use gp or bi")
    if spec.learner == "regional" or (
        spec.learner == "exact" and net.n_segments > MAX_EXACT_SEGMENTS
    ):
        return _regional_model(spec, net, seed, gp_overrides)
    if spec.learner == "exact":
        from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP

        fields = {
            "lengthscale": spec.lengthscale,
            "learn_hyperparameters": spec.learn_hyperparameters,
            "kernel_mode": spec.kernel_mode,
            "segment_scale": spec.segment_scale,
        }
        try:
            config = IncrementalConfig(**{**fields, **gp_overrides})
        except TypeError as exc:
            raise ConfigError(f"not a setting of the exact learner: {exc}") from None
        return IncrementalGP(net, config=config, seed=seed)
    if spec.learner == "svgp":
        from ev_nav.gp.svgp import SVGPModel

        if spec.segment_scale != "uniform":
            raise ConfigError("the SVGP learner (the paper mode) has uniform scales only")

        # fleet runs last hundreds of trips: a one-off eigendecomposition for the prior
        # variances (Luxembourg: 30–45 s) pays for itself after ~50 trips
        spectral = {"spectral_diag": True} if net.n_segments <= FLEET_SPECTRAL_MAX else {}
        config = svgp_config(spec, **{**spectral, **gp_overrides})
        return SVGPModel(net, config=config, seed=seed)
    raise ConfigError(f"unknown learner {spec.learner!r}; use exact, regional or svgp")


def resolve_endpoint(net: RoadNetwork, value: Any) -> int:
    """A segment id from an id or a ``(lon, lat)`` pair."""
    if isinstance(value, (int, np.integer)):
        if not 0 <= int(value) < net.n_segments:
            raise ConfigError(f"segment id {value} outside 0..{net.n_segments - 1}")
        return int(value)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return net.nearest_segment(float(value[0]), float(value[1]))
    raise ConfigError(f"cannot use {value!r} as a trip endpoint (segment id or [lon, lat])")


class TripGenerator:
    """Yields (start, goal) segment pairs for each vehicle of each round."""

    def __init__(self, spec: TripSpec, net: RoadNetwork, seed: int) -> None:
        self.spec = spec
        self.net = net
        self.rng = np.random.default_rng(_seed("trips", seed))
        if spec.kind == "fixed":
            if spec.start is None or spec.goal is None:
                raise ConfigError("a fixed-route trip spec needs start and goal")
            self.fixed = (resolve_endpoint(net, spec.start), resolve_endpoint(net, spec.goal))
            if self.fixed[0] == self.fixed[1]:
                # written differently (an id and a coordinate on it, two close coordinates),
                # they were one place: every trip had regret 0
                raise ConfigError(
                    f"start {spec.start!r} and goal {spec.goal!r} are the same segment "
                    f"({self.fixed[0]}); no trip"
                )
        elif spec.kind == "random":
            self.mid = net.segment_midpoints()
        else:
            raise ConfigError(f"unknown trip kind {spec.kind!r}; use fixed or random")

    def next(self) -> tuple[int, int]:
        if self.spec.kind == "fixed":
            return self.fixed
        from ev_nav.roads.network import haversine_m

        for _ in range(1000):
            s, g = self.rng.integers(0, self.net.n_segments, 2)
            d = haversine_m(self.mid[s, 0], self.mid[s, 1], self.mid[g, 0], self.mid[g, 1])
            if s != g and d >= self.spec.min_distance_m:
                return int(s), int(g)
        raise ConfigError(
            f"no origin–destination pair {self.spec.min_distance_m} m apart in this network"
        )


# ----------------------------------------------------------------------------- the run
@dataclass
class RunState:
    """Everything needed to continue a run exactly where it stopped."""

    t: int
    rows: list[dict[str, Any]]
    model: Any
    agent: dict[str, Any]
    rng_noise: dict[str, Any]
    rng_trips: dict[str, Any]
    rng_random: dict[str, Any]
    visits: Any = None
    detector: Any = None
    #: :func:`input_files_hash` of the run's files when it was checkpointed (None: a checkpoint
    #: of an earlier version, which did not record it)
    inputs: str | None = None


#: A run's checkpoint file (pickle-free, :mod:`ev_nav.checkpoints`). Runs of older versions left
#: ``checkpoint.pt`` (pickle); that name is never read, so such a run restarts from trip 1.
CHECKPOINT_NAME = "checkpoint.evck"
LEGACY_CHECKPOINT_NAME = "checkpoint.pt"


def _save_checkpoint(path: Path, state: RunState) -> None:
    blob = encode_checkpoint(dataclasses.asdict(state))
    with atomic_path(path) as tmp:
        tmp.write_bytes(blob)


def _load_checkpoint(path: Path) -> RunState | None:
    """The run state in ``path``; ``None`` if there is none.

    Raises
    ------
    UnsafeCheckpointError
        If the file is not a pickle-free ev-nav checkpoint (it is never unpickled: with Dask the
        run folder is on a shared file system that others can write to).
    ModelStateError
        If it is one but damaged.
    """
    if not path.is_file():
        return None
    data = decode_checkpoint(path.read_bytes())
    names = {f.name for f in dataclasses.fields(RunState)}
    # checkpoints from before change detection have no "detector", from before the input
    # files were recorded no "inputs"
    if not isinstance(data, dict) or not (names - {"detector", "inputs"} <= set(data) <= names):
        raise ModelStateError(f"{path} is not a fleet run checkpoint")
    return RunState(**data)


#: Builds an agent's model: ``(agent spec, network, seed) -> model``; :func:`make_model` by
#: default (diagnostics pass their own, e.g. with other learner settings).
ModelFactory = Callable[[AgentSpec, RoadNetwork, int], SegmentModel]


@dataclass
class RunResult:
    """What a run produced.

    Attributes
    ----------
    rows : list of dict
        One row per vehicle trip (the columns of :data:`RESULT_COLUMNS`).
    model : SegmentModel or None
        The final learned model (``None`` for random routing or a run read back from its CSV).
    env : Environment or None
        The simulated world (``None`` for a run read back from its CSV).
    visits : ndarray of int64 or None
        Times each segment was driven.
    finished : bool
        Whether the run reached its horizon (``False`` after ``stop_after``).
    """

    rows: list[dict[str, Any]]
    model: SegmentModel | None = None
    env: Environment | None = None
    visits: NDArray[np.int64] | None = None
    finished: bool = True


@dataclass
class _Driver:
    """The per-run machinery: world, trips, agent (or random routing) and their generators."""

    net: RoadNetwork
    env: Environment
    trips: TripGenerator
    router: Router
    model: SegmentModel | None
    agent: Agent | None
    rng_noise: np.random.Generator
    rng_random: np.random.Generator
    visits: NDArray[np.int64]
    detector: ChangeDetector | None = None

    def plan(self, start: int, goal: int, t: int) -> NDArray[np.int64]:
        if self.agent is None:
            weights = self.rng_random.exponential(1.0, self.net.n_segments)
            return self.router.route(weights, start, goal)
        return self.agent.plan(start, goal, t)

    def state(self, t: int, rows: list[dict[str, Any]]) -> RunState:
        return RunState(
            t=t,
            rows=rows,
            model=self.model.state_dict() if self.model is not None else None,
            agent=self.agent.state() if self.agent is not None else {},
            rng_noise=self.rng_noise.bit_generator.state,
            rng_trips=self.trips.rng.bit_generator.state,
            rng_random=self.rng_random.bit_generator.state,
            visits=self.visits,
            detector=self.detector.state_dict() if self.detector is not None else None,
        )

    def restore(self, state: RunState) -> None:
        if state.visits is not None:
            self.visits = np.asarray(state.visits, dtype=np.int64)
        if self.detector is not None and state.detector is not None:
            self.detector.load_state_dict(state.detector)
        if self.model is not None and self.agent is not None:
            self.model.load_state_dict(state.model)
            self.agent.load_state(state.agent)
        self.rng_noise.bit_generator.state = state.rng_noise
        self.trips.rng.bit_generator.state = state.rng_trips
        self.rng_random.bit_generator.state = state.rng_random


def _driver(
    spec: RunSpec, truth_cache: str | Path | None, model_factory: ModelFactory
) -> _Driver:
    net = load_network(spec.network)
    env = Environment.create(net, seed=spec.seed, truth=spec.truth, cache_dir=truth_cache)
    router = Router(net)
    agent_seed = _seed("agent", spec.seed, spec.agent.label)
    model = agent = None
    if spec.agent.policy != "random":
        model = model_factory(spec.agent, net, agent_seed)
        rule = make_index(
            spec.agent.policy,
            beta_scale=spec.agent.beta_scale,
            omega=spec.agent.omega,
            xi=spec.agent.xi,
        )
        if spec.agent.rectification not in ("reduced", "paper"):
            raise ConfigError(
                f"unknown rectification {spec.agent.rectification!r}; use reduced or paper"
            )
        dphi = potential_change(net) if spec.agent.rectification == "reduced" else None
        agent = Agent(net, model, rule, seed=agent_seed, router=router, potential_change=dphi)
    detector = ChangeDetector(net.n_segments) if spec.agent.detect_changes else None
    if detector is not None and model is None:
        raise ConfigError("detect_changes needs a learning agent (not random routing)")
    return _Driver(
        net=net,
        env=env,
        trips=TripGenerator(spec.trips, net, spec.seed),
        router=router,
        model=model,
        agent=agent,
        rng_noise=np.random.default_rng(_seed("noise", spec.seed)),
        rng_random=np.random.default_rng(agent_seed),
        visits=np.zeros(net.n_segments, dtype=np.int64),
        detector=detector,
    )


def run_one(
    spec: RunSpec,
    out_dir: str | Path | None = None,
    *,
    resume: bool = True,
    checkpoint_every: int = 50,
    progress: bool = False,
    stop_after: int | None = None,
    truth_cache: str | Path | None = None,
    model_factory: ModelFactory = make_model,
) -> RunResult:
    """Execute one run.

    Parameters
    ----------
    spec : RunSpec
    out_dir : path, optional
        Run folder: ``trips.csv``, ``metadata.json`` and the checkpoint are written there.
    resume : bool
        Continue from the checkpoint when present (a finished run is read back from its CSV).
    checkpoint_every : int
        Rounds between checkpoints.
    progress : bool
        Show a tqdm progress bar.
    stop_after : int, optional
        Stop (after checkpointing) once this round is done: simulates an interruption in tests.
    truth_cache : path, optional
        Folder where ground-truth draws are cached (shared by the runs of a grid).
    model_factory : callable, optional
        Builds the agent's model (default :func:`make_model`).

    Returns
    -------
    RunResult
    """
    run_dir = Path(out_dir) if out_dir is not None else None
    inputs = input_files_hash(spec) if run_dir is not None else None  # (kept with the run)
    if run_dir is not None and resume and (run_dir / "trips.csv").is_file():
        made_with = _recorded_inputs(run_dir / "metadata.json")
        _check_same_inputs(spec, made_with, inputs, "finished")
        return RunResult(rows=read_trips_csv(run_dir / "trips.csv").to_dict("records"))

    drv = _driver(spec, truth_cache, model_factory)
    rows: list[dict[str, Any]] = []
    t0 = 0
    ckpt = run_dir / CHECKPOINT_NAME if run_dir is not None else None
    if ckpt is not None and resume:
        try:
            state = _load_checkpoint(ckpt)
        except ModelStateError as exc:
            # it said only "checkpoint damaged or not readable", on every resume; the file is
            # the run's alone (finished runs keep none), so setting it aside loses nothing else
            raise type(exc)(
                f"{ckpt}: {exc}; move that file out of the way (or delete it) and resume: run "
                f"{spec.run_id} then starts again from round 1, the other runs are kept"
            ) from None
        if state is not None:
            _check_same_inputs(spec, state.inputs, inputs, f"checkpointed at round {state.t}")
            t0, rows = state.t, state.rows
            drv.restore(state)
            for r in sorted(spec.truth.drift_rounds):  # the world as it was at the checkpoint
                if r <= t0:
                    drift(spec, drv, r)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=spec.horizon, initial=t0, desc=spec.run_id[:48], leave=False)
    for t in range(t0 + 1, spec.horizon + 1):
        rows.extend(_round(spec, drv, t))
        if bar is not None:
            bar.update(1)
        last = t == spec.horizon
        if ckpt is not None and (t % checkpoint_every == 0 or last or t == stop_after):
            _save_checkpoint(ckpt, dataclasses.replace(drv.state(t, rows), inputs=inputs))
            crash_point("run-checkpointed")
        restart = getattr(drv.model, "restart_from_statistics", None)
        if restart is not None and (t % checkpoint_every == 0 or t == stop_after):
            # a learner whose per-trip updates are not bit-reproducible from its checkpoint
            # (the regional one) continues from the checkpoint's statistics, exactly as a run
            # resumed there does: the same results with or without an interruption
            restart()
        if stop_after is not None and t >= stop_after and not last:
            if bar is not None:
                bar.close()
            return RunResult(rows, drv.model, drv.env, drv.visits, finished=False)
    if bar is not None:
        bar.close()
    if run_dir is not None:
        write_run(run_dir, spec, rows, drv.env, drv.visits, inputs)
    return RunResult(rows, drv.model, drv.env, drv.visits)


def input_files_hash(spec: RunSpec) -> str | None:
    """SHA-256 of the files a run reads (its network file, elevation tiles and truth file), or
    None when it reads none (a synthetic town, a drawn world). The run id names the files, not
    their contents: a truth file replaced between an interruption and ``--resume`` gave one run
    two worlds (two optima for one fixed trip)."""
    paths = [spec.network.path] if spec.network.kind in ("file", "osm") else []
    paths += list(spec.network.dems)
    if spec.truth.kind == "file":
        paths.append(spec.truth.path)
    paths = [p for p in paths if p]
    if not paths:
        return None
    digest = hashlib.sha256()
    for path in paths:
        digest.update(_file_sha256(str(Path(path).resolve())).encode())
    return digest.hexdigest()


@functools.lru_cache(maxsize=64)
def _file_sha256_at(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_sha256(path: str) -> str:
    """A file's SHA-256, read once per process while its size and time stay the same."""
    try:
        st = os.stat(path)
    except OSError:
        return "missing"  # the run itself says what is missing
    return _file_sha256_at(path, st.st_size, st.st_mtime_ns)


def _recorded_inputs(metadata: Path) -> str | None:
    try:
        return json.loads(metadata.read_text(encoding="utf-8")).get("input_files_sha256")
    except (OSError, ValueError, AttributeError):
        return None


def _check_same_inputs(spec: RunSpec, recorded: str | None, now: str | None, what: str) -> None:
    if recorded is not None and recorded != now:
        files = "its truth file" if spec.truth.kind == "file" else "its network file"
        raise ConfigError(
            f"run {spec.run_id} was {what} with other input files ({files} changed since): "
            "resuming would mix two worlds in one run; restore the file, or run the config "
            "into a new folder (--out NEW_FOLDER)"
        )


def _round(spec: RunSpec, drv: _Driver, t: int) -> list[dict[str, Any]]:
    """One round: every vehicle plans and drives; the shared model learns from all of them."""
    base = {
        "run_id": spec.run_id,
        "network": spec.network.label,
        "route": spec.trips.name,
        "agent": spec.agent.label,
        "seed": spec.seed,
    }
    if t in spec.truth.drift_rounds:
        drift(spec, drv, t)
    env, temp = drv.env, round_temperature(spec, t)
    if temp is not None:  # the world of this round's temperature
        env = drv.env.at_temperature(temp)
        base["temperature_c"] = temp
    use_temp = temp is not None and spec.agent.temperature
    if drv.agent is not None:
        drv.agent.temperature = temp if use_temp else None
    rows, paths, observed = [], [], []
    for vehicle in range(spec.trips.vehicles):
        start, goal = drv.trips.next()
        path = drv.plan(start, goal, t)
        obs = env.drive(path, drv.rng_noise)
        regret, energy, best = env.regret(path, start, goal)
        rows.append(
            {
                **base,
                "t": t,
                "vehicle": vehicle,
                "start": start,
                "goal": goal,
                "regret_wh": regret,
                "energy_wh": energy,
                "optimal_wh": best,
                "path_segments": int(path.shape[0]),
                "length_m": float(drv.net.length_m[path].sum()),
            }
        )
        paths.append(path)
        observed.append(obs)
        np.add.at(drv.visits, path, 1)
    if drv.model is not None:
        ids, y = np.concatenate(paths), np.concatenate(observed)
        events = []
        if drv.detector is not None:  # scored against the prediction before learning them
            post = drv.model.posterior(temperature=temp) if use_temp else drv.model.posterior()
            var = post.std[ids] ** 2 + drv.model.noise_variances(ids)
            events = drv.detector.observe(ids, y, post.mean[ids], var)
        if use_temp:
            drv.model.update(ids, y, temperature=temp)
        else:
            drv.model.update(ids, y)
        if events:
            drv.detector.respond(drv.model, events)  # type: ignore[union-attr]
    return rows


def round_temperature(spec: RunSpec, t: int) -> float | None:
    """Ambient temperature [°C] of round ``t`` (None in a world without a temperature cycle)."""
    truth = spec.truth
    if truth.temperature_mean_c is None:
        return None
    from ev_nav.sim.climate import seasonal_temperature

    return seasonal_temperature(
        t, mean_c=truth.temperature_mean_c, amplitude_c=truth.temperature_amplitude_c,
        period=truth.temperature_period_rounds, noise_c=truth.temperature_noise_c,
        seed=spec.seed,
    )


def drift_stretch(spec: RunSpec, env: Environment, t: int) -> NDArray[np.int64]:
    """The segments that change at round ``t``: ``drift_segments`` consecutive ones in the
    middle of the energy-optimal route (under the world as it is then) of the run's fixed trip,
    or of a trip drawn for the change from its own seeded generator (random trips)."""
    k = spec.truth.drift_segments
    net = env.net
    if spec.trips.kind == "fixed":
        gen = TripGenerator(spec.trips, net, spec.seed)
        path, _ = env.oracle.optimal(*gen.next())
    else:
        rng = np.random.default_rng(_seed("drift", spec.seed, t))
        for _ in range(1000):
            s, g = (int(x) for x in rng.integers(net.n_segments, size=2))
            try:
                path, _ = env.oracle.optimal(s, g)
            except UnreachableError:
                continue
            if path.size >= k + 2:
                break
        else:
            raise ConfigError("no route long enough for drift_segments in this network")
    mid = max(0, (path.size - k) // 2)
    return np.asarray(path[mid : mid + k], dtype=np.int64)


def drift(spec: RunSpec, drv: _Driver, t: int) -> None:
    """Apply the change of round ``t`` to the world (see :class:`TruthSpec`)."""
    drv.env.raise_losses(drift_stretch(spec, drv.env, t), spec.truth.drift_size)


def write_run(
    run_dir: Path,
    spec: RunSpec,
    rows: list[dict[str, Any]],
    env: Environment,
    visits: np.ndarray,
    inputs: str | None = None,
) -> None:
    """Write ``visits.npy``, ``metadata.json`` and, last, ``trips.csv`` (all atomically).

    ``trips.csv`` marks a run as finished, so it is written after everything else.
    """
    import pandas as pd

    run_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(run_dir / "visits.npy", suffix=".npy") as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, visits)
    atomic_write_json(
        run_dir / "metadata.json",
        run_metadata(
            spec,
            seeds={"run": spec.seed},
            run_id=spec.run_id,
            ground_truth_redraws=env.redraws,
            noise_std_wh=(
                env.noise_std if np.ndim(env.noise_std) == 0
                else {"median": float(np.median(env.noise_std)),
                      "max": float(np.max(env.noise_std))}
            ),
            network_hash=env.net.content_hash,
            input_files_sha256=inputs,
        ),
    )
    with atomic_path(run_dir / "trips.csv") as tmp:
        pd.DataFrame(rows, columns=list(RESULT_COLUMNS)).to_csv(tmp, index=False)
    # the run is complete: its checkpoint (model state, possibly megabytes) is no longer needed
    (run_dir / CHECKPOINT_NAME).unlink(missing_ok=True)
    (run_dir / LEGACY_CHECKPOINT_NAME).unlink(missing_ok=True)


# ----------------------------------------------------------------------------- configs
def _tuple_endpoint(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def specs_from_toml(path: str | Path) -> tuple[list[RunSpec], dict[str, Any]]:
    """Expand a fleet config (TOML) into run specs (networks × routes × agents × seeds).

    Layout::

        horizon = 200
        seeds = [0, 1, 2]
        [network]            # or [[networks]] for several
        kind = "synthetic"
        n_segments = 2000
        [[routes]]           # fixed or random trips; or [trips] for one
        name = "A"
        kind = "fixed"
        start = [8.0123, 47.0021]   # lon, lat (or a segment id)
        goal = [8.0301, 47.0200]
        [[agents]]
        model = "gp"
        policy = "ts"
        [truth]
        lengthscale = 1.0    # or kind = "file", path = "truth.csv" (see save_truth)

    Returns the specs and the ``[output]`` table (``dir``, ``checkpoint_every``).
    """
    p = require_file(path, "config file")
    try:
        cfg = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p} is not valid TOML: {exc}") from None
    base = p.parent
    _check_top_level(cfg, p)

    def check(cls, table: dict[str, Any], what: str) -> None:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(table) - names
        if unknown:
            raise ConfigError(f"{p}: unknown {what} key(s): {', '.join(sorted(unknown))}")
        check_config_table(cls, table, f"{p}: {_TABLES[what]}")

    def build(cls, table: dict[str, Any], what: str):
        check(cls, table, what)
        try:
            return cls(**table)
        except ConfigError as exc:  # a spec's own check: say where in the config
            raise ConfigError(f"{p}: {_TABLES[what]} {exc}") from None

    for one, many in (("network", "networks"), ("trips", "routes")):
        if one in cfg and many in cfg:  # the one table was ignored
            raise ConfigError(
                f"{p}: give either [{one}] or [[{many}]], not both ([{one}] would be ignored)"
            )
    networks = cfg.get("networks") or [cfg.get("network", {})]
    net_specs = []
    for table in networks:
        table = dict(table)
        _check_kind_keys(NetworkSpec, table, f"{p}: {_TABLES['network']}")
        check(NetworkSpec, table, "network")  # the paths' types, before they are resolved
        if table.get("path") and not Path(table["path"]).is_absolute():
            table["path"] = str((base / table["path"]).resolve())
        if "dems" in table:
            table["dems"] = tuple(str((base / d).resolve()) for d in table["dems"])
        net_specs.append(build(NetworkSpec, table, "network"))
    routes = cfg.get("routes") or [cfg.get("trips", {"kind": "random", "name": "random"})]
    trip_specs = []
    for table in routes:
        table = dict(table)
        _check_kind_keys(TripSpec, table, f"{p}: {_TABLES['route']}")
        for key in ("start", "goal"):
            if key in table:
                table[key] = _tuple_endpoint(table[key])
        trip_specs.append(build(TripSpec, table, "route"))
    agents = [build(AgentSpec, dict(a), "agent") for a in cfg.get("agents", [{}])]
    truth_table = dict(cfg.get("truth", {}))
    check(TruthSpec, truth_table, "truth")
    _check_kind_keys(TruthSpec, truth_table, f"{p}: {_TABLES['truth']}")
    if truth_table.get("path") and not Path(truth_table["path"]).is_absolute():
        truth_table["path"] = str((base / truth_table["path"]).resolve())
    truth = build(TruthSpec, truth_table, "truth")
    horizon = _config_whole(cfg.get("horizon", 100), f"{p}: horizon", least=1)
    seeds = cfg.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(f"{p}: seeds must be a non-empty list of whole numbers, got {seeds!r}")
    seeds = [_config_whole(s, f"{p}: each seed", least=0) for s in seeds]
    output = dict(cfg.get("output", {}))
    if "checkpoint_every" in output:
        _config_whole(output["checkpoint_every"], f"{p}: [output] checkpoint_every", least=1)
    if "dir" in output and not isinstance(output["dir"], str):
        raise ConfigError(f"{p}: [output] dir must be a folder name, got {output['dir']!r}")
    for spec in net_specs:
        _check_network(spec, f"{p}: {_TABLES['network']}")
    if truth.kind == "file" and not truth.path:
        raise ConfigError(f"{p}: [truth] kind = 'file' needs 'path'")
    if truth.path:
        _check_file(truth.path, f"{p}: [truth] path")
    for spec in trip_specs:
        _check_trips(spec, f"{p}: [[routes]] {spec.name!r}")
    for net_spec in net_specs:
        # against every network, as the runs will have it: a file or an OSM extract (read by
        # _check_network, kept for the runs of this process; an OSM extract's derived network
        # is cached on disk for the workers) and a town (built and kept; n_segments is the size
        # asked for, the town built is a few segments off it). Each of these failed every run
        # separately, with a message that named no key (an OSM network's until it was loaded
        # here too)
        net = load_network(net_spec)
        _check_routes_on(net, net_spec, trip_specs, seeds[0], p)
        if truth.kind == "file":
            try:
                # the world itself, not only the file: a negative-energy cycle (no exact
                # optimum) failed every run with a NegativeCycleError traceback
                Environment.from_file(net, truth)
            except ConfigError as exc:
                raise ConfigError(f"{p}: [truth] {exc}") from None
            except NegativeCycleError:
                raise ConfigError(
                    f"{p}: [truth] path: the energies of {truth.path} on {net_spec.label} "
                    "have a negative-energy cycle (a closed loop that gains energy), so no "
                    "exact optimum exists; use optimum = 'rectified' in [truth]"
                ) from None
    for agent in agents:
        if agent.temperature and truth.temperature_mean_c is None:
            raise ConfigError(
                f"{p}: [[agents]] {agent.label}: temperature = true needs a world with a "
                "temperature cycle ([truth] temperature_mean_c); without one it does nothing"
            )
    late = [r for r in truth.drift_rounds if r > horizon]
    if late:
        raise ConfigError(f"{p}: [truth] drift_rounds {late} come after the last round "
                          f"({horizon}): those changes would never happen")
    specs = [
        RunSpec(network=n, agent=a, trips=r, truth=truth, horizon=horizon, seed=int(s))
        for n in net_specs
        for r in trip_specs
        for a in agents
        for s in seeds
    ]
    seen: set[str] = set()
    for spec in specs:
        if spec.run_id in seen:
            raise ConfigError(
                f"{p}: makes run {spec.run_id} twice (a repeated seed, or two identical "
                "[[networks]], [[routes]] or [[agents]] tables)"
            )
        seen.add(spec.run_id)
    labelled: dict[tuple[str, str, str, int], str] = {}
    for spec in specs:
        key = (spec.network.label, spec.trips.name, spec.agent.label, spec.seed)
        if key in labelled:  # the tables would have merged them (two routes as two "seeds")
            raise ConfigError(
                f"{p}: runs {labelled[key]} and {spec.run_id} would be one row of the tables "
                f"(network {key[0]}, route {key[1]!r}, agent {key[2]}, seed {key[3]}): give "
                "the [[networks]], [[routes]] or [[agents]] tables that differ distinct names "
                "(name = \"...\")"
            )
        labelled[key] = spec.run_id
    return specs, output


#: A fleet config's top-level keys: a plain value, a table (``[name]``) or tables
#: (``[[name]]``, at least one).
_TOP_LEVEL: dict[str, str] = {
    "horizon": "value", "seeds": "value",
    "network": "table", "trips": "table", "truth": "table", "output": "table",
    "networks": "tables", "routes": "tables", "agents": "tables",
}
_OUTPUT_KEYS = ("dir", "checkpoint_every")


def _check_top_level(cfg: dict[str, Any], p: Path) -> None:
    """Refuse a misspelt top-level or ``[output]`` key (it was ignored: the run went on with the
    default) and a table given as a plain value (a traceback later)."""
    unknown = sorted(set(cfg) - set(_TOP_LEVEL))
    if unknown:
        raise ConfigError(
            f"{p}: unknown top-level key(s): {', '.join(unknown)} "
            f"(known: {', '.join(_TOP_LEVEL)})"
        )
    for key, shape in _TOP_LEVEL.items():
        if key not in cfg:
            continue
        value = cfg[key]
        if shape == "table" and not isinstance(value, dict):
            raise ConfigError(f"{p}: {key} must be a table ([{key}]), got {value!r}")
        if shape == "tables" and not (
            isinstance(value, list) and value and all(isinstance(t, dict) for t in value)
        ):
            raise ConfigError(f"{p}: {key} must be tables ([[{key}]]), got {value!r}")
    unknown = sorted(set(cfg.get("output", {})) - set(_OUTPUT_KEYS))
    if unknown:
        raise ConfigError(
            f"{p}: unknown [output] key(s): {', '.join(unknown)} (known: {', '.join(_OUTPUT_KEYS)})"
        )


#: The values a config's string keys may take (a typo fails here, before any run, instead of in
#: every run at its first trip). ``kernel_mode`` and ``segment_scale`` are checked against
#: their owners' lists in :func:`check_config_table`.
CONFIG_CHOICES: dict[tuple[type, str], tuple[str, ...]] = {
    (NetworkSpec, "kind"): ("synthetic", "osm", "file"),
    (AgentSpec, "model"): ("gp", "bi"),
    (AgentSpec, "policy"): ("ts", "ts-joint", "bucb", "bucb-quantile", "ucb",
                            *ROUTE_POLICIES, "mean", "safe", "random"),
    (AgentSpec, "rectification"): ("reduced", "paper"),
    (AgentSpec, "learner"): ("exact", "regional", "svgp"),
    (TripSpec, "kind"): ("fixed", "random"),
    (TruthSpec, "kind"): ("physical", "gp", "det-noise", "file"),
    (TruthSpec, "optimum"): ("exact", "rectified"),
}


#: How a config's tables are written in TOML (for messages that name a key).
_TABLES = {"network": "[network]", "route": "[[routes]]", "agent": "[[agents]]", "truth": "[truth]"}


def _choices(cls: type, key: str) -> tuple[str, ...] | None:
    if cls is AgentSpec and key == "segment_scale":
        from ev_nav.gp.incremental_state import SEGMENT_SCALES

        return SEGMENT_SCALES
    if cls is AgentSpec and key == "kernel_mode":
        from ev_nav.gp.kernels import KERNEL_MODES

        return KERNEL_MODES
    return CONFIG_CHOICES.get((cls, key))


_TYPE_WORDS = {"bool": "true or false", "int": "a whole number", "float": "a number",
               "str": "a string"}


def _fits(value: Any, annotation: str) -> bool:
    """Whether a TOML value fits a spec field's annotation (``"float"``, ``"str | None"``,
    ``"tuple[int, ...]"``, ``"int | tuple[float, float] | None"``)."""
    for option in (o.strip() for o in annotation.split("|")):
        if option == "bool" and isinstance(value, bool):
            return True
        if isinstance(value, bool):
            continue  # a boolean is no number or string
        if option == "int" and isinstance(value, int):
            return True
        if option == "float" and isinstance(value, int | float):
            return True
        if option == "str" and isinstance(value, str):
            return True
        if option.startswith("tuple[") and isinstance(value, list | tuple):
            inner = [t.strip() for t in option[len("tuple["):-1].split(",")]
            if inner[-1] == "...":
                if all(_fits(v, inner[0]) for v in value):
                    return True
            elif len(value) == len(inner) and all(map(_fits, value, inner)):
                return True
    return False


def _expected(annotation: str) -> str:
    words = []
    for option in (o.strip() for o in annotation.split("|")):
        if option.startswith("tuple[") and option.endswith("...]"):
            word = _TYPE_WORDS[option[6:-6].strip()].removeprefix("a ")
            words.append(f"a list of {word}s")
        elif option.startswith("tuple["):
            words.append(f"a list [{option[6:-1]}]")
        elif option in _TYPE_WORDS:
            words.append(_TYPE_WORDS[option])
    return " or ".join(words)


def check_config_table(cls: type, table: dict[str, Any], where: str) -> None:
    """Refuse a config table's value of the wrong type or outside its choices, naming the key.

    Raises
    ------
    ConfigError
        One line: ``where``, the key, what it must be and what it is.
    """
    annotations = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    for key, value in table.items():
        annotation = annotations[key]
        if not _fits(value, annotation):
            raise ConfigError(f"{where} {key} must be {_expected(annotation)}, got {value!r}")
        choices = _choices(cls, key)
        if choices is not None and value not in choices:
            raise ConfigError(
                f"{where} {key} must be one of {', '.join(choices)}, got {value!r}"
            )


def _check_file(path: str, where: str) -> None:
    require_file(path, f"{where}: file")


_DRIFT_KEYS = ("drift_rounds", "drift_size", "drift_segments")
_TEMPERATURE_KEYS = ("temperature_mean_c", "temperature_amplitude_c",
                     "temperature_period_rounds", "temperature_noise_c")

#: The keys each kind of ``[network]``, ``[[routes]]`` and ``[truth]`` uses (beside ``kind``);
#: another was ignored (a truth file's world drawn with a lengthscale that shaped nothing).
_KIND_KEYS: dict[type, dict[str, tuple[str, ...]]] = {
    TruthSpec: {
        "physical": ("lengthscale", "graph_share", "optimum", "loss_spread", "noise_spread",
                     *_DRIFT_KEYS, *_TEMPERATURE_KEYS),
        "gp": ("lengthscale", "graph_share", "max_redraws", "optimum"),
        "det-noise": ("max_redraws", "optimum"),  # (its noise has no lengthscale)
        "file": ("path", "optimum"),
    },
    NetworkSpec: {
        "synthetic": ("n_segments", "seed", "name"),
        "osm": ("path", "dems", "name"),
        "file": ("path", "name"),
    },
    TripSpec: {
        "fixed": ("start", "goal", "vehicles", "name"),
        "random": ("vehicles", "min_distance_m", "name"),
    },
}


def _check_kind_keys(cls: type, table: dict[str, Any], where: str) -> None:
    """Refuse a key of ``table`` (a ``cls`` spec) that its ``kind`` does not use."""
    kinds = _KIND_KEYS[cls]
    kind = table.get("kind", cls.kind)  # type: ignore[attr-defined]
    used = kinds.get(kind) if isinstance(kind, str) else None
    if used is None:
        return  # an unknown kind: check_config_table names the choices
    known = {k for keys in kinds.values() for k in keys}
    for key in table:
        if key != "kind" and key not in used and key in known:
            raise ConfigError(
                f"{where} {key} is not used by kind = {kind!r} (it uses {', '.join(used)})"
            )


def _check_network(spec: NetworkSpec, where: str) -> None:
    if spec.kind in ("osm", "file"):
        if not spec.path:
            raise ConfigError(f"{where} kind = {spec.kind!r} needs 'path'")
        _check_file(spec.path, f"{where} path")
        for dem in spec.dems:
            _check_file(dem, f"{where} dems")
        # read now (kept for the runs of this process; an OSM extract's network is cached on
        # disk, so the workers load it fast): a damaged file is one error before any run, not a
        # failure of every run, and the routes and truth file are checked against it
        load_network(spec)
    elif spec.kind == "synthetic":
        from ev_nav.roads.synthetic import MAX_TOWN_SEGMENTS, MIN_TOWN_SEGMENTS

        if spec.seed < 0:
            raise ConfigError(f"{where} seed must be >= 0, got {spec.seed}")

        if not MIN_TOWN_SEGMENTS <= spec.n_segments <= MAX_TOWN_SEGMENTS:
            raise ConfigError(
                f"{where} n_segments must be in {MIN_TOWN_SEGMENTS}..{MAX_TOWN_SEGMENTS:,}, "
                f"got {spec.n_segments}"
            )


def _check_routes_on(net: RoadNetwork, net_spec: NetworkSpec, trip_specs: list[TripSpec],
                     seed: int, p: Path) -> None:
    """The routes' endpoints on ``net`` (ids in range, coordinates on a road), and a random
    route's first trip (the distance asked for exists)."""
    n = net.n_segments
    for spec in trip_specs:
        where = f"{p}: [[routes]] {spec.name!r}"
        for key in ("start", "goal"):
            value = getattr(spec, key)
            if isinstance(value, int) and value >= n:
                raise ConfigError(f"{where} {key} = {value} is no segment of {net_spec.label} "
                                  f"(it has {n:,}: ids 0..{n - 1})")
        try:
            gen = TripGenerator(spec, net, seed)
            if spec.kind == "random":
                gen.next()
        except (ConfigError, OutsideNetworkError) as exc:
            raise ConfigError(f"{where} on {net_spec.label}: {exc}") from None


def _check_trips(spec: TripSpec, where: str) -> None:
    if spec.kind == "fixed" and (spec.start is None or spec.goal is None):
        raise ConfigError(f"{where}: a fixed route needs start and goal")
    if spec.kind == "fixed" and spec.start == spec.goal:
        raise ConfigError(f"{where}: start and goal are the same ({spec.start!r}); no trip")


def _config_whole(value: Any, what: str, least: int) -> int:
    """A whole number of a config (a TOML string, float or boolean is a typo, not a number)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} must be a whole number, got {value!r}")
    if value < least:
        raise ConfigError(f"{what} must be >= {least}, got {value}")
    return value
