"""The surrogate's hyperparameter treatment in the cost-varying-subset family.

Two treatments share the one exact GP of :mod:`ev_nav.gp.exact`:

* **fixed** (both papers' code, the benchmark default): SE kernel with the problem's
  lengthscale, outputscale 1, noise variance ``max(noise_std, 1e-4)²``, zero prior mean, raw
  ``y``, no fitting;
* **standardised** (the user-objective default): the prior is set from the data, so that the
  GP sees ``(y − ȳ) / s_y`` with outputscale 1. A GP on standardised ``y`` is the GP on raw
  ``y`` with prior mean ``ȳ``, outputscale ``s_y²`` and noise ``s_y²`` times the
  standardised noise, so the model stays in the caller's units and every policy reads it
  unchanged; the objective's scale then changes nothing but those constants.

Either treatment may refit the hyperparameters (ARD lengthscales, outputscale, noise) by
marginal likelihood on a schedule (:class:`SurrogateConfig`): every ``refit_every``
observations, and/or once when the spend first exceeds ``refit_at_spend`` of the budget (the
unknown-cost method's single refit at the start of exploitation, offered to every method for a
like-for-like comparison). The standardisation constants are re-estimated at every refit and
kept fixed in between (the O(n²) Cholesky extensions stay exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ev_nav.errors import ConfigError, InvalidObservation
from ev_nav.gp.exact import ExactGP, HyperBounds

DTYPE = torch.float64
#: Noise variance of the fixed treatment when the declared noise is smaller (papers' λ).
MIN_NOISE_VAR = 1e-4
#: Standardised noise variance when none is declared (the papers' λ on a unit-variance scale).
STANDARDISED_NOISE_VAR = 1e-4
#: Box of the standardised fit: lengthscales (unit cube), outputscale, noise variance (both in
#: units of ``s_y²``). Unbounded, five points of a quadratic gave ℓ ≈ 8 with outputscale ≈ 5·10⁵
#: (the likelihood grows both together on a smooth objective), or one lengthscale of 0.017, and
#: UCB then spent the budget in the corners; inside this box the same runs converge.
STANDARDISED_BOUNDS: HyperBounds = ((0.1, 1.0), (0.1, 2.0), (1e-6, 0.1))


@dataclass(frozen=True)
class SurrogateConfig:
    """How the GP's prior is set and when its hyperparameters are fitted.

    Attributes
    ----------
    standardise
        Set the prior mean and scales from the observations (see the module docstring);
        ``False`` keeps the papers' fixed prior on raw ``y``.
    refit_every
        Fit the hyperparameters by marginal likelihood after the initial design and then after
        every ``refit_every`` observations (0: never).
    refit_at_spend
        Fit them once when the spend first exceeds this fraction of the budget (``None``: never).
    n_restarts
        Starts of each fit (the current values plus random ones).
    """

    standardise: bool = False
    refit_every: int = 0
    refit_at_spend: float | None = None
    n_restarts: int = 2

    def __post_init__(self) -> None:
        if self.refit_every < 0 or self.n_restarts < 1:
            raise ConfigError("refit_every must be >= 0 and n_restarts >= 1")
        if self.refit_at_spend is not None and not 0.0 <= self.refit_at_spend < 1.0:
            raise ConfigError("refit_at_spend must be a budget fraction in [0, 1)")

    @property
    def label(self) -> str:
        """Short description for tables and manifests."""
        parts = ["standardised" if self.standardise else "fixed prior"]
        if self.refit_every:
            parts.append(f"ML-II every {self.refit_every} obs")
        if self.refit_at_spend is not None:
            parts.append(f"ML-II once at {self.refit_at_spend:g} C")
        return ", ".join(parts)


#: The papers' treatment (benchmarks' default).
FIXED = SurrogateConfig()
#: Refit interval of the user-objective default (observations).
USER_REFIT_EVERY = 10
#: User objectives' default: standardised, refitted every :data:`USER_REFIT_EVERY` observations.
FITTED = SurrogateConfig(standardise=True, refit_every=USER_REFIT_EVERY)


def new_model(lengthscale: float, noise_std: float | None) -> ExactGP:
    """The fixed prior: SE, outputscale 1, noise ``max(noise_std, 1e-4)²`` (raw ``y``)."""
    std = 0.0 if noise_std is None else float(noise_std)
    return ExactGP("se", lengthscale, 1.0, max(std, math.sqrt(MIN_NOISE_VAR)) ** 2)


def _scale(y: Tensor) -> tuple[float, float]:
    """``(ȳ, s_y)``; ``s_y = 1`` when the observations do not vary (one point, a flat start)."""
    mean = float(y.mean())
    sd = float(y.std()) if y.numel() > 1 else 0.0
    return mean, sd if sd > 0.0 and math.isfinite(sd) else 1.0


def condition(
    model: ExactGP,
    X: Tensor,
    y: Tensor,
    config: SurrogateConfig,
    noise_std: float | None,
) -> None:
    """Condition ``model`` on ``(X, y)``; with ``standardise``, first set its prior from ``y``.

    ``noise_std`` is the declared observation noise in ``y``'s units (``None``: undeclared, the
    standardised noise variance is then :data:`STANDARDISED_NOISE_VAR`).
    """
    if config.standardise:
        mean, sd = _scale(y)
        model.mean = mean
        model.outputscale = sd * sd
        if noise_std is None:
            model.noise_var = STANDARDISED_NOISE_VAR * sd * sd
        else:
            model.noise_var = max(float(noise_std) ** 2, 1e-6 * sd * sd)
    model.fit(X, y)


def refit(model: ExactGP, config: SurrogateConfig, generator: torch.Generator) -> bool:
    """Fit the hyperparameters of ``model`` to its own data by marginal likelihood (ARD).

    Returns ``False`` (hyperparameters kept) when every start fails, as on a very smooth
    objective whose likelihood drives the lengthscales to a singular kernel.
    """
    X, y = model.X_train, model.y_train
    if X is None or y is None:
        return False
    if not config.standardise:
        try:
            model.fit_hyperparameters(X, y, n_restarts=config.n_restarts, generator=generator)
        except InvalidObservation:
            return False
        return True
    mean, sd = _scale(y)
    unit = ExactGP(
        model.kind,
        model.lengthscale,
        model.outputscale / (sd * sd),
        max(model.noise_var / (sd * sd), 1e-6),
    )
    try:
        unit.fit_hyperparameters(
            X,
            (y - mean) / sd,
            n_restarts=config.n_restarts,
            generator=generator,
            bounds=STANDARDISED_BOUNDS,
        )
    except InvalidObservation:
        return False
    model.mean = mean
    model.lengthscale = unit.lengthscale
    model.outputscale = unit.outputscale * sd * sd
    model.noise_var = unit.noise_var * sd * sd
    model.fit(X, y)
    return True
