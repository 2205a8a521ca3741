"""Simulated driving: a ground-truth energy per segment, noisy semi-bandit feedback, regret.

The ground truth is one draw ``f ~ GP(E_det, k)`` (spec §4) from the GP core's sampler; a draw
with a negative-energy cycle has no optimal route and is rejected and redrawn (counted). For very
large networks, ``kind="det-noise"`` uses E_det plus spatially correlated noise instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from ev_nav.bandits.routing import Oracle
from ev_nav.energy import Vehicle
from ev_nav.errors import ConfigError, NegativeCycleError
from ev_nav.roads.network import RoadNetwork


@dataclass(frozen=True)
class TruthSpec:
    """How the ground truth is drawn.

    Attributes
    ----------
    kind : str
        ``"gp"`` (spec §4: one draw from the GP prior) or ``"det-noise"`` (E_det plus correlated
        noise, for networks too large for the GP sampler).
    lengthscale : float
        Feature-kernel lengthscale of the ground truth (1.0 in the paper; varied in Fig. 4–5).
    max_redraws : int
        How many draws with a negative cycle are tolerated before giving up.
    """

    kind: str = "gp"
    lengthscale: float = 1.0
    max_redraws: int = 200


@dataclass
class Environment:
    """The world an agent drives in.

    Attributes
    ----------
    net : RoadNetwork
    true_energy : ndarray
        Expected energy per segment [Wh] (unknown to the agent).
    noise_std : float
        Observation noise ς [Wh].
    oracle : Oracle
        Exact optimal routes under ``true_energy``.
    redraws : int
        Ground-truth draws rejected for containing a negative cycle.
    """

    net: RoadNetwork
    true_energy: NDArray[np.float64]
    noise_std: float
    oracle: Oracle
    redraws: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        net: RoadNetwork,
        *,
        seed: int,
        truth: TruthSpec | None = None,
        vehicle: Vehicle | None = None,
    ) -> Environment:
        """Draw a ground truth (rejecting negative-cycle draws) and build the oracle."""
        from ev_nav.gp.groundtruth import PriorSettings, sample_ground_truth

        truth = truth or TruthSpec()
        settings = PriorSettings.from_network(net, vehicle, lengthscale=truth.lengthscale)
        noise_std = float(np.sqrt(settings.noise_var))
        for k in range(truth.max_redraws + 1):
            draw_seed = int(seed) * 1_000_003 + k
            if truth.kind == "gp":
                f = sample_ground_truth(
                    net, vehicle, settings=settings, lengthscale=truth.lengthscale, seed=draw_seed
                )
            elif truth.kind == "det-noise":
                f = det_plus_correlated_noise(
                    net, vehicle, np.sqrt(settings.outputscale), draw_seed
                )
            else:
                raise ConfigError(f"unknown ground-truth kind {truth.kind!r}; use gp or det-noise")
            try:
                oracle = Oracle(net, f)
            except NegativeCycleError:
                continue
            return cls(net=net, true_energy=f, noise_std=noise_std, oracle=oracle, redraws=k)
        raise NegativeCycleError(
            f"{truth.max_redraws + 1} ground-truth draws all had negative-energy cycles"
        )

    def drive(self, path: ArrayLike, rng: np.random.Generator) -> NDArray[np.float64]:
        """Noisy per-segment energies [Wh] observed when driving ``path`` (semi-bandit)."""
        p = np.asarray(path, dtype=np.int64)
        return self.true_energy[p] + self.noise_std * rng.standard_normal(p.shape[0])

    def regret(self, path: ArrayLike, start: int, goal: int) -> tuple[float, float, float]:
        """``(regret, energy, optimal energy)`` [Wh] of a path against the trip's own optimum."""
        energy = self.oracle.path_energy(path)
        _, best = self.oracle.optimal(start, goal)
        return energy - best, energy, best


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
