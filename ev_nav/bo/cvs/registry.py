"""The methods of the cost-varying-subset family, by name, for known and for unknown costs.

Both registries map a name to a builder ``(problem, settings) -> Policy``. Known costs (Tay et
al. 2023): ETC groups are the sets sharing a cost; unknown costs (Hoang et al. 2025): the learner
cannot read mean costs, so ETC groups sets by size and only ``ucb-cvs`` (a reference given the
true means) reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ev_nav.bo.core.registry import Registry
from ev_nav.bo.cvs.policies import (
    ETC,
    TSPSQ,
    UCBCVS,
    UCBPSQ,
    EIPerCost,
    PerCost,
    Policy,
    linear_eps,
    make_etc,
    size_groups,
)
from ev_nav.bo.cvs.problems import Problem
from ev_nav.bo.cvs.unknown import UCVSConfig, UnknownCostCVS


@dataclass(frozen=True)
class CVSMethodConfig:
    """Method settings of the family (each method reads the ones it needs).

    Attributes
    ----------
    ada_scale
        ETC-Ada plays per group ``int(ada_scale / c_g)``.
    eps_start, eps_cutoff
        Linear ε-schedule of UCB-CVS, ``ε_t = eps_start · max(1 − t / eps_cutoff, 0)`` (our
        default 1 → 0 over 100 iterations: the paper evaluates no schedule and the official
        code instantiates none).
    n_features
        Random Fourier features of the Thompson-sampling methods (``2048`` = 1024 frequencies).
    etc_quota
        ETC plays per size group (unknown costs).
    tau, alpha, explore_frac, clip_cost_lcb, refit_at_exploit
        The unknown-cost method (see :class:`~ev_nav.bo.cvs.unknown.UCVSConfig`).
    """

    ada_scale: float = 4.0
    eps_start: float = 1.0
    eps_cutoff: int = 100
    n_features: int = 2048
    etc_quota: int = 50
    tau: int = 10
    alpha: float = 0.1
    explore_frac: float = 0.6
    clip_cost_lcb: bool = True
    refit_at_exploit: bool = True


PolicyBuilder = Callable[[Problem, CVSMethodConfig], Policy]

KNOWN_COST_METHODS: Registry[PolicyBuilder] = Registry("method", "cvs")
UNKNOWN_COST_METHODS: Registry[PolicyBuilder] = Registry("method", "ucvs")

_known = KNOWN_COST_METHODS.add
_known(
    "ucb-psq", "UCB over partial queries, cost-blind (Hayashi et al. 2022)", lambda p, s: UCBPSQ()
)
_known(
    "ts-psq",
    "Thompson sampling (random Fourier features) over partial queries, cost-blind",
    lambda p, s: TSPSQ(s.n_features),
)
_known(
    "etc50",
    "explore-then-commit UCB-CVS, 50 plays per cost group",
    lambda p, s: make_etc(p, "etc50"),
)
_known(
    "etc100",
    "explore-then-commit UCB-CVS, 100 plays per cost group",
    lambda p, s: make_etc(p, "etc100"),
)
_known(
    "etcada",
    "explore-then-commit UCB-CVS, int(ada_scale / c) plays per cost group (evaluated method)",
    lambda p, s: make_etc(p, "etcada", s.ada_scale),
)
_known(
    "ucb-cvs",
    "UCB-CVS, Algorithm 1 with a linear epsilon-schedule",
    lambda p, s: UCBCVS(p.costs.means, linear_eps(s.eps_start, s.eps_cutoff)),
)
_known(
    "ucb-per-cost",
    "UCB value per unit cost (naive baseline)",
    lambda p, s: PerCost(p.costs.means, "ucb"),
)
_known(
    "ts-per-cost",
    "Thompson-sample value per unit cost (naive baseline)",
    lambda p, s: PerCost(p.costs.means, "ts", s.n_features),
)
_known(
    "ei-per-cost",
    "EI-PSQ per unit cost (Tay et al., App. B)",
    lambda p, s: EIPerCost(p.costs.means),
)


def _ucvs(p: Problem, s: CVSMethodConfig) -> Policy:
    # current (not intersected) bounds: with a fitted, finite-β GP a single optimiser miss
    # ratchets the running min of a set's UCB below the running max LCB for good
    return UnknownCostCVS(
        UCVSConfig(
            "practical",
            alpha=s.alpha,
            explore_frac=s.explore_frac,
            intersect=False,
            clip_cost_lcb=s.clip_cost_lcb,
            refit_at_exploit=s.refit_at_exploit,
        )
    )


def _etc_sizes(p: Problem, s: CVSMethodConfig) -> Policy:
    groups = size_groups(p.control_sets, p.dim)
    return ETC(groups, [s.etc_quota] * len(groups), name="etc50")


_unknown = UNKNOWN_COST_METHODS.add
_unknown(
    "ucvs",
    "proposed method, practical form (explore while spend <= 60 % of C, alpha halved)",
    _ucvs,
)
_unknown(
    "ucvs-paper",
    "proposed method, Algorithm 1 (tau plays per set, fixed alpha)",
    lambda p, s: UnknownCostCVS(
        UCVSConfig(
            "paper",
            tau=s.tau,
            alpha=s.alpha,
            clip_cost_lcb=s.clip_cost_lcb,
            refit_at_exploit=s.refit_at_exploit,
        ),
        name="ucvs-paper",
    ),
)
_unknown("ucb-psq", "UCB over partial queries, cost-blind", lambda p, s: UCBPSQ())
_unknown(
    "ts-psq", "Thompson sampling over partial queries, cost-blind", lambda p, s: TSPSQ(s.n_features)
)
_unknown(
    "ucb-cvs",
    "UCB-CVS given the true mean costs (reference; needs them)",
    lambda p, s: UCBCVS(p.costs.means, linear_eps(s.eps_start, s.eps_cutoff)),
)
_unknown("etc50", "explore-then-commit with size groups, etc_quota plays per group", _etc_sizes)

#: The two registries by family name (``ev-nav bo cvs`` and ``ev-nav bo ucvs``).
METHODS: dict[str, Registry[PolicyBuilder]] = {
    "cvs": KNOWN_COST_METHODS,
    "ucvs": UNKNOWN_COST_METHODS,
}
