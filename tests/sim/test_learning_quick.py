"""CI check of the learning loop (issue 4): GP-TS beats uniformly random routing.

Averaged over 3 seeds on the synthetic town, GP-TS's cumulative regret after 40 trips between the
same endpoints must be below that of random routing (Dijkstra on i.i.d. random weights).
"""

import numpy as np
import pandas as pd

from ev_nav.sim.fleet import AgentSpec, NetworkSpec, RunSpec, TripSpec, load_network, run_one


def test_gp_ts_beats_random_routing():
    net_spec = NetworkSpec(kind="synthetic", n_segments=600, seed=1)
    net = load_network(net_spec)
    mid = net.segment_midpoints()
    start = int(np.argmin(mid[:, 0] + mid[:, 1]))
    goal = int(np.argmax(mid[:, 0] + mid[:, 1]))
    trips = TripSpec(kind="fixed", start=start, goal=goal, name="diag")
    final = {}
    for agent in (
        AgentSpec(model="gp", policy="ts", num_inducing=300, batch_size=500),
        AgentSpec(policy="random"),
    ):
        totals = []
        for seed in range(3):
            rows = run_one(
                RunSpec(network=net_spec, agent=agent, trips=trips, horizon=40, seed=seed)
            ).rows
            totals.append(pd.DataFrame(rows)["regret_wh"].sum())
        final[agent.label] = float(np.mean(totals))
    assert final["GP-TS"] < final["random"], final
