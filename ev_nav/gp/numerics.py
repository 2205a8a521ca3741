"""Numerics shared by the GP models: Cholesky with a jitter ladder, Matérn-5/2, random features.

One home for what :mod:`ev_nav.gp.svgp`, :mod:`ev_nav.gp.exact` and
:mod:`ev_nav.gp.groundtruth` (and the kernels of :mod:`ev_nav.gp.kernels`) compute alike.

Kernel-parameter convention (every class and function of ``ev_nav.gp``):

* ``lengthscale`` — in input units, a scalar or one per input dimension (ARD);
* ``outputscale`` — the prior *variance* ``k(x, x)`` (units of ``f`` squared), never a standard
  deviation; ``noise_var`` likewise a variance;
* kernels here are correlations (``k(x, x) = 1``) unless an ``outputscale`` is passed.

Cholesky factorisations come in two back ends on purpose: torch (differentiable, used by the
models) and SciPy's LAPACK for NumPy arrays — the ground-truth draws of the experiments were
made with the latter, and the two libraries' factors differ in the last bits. torch is imported
by the functions that use it, so the NumPy half serves torch-free readers (route planning).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar

import numpy as np
from numpy.typing import NDArray

from ev_nav.errors import EvNavError, InvalidObservation
from ev_nav.gp.lapack import potrf

if TYPE_CHECKING:
    from torch import Tensor

#: Relative diagonal jitters tried in turn when a factorisation fails (``0`` first: none).
JITTER_LADDER: tuple[float, ...] = (0.0, 1e-10, 1e-8, 1e-6, 1e-4)
_NOT_PD = "the covariance matrix is not positive definite even with jitter"

ArrayT = TypeVar("ArrayT", "Tensor", NDArray[np.float64])


# ------------------------------------------------------------------------------ Cholesky
def cholesky_jitter(
    A: Tensor,
    scale: float | None = None,
    *,
    ladder: tuple[float, ...] = JITTER_LADDER,
    symmetrize: bool = False,
    error: type[EvNavError] = InvalidObservation,
    message: str = _NOT_PD,
) -> tuple[Tensor, float]:
    """Lower Cholesky factor of ``A + jitter I`` with the smallest jitter of the ladder that works.

    Parameters
    ----------
    A
        Symmetric positive (semi-)definite matrix ``(n, n)``.
    scale
        What the relative jitters multiply (units of ``A``); default the mean absolute diagonal
        (``1`` if that is zero).
    ladder
        Relative jitters tried in order.
    symmetrize
        Factor ``(A + Aᵀ) / 2`` (removes round-off asymmetry of a computed covariance).
    error, message
        Raised when every rung fails.

    Returns
    -------
    (Tensor, float)
        The factor ``L`` and the absolute jitter added (units of ``A``).
    """
    import torch

    if symmetrize:
        A = 0.5 * (A + A.T)
    if scale is None:
        scale = float(A.diagonal().abs().mean().detach()) or 1.0
    eye = torch.eye(A.shape[-1], dtype=A.dtype)
    for rel in ladder:
        jitter = rel * scale
        L, info = torch.linalg.cholesky_ex(A + jitter * eye if jitter else A)
        if int(info) == 0:
            return L, jitter
    raise error(message)


def cholesky_jitter_np(
    A: NDArray[np.float64],
    scale: float | None = None,
    *,
    ladder: tuple[float, ...] = JITTER_LADDER,
    symmetrize: bool = False,
    error: type[EvNavError] = InvalidObservation,
    message: str = _NOT_PD,
) -> tuple[NDArray[np.float64], float]:
    """:func:`cholesky_jitter` for NumPy arrays, factorised by the LAPACK SciPy is built with
    (same arguments; :mod:`ev_nav.gp.lapack`, so the factor is what ``scipy.linalg.cholesky``
    gives)."""
    if symmetrize:
        A = 0.5 * (A + A.T)
    if scale is None:
        scale = float(np.abs(np.diagonal(A)).mean()) or 1.0
    for rel in ladder:
        jitter = rel * scale
        M = np.array(A + jitter * np.eye(A.shape[0]) if jitter else A, order="F", copy=True)
        if potrf(M) == 0:  # LAPACK's dpotrf, other threads running meanwhile (gp.lapack)
            # zero the upper triangle in place: the factor stays column-major, as SciPy's is
            # (products with it then sum in the same order, to the bit)
            np.copyto(M, 0.0, where=~np.tri(M.shape[0], dtype=bool))
            return M, jitter
    raise error(message)


# ------------------------------------------------------------------------------ Matérn-5/2
def matern52(x1: Tensor, x2: Tensor, lengthscale: Tensor) -> Tensor:
    """Matérn-5/2 correlation with ARD lengthscales, ``(1 + √5 r + 5r²/3) exp(-√5 r)``.

    ``r`` is the Euclidean distance after dividing every input by its lengthscale.
    """
    import torch

    r = torch.cdist(x1 / lengthscale, x2 / lengthscale)
    if not (torch.is_grad_enabled() and (r.requires_grad or lengthscale.requires_grad)):
        # no autograd: the same formula in place, three passes fewer over an (n, M) array
        s = r.mul_(math.sqrt(5.0))
        e = torch.neg(s).exp_()
        return s.div(3.0).add_(1.0).mul_(s).add_(1.0).mul_(e)
    s5r = math.sqrt(5.0) * r
    return (1.0 + s5r + s5r * s5r / 3.0) * torch.exp(-s5r)


def matern52_parts(x: Tensor, lengthscale: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`matern52` of x with itself with what its lengthscale derivatives need: the
    correlation k, the factor ``q = (5/3)(1 + √5 r) e^{−√5 r}`` with
    ``∂k/∂log ℓ_d = q (u_{id} − u_{jd})²``, and the scaled inputs ``u = x/ℓ``
    (:func:`ev_nav.gp.fitting.fit_objective`'s closed-form gradient)."""
    import torch

    u = x / lengthscale
    s = math.sqrt(5.0) * torch.cdist(u, u)
    e = torch.exp(-s)
    return (1.0 + s + s * s / 3.0) * e, (5.0 / 3.0) * (1.0 + s) * e, u


