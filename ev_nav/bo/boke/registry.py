"""The methods of the BOKE study by name: the BOKE family of Zhu et al. and the baselines.

``gp-ucb`` uses the default lengthscale 0.2 and ``gp-ucb-wide`` 0.5 (the ranking flips
between them); ``gp-ei``, ``random`` and ``gp-ucb-wide`` are extras, not in paper v1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ev_nav.bo.boke.baselines import GPBaselineConfig, GPEIMethod, GPUCBMethod, RandomSearch
from ev_nav.bo.boke.methods import (
    BOKEConfig,
    BOKEMaximizerConfig,
    BOKEMethod,
    DensityExploration,
    KRUCBConfig,
    KRUCBMethod,
    Proposal,
)
from ev_nav.bo.boke.surrogate import DEFAULT_C_H, BandwidthRule
from ev_nav.bo.core.registry import Registry
from ev_nav.bo.core.space import Space


class Method(Protocol):
    """A BOKE-study method: propose the next unit-cube point from the data so far."""

    @property
    def name(self) -> str: ...

    def propose(
        self, X: torch.Tensor, y: torch.Tensor, gen: torch.Generator, space: Space | None = None
    ) -> Proposal:
        """The next point; with a mixed ``space`` it is a snapped (valid) internal point."""
        ...


#: GP baselines on your own objective refit their hyperparameters after this many new points.
USER_GP_REFIT_EVERY = 5


@dataclass(frozen=True)
class BOKEMethodConfig:
    """Settings of the methods (each reads the ones it needs; unit cube, standardised ``y``).

    Attributes
    ----------
    varsigma, delta, c_h, bandwidth_rule, p_ucb
        BOKE family (see :class:`~ev_nav.bo.boke.methods.BOKEConfig`).
    gp_lengthscale, gp_sqrt_beta
        GP-UCB / GP-EI fixed SE lengthscale and UCB width; ``gp-ucb-wide`` uses 0.5.
    gp_refit_every
        ``0``: the GP baselines keep ``gp_lengthscale`` (the study's set-up); ``k > 0``: they fit
        their hyperparameters by marginal likelihood after every ``k`` new observations (the
        default, for your own objectives: :data:`USER_GP_REFIT_EVERY`).
    maximizer
        Acquisition maximiser budget shared by every method.
    """

    varsigma: float = 0.3
    delta: float = 0.1
    c_h: float = DEFAULT_C_H
    bandwidth_rule: BandwidthRule = "scott"
    p_ucb: float = 0.5
    gp_lengthscale: float = 0.2
    gp_sqrt_beta: float = 2.0
    gp_refit_every: int = USER_GP_REFIT_EVERY
    maximizer: BOKEMaximizerConfig = field(default_factory=BOKEMaximizerConfig)

    def gp(self, lengthscale: float | None = None) -> GPBaselineConfig:
        return GPBaselineConfig(
            self.gp_lengthscale if lengthscale is None else lengthscale,
            self.gp_sqrt_beta,
            refit_every=self.gp_refit_every,
        )

    def boke(self) -> BOKEConfig:
        return BOKEConfig(
            varsigma=self.varsigma,
            delta=self.delta,
            c_h=self.c_h,
            bandwidth_rule=self.bandwidth_rule,
            p_ucb=self.p_ucb,
        )


#: ``build(settings, noise_std)``: ``noise_std`` is the known observation noise (0: noise-free).
MethodBuilder = Callable[[BOKEMethodConfig, float], Method]

METHODS: Registry[MethodBuilder] = Registry("method", "boke")
_add = METHODS.add
_add(
    "boke",
    "BOKE, Algorithm 2 (IKR-UCB every step)",
    lambda s, n: BOKEMethod(s.boke(), s.maximizer, plus=False, noise_std=n),
)
_add(
    "boke+",
    "BOKE+, Algorithm 3 (IKR-UCB or exploitation by a coin)",
    lambda s, n: BOKEMethod(s.boke(), s.maximizer, plus=True, noise_std=n),
)
_add(
    "de",
    "pure density exploration, eq. 3.10",
    lambda s, n: DensityExploration(s.boke(), s.maximizer),
)
_add(
    "kr-ucb",
    "KR-UCB baseline (App. A.2, adapted from KR-UCT)",
    lambda s, n: KRUCBMethod(KRUCBConfig(bandwidth_rule=s.bandwidth_rule, c_h=s.c_h), s.maximizer),
)
_add(
    "gp-ucb",
    "GP-UCB, fixed SE lengthscale (0.2 by default), fixed sqrt(beta)",
    lambda s, n: GPUCBMethod(s.gp(), s.maximizer, noise_std=n),
)
_add(
    "gp-ucb-wide",
    "GP-UCB with lengthscale 0.5 (extra)",
    lambda s, n: GPUCBMethod(s.gp(0.5), s.maximizer, noise_std=n),
)
_add(
    "gp-ei",
    "GP expected improvement (extra)",
    lambda s, n: GPEIMethod(s.gp(), s.maximizer, noise_std=n),
)
_add("random", "uniform random search (extra)", lambda s, n: RandomSearch())

#: Methods that are not in paper v1 (reported, but labelled as extras).
EXTRA_METHODS: frozenset[str] = frozenset({"gp-ei", "random", "gp-ucb-wide"})


def make_method(
    name: str, settings: BOKEMethodConfig | None = None, noise_std: float = 0.0
) -> Method:
    """Instantiate method ``name``."""
    return METHODS.get(name)(settings or BOKEMethodConfig(), noise_std)
