"""Multi-start acquisition maximisation shared by every method of the BOKE study.

The paper maximises every acquisition with "a multi-start strategy integrated with L-BFGS-B" and
reports no budget. To keep timings comparable all methods here use the *same* routine
(spec §4 [REC]):

1. score ``N_c = n_per_dim * min(d, 4)`` (at most ``max_candidates``) uniform random points in
   ``[0, 1]^d`` plus the ``n_best`` best observed points;
2. start L-BFGS-B (box ``[0, 1]^d``, ``maxiter``, analytic gradients supplied by the method) from
   the top ``n_starts`` of them;
3. return the best point seen.

The starts are optimised *jointly* as one ``n_starts * d`` problem whose objective is the sum of
the per-start objectives: the problems are separable, so the gradient is exact per block and one
scipy call replaces ``n_starts`` Python-level loops (the same trick BoTorch uses).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize

from ev_nav.errors import ConfigError

#: ``obj(Z (n, d), with_grad) -> (values (n,), grads (n, d) or None)``, to be *maximised*.
Objective = Callable[[torch.Tensor, bool], tuple[torch.Tensor, torch.Tensor | None]]


@dataclass
class AcqOptConfig:
    """Budget of the acquisition optimiser (identical for all methods).

    Attributes
    ----------
    n_per_dim : int
        Random candidates per input dimension (capped at 4 dimensions and ``max_candidates``).
    max_candidates : int
    n_best : int
        Best observed points added to the candidate set.
    n_starts : int
        L-BFGS-B starting points (top candidates).
    maxiter : int
        L-BFGS-B iterations; ``0`` means "best random candidate only" (no local optimisation).
    """

    n_per_dim: int = 1000
    max_candidates: int = 4000
    n_best: int = 5
    n_starts: int = 5
    maxiter: int = 50

    def __post_init__(self) -> None:
        if self.n_per_dim < 1 or self.max_candidates < 1 or self.n_starts < 1:
            raise ConfigError("acquisition optimiser needs >= 1 candidate and >= 1 start")
        if self.n_best < 0 or self.maxiter < 0:
            raise ConfigError("n_best and maxiter must be >= 0")

    def n_candidates(self, d: int) -> int:
        """Number of random candidates scored for a ``d``-dimensional problem."""
        return min(self.n_per_dim * min(d, 4), self.max_candidates)


def _finite(v: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isnan(v), torch.full_like(v, -torch.inf), v)


def maximize_multistart(
    obj: Objective,
    X: torch.Tensor,
    ys: torch.Tensor | None,
    gen: torch.Generator,
    opt: AcqOptConfig,
    candidates: torch.Tensor | None = None,
) -> tuple[torch.Tensor, float]:
    """Maximise ``obj`` over ``[0, 1]^d``.

    Parameters
    ----------
    obj : Objective
        Vectorised objective with optional analytic gradient.
    X : Tensor (t, d)
        Observed inputs (unit cube); the ``opt.n_best`` of them with the highest ``ys`` join the
        candidates.
    ys : Tensor (t,) or None
        Responses ranking the observed points (``None``: do not add observed points).
    gen : torch.Generator
        Source of the random candidates.
    candidates : Tensor (n, d) or None
        Use these instead of fresh uniform candidates.

    Returns
    -------
    x : Tensor (d,)
        The best point found.
    value : float
        ``obj`` at ``x``.
    """
    d = X.shape[1]
    if candidates is None:
        candidates = torch.rand(opt.n_candidates(d), d, generator=gen, dtype=torch.float64)
    if ys is not None and opt.n_best > 0 and X.shape[0] > 0:
        k = min(opt.n_best, X.shape[0])
        candidates = torch.cat([candidates, X[torch.topk(ys, k).indices]])
    vals, _ = obj(candidates, False)
    vals = _finite(vals)
    order = torch.argsort(vals, descending=True)
    best_x, best_v = candidates[order[0]].clone(), float(vals[order[0]])
    if opt.maxiter == 0:
        return best_x, best_v

    starts = candidates[order[: min(opt.n_starts, candidates.shape[0])]]
    n_s = starts.shape[0]

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        Z = torch.from_numpy(z.reshape(n_s, d))
        v, g = obj(Z, True)
        if not torch.isfinite(v).all() or g is None or not torch.isfinite(g).all():
            # L-BFGS-B backtracks on a huge value; it never sees NaN
            return 1e300, np.zeros_like(z)
        return -float(v.sum()), -g.reshape(-1).numpy().copy()

    res = minimize(
        fun,
        starts.reshape(-1).numpy().copy(),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, 1.0)] * (n_s * d),
        options={"maxiter": opt.maxiter},
    )
    Zf = torch.from_numpy(np.clip(res.x, 0.0, 1.0).reshape(n_s, d))
    vf, _ = obj(Zf, False)
    vf = _finite(vf)
    i = int(torch.argmax(vf))
    if float(vf[i]) > best_v:
        best_x, best_v = Zf[i].clone(), float(vf[i])
    return best_x, best_v
