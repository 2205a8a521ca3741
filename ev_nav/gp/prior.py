"""The prior settings of spec §4, shared by the simulated world and the learners.

:class:`PriorSettings` holds the paper's prior: outputscale ``σ0² = 0.25² σ²_det``, noise
``ς² = 0.1² σ²_det`` (``σ²_det`` = variance of E_det over the network), graph ν = 2, κ = 1, feature
lengthscales ℓ (1 in the paper; varied in Figs. 4–5) and the equal split of σ0² between the
``k_G·k_f`` and ``k'_f`` terms **[decision, spec §4]**.

A module of its own, free of torch: the independent (BI) learner needs only these numbers, and
``ev-nav observe`` of a BI state would otherwise load torch (1.4 s of its 2.3 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from ev_nav.energy import Vehicle
from ev_nav.errors import ConfigError
from ev_nav.roads.network import RoadNetwork


@dataclass(frozen=True)
class PriorSettings:
    """GP prior of the simulated ground truth and the agents' initial hyperparameters (spec §4).

    Attributes
    ----------
    outputscale : float
        Total prior variance σ0² per segment [Wh²].
    noise_var : float
        Observation-noise variance ς² [Wh²].
    graph_nu, graph_kappa : float
        Graph Matérn smoothness ν_G and lengthscale κ_G.
    lengthscale : float
        Lengthscale of both feature kernels in every (standardised) dimension.
    graph_share : float
        Fraction of σ0² carried by the ``k_G·k_f`` term (the rest by ``k'_f``).
    """

    outputscale: float
    noise_var: float
    graph_nu: float = 2.0
    graph_kappa: float = 1.0
    lengthscale: float = 1.0
    graph_share: float = 0.5

    def __post_init__(self) -> None:
        if not (self.outputscale > 0 and self.noise_var > 0 and self.lengthscale > 0):
            raise ConfigError("prior outputscale, noise variance and lengthscale must be positive")
        if not 0.0 <= self.graph_share <= 1.0:
            raise ConfigError(f"graph_share must lie in [0, 1], got {self.graph_share}")

    @classmethod
    def from_network(
        cls, net: RoadNetwork, vehicle: Vehicle | None = None, lengthscale: float = 1.0
    ) -> PriorSettings:
        """The paper's settings for ``net``: σ0² = 0.25² Var(E_det), ς² = 0.1² Var(E_det)."""
        var_det = float(np.var(net.e_det(vehicle)))
        if not var_det > 0:
            raise ConfigError("E_det is constant over the network: cannot scale the prior")
        return cls(
            outputscale=0.25**2 * var_det, noise_var=0.1**2 * var_det, lengthscale=lengthscale
        )

    @classmethod
    def relative(cls, lengthscale: float = 1.0) -> PriorSettings:
        """*Relative* scales (unitless) for learners whose variances scale with each segment's
        loss (``segment_scale="loss"``): σ0² = 0.25² (the paper's ratio, now of the loss) and
        ς² = 0.2², the spreads of the physical world (:class:`ev_nav.sim.environment.TruthSpec`
        ``loss_spread`` and ``noise_spread``): like the paper's agents, which start from the
        prior the world is drawn from, a learner starts at the world's documented model and
        fits from there."""
        return cls(outputscale=0.25**2, noise_var=0.2**2, lengthscale=lengthscale)

    @property
    def product_scale(self) -> float:
        """Outputscale s₁ of the ``k_G·k_f`` term [Wh²]."""
        return self.outputscale * self.graph_share

    @property
    def feature_scale(self) -> float:
        """Outputscale s₂ of the ``k'_f`` term [Wh²]."""
        return self.outputscale * (1.0 - self.graph_share)

    @property
    def noise_std(self) -> float:
        """ς [Wh]."""
        return math.sqrt(self.noise_var)

    def with_lengthscale(self, lengthscale: float) -> PriorSettings:
        """A copy with another feature lengthscale."""
        return replace(self, lengthscale=float(lengthscale))


def learner_prior(
    net: RoadNetwork, vehicle: Vehicle | None, segment_scale: str, lengthscale: float
) -> tuple[PriorSettings, NDArray[np.float64] | None]:
    """A GP learner's initial prior and each segment's amplitude ``a_e`` [Wh].

    ``segment_scale="uniform"`` (the paper's model): :meth:`PriorSettings.from_network`, no
    amplitudes (None). ``"loss"``: :meth:`PriorSettings.relative` and ``a_e`` the segment's
    deterministic loss (:func:`ev_nav.potential.loss_scale`): the prior covariance is
    ``a_e a_e' k(e, e')`` and the noise variance ``ς² a_e²``.
    """
    if segment_scale == "loss":
        from ev_nav.potential import loss_scale

        return PriorSettings.relative(lengthscale), loss_scale(net, vehicle)
    return PriorSettings.from_network(net, vehicle, lengthscale), None
