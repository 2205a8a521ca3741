"""The one acquisition maximiser of the package: multi-start L-BFGS-B on the unit box.

1. Score ``n_raw`` raw points (uniform in ``[0, 1]^d`` unless given, plus any ``extra_points``)
   without gradients.
2. Choose starts by one of two rules:

   * ``"top"`` — the ``n_starts`` best raw points (BoTorch's ``optimize_acqf`` heuristic);
   * ``"best+random"`` — the best raw point plus ``n_starts - 1`` fresh uniform points (the
     official code of the cost-varying-subset papers).

3. Run L-BFGS-B (box ``[0, 1]^d``) from all starts **jointly**, as one ``n_starts · d`` problem
   whose objective is the sum of the per-start objectives: the starts are independent, so the
   gradient is exact per block and one SciPy call replaces a Python loop over starts (BoTorch's
   batched trick).
4. Return the best point seen (raw or optimised).

Gradients come from the objective: analytic ones through the :data:`Objective` protocol, or
autograd for any differentiable batched torch function through :func:`autograd`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Literal, NamedTuple

import numpy as np
import torch
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits
from torch import Tensor

from ev_nav.errors import ConfigError

DTYPE = torch.float64
#: ``objective(Z (n, d), with_grad) -> (values (n,), gradients (n, d) or None)``, maximised.
Objective = Callable[[Tensor, bool], tuple[Tensor, Tensor | None]]
#: A batched differentiable function ``(n, d) -> (n,)``.
BatchFn = Callable[[Tensor], Tensor]
StartRule = Literal["top", "best+random"]

_SINGLE: contextvars.ContextVar[bool] = contextvars.ContextVar("bo_single_threaded", default=False)


@contextlib.contextmanager
def blas_single_threaded() -> Iterator[None]:
    """Limit BLAS and OpenMP pools (NumPy, SciPy) to one thread inside the block.

    SciPy's L-BFGS-B calls BLAS thousands of times per run on 5–30-dimensional problems; with a
    multi-threaded pool each call pays a thread hand-off, which on a loaded 2-core machine made
    runs ~10x slower in wall time for the same CPU time.
    """
    if _SINGLE.get():
        yield
        return
    with threadpool_limits(limits=1):
        token = _SINGLE.set(True)
        try:
            yield
        finally:
            _SINGLE.reset(token)


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Run torch (intra-op) and BLAS on one thread inside the block, then restore.

    BO loops work on small matrices in long sequences of tiny ops; thread hand-offs cost far
    more than they save (measured: autograd backward 16 ms vs < 1 ms per call with 11 runnable
    processes), and results must not depend on the thread count.
    """
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with blas_single_threaded():
            yield
    finally:
        torch.set_num_threads(prev)


class Maximum(NamedTuple):
    """A maximiser ``x`` (unit-box coordinates) and the objective value there."""

    x: Tensor
    value: float


def autograd(fn: BatchFn) -> Objective:
    """Wrap a differentiable batched function into the :data:`Objective` protocol."""

    def objective(Z: Tensor, with_grad: bool) -> tuple[Tensor, Tensor | None]:
        if not with_grad:
            with torch.no_grad():
                return fn(Z), None
        Zg = Z.detach().clone().requires_grad_(True)
        v = fn(Zg)
        (g,) = torch.autograd.grad(v.sum(), Zg)
        return v.detach(), g

    return objective


def _finite(v: Tensor) -> Tensor:
    return torch.where(torch.isfinite(v), v, torch.full_like(v, -torch.inf))


def maximize(
    objective: Objective,
    dim: int,
    generator: torch.Generator,
    *,
    n_raw: int,
    n_starts: int,
    maxiter: int,
    start_rule: StartRule = "top",
    raw_points: Tensor | None = None,
    extra_points: Tensor | None = None,
    rows_per_point: int = 1,
    chunk_rows: int = 1 << 15,
) -> Maximum:
    """Maximise ``objective`` over ``[0, 1]^dim``.

    Parameters
    ----------
    objective
        Batched objective with optional gradient (see :data:`Objective`, :func:`autograd`).
    dim
        Number of free coordinates.
    generator
        Source of the raw points and of the ``"best+random"`` starts.
    n_raw
        Uniform raw points scored first (ignored when ``raw_points`` is given).
    n_starts
        L-BFGS-B starts; ``0`` (or ``maxiter = 0``) returns the best raw point.
    maxiter
        L-BFGS-B iteration cap, shared by the batched starts.
    start_rule
        ``"top"`` or ``"best+random"`` (module docstring).
    raw_points
        Use these ``(n, dim)`` points instead of fresh uniform ones.
    extra_points
        Points appended to the raw points (e.g. the best observed inputs).
    rows_per_point, chunk_rows
        The objective expands one point to ``rows_per_point`` rows (a Monte Carlo average):
        raw points are scored in chunks of at most ``chunk_rows`` rows (a memory cap).

    Returns
    -------
    Maximum
        The best point ``(dim,)`` (inside the box) and its objective value.
    """
    if n_raw < 1 or n_starts < 0 or maxiter < 0:
        raise ConfigError("the maximiser needs n_raw >= 1, n_starts >= 0 and maxiter >= 0")
    if start_rule not in ("top", "best+random"):
        raise ConfigError(f"unknown start rule {start_rule!r}; use 'top' or 'best+random'")
    W = (
        raw_points
        if raw_points is not None
        else torch.rand(n_raw, dim, dtype=DTYPE, generator=generator)
    )
    if extra_points is not None and extra_points.shape[0] > 0:
        W = torch.cat([W, extra_points])
    step = max(1, chunk_rows // max(rows_per_point, 1))
    vals = _finite(
        torch.cat([objective(W[i : i + step], False)[0] for i in range(0, len(W), step)])
    )
    if start_rule == "top":
        order = torch.argsort(vals, descending=True)
        j = int(order[0])
    else:
        j = int(torch.argmax(vals))
    best_x, best_v = W[j].clone(), float(vals[j])
    if n_starts == 0 or maxiter == 0:
        return Maximum(best_x, best_v)
    if start_rule == "top":
        starts = W[order[: min(n_starts, W.shape[0])]]
    else:
        fresh = torch.rand(n_starts - 1, dim, dtype=DTYPE, generator=generator)
        starts = torch.cat([W[j : j + 1], fresh])
    n_s = starts.shape[0]

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        v, g = objective(torch.from_numpy(z.reshape(n_s, dim)), True)
        if not torch.isfinite(v).all() or g is None or not torch.isfinite(g).all():
            # L-BFGS-B backtracks on a huge value; it must never see NaN
            return 1e300, np.zeros_like(z)
        return -float(v.sum()), -g.reshape(-1).numpy().copy()

    with blas_single_threaded():
        res = minimize(
            fun,
            starts.reshape(-1).numpy().copy(),
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, 1.0)] * (n_s * dim),
            options={"maxiter": maxiter},
        )
    Zf = torch.from_numpy(np.clip(res.x, 0.0, 1.0).reshape(n_s, dim))
    vf = _finite(objective(Zf, False)[0])
    k = int(torch.argmax(vf))
    if float(vf[k]) > best_v:
        best_x, best_v = Zf[k].clone(), float(vf[k])
    return Maximum(best_x, best_v)