# ------------------------------------------------------------------------------ random features
def student_t_frequencies(z: ArrayT, chi2: ArrayT, dof: float, lengthscale: object) -> ArrayT:
    """Spectral frequencies of a Matérn-ν kernel: ``z √(2ν / χ²) / ℓ``.

    The Matérn-ν spectral density is a multivariate Student-t with ``2ν`` degrees of freedom
    scaled by ``1/ℓ``: ``z ~ N(0, I)`` (one column per frequency) and ``χ² ~ χ²(2ν)`` (one per
    frequency) are drawn by the caller, with its own generator (NumPy or torch).
    """
    if isinstance(z, np.ndarray):
        return z * np.sqrt(dof / chi2) / lengthscale  # type: ignore[operator]
    import torch

    return z * torch.sqrt(dof / chi2) / lengthscale  # type: ignore[operator, return-value]


def fourier_features(proj: ArrayT, outputscale: float, phases: ArrayT | None = None) -> ArrayT:
    """Random Fourier features from projections ``proj = x Ω`` (``(n, D)``).

    With ``phases`` ``b ~ U(0, 2π)``: ``√(2 s / D) cos(x Ω + b)`` (``D`` features); without:
    ``√(s / D) [cos(x Ω), sin(x Ω)]`` (``2D`` features, a lower-variance estimator). Either way
    ``φ(x) φ(x')ᵀ ≈ s k(x, x')`` for the kernel whose spectral density drew ``Ω``.
    """
    n_freq = proj.shape[-1]
    if isinstance(proj, np.ndarray):
        if phases is not None:
            return np.sqrt(2.0 * outputscale / n_freq) * np.cos(proj + phases)
        return math.sqrt(outputscale / n_freq) * np.concatenate([np.cos(proj), np.sin(proj)], -1)
    import torch

    if phases is not None:
        return math.sqrt(2.0 * outputscale / n_freq) * torch.cos(proj + phases)
    return math.sqrt(outputscale / n_freq) * torch.cat([torch.cos(proj), torch.sin(proj)], dim=-1)
