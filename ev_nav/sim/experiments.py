"""The paper's experiments (spec §7) as run specifications.

Fig. 2: six agents {GP, BI} × {UCB, BUCB, TS}; Fig. 3: four β parametrisations of GP-UCB/BUCB;
Figs. 4–5: lengthscale sweep for GP/BI × BUCB/TS; Figs. 6–9: exploration maps from the Fig. 2
runs. Networks: MoST Monaco and LuST Luxembourg, routes A and B from ``data/routes.toml``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ev_nav import settings
from ev_nav.errors import ConfigError, NetworkFileNotFound, require_file
from ev_nav.sim.environment import TruthSpec
from ev_nav.sim.fleet import AgentSpec, NetworkSpec, RunSpec, TripSpec


def paper_routes(
    routes_file: str | Path = settings.ROUTES_FILE,
    data_dir: str | Path | None = None,
    networks: Sequence[str] = ("monaco", "luxembourg"),
) -> list[tuple[NetworkSpec, TripSpec]]:
    """(network, route) pairs of the paper experiments, routes A and B per network."""
    path = require_file(routes_file, "routes file")
    table = tomllib.loads(path.read_text(encoding="utf-8"))
    data = Path(data_dir) if data_dir else settings.data_dir()
    out = []
    for name in networks:
        if name not in table:
            raise ConfigError(f"{path} has no routes for network {name!r}")
        for route_name, r in sorted(table[name].items()):
            osm = data / r["osm"]
            if not osm.is_file():
                raise NetworkFileNotFound(
                    f"{osm} not found; set EV_NAV_DATA to the folder holding {r['osm']}"
                )
            net = NetworkSpec(kind="osm", path=str(osm), name=name)
            trips = TripSpec(
                kind="fixed", start=tuple(r["start"]), goal=tuple(r["goal"]), name=route_name
            )
            out.append((net, trips))
    return out


SIX_AGENTS: tuple[AgentSpec, ...] = tuple(
    AgentSpec(model=m, policy=p) for m in ("gp", "bi") for p in ("ucb", "bucb", "ts")
)

FIG3_AGENTS: tuple[AgentSpec, ...] = (
    AgentSpec(model="gp", policy="bucb", omega=1.0, xi=1.0, name="GP-BUCB (w=1, xi=1)"),
    AgentSpec(model="gp", policy="bucb", omega=1.0, xi=0.5, name="GP-BUCB (w=1, xi=0.5)"),
    AgentSpec(model="gp", policy="ucb", name="GP-UCB"),
    AgentSpec(model="gp", policy="ucb", beta_scale=0.5, name="GP-UCB (beta x0.5)"),
)

FIG45_AGENTS: tuple[AgentSpec, ...] = tuple(
    AgentSpec(model=m, policy=p) for m in ("gp", "bi") for p in ("bucb", "ts")
)


def grid_specs(
    agents: Sequence[AgentSpec],
    *,
    horizon: int,
    seeds: Sequence[int],
    routes: Sequence[tuple[NetworkSpec, TripSpec]],
    truth: TruthSpec | None = None,
    agent_overrides: dict | None = None,
    world: str = "paper",
    learner: str = "exact",
) -> list[RunSpec]:
    """All combinations of routes × agents × seeds.

    ``world="paper"``: the paper's ground truth ``GP(E_det, k)`` with the rectified optimum and
    the paper's per-segment rectification (the reproductions). ``world="physical"``: the physical
    ground truth with its exact optimum, and regeneration-aware agents (the product).
    ``learner``: the GP agents' learner, ``"exact"`` (the product's) or ``"svgp"`` (the paper's
    Algorithm 3).
    """
    if world not in WORLDS:
        raise ValueError(f"unknown world {world!r}; use one of {sorted(WORLDS)}")
    truth_kw, rectification = WORLDS[world]
    truth = replace(truth, **truth_kw) if truth is not None else TruthSpec(**truth_kw)
    specs = []
    for net, trips in routes:
        for agent in agents:
            a = replace(
                agent, rectification=rectification, learner=learner, **(agent_overrides or {})
            )
            for seed in seeds:
                specs.append(
                    RunSpec(
                        network=net, agent=a, trips=trips, truth=truth, horizon=horizon, seed=seed
                    )
                )
    return specs


# On MoST Monaco and LuST almost every paper-world draw has a negative-energy cycle (measured:
# 20/20 and 19/20), so its exact optimum is undefined there; see TruthSpec.optimum. The physical
# world has none by construction.
WORLDS: dict[str, tuple[dict, str]] = {
    "paper": ({"kind": "gp", "optimum": "rectified"}, "paper"),
    "physical": ({"kind": "physical", "optimum": "exact"}, "reduced"),
}


def fig2_specs(
    horizon: int = 500,
    seeds: Sequence[int] = range(5),
    world: str = "paper",
    learner: str = "exact",
    **kw,
) -> list[RunSpec]:
    """Fig. 2: the six agents on four routes (in the paper's world unless asked otherwise).

    ``learner="exact"``: the GP agents use the product's exact learner; ``"svgp"``: the paper's
    Algorithm 3 (the runs published first, labelled ``SVGP-…``).
    """
    return grid_specs(
        SIX_AGENTS,
        horizon=horizon,
        seeds=list(seeds),
        routes=paper_routes(**kw),
        world=world,
        learner=learner,
    )


def fig3_specs(
    horizon: int = 500, seeds: Sequence[int] = range(5), learner: str = "exact", **kw
) -> list[RunSpec]:
    """Fig. 3: β parametrisations of GP-BUCB and GP-UCB in the paper's world.

    ``learner="exact"``: the product's exact learner; ``"svgp"``: the paper's Algorithm 3 (the
    agents are then labelled ``SVGP-…`` as in Fig. 2).
    """
    return grid_specs(
        _learner_named(FIG3_AGENTS, learner),
        horizon=horizon,
        seeds=list(seeds),
        routes=paper_routes(**kw),
        learner=learner,
    )


def fig45_specs(
    lengthscales: Sequence[float] = (0.1, 0.5, 1.0, 1.5, 2.0),
    horizon: int = 500,
    seeds: Sequence[int] = range(5),
    learner: str = "exact",
    **kw,
) -> list[RunSpec]:
    """Figs. 4–5: ground truth and agent prior share the lengthscale ℓ, swept over a range.

    The paper's world at each ℓ; ``learner`` as in :func:`fig3_specs` (the BI agents have no
    learner, so their runs are the same under either).
    """
    specs = []
    routes = paper_routes(**kw)
    for ell in lengthscales:
        specs += grid_specs(
            FIG45_AGENTS,
            horizon=horizon,
            seeds=list(seeds),
            routes=routes,
            truth=TruthSpec(lengthscale=float(ell)),
            agent_overrides={"lengthscale": float(ell)},
            learner=learner,
        )
    return specs


def _learner_named(agents: Sequence[AgentSpec], learner: str) -> list[AgentSpec]:
    """Agents with a fixed ``name``, relabelled ``SVGP-…`` when they run Algorithm 3.

    Unnamed agents get that label from :attr:`AgentSpec.label`; the named Fig. 3 agents need it
    spelled out so an SVGP run is never shown as a ``GP-…`` one.
    """
    if learner != "svgp":
        return list(agents)
    return [
        replace(a, name="SVGP-" + a.name.removeprefix("GP-")) if a.name and a.model == "gp" else a
        for a in agents
    ]
