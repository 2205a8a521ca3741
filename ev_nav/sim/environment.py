"""Simulated driving: a ground-truth energy per segment, noisy semi-bandit feedback, regret.

Ground truths:

* ``kind="physical"`` (the default): ``f = ΔΦ + c_true`` with the node potential ``Φ`` of
  :mod:`ev_nav.potential` and losses ``c_true = c_det · exp(s·z − s²/2)``, where ``z`` is the
  paper's spatially correlated GP draw standardised to unit variance (same kernel, same seed as
  ``kind="gp"``) and ``s`` the relative spread of the losses (``loss_spread``, 0.25 = the paper's
  σ0 = 0.25·sd(E_det), applied to losses). Losses stay positive and keep their expected value
  ``c_det``, so no closed loop gains energy: the exact optimum always exists and is Dijkstra on
  the reduced costs. Chosen over truncating ``c_det + noise`` at 0, which would put a mass of
  loss-free segments wherever the noise exceeds the losses (short and downhill segments).
  One drive's noise on segment ``e`` has sd ``ρ·a_e`` with ``a_e`` its deterministic loss
  (:func:`ev_nav.potential.loss_scale`) and ``ρ`` = ``noise_spread`` (0.2): deviations and noise
  both act on the losses, so both scale with the segment (``docs/objective.md``).
* ``kind="file"``: per-segment expected energies and noise sds from a CSV file (``path``;
  :func:`save_truth` writes one), for measured or externally modelled energies.
* ``kind="gp"`` (the paper, spec §4): one draw ``f ~ GP(E_det, k)``; a draw with a negative-energy
  cycle has no optimal route and is rejected and redrawn (counted, bounded by ``max_redraws``).
  Used by the paper reproductions. For very large networks, ``kind="det-noise"`` uses E_det plus
  spatially correlated noise instead.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from ev_nav.bandits.routing import Oracle
from ev_nav.energy import Vehicle
from ev_nav.errors import ConfigError, NegativeCycleError, require_number
from ev_nav.provenance import atomic_path
from ev_nav.roads.network import RoadNetwork

#: The paper's equal split of the ground truth's prior variance between its local and its
#: network-wide term (spec §4; :class:`ev_nav.gp.prior.PriorSettings`).
PAPER_GRAPH_SHARE = 0.5


#: Largest relative spread of the physical world's losses and noise (``loss_spread``,
#: ``noise_spread``): at 3 a loss varies by a factor e^±6 between roads.
MAX_SPREAD = 3.0


@dataclass(frozen=True)
class TruthSpec:
    """How the ground truth is drawn.

    Attributes
    ----------
    kind : str
        ``"physical"`` (default: potential plus positive, spatially correlated losses; see the
        module doc), ``"gp"`` (the paper, spec §4: one draw from the GP prior) or
        ``"det-noise"`` (E_det plus correlated noise, for networks too large for the sampler).
    lengthscale : float
        Feature-kernel lengthscale of the ground truth (1.0 in the paper; varied in Fig. 4–5).
    graph_share : float
        Share of the ground truth's prior variance in the local ``k_G·k_f`` term; the rest is
        in the network-wide ``k'_f`` term (0.5: the paper's equal split, spec §4). In the
        physical world it sets how much of the losses' deviations a learner can pool across
        the network (``docs/objective.md``, "Quality in hills").
    max_redraws : int
        How many draws with a negative cycle are tolerated before giving up (``exact`` only).
    loss_spread : float
        Relative spread ``s`` of the losses in the physical truth (ignored by the others).
    noise_spread : float
        Relative noise ``ρ`` of one drive in the physical truth: segment ``e``'s observation
        noise has sd ``ρ·a_e`` [Wh], ``a_e`` its deterministic loss (ignored by the others).
    path : str, optional
        The CSV file of ``kind="file"`` (columns ``segment``, ``expected_wh``, ``noise_sd_wh``).
    drift_rounds : tuple of int
        Rounds at whose start roads change (``docs/changes.md``; physical world only): a stretch
        of ``drift_segments`` consecutive segments in the middle of the then energy-optimal
        route of the run's fixed trip (or of a random trip) gets its losses raised by the
        factor ``1 + drift_size`` (roadworks: slower, stop-and-go). Empty: a world that never
        changes.
    optimum : str
        How each trip's optimal route p* is defined. ``"exact"`` (spec §1): the energy-optimal
        path under the true energies by Johnson/Bellman–Ford; draws with a negative-energy cycle
        are rejected and redrawn. ``"rectified"``: the route a perfectly informed agent would
        drive — Dijkstra on ``E[max(0, f + ε)]`` of the true energies — used where almost every
        draw has a negative cycle (MoST Monaco: 20 of 20 draws, LuST: 19 of 20, measured), which
        makes the exact optimum undefined; regret is still measured in true energies.
    temperature_mean_c : float, optional
        A seasonal temperature cycle (physical world only; ``docs/temperature.md``): round
        ``t`` has the ambient temperature ``mean − amplitude·cos(2π t/period)`` plus a weather
        deviation of sd ``temperature_noise_c`` [°C], and every energy of that round is the
        world's at that temperature (:mod:`ev_nav.sim.climate`, fixed from AAA's 2019
        measurements). None (the default): no temperature, the world as before.
    temperature_amplitude_c, temperature_period_rounds, temperature_noise_c
        The cycle's amplitude [K], period [rounds] and weather sd [K].
    """

    kind: str = "physical"
    lengthscale: float = 1.0
    graph_share: float = PAPER_GRAPH_SHARE
    max_redraws: int = 50
    optimum: str = "exact"
    loss_spread: float = 0.25
    noise_spread: float = 0.2
    path: str | None = None
    drift_rounds: tuple[int, ...] = ()
    drift_size: float = 0.5
    drift_segments: int = 5
    temperature_mean_c: float | None = None
    temperature_amplitude_c: float = 10.0
    temperature_period_rounds: int = 365
    temperature_noise_c: float = 3.0

    def __post_init__(self) -> None:
        # refused where the spec is made: each of these failed every run at its first trip
        # (or, for a negative spread, drew a world whose losses are not what was asked)
        # (inf passed these as ">= 0" and drew non-finite energies; a spread of 1e300 made every
        # loss 0; the physical world needs some noise, which it refused only in each run)
        require_number(self.lengthscale, "lengthscale", low=0, low_open=True)
        require_number(self.loss_spread, "loss_spread", low=0, high=MAX_SPREAD)
        require_number(self.noise_spread, "noise_spread", low=0, high=MAX_SPREAD,
                       low_open=self.kind == "physical")
        require_number(self.drift_size, "drift_size")
        for name in ("temperature_amplitude_c", "temperature_noise_c"):
            require_number(getattr(self, name), name)
        share = self.graph_share
        if isinstance(share, bool) or not isinstance(share, numbers.Real):
            raise ConfigError(f"graph_share must be a number, got {share!r}")
        if not 0 <= share <= 1:
            raise ConfigError(f"graph_share must lie in [0, 1], got {share!r}")
        if share != PAPER_GRAPH_SHARE and self.kind not in ("physical", "gp"):
            raise ConfigError(
                f"graph_share splits the GP draw of kind = 'physical' or 'gp'; kind = "
                f"{self.kind!r} has none (leave graph_share at {PAPER_GRAPH_SHARE})"
            )
        object.__setattr__(self, "graph_share", float(share))  # 0 and 0.0: one run id
        cycle = (self.temperature_mean_c, self.temperature_amplitude_c,
                 self.temperature_noise_c, self.temperature_period_rounds)
        if self.temperature_mean_c is not None and any(
            isinstance(x, bool) or not isinstance(x, int | float) for x in cycle
        ):
            raise ConfigError(f"the temperature cycle's settings must be numbers, got {cycle}")
        if self.temperature_mean_c is not None and (
            self.kind != "physical" or self.temperature_period_rounds < 1
            or not (self.temperature_amplitude_c >= 0 and self.temperature_noise_c >= 0)
            or not -40.0 <= self.temperature_mean_c <= 40.0
        ):
            raise ConfigError(
                "a temperature cycle needs kind = 'physical', temperature_mean_c in -40..40, "
                "temperature_amplitude_c >= 0, temperature_noise_c >= 0 and "
                "temperature_period_rounds >= 1"
            )
        object.__setattr__(self, "drift_rounds", tuple(int(r) for r in self.drift_rounds))
        if self.drift_rounds and (
            self.kind != "physical" or not self.drift_size > -1 or self.drift_segments < 1
            or min(self.drift_rounds) < 1
        ):
            raise ConfigError(
                "drift needs kind = 'physical', drift_size > -1, drift_segments >= 1 and "
                "drift_rounds >= 1"
            )


@dataclass
class Environment:
    """The world an agent drives in.

    Attributes
    ----------
    net : RoadNetwork
    true_energy : ndarray
        Expected energy per segment [Wh] (unknown to the agent).
    noise_std : float or ndarray
        Observation noise sd [Wh]: one ς for every segment (the paper's worlds), or one per
        segment (the physical world, a truth file).
    oracle : Oracle
        Exact optimal routes under ``true_energy``.
    redraws : int
        Ground-truth draws rejected for containing a negative cycle.
    """

    net: RoadNetwork
    true_energy: NDArray[np.float64]
    noise_std: float | NDArray[np.float64]
    oracle: Any
    redraws: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    #: the node potential Φ [Wh] of the physical world (None for the others)
    potential: NDArray[np.float64] | None = None
    #: the car whose energies these are (None: the paper's default EV)
    vehicle: Vehicle | None = None

    def raise_losses(self, segments: ArrayLike, size: float) -> None:
        """A change of the road (drift): the listed segments' true losses ``f − ΔΦ`` are
        multiplied by ``1 + size``; the optimum follows (physical world only)."""
        if self.potential is None:
            raise ConfigError("roads can change only in the physical world")
        seg = np.asarray(segments, dtype=np.int64)
        net = self.net
        dphi = self.potential[net.seg_v[seg]] - self.potential[net.seg_u[seg]]
        f = self.true_energy.copy()
        f[seg] = dphi + (f[seg] - dphi) * (1.0 + size)
        self.true_energy = f
        if isinstance(self.oracle, RectifiedOracle):
            self.oracle = RectifiedOracle(net, f, self.noise_std)
        else:
            self.oracle = Oracle(net, f, node_potential=self.potential)

    def at_temperature(self, temperature_c: float) -> Environment:
        """The world on a day at ``temperature_c`` [°C]: every segment's energy as
        :func:`ev_nav.sim.climate.energy_at` gives it, the same noise, and the optimum under
        those energies (physical world only: its node potential stays feasible)."""
        from ev_nav.sim.climate import energy_at

        if self.potential is None:
            raise ConfigError("a temperature cycle needs the physical world")
        f = energy_at(self.net, self.true_energy, temperature_c, self.vehicle)
        if isinstance(self.oracle, RectifiedOracle):
            oracle: Any = RectifiedOracle(self.net, f, self.noise_std)
        else:
            oracle = Oracle(self.net, f, node_potential=self.potential)
        return replace(self, true_energy=f, oracle=oracle)

    @classmethod
    def create(
        cls,
        net: RoadNetwork,
        *,
        seed: int,
        truth: TruthSpec | None = None,
        vehicle: Vehicle | None = None,
        cache_dir: str | Path | None = None,
    ) -> Environment:
        """Draw a ground truth (rejecting negative-cycle draws for ``optimum="exact"``).

        Draws are memoised per process and, with ``cache_dir``, on disk (keyed by network, seed
        and truth settings): the agents of one experiment share their worlds, and drawing a
        world means factorising an |E|×|E| covariance.
        """
        from ev_nav.gp.prior import PriorSettings

        truth = truth or TruthSpec()
        if truth.optimum not in ("exact", "rectified"):
            raise ConfigError(f"unknown optimum {truth.optimum!r}; use exact or rectified")
        if truth.kind == "file":
            return cls.from_file(net, truth)
        settings = replace(
            PriorSettings.from_network(net, vehicle, lengthscale=truth.lengthscale),
            graph_share=truth.graph_share,
        )
        noise_std = float(np.sqrt(settings.noise_var))
        if truth.kind == "physical":
            from ev_nav.potential import loss_scale, node_potential

            if not (truth.loss_spread >= 0 and truth.noise_spread > 0):
                raise ConfigError(
                    f"loss_spread must be >= 0 and noise_spread > 0, got {truth.loss_spread} "
                    f"and {truth.noise_spread}"
                )
            phi = node_potential(net, vehicle)
            base = replace(truth, kind="gp", drift_rounds=(), temperature_mean_c=None)  # draw
            f_gp = _draw(net, vehicle, settings, base, int(seed) * 1_000_003, cache_dir)
            f = physical_truth(net, vehicle, phi, f_gp, settings.outputscale, truth.loss_spread)
            sd = truth.noise_spread * loss_scale(net, vehicle)
            if truth.optimum == "rectified":
                oracle: Any = RectifiedOracle(net, f, sd)
            else:  # exists for every draw: Dijkstra on the reduced costs, no Bellman–Ford
                oracle = Oracle(net, f, node_potential=phi)
            s = truth.loss_spread
            info = {  # the scales a learner with segment_scale="loss" should find
                "relative_outputscale": math.expm1(s * s),
                "relative_noise_sd": truth.noise_spread,
            }
            return cls(net=net, true_energy=f, noise_std=sd, oracle=oracle, redraws=0,
                       info=info, potential=phi, vehicle=vehicle)
        for k in range(truth.max_redraws + 1):
            f = _draw(net, vehicle, settings, truth, int(seed) * 1_000_003 + k, cache_dir)
            if truth.optimum == "rectified":
                oracle = RectifiedOracle(net, f, noise_std)
            else:
                try:
                    oracle = Oracle(net, f)
                except NegativeCycleError:
                    if k == 0:
                        warnings.warn(
                            f"ground-truth draw of seed {seed} has a negative-energy cycle; "
                            f"redrawing (at most {truth.max_redraws} times)",
                            stacklevel=2,
                        )
                    continue
            return cls(net=net, true_energy=f, noise_std=noise_std, oracle=oracle, redraws=k)
        raise NegativeCycleError(
            f"{truth.max_redraws + 1} ground-truth draws all had negative-energy cycles; use "
            "kind = 'physical' (no negative cycles by construction) or optimum = 'rectified' in "
            "[truth] for this network"
        )

    @classmethod
    def from_file(cls, net: RoadNetwork, truth: TruthSpec) -> Environment:
        """The world of a truth file (``kind="file"``), checked against ``net``.

        Raises
        ------
        ConfigError
            No ``path``; a missing or unreadable file; not exactly one row per segment of this
            network; a non-finite energy or a negative noise sd.
        NegativeCycleError
            If the energies let a closed loop gain energy (no optimal route would exist).
        """
        if not truth.path:
            raise ConfigError("a file truth needs 'path' (a CSV written by save_truth)")
        f, sd = load_truth(truth.path, net)
        if truth.optimum == "rectified":
            oracle: Any = RectifiedOracle(net, f, sd)
        else:
            oracle = Oracle(net, f)
        return cls(net=net, true_energy=f, noise_std=sd, oracle=oracle, redraws=0,
                   info={"path": str(truth.path)})

    def noise_sd(self, path: ArrayLike) -> NDArray[np.float64]:
        """Each listed segment's observation-noise sd [Wh]."""
        p = np.asarray(path, dtype=np.int64)
        sd = np.asarray(self.noise_std, dtype=np.float64)
        return np.broadcast_to(sd, (self.net.n_segments,))[p]

    def drive(self, path: ArrayLike, rng: np.random.Generator) -> NDArray[np.float64]:
        """Noisy per-segment energies [Wh] observed when driving ``path`` (semi-bandit)."""
        p = np.asarray(path, dtype=np.int64)
        if np.ndim(self.noise_std) == 0:  # one ς: the paper's worlds, bit for bit as before
            return self.true_energy[p] + self.noise_std * rng.standard_normal(p.shape[0])
        return self.true_energy[p] + self.noise_sd(p) * rng.standard_normal(p.shape[0])

    def regret(self, path: ArrayLike, start: int, goal: int) -> tuple[float, float, float]:
        """``(regret, energy, optimal energy)`` [Wh] of a path against the trip's own optimum."""
        energy = self.oracle.path_energy(path)
        _, best = self.oracle.optimal(start, goal)
        return energy - best, energy, best


#: Columns of a truth file (:func:`save_truth`, ``[truth] kind = "file"``).
TRUTH_COLUMNS = ("segment", "expected_wh", "noise_sd_wh")


def save_truth(path: str | Path, env: Environment) -> None:
    """Write a world's expected energies and noise sds as a truth file (CSV, atomically).

    One row per segment: ``segment`` (id in ``0 .. n − 1``), ``expected_wh``, ``noise_sd_wh``.
    A header comment names the network (its content hash), which :func:`load_truth` checks.
    """
    n = env.net.n_segments
    sd = env.noise_sd(np.arange(n))
    with atomic_path(Path(path)) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"# ev-nav truth file; network {env.net.content_hash}\n")
            table = np.column_stack([np.arange(n), env.true_energy, sd])
            # %.17g round-trips every float64 exactly
            np.savetxt(fh, table, fmt=("%d", "%.17g", "%.17g"), delimiter=",",
                       header=",".join(TRUTH_COLUMNS), comments="")


