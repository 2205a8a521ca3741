"""The regional learner: the segment-energy GP as a sparse precision (issue 26).

:class:`RegionalGP` implements :class:`~ev_nav.gp.posterior.SegmentModel` on networks far
beyond the exact learner's N × N covariance: the product term by a Vecchia prior
(:mod:`.vecchia`), factorised on its own pattern (:mod:`.factor`), the feature-only term by
landmarks (:mod:`.model`).
"""

from ev_nav.gp.regional.factor import PrecisionFactor
from ev_nav.gp.regional.model import RegionalConfig, RegionalGP, pivoted_cholesky
from ev_nav.gp.regional.vecchia import VecchiaPrior, VecchiaSettings, build_vecchia, maxmin_order

__all__ = [
    "PrecisionFactor",
    "RegionalConfig",
    "RegionalGP",
    "VecchiaPrior",
    "VecchiaSettings",
    "build_vecchia",
    "maxmin_order",
    "pivoted_cholesky",
]
