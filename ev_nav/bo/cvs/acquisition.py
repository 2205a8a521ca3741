"""Acquisition pieces of the cost-varying-subset family: confidence bounds and the expectation
over the random coordinates, maximised per control set with the package's maximiser.

For a partial control set ``I`` the learner maximises ``x^I ↦ (1/N) Σ_s u([x^I, S_s^{-I}])``,
the Monte Carlo average over the rows ``S_s`` of a matrix drawn once per run (common random
numbers); the full set has no expectation. Both go through :func:`ev_nav.bo.core.maximize`
with the official code's start rule (best warm-up point + fresh random starts) and autograd
gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ev_nav.bo.core.maximize import Maximum, autograd, maximize
from ev_nav.bo.core.space import Space
from ev_nav.bo.cvs.problems import mc_expectation
from ev_nav.errors import ConfigError
from ev_nav.gp.exact import ExactGP

BatchFn = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class CVSMaximizerConfig:
    """Budget of the acquisition maximiser of the cost-varying-subset family.

    Attributes
    ----------
    n_warmup
        Uniform random points evaluated first (per partial control set).
    n_warmup_full
        Warm-up points when there is no expectation (full set, Thompson samples).
    n_starts
        L-BFGS-B starts: the best warm-up point plus ``n_starts - 1`` uniform random points.
    maxiter
        L-BFGS-B iteration cap (shared by the batched starts).
    chunk_rows
        Largest number of objective rows evaluated at once during warm-up (memory cap).
    """

    n_warmup: int = 100
    n_warmup_full: int = 10_000
    n_starts: int = 5
    maxiter: int = 200
    chunk_rows: int = 1 << 15

    def __post_init__(self) -> None:
        if self.n_warmup < 1 or self.n_warmup_full < 1 or self.n_starts < 0 or self.maxiter < 1:
            raise ConfigError("maximizer counts must be positive (n_starts may be 0)")


def confidence_bound(model: ExactGP, X: Tensor, beta: float) -> Tensor:
    """``μ(x) + β σ(x)`` of the latent posterior (``β < 0`` gives a lower bound)."""
    mu, var = model.posterior(X)
    return mu + beta * torch.sqrt(var)


def _maximize(
    h: BatchFn,
    dim: int,
    generator: torch.Generator,
    n_warmup: int,
    config: CVSMaximizerConfig,
    space: Space | None,
    rows_per_point: int = 1,
) -> Maximum:
    """The family's recipe; with a mixed ``space`` the objective is read at snapped points
    (:meth:`~ev_nav.bo.core.space.Space.discrete_objective`) and the maximiser is snapped."""
    objective = autograd(h)
    if space is not None:
        objective = space.discrete_objective(objective)
    best = maximize(
        objective,
        dim,
        generator,
        n_raw=n_warmup,
        n_starts=config.n_starts,
        maxiter=config.maxiter,
        start_rule="best+random",
        rows_per_point=rows_per_point,
        chunk_rows=config.chunk_rows,
    )
    return best if space is None else Maximum(space.snap(best.x), best.value)


def maximize_box(
    h: BatchFn,
    dim: int,
    generator: torch.Generator,
    n_warmup: int,
    config: CVSMaximizerConfig,
    space: Space | None = None,
) -> Maximum:
    """Maximise a batched function of ``dim`` free coordinates with this family's recipe
    (``space``: the coordinates' inputs when some are discrete)."""
    return _maximize(h, dim, generator, n_warmup, config, space)


def maximize_over_set(
    fn: BatchFn,
    dim: int,
    control: Sequence[int],
    S: Tensor,
    generator: torch.Generator,
    config: CVSMaximizerConfig,
    space: Space | None = None,
) -> Maximum:
    """``max_{x^i} E fn([x^i, X^{-i}])`` for one control set (full set: no expectation);
    ``space``: the set's inputs when some are discrete (:meth:`Problem.control_space`)."""
    control = tuple(control)
    if len(control) == dim:
        return _maximize(fn, dim, generator, config.n_warmup_full, config, space)
    return _maximize(
        lambda x_ctrl: mc_expectation(fn, dim, control, x_ctrl, S),
        len(control),
        generator,
        config.n_warmup,
        config,
        space,
        rows_per_point=S.shape[0],
    )
