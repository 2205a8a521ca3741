"""GP baselines of the BOKE study, on the shared GP core (:class:`ev_nav.gp.exact.ExactGP`).

* **GP-UCB** (App. A.1): squared-exponential kernel with a *fixed* lengthscale on the unit cube,
  signal variance 1 on standardised responses, fixed ``sqrt(beta)``, no hyperparameter refits
  (the paper's set-up; its constants are unreported, the defaults are listed in docs/bo-boke.md).
  Every iteration conditions the GP afresh (one Cholesky, ``O(t^3)``); each acquisition
  evaluation does one triangular solve (``O(t^2)``). With ``refit_every = k > 0`` (the default
  for your own objectives) the ARD lengthscales, signal variance and noise are instead fitted by
  marginal likelihood (the shared :meth:`ExactGP.fit_hyperparameters`) on the standardised data
  at the first step and then after every ``k`` new observations.
* **GP-EI** and **random search**: extras (not in paper v1), labelled so.

All methods share :func:`ev_nav.bo.boke.methods.maximize_acquisition` (the package's maximiser
with the study's budget); GP gradients come from autograd through ``ExactGP.posterior``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ev_nav.bo.boke.methods import (
    BOKEMaximizerConfig,
    Proposal,
    maximize_acquisition,
    standardise,
)
from ev_nav.bo.core.maximize import autograd
from ev_nav.bo.core.space import Space
from ev_nav.errors import ConfigError
from ev_nav.gp.exact import ExactGP

_SQRT2 = math.sqrt(2.0)


@dataclass
class GPBaselineConfig:
    """Fixed-hyperparameter GP used by GP-UCB / GP-EI (unit cube, standardised ``y``).

    Attributes
    ----------
    lengthscale : float
        SE lengthscale in unit-cube units (0.2 and 0.5 are both reported: the ranking flips).
    sqrt_beta : float
        UCB width multiplier.
    noise_var : float
        Noise variance for noise-free problems (a nugget); noisy problems use
        ``(noise_std / std(y))^2``.
    xi : float
        EI margin on standardised ``y``.
    refit_every : int
        ``0``: fixed hyperparameters (the study's); ``k > 0``: fit them by marginal likelihood at
        the first step and after every ``k`` new observations (``lengthscale`` is the start).
    """

    lengthscale: float = 0.2
    sqrt_beta: float = 2.0
    noise_var: float = 1e-6
    xi: float = 0.01
    refit_every: int = 0

    def __post_init__(self) -> None:
        if not (self.lengthscale > 0 and self.sqrt_beta >= 0 and self.noise_var >= 0):
            raise ConfigError("GP baseline needs lengthscale > 0, sqrt_beta >= 0, noise_var >= 0")
        if self.refit_every < 0:
            raise ConfigError(f"refit_every must be >= 0, got {self.refit_every}")


@dataclass
class _Hyper:
    """Hyperparameters fitted at ``t`` observations (standardised units)."""

    t: int
    lengthscale: torch.Tensor
    outputscale: float
    noise_var: float


def _fit_gp(
    cfg: GPBaselineConfig,
    X: torch.Tensor,
    y: torch.Tensor,
    noise_std: float,
    fitted: _Hyper | None = None,
) -> tuple[ExactGP, _Hyper | None]:
    """The GP on standardised ``y``: fixed hyperparameters, or fitted on ``cfg``'s schedule.

    Returns the conditioned model and the hyperparameters in force (``None`` when fixed).
    """
    ys, _, sd = standardise(y)
    nv = (noise_std / sd) ** 2 if noise_std > 0 else cfg.noise_var
    if cfg.refit_every == 0:
        model = ExactGP("se", lengthscale=cfg.lengthscale, outputscale=1.0, noise_var=nv)
        return model.fit(X, ys), None
    t = X.shape[0]
    if fitted is None or t - fitted.t >= cfg.refit_every:
        start = fitted or _Hyper(
            t, torch.full((X.shape[1],), cfg.lengthscale, dtype=X.dtype), 1.0, nv
        )
        model = ExactGP(
            "se",
            lengthscale=start.lengthscale.clone(),
            outputscale=start.outputscale,
            noise_var=max(start.noise_var, 1e-6),
        )
        # restarts from a generator seeded by t: the fit depends on the data alone
        model.fit_hyperparameters(X, ys, generator=torch.Generator().manual_seed(t))
        fitted = _Hyper(t, model.lengthscale.detach().clone(), model.outputscale, model.noise_var)
        return model, fitted
    model = ExactGP(
        "se",
        lengthscale=fitted.lengthscale.clone(),
        outputscale=fitted.outputscale,
        noise_var=fitted.noise_var,
    )
    return model.fit(X, ys), fitted


@dataclass
class GPUCBMethod:
    """GP-UCB with a fixed SE lengthscale and fixed ``sqrt(beta)`` on the shared ExactGP."""

    gp: GPBaselineConfig = field(default_factory=GPBaselineConfig)
    opt: BOKEMaximizerConfig = field(default_factory=BOKEMaximizerConfig)
    noise_std: float = 0.0
    fitted: _Hyper | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"gp-ucb(l={self.gp.lengthscale:g})"

    def propose(
        self, X: torch.Tensor, y: torch.Tensor, gen: torch.Generator, space: Space | None = None
    ) -> Proposal:
        model, self.fitted = _fit_gp(self.gp, X, y, self.noise_std, self.fitted)
        sb = self.gp.sqrt_beta

        def ucb(Z: torch.Tensor) -> torch.Tensor:
            mu, var = model.posterior(Z)
            return mu + sb * var.sqrt()

        x, val = maximize_acquisition(autograd(ucb), X, model.y_train, gen, self.opt, space=space)
        return Proposal(x=x, step="ucb", acq_value=val)


@dataclass
class GPEIMethod:
    """GP expected improvement over the best standardised observation (extra, not in v1)."""

    gp: GPBaselineConfig = field(default_factory=GPBaselineConfig)
    opt: BOKEMaximizerConfig = field(default_factory=BOKEMaximizerConfig)
    noise_std: float = 0.0
    fitted: _Hyper | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"gp-ei(l={self.gp.lengthscale:g})"

    def propose(
        self, X: torch.Tensor, y: torch.Tensor, gen: torch.Generator, space: Space | None = None
    ) -> Proposal:
        model, self.fitted = _fit_gp(self.gp, X, y, self.noise_std, self.fitted)
        assert model.y_train is not None
        best = float(model.y_train.max()) + self.gp.xi

        def ei(Z: torch.Tensor) -> torch.Tensor:
            mu, var = model.posterior(Z)
            s = var.sqrt()
            z = (mu - best) / s
            cdf = 0.5 * torch.special.erfc(-z / _SQRT2)
            pdf = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
            return (mu - best) * cdf + s * pdf

        x, val = maximize_acquisition(autograd(ei), X, model.y_train, gen, self.opt, space=space)
        return Proposal(x=x, step="ei", acq_value=val)


@dataclass
class RandomSearch:
    """Uniform random queries on the unit cube (extra baseline, not in v1)."""

    name: str = "random"

    def propose(
        self, X: torch.Tensor, y: torch.Tensor, gen: torch.Generator, space: Space | None = None
    ) -> Proposal:
        x = torch.rand(X.shape[1], generator=gen, dtype=torch.float64)
        return Proposal(x=x if space is None else space.snap(x), step="random")
