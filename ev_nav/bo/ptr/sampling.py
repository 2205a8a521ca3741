"""Joint posterior samples on the whole ``X × Ω`` grid (BPT-TS, BQO-TS, Monte-Carlo checks).

A naive joint draw factorises the ``|X||Ω| × |X||Ω|`` posterior covariance: O((|X||Ω|)³) time,
and for a smooth RBF kernel on a 2500-point grid the matrix is numerically singular anyway.
Instead:

1. **Prior draw.** For a kernel that factorises over ``x`` and ``w`` (the squared exponential
   does: ``k = σ² k_x k_w``) the prior covariance on a product grid is ``K_x ⊗ K_w``, so
   ``F_x Z F_wᵀ`` with ``F = U diag(√max(s, 0))`` from the eigen-decompositions of the two small
   factor matrices is an exact draw (negative round-off eigenvalues clipped). Other kernels
   (Matérn on the newsvendor problem) use random Fourier features.
2. **Matheron's rule.** ``f_post = f_prior + K(grid, Z_n)(K_nn + σ²I)⁻¹(y − f_prior(Z_n) − ε)``,
   ``ε ~ N(0, σ²I)``, is exactly distributed as the posterior; with the cached
   ``A = L⁻¹K(Z_n, grid)`` of :class:`~ev_nav.bo.ptr.grid.GridPosterior` it costs O(n N) per draw.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ev_nav.bo.ptr.grid import DTYPE, GridKernel, GridPosterior, ProductGrid
from ev_nav.gp.exact import RandomFourierFeatures, stationary_kernel


def _psd_factor(K: Tensor) -> Tensor:
    """``F`` with ``F Fᵀ = K`` up to clipping negative eigenvalues (symmetric eigh)."""
    s, U = torch.linalg.eigh(0.5 * (K + K.T))
    return U * torch.sqrt(s.clamp_min(0.0))


class KroneckerPriorSampler:
    """Exact prior draws of a squared-exponential GP on a product grid.

    Parameters
    ----------
    grid
        Product grid; the first ``d_x`` lengthscales belong to ``x``, the rest to ``w``.
    kernel
        Must be ``kind="se"`` (the only separable kind).
    """

    def __init__(self, grid: ProductGrid, kernel: GridKernel) -> None:
        if kernel.kind != "se":
            raise ValueError("the Kronecker sampler needs a separable ('se') kernel")
        d = grid.d_x + grid.w_points.shape[1]
        ls = kernel.ls_tensor(d)
        X = torch.as_tensor(grid.x_points, dtype=DTYPE)
        W = torch.as_tensor(grid.w_points, dtype=DTYPE)
        self.Fx = _psd_factor(stationary_kernel("se", X, X, ls[: grid.d_x], 1.0))
        self.Fw = _psd_factor(stationary_kernel("se", W, W, ls[grid.d_x :], kernel.outputscale))
        self.n_x, self.n_w = grid.n_x, grid.n_w

    def __call__(self, n_samples: int, generator: torch.Generator) -> Tensor:
        """``n_samples`` prior draws, shape ``(n_samples, n_x * n_w)`` (flat grid order)."""
        Z = torch.randn(n_samples, self.n_x, self.n_w, dtype=DTYPE, generator=generator)
        return (self.Fx @ Z @ self.Fw.T).reshape(n_samples, -1)


class RFFPriorSampler:
    """Approximate prior draws via random Fourier features (any stationary kernel).

    A fresh feature map is drawn per call, so successive draws are independent.
    """

    def __init__(self, grid: ProductGrid, kernel: GridKernel, n_features: int = 1000) -> None:
        self.grid, self.kernel, self.n_features = grid, kernel, n_features

    def __call__(self, n_samples: int, generator: torch.Generator) -> Tensor:
        Zg = self.grid.Z
        rff = RandomFourierFeatures(
            self.kernel.kind,
            self.kernel.ls_tensor(Zg.shape[1]),
            self.kernel.outputscale,
            Zg.shape[1],
            self.n_features,
            generator,
        )
        Phi = rff(Zg)  # (N, F)
        theta = torch.randn(self.n_features, n_samples, dtype=DTYPE, generator=generator)
        return (Phi @ theta).T


def make_prior_sampler(
    grid: ProductGrid, kernel: GridKernel, n_features: int = 1000
) -> KroneckerPriorSampler | RFFPriorSampler:
    """Exact Kronecker sampler for ``"se"`` kernels, random Fourier features otherwise."""
    if kernel.kind == "se":
        return KroneckerPriorSampler(grid, kernel)
    return RFFPriorSampler(grid, kernel, n_features)


def posterior_samples(
    gp: GridPosterior,
    prior_sampler: KroneckerPriorSampler | RFFPriorSampler,
    n_samples: int,
    generator: torch.Generator,
) -> np.ndarray:
    """Joint posterior draws of ``f`` on the grid by Matheron's rule.

    Returns
    -------
    numpy.ndarray
        Shape ``(n_samples, n_x, n_w)``.
    """
    f0 = prior_sampler(n_samples, generator)  # (s, N)
    if gp.n > 0:
        idx = torch.as_tensor(gp.obs_index)
        y = torch.as_tensor(gp.y, dtype=DTYPE)
        eps = math.sqrt(gp.noise_var) * torch.randn(
            n_samples, gp.n, dtype=DTYPE, generator=generator
        )
        resid = (y - gp.prior_mean) - f0[:, idx] - eps  # (s, n)
        f0 = f0 + gp.condition_correction(resid.T)
    f = f0 + gp.prior_mean
    return f.numpy().reshape(n_samples, gp.grid.n_x, gp.grid.n_w)
