"""Node potential energy and reduced costs: why no closed loop gains energy, and how routing keeps
regeneration.

The energy model (:func:`ev_nav.energy.segment_energy_wh`, paper Eq. 8) splits the mechanical work
of a segment into a potential part ``P = m g ℓ sin α`` and a loss part ``L ≥ 0`` (rolling and air
resistance), and the battery supplies ``(P + L)/η⁺`` or receives ``η⁻ |P + L|``. With
``η⁻ ≤ 1 ≤ 1/η⁺`` both branches are at least ``η⁻ P``:

* traction (``P + L > 0``): ``(P + L)/η⁺ ≥ P + L ≥ P ≥ η⁻ P`` when ``P ≥ 0``, and ``> 0 > η⁻ P``
  when ``P < 0``;
* recuperation (``P + L ≤ 0``): ``η⁻ (P + L) ≥ η⁻ P``.

With the node potential ``Φ(v) = η⁻ m g h(v) / 3600`` [Wh] and ``Δh = ℓ sin α`` this gives
``E_det(u→v) = Φ(v) − Φ(u) + c(u→v)`` with ``c ≥ 0``. On a built network the grade is ``Δh / ℓ``
(ℓ the segment length) so ``ℓ sin α = Δh / √(1 + grade²)`` has a slightly *smaller* magnitude than
``Δh``. Downhill that only helps (the recoverable energy is less than ``η⁻ m g |Δh|``); uphill
``c ≥ 0`` needs ``√(1 + grade²) ≤ 1/(η⁺ η⁻)``, true for |grade| ≤ 0.30 (the build limit) and the
presets (1/(η⁺η⁻) = 1.063 for the paper's EV, grade ≤ 0.366). Where it fails (an unusual vehicle,
round-off), :func:`node_potential` lowers ``Φ`` by the least amount that restores ``c ≥ 0`` on every
segment: Johnson's correction ``Φ ← Φ + d`` with ``d(v) = min(0, shortest c-distance to v)``,
the tightest node potential below the physical one.

Consequences used across ev-nav:

* a closed loop has energy ``Σ c ≥ 0``: the exact energy-optimal route exists for any energies of
  the form ``ΔΦ + c`` with ``c ≥ 0`` (the physical ground truth of the simulator);
* the reduced costs ``c`` are Dijkstra-safe (Johnson's reweighting with a known potential), and a
  route's energy is ``Φ(goal) − Φ(start) + Σ c`` — constant plus a non-negative sum, so minimising
  ``Σ c`` minimises energy;
* an index rule can rectify in reduced space, ``max(0, μ̃ − ΔΦ)``, which never values a downhill
  segment's regeneration at less than physics guarantees (the paper's ``max(0, μ̃)`` values a
  −300 Wh descent like a 0 Wh segment).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray
from scipy.sparse.csgraph import NegativeCycleError as _ScipyNegativeCycle
from scipy.sparse.csgraph import bellman_ford

from ev_nav.energy import J_PER_WH, Vehicle, require_vehicle
from ev_nav.errors import ConfigError, NegativeCycleError
from ev_nav.roads.network import RoadNetwork, require_network

__all__ = [
    "loss_lower_bound",
    "loss_scale",
    "node_potential",
    "potential_change",
    "reduced_costs",
]

#: Reduced costs down to this (round-off of the energy model's trigonometry) count as zero [Wh].
TOLERANCE_WH = 1e-9


def physical_potential(net: RoadNetwork, vehicle: Vehicle | None = None) -> NDArray[np.float64]:
    """``Φ₀(v) = η⁻ m g h(v) / 3600`` [Wh] at every road node (before any correction)."""
    require_network(net, "physical_potential")
    veh = require_vehicle(vehicle, "physical_potential")
    return veh.eta_recuperation * veh.mass_kg * veh.gravity * net.node_elevation / J_PER_WH


def node_potential(net: RoadNetwork, vehicle: Vehicle | None = None) -> NDArray[np.float64]:
    """The tightest node potential [Wh] with ``E_det − ΔΦ ≥ 0`` on every segment (module doc).

    Equal to :func:`physical_potential` whenever that already satisfies the bound (every network
    built with the default grade limit and the presets); otherwise lowered minimally.
    """
    require_network(net, "node_potential")
    vehicle = require_vehicle(vehicle, "node_potential")
    phi = physical_potential(net, vehicle)
    c = net.e_det(vehicle) - (phi[net.seg_v] - phi[net.seg_u])
    if c.min() >= -TOLERANCE_WH:
        return phi
    # Johnson: a virtual source reaches every node at cost 0; d(v) is the shortest c-distance,
    # so d(v) <= d(u) + c(u->v) and Φ + d keeps every reduced cost >= 0.
    n_nodes = net.node_elevation.shape[0]
    rows = np.concatenate([net.seg_u, np.full(n_nodes, n_nodes)])
    cols = np.concatenate([net.seg_v, np.arange(n_nodes)])
    # csgraph drops explicit zeros; a tiny positive weight on the source edges keeps them
    data = np.concatenate([c, np.full(n_nodes, 1e-300)])
    graph = sp.csr_matrix((data, (rows, cols)), shape=(n_nodes + 1, n_nodes + 1))
    try:
        d = bellman_ford(graph, directed=True, indices=n_nodes)[:n_nodes]
    except _ScipyNegativeCycle:
        raise NegativeCycleError(
            "this vehicle's deterministic energies have a cycle of negative total energy on "
            "this network (no node potential exists; a loss-free vehicle with η⁺ = η⁻ = 1?)"
        ) from None
    return phi + np.minimum(d, 0.0)


def potential_change(
    net: RoadNetwork, vehicle: Vehicle | None = None, potential: ArrayLike | None = None
) -> NDArray[np.float64]:
    """``ΔΦ(e) = Φ(head) − Φ(tail)`` per segment [Wh] (regeneration physics guarantees)."""
    require_network(net, "potential_change")
    vehicle = require_vehicle(vehicle, "potential_change")
    phi = node_potential(net, vehicle) if potential is None else np.asarray(potential, float)
    if phi.shape != (net.n_nodes,):  # was an IndexError, or a silently wrong ΔΦ
        raise ConfigError(
            f"a potential has one value per node of {net.name} ({net.n_nodes:,}), got an array "
            f"of shape {phi.shape}"
        )
    if not np.isfinite(phi).all():  # a NaN made every ΔΦ through its node NaN, silently
        raise ConfigError(f"a potential must be finite [Wh]; {int((~np.isfinite(phi)).sum()):,} "
                          "of its values are not")
    return phi[net.seg_v] - phi[net.seg_u]


def reduced_costs(
    net: RoadNetwork, energies: ArrayLike, vehicle: Vehicle | None = None
) -> NDArray[np.float64]:
    """``c = energies − ΔΦ`` per segment [Wh]; ``≥ 0`` for ``E_det`` and the physical truth."""
    vehicle = require_vehicle(vehicle, "reduced_costs")
    return np.asarray(energies, dtype=np.float64) - potential_change(net, vehicle)


#: Smallest per-segment scale [Wh] (:func:`loss_scale`): keeps the scale positive on the rare
#: segment whose deterministic loss rounds to zero. A few metres of driving cost more.
LOSS_SCALE_FLOOR_WH = 0.05


def loss_scale(net: RoadNetwork, vehicle: Vehicle | None = None) -> NDArray[np.float64]:
    """Each segment's deterministic loss ``c_det = E_det − ΔΦ`` [Wh], floored at
    :data:`LOSS_SCALE_FLOOR_WH`: the scale of how much its true energy and one drive's energy
    can differ from the physics model.

    What varies between roads and between drives (traffic, driving style, wind, tyres, the
    auxiliaries' share) acts on the losses — rolling and air resistance and the drivetrain —
    not on the potential energy, which the elevation fixes. So a segment's deviation and noise
    grow with its loss: with its length, its speed (air drag) and its climb (drivetrain losses),
    and a 5 m link varies less in Wh than a 2 km road. The physical world
    (:class:`ev_nav.sim.environment.TruthSpec`) and the learners' ``segment_scale="loss"``
    both use this scale; see ``docs/objective.md``.
    """
    require_network(net, "loss_scale")
    vehicle = require_vehicle(vehicle, "loss_scale")
    c = net.e_det(vehicle) - potential_change(net, vehicle)
    return np.maximum(c, LOSS_SCALE_FLOOR_WH)


def loss_lower_bound(net: RoadNetwork, vehicle: Vehicle | None = None) -> NDArray[np.float64]:
    """A physical lower bound of each segment's loss ``c = E − ΔΦ`` [Wh]: rolling resistance.

    Every traversal dissipates at least its rolling-resistance work ``R = m g C_r ℓ cos α``
    (air drag and drivetrain losses only add to it). In the energy model a segment's loss is at
    least ``η⁻ (R + drag)``: traction gives ``(P + L)/η⁺ − η⁻ P ≥ η⁻ L`` (as ``1/η⁺ ≥ η⁻``),
    recuperation exactly ``η⁻ L``. The bound is ``η⁻ R``, capped at the deterministic loss
    :func:`loss_scale` would be without its floor (where the node potential was lowered, or the
    grade's ``√(1 + grade²)`` term bites, that can be smaller). On the synthetic towns and MoST
    Monaco it is 65–74 % of the deterministic loss (median over segments).

    It is what :class:`ev_nav.bandits.routing.Router` takes as ``lower`` for goal-directed
    search, valid for weights that never value a segment's loss below it.
    """
    require_network(net, "loss_lower_bound")
    veh = require_vehicle(vehicle, "loss_lower_bound")
    rolling_wh = (
        veh.eta_recuperation * veh.mass_kg * veh.gravity * veh.rolling_coeff
        * net.length_m * np.cos(np.arctan(net.grade)) / J_PER_WH
    )
    c_det = net.e_det(veh) - potential_change(net, veh)
    return np.maximum(np.minimum(rolling_wh, c_det), 0.0)
