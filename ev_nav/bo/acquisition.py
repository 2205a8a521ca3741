"""Acquisition building blocks: confidence bounds, Monte Carlo expectations, a box maximiser.

The maximiser follows the recipe of the cost-varying BO papers — random warm-up points, then
L-BFGS-B from several starts — but with exact autograd gradients instead of finite differences,
and with all starts optimised in one batched SciPy call (the objective is a sum of independent
per-start terms, so its gradient separates).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize
from torch import Tensor

from ev_nav.bo.problems import mc_expectation
from ev_nav.errors import ConfigError
from ev_nav.gp.exact import ExactGP

try:  # SciPy's L-BFGS-B calls BLAS on tiny arrays; threaded OpenBLAS makes it ~5x slower
    from threadpoolctl import threadpool_limits as _threadpool_limits
except ImportError:  # pragma: no cover - optional
    _threadpool_limits = None

_SINGLE: contextvars.ContextVar[bool] = contextvars.ContextVar("_single_threaded", default=False)

DTYPE = torch.float64
BatchFn = Callable[[Tensor], Tensor]


@contextlib.contextmanager
def single_threaded():
    """Run torch (intra-op) and BLAS on one thread inside the block, then restore.

    The BO loops work on small matrices (hundreds of rows) in long sequences of tiny ops; on a
    shared 2-core machine thread hand-offs cost far more than they save (measured: autograd
    backward 16 ms vs < 1 ms per call with 11 runnable processes).
    """
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _blas_limiter():
            token = _SINGLE.set(True)
            try:
                yield
            finally:
                _SINGLE.reset(token)
    finally:
        torch.set_num_threads(prev)


def _blas_limiter():
    """Limit BLAS to one thread unless an enclosing :func:`single_threaded` already did."""
    if _threadpool_limits is None or _SINGLE.get():
        return contextlib.nullcontext()
    return _threadpool_limits(limits=1, user_api="blas")


@dataclass(frozen=True)
class MaximizerConfig:
    """Settings of :func:`maximize`.

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


def expected_fn(fn: BatchFn, dim: int, control: Sequence[int], S: Tensor) -> BatchFn:
    """``x^i ↦ (1/N) Σ_s fn([x^i, S_s^{-i}])`` as a batched, differentiable function."""
    control = tuple(control)
    return lambda x_ctrl: mc_expectation(fn, dim, control, x_ctrl, S)


def maximize(
    h: BatchFn,
    dim: int,
    generator: torch.Generator,
    *,
    n_warmup: int,
    n_starts: int,
    maxiter: int = 200,
    rows_per_point: int = 1,
    chunk_rows: int = 1 << 15,
) -> tuple[float, Tensor]:
    """Maximise a batched function over ``[0, 1]^dim``.

    Parameters
    ----------
    h
        Maps ``(b, dim)`` to ``(b,)``; must be differentiable for the L-BFGS-B phase.
    dim
        Number of free coordinates.
    generator
        Source of the warm-up and start points.
    n_warmup, n_starts, maxiter
        See :class:`MaximizerConfig`.
    rows_per_point
        Objective rows one point expands to (the MC sample count), to size warm-up chunks.
    chunk_rows
        Memory cap on rows per warm-up call.

    Returns
    -------
    (float, Tensor)
        Best value found and its maximiser ``(dim,)`` (clipped to the box).
    """
    W = torch.rand(n_warmup, dim, dtype=DTYPE, generator=generator)
    step = max(1, chunk_rows // max(rows_per_point, 1))
    with torch.no_grad():
        hw = torch.cat([h(W[i : i + step]) for i in range(0, n_warmup, step)])
    hw = torch.where(torch.isfinite(hw), hw, torch.full_like(hw, -torch.inf))
    j = int(torch.argmax(hw))
    best_val, best_x = float(hw[j]), W[j].clone()
    if n_starts <= 0:
        return best_val, best_x
    X0 = torch.cat([W[j : j + 1], torch.rand(n_starts - 1, dim, dtype=DTYPE, generator=generator)])

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        x = torch.from_numpy(z).reshape(n_starts, dim).requires_grad_(True)
        val = h(x)
        loss = -val.sum()
        if not torch.isfinite(loss):
            return 1e30, np.zeros_like(z)
        (g,) = torch.autograd.grad(loss, x)
        return float(loss.detach()), g.reshape(-1).numpy().copy()

    with _blas_limiter():
        res = minimize(
            fun,
            X0.reshape(-1).numpy(),
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, 1.0)] * (n_starts * dim),
            options={"maxiter": maxiter},
        )
    Xf = torch.from_numpy(np.clip(res.x, 0.0, 1.0)).reshape(n_starts, dim)
    with torch.no_grad():
        hf = h(Xf)
    hf = torch.where(torch.isfinite(hf), hf, torch.full_like(hf, -torch.inf))
    k = int(torch.argmax(hf))
    if float(hf[k]) > best_val:
        best_val, best_x = float(hf[k]), Xf[k].clone()
    return best_val, best_x


def maximize_over_set(
    fn: BatchFn,
    dim: int,
    control: Sequence[int],
    S: Tensor,
    generator: torch.Generator,
    config: MaximizerConfig,
) -> tuple[float, Tensor]:
    """``max_{x^i} E fn([x^i, X^{-i}])`` for one control set (full set: no expectation)."""
    control = tuple(control)
    if len(control) == dim:
        return maximize(
            fn,
            dim,
            generator,
            n_warmup=config.n_warmup_full,
            n_starts=config.n_starts,
            maxiter=config.maxiter,
            chunk_rows=config.chunk_rows,
        )
    return maximize(
        expected_fn(fn, dim, control, S),
        len(control),
        generator,
        n_warmup=config.n_warmup,
        n_starts=config.n_starts,
        maxiter=config.maxiter,
        rows_per_point=S.shape[0],
        chunk_rows=config.chunk_rows,
    )
