"""``ev-nav demo``: a simulated fleet learns the energy of the embedded synthetic town.

GP-TS and BI-TS learn side by side (same ground truth, same trips, same noise) while a
random-routing fleet shows what no learning costs. Prints the regret table and writes a regret plot,
an HTML map of the GP's learned energy per km with one planned route, and a PNG of the same.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ev_nav.cli import count_arg, town_size_arg
from ev_nav.wording import plural


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` command."""
    parser = subparsers.add_parser("demo", help="fleet-learning demo on the embedded town")
    # the same argument types as 'ev-nav init' and 'fleet': a zero or negative count was taken and
    # failed later with a "damaged run, --resume" message that did not apply to the demo
    parser.add_argument(
        "--segments", type=town_size_arg, default=1200,
        help="synthetic town size [segments] (default 1200)",
    )
    parser.add_argument(
        "--rounds", type=count_arg, default=30, help="learning rounds (default 30)"
    )
    parser.add_argument(
        "--vehicles", type=count_arg, default=4, help="vehicles per round (default 4)"
    )
    parser.add_argument(
        "--seeds", type=count_arg, default=2,
        help="repetitions, each a different world (default 2)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("maps"), help="output folder (default maps)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch and BLAS threads (default 1: on a busy machine more threads made the demo "
        "slower, scripts/bench_demo.py)",
    )
    parser.set_defaults(func=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from ev_nav.errors import ConfigError
    from ev_nav.sim.grid import limited_threads

    if args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    # refused before any work: a file there failed after the town's summary, naming a run folder
    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(f"--out {args.out} is a file; give the folder to write the demo in")
    # The demo's matrices are small enough that one thread loses little on idle cores, while
    # threads that wait for busy cores made it several times slower (README, "make demo").
    with limited_threads(args.threads):
        return _demo(args)


def _demo(args: argparse.Namespace) -> int:
    import numpy as np
    from tqdm.auto import tqdm

    from ev_nav.bandits.agent import Agent, describe_route
    from ev_nav.errors import ConfigError
    from ev_nav.roads.cli import print_summary
    from ev_nav.sim.fleet import (
        AgentSpec,
        NetworkSpec,
        RunSpec,
        TripGenerator,
        TripSpec,
        load_network,
        run_one,
    )
    from ev_nav.sim.grid import aggregate
    from ev_nav.sim.report import summary_markdown
    from ev_nav.viz.maps import route_map
    from ev_nav.viz.plots import network_png
    from ev_nav.viz.regret import cumulative_regret_figure

    t_start = time.perf_counter()
    net_spec = NetworkSpec(kind="synthetic", n_segments=args.segments, seed=0, name="town")
    net = load_network(net_spec)
    trips = TripSpec(kind="random", vehicles=args.vehicles, min_distance_m=1500.0, name="fleet")
    # the trips each run will draw (same seeds), before any work: a small town failed after its
    # summary with "no origin–destination pair 1500.0 m apart", saying nothing of --segments
    for seed in range(args.seeds):
        draws = TripGenerator(trips, net, seed)
        try:
            for _ in range(args.rounds * args.vehicles):
                draws.next()
        except ConfigError:
            raise ConfigError(
                f"a town of {args.segments:,} segments has too few places "
                f"{trips.min_distance_m / 1000:g} km apart for the demo's trips; use a larger "
                "--segments (default 1200)"
            ) from None
    print("Embedded synthetic town:")
    print_summary(net)
    agents = [
        AgentSpec(model="gp", policy="ts"),  # the exact learner
        AgentSpec(model="bi", policy="ts"),
        AgentSpec(policy="random"),
    ]
    specs = [
        RunSpec(network=net_spec, agent=a, trips=trips, horizon=args.rounds, seed=s)
        for s in range(args.seeds)
        for a in agents
    ]
    out = args.out
    exp_dir = out / "demo-runs"
    finished = {}
    show = not args.quiet and sys.stderr.isatty()
    for spec in tqdm(specs, desc="demo runs", unit="run", disable=not show):
        result = run_one(spec, exp_dir / "runs" / spec.run_id, resume=False)
        finished[(spec.agent.label, spec.seed)] = result
    # only this demo's runs: an earlier demo into the same folder (other rounds, seeds or size)
    # left its runs there, and they were averaged into this table
    results, summary = aggregate(exp_dir, run_ids=[s.run_id for s in specs])
    print(f"\nFleet of {plural(args.vehicles, 'vehicle')}, {plural(args.rounds, 'round')}, "
          f"{plural(args.seeds, 'world')}:")
    print(summary_markdown(summary))
    regret_png = cumulative_regret_figure(
        results, out / "demo-regret.png", title="demo: cumulative regret (mean ± 1 SE)"
    )

    # The learned GP of world 0, and one trip it plans greedily (its best guess).
    model, env = finished[("GP-TS", 0)].model, finished[("GP-TS", 0)].env
    post = model.posterior()
    wh_per_km = post.mean / (net.length_m / 1000.0)
    mid = net.segment_midpoints()
    start = int(np.argmin(mid[:, 0] + mid[:, 1]))
    goal = int(np.argmax(mid[:, 0] + mid[:, 1]))
    agent = Agent(net, model, "mean", seed=0)
    planned = agent.plan(start, goal)
    best, best_wh = env.oracle.optimal(start, goal)
    from ev_nav.bandits.routing import Router

    shortest = Router(net).route(net.length_m, start, goal)
    alternatives = {"energy-optimal (true)": best, "shortest": shortest}
    # each route's prediction from the model's joint posterior, as the route table shows it
    figures = {
        n: describe_route(net, r, model)
        for n, r in {"planned by GP (mean)": planned, **alternatives}.items()
    }
    html = route_map(
        net,
        planned,
        alternatives,
        route_name="planned by GP (mean)",
        mean_wh=post.mean,
        sd_wh=post.std,
        route_figures=figures,
        color_by=wh_per_km,
        legend_title="learned energy [Wh/km]",
        title="ev-nav demo: learned energy and a planned route",
        path=out / "demo-map.html",
    )
    del html
    png = network_png(
        net,
        wh_per_km,
        out / "demo-map.png",
        label="learned energy [Wh/km]",
        title="ev-nav demo: learned energy",
        routes={"planned": planned},
    )
    print(
        f"\nplanned route (GP mean): true energy {env.oracle.path_energy(planned):.1f} Wh, "
        f"optimal {best_wh:.1f} Wh, shortest path {env.oracle.path_energy(shortest):.1f} Wh"
    )
    print(f"wrote {regret_png}, {out / 'demo-map.html'}, {png}")
    print(f"demo finished in {time.perf_counter() - t_start:.0f} s")
    return 0