def load_truth(
    path: str | Path, net: RoadNetwork
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Read a truth file: ``(expected energy, noise sd)`` per segment [Wh] (see
    :meth:`Environment.from_file` for the checks)."""
    import pandas as pd

    p = Path(path)
    try:
        with open(p, encoding="utf-8") as fh:
            first = fh.readline()
        table = pd.read_csv(p, comment="#")
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError) as exc:
        raise ConfigError(f"cannot read truth file {p}: {exc}") from None
    marker = "network "
    if marker in first and net.content_hash not in first:
        raise ConfigError(
            f"truth file {p} was written for another network ({first.strip()[2:]}), not "
            f"{net.name} ({net.content_hash})"
        )
    missing = [c for c in TRUTH_COLUMNS if c not in table.columns]
    if missing:
        raise ConfigError(f"truth file {p} lacks column(s) {missing}; need {TRUTH_COLUMNS}")
    try:
        seg = table["segment"].to_numpy(dtype=np.int64)
        f_col = table["expected_wh"].to_numpy(dtype=np.float64)
        sd_col = table["noise_sd_wh"].to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"truth file {p}: non-numeric value ({exc})") from None
    n = net.n_segments
    if seg.size != n or np.any(np.sort(seg) != np.arange(n)):
        raise ConfigError(
            f"truth file {p} has {seg.size} rows; it needs exactly one per segment "
            f"0..{n - 1} of {net.name}"
        )
    if not (np.all(np.isfinite(f_col)) and np.all(np.isfinite(sd_col)) and sd_col.min() >= 0):
        raise ConfigError(f"truth file {p}: energies must be finite and noise sds >= 0")
    f = np.empty(n)
    sd = np.empty(n)
    f[seg] = f_col
    sd[seg] = sd_col
    return f, sd


_TRUTHS: dict[tuple, NDArray[np.float64]] = {}


def physical_truth(
    net: RoadNetwork,
    vehicle: Vehicle | None,
    potential: NDArray[np.float64],
    gp_draw: NDArray[np.float64],
    outputscale: float,
    loss_spread: float,
) -> NDArray[np.float64]:
    """``ΔΦ + c_det · exp(s·z − s²/2)`` [Wh] from a paper-world draw ``gp_draw`` (module doc).

    ``z = (gp_draw − E_det) / √outputscale`` carries the paper's spatial correlation with unit
    variance; the log-normal factor has mean 1, so the expected loss of each segment is ``c_det``.
    """
    e_det = net.e_det(vehicle)
    dphi = potential[net.seg_v] - potential[net.seg_u]
    c_det = np.maximum(e_det - dphi, 0.0)  # >= 0 by the choice of potential (round-off only)
    z = (gp_draw - e_det) / np.sqrt(outputscale)
    s = float(loss_spread)
    return dphi + c_det * np.exp(s * z - 0.5 * s * s)


def _draw(
    net: RoadNetwork,
    vehicle: Vehicle | None,
    settings: Any,
    truth: TruthSpec,
    draw_seed: int,
    cache_dir: str | Path | None,
) -> NDArray[np.float64]:
    from ev_nav.gp.groundtruth import sample_ground_truth

    key: tuple[object, ...] = (
        net.content_hash, net.n_segments, truth.kind, float(truth.lengthscale), draw_seed
    )
    if truth.graph_share != PAPER_GRAPH_SHARE:  # the paper's split keeps its draws' names
        key += (truth.graph_share,)
    if key in _TRUTHS:
        return _TRUTHS[key]
    path = None
    if cache_dir is not None:
        tag = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        path = Path(cache_dir) / f"truth-{tag}.npy"
        if path.is_file():
            f = np.load(path, allow_pickle=False)
            if f.shape == (net.n_segments,):
                _TRUTHS[key] = f
                return f
    if truth.kind == "gp":
        f = sample_ground_truth(
            net, vehicle, settings=settings, lengthscale=truth.lengthscale, seed=draw_seed
        )
    elif truth.kind == "det-noise":
        f = det_plus_correlated_noise(net, vehicle, np.sqrt(settings.outputscale), draw_seed)
    else:
        raise ConfigError(
            f"unknown ground-truth kind {truth.kind!r}; use physical, gp, det-noise or file"
        )
    if path is not None:
        with atomic_path(path, suffix=".npy") as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, f)
    if len(_TRUTHS) > 32:
        _TRUTHS.clear()
    _TRUTHS[key] = f
    return f


class RectifiedOracle:
    """Optimal routes of a perfectly informed agent: Dijkstra on ``E[max(0, f + ε)]``.

    Same interface as :class:`~ev_nav.bandits.routing.Oracle`; path energies are true energies.
    """

    def __init__(
        self, net: RoadNetwork, energies: ArrayLike, noise_std: float | ArrayLike
    ) -> None:
        from ev_nav.bandits.indices import rectify
        from ev_nav.bandits.routing import Router

        self.energies = np.asarray(energies, dtype=np.float64)
        self._weights = rectify(self.energies, noise_std)
        self._router = Router(net)
        self._cache: dict[tuple[int, int], NDArray[np.int64]] = {}

    def optimal(self, start: int, goal: int) -> tuple[NDArray[np.int64], float]:
        """The perfectly informed route and its true energy [Wh]."""
        key = (int(start), int(goal))
        if key not in self._cache:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = self._router.route(self._weights, start, goal)
        path = self._cache[key]
        return path, float(self.energies[path].sum())

    def path_energy(self, path: ArrayLike) -> float:
        """True energy of a path [Wh]."""
        return float(self.energies[np.asarray(path, dtype=np.int64)].sum())


def det_plus_correlated_noise(
    net: RoadNetwork,
    vehicle: Vehicle | None,
    noise_std: float,
    seed: int,
    smoothing_steps: int = 5,
) -> NDArray[np.float64]:
    """E_det plus noise smoothed over the line graph (neighbouring segments correlate).

    White noise is averaged ``smoothing_steps`` times over each segment and its line-graph
    neighbours (a sparse matrix–vector product per step), then rescaled to ``noise_std``.
    """
    rng = np.random.default_rng(seed)
    n = net.n_segments
    adj = net.line_graph
    adj = adj + adj.T + sp.identity(n, format="csr")
    deg = np.asarray(adj.sum(axis=1)).ravel()
    walk = sp.diags(1.0 / deg) @ adj
    z = rng.standard_normal(n)
    for _ in range(smoothing_steps):
        z = walk @ z
    z = (z - z.mean()) / z.std()
    return net.e_det(vehicle) + noise_std * z
