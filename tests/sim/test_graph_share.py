"""The world's split of its losses' variance between the local and the network-wide term."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ev_nav.errors import ConfigError
from ev_nav.gp.groundtruth import sample_ground_truth
from ev_nav.gp.prior import PriorSettings
from ev_nav.potential import node_potential
from ev_nav.roads.synthetic import synthetic_town
from ev_nav.sim.environment import Environment, TruthSpec, physical_truth
from ev_nav.sim.fleet import AgentSpec, NetworkSpec, RunSpec, TripSpec


@pytest.fixture(scope="module")
def net():
    return synthetic_town(400, seed=3)


def _direct(net, share: float, seed: int) -> np.ndarray:
    """The physical world built by hand from the sampler at ``share``."""
    settings = replace(PriorSettings.from_network(net), graph_share=share)
    draw = sample_ground_truth(net, settings=settings, seed=seed * 1_000_003)
    return physical_truth(net, None, node_potential(net), draw, settings.outputscale, 0.25)


def test_the_share_reaches_the_world_and_each_share_has_its_own_world(net):
    worlds = {}
    for share in (0.5, 0.0, 1.0, 0.5):  # 0.5 twice: memoised worlds must not mix shares
        env = Environment.create(net, seed=91, truth=TruthSpec(graph_share=share))
        np.testing.assert_allclose(env.true_energy, _direct(net, share, 91), rtol=1e-12)
        worlds[share] = env.true_energy
    assert not np.allclose(worlds[0.0], worlds[1.0])
    assert not np.allclose(worlds[0.0], worlds[0.5])


def test_a_world_of_network_wide_deviations_alone_correlates_look_alike_segments(net):
    """Share 0: the deviations are a function of the features only, so two segments with
    close features deviate alike wherever they are; share 1 keeps the correlation local."""
    feats = (net.features - net.features.mean(0)) / net.features.std(0)
    d = np.linalg.norm(feats[:, None] - feats[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    i, j = np.nonzero(np.triu(d < 0.1))
    assert len(i) >= 20
    corr = {}
    for share in (0.0, 1.0):
        settings = replace(PriorSettings.from_network(net), graph_share=share)
        z = sample_ground_truth(net, settings=settings, seed=7, size=400) - net.e_det()
        z /= np.sqrt(settings.outputscale)
        corr[share] = float(np.mean(z[:, i] * z[:, j]))
    assert corr[0.0] > 0.8 and corr[1.0] < 0.2  # measured 0.95 and 0.03


def test_bad_shares_are_refused_and_the_paper_split_keeps_old_run_ids():
    for bad in (-0.1, 1.5, float("nan"), True, "0.3"):
        with pytest.raises(ConfigError, match="graph_share must (lie in|be a number)"):
            TruthSpec(graph_share=bad)
    spec = RunSpec(network=NetworkSpec(n_segments=400, seed=3), agent=AgentSpec(),
                   trips=TripSpec(), horizon=3)
    assert spec.run_id == "synthetic-400_route_GP-TS_s0_e7d6df9d"  # its id before the option
    assert replace(spec, truth=TruthSpec(graph_share=0.25)).run_id != spec.run_id
    # a TOML 0 and a command line's 0.0 are one world and one run folder
    assert (replace(spec, truth=TruthSpec(graph_share=0)).run_id
            == replace(spec, truth=TruthSpec(graph_share=np.float32(0.0))).run_id
            == replace(spec, truth=TruthSpec(graph_share=0.0)).run_id)


@pytest.mark.parametrize("kind", ["det-noise", "file"])
def test_worlds_without_a_gp_draw_refuse_another_share(kind):
    """Their worlds do not depend on the share: it would only have renamed their runs."""
    with pytest.raises(ConfigError, match=f"kind = '{kind}' has none"):
        TruthSpec(kind=kind, graph_share=0.25)
    assert TruthSpec(kind=kind).graph_share == 0.5
