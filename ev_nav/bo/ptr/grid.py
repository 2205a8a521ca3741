"""Exact GP posterior on a fixed product grid ``X × Ω``, updated one observation at a time.

Every PTR method needs the latent posterior mean and variance at *all* ``|X||Ω|`` grid points
after every query, and all queries are grid points. Keeping ``A = L⁻¹ K(Z_n, grid)`` (``L`` the
Cholesky factor of ``K_nn + σ²I``) makes an update one new row of ``A``:

    a = A[:, j]   (= L⁻¹ k(Z_n, z_j)),   d = sqrt(k(z_j, z_j) + σ² − aᵀa),
    A_new_row = (k(z_j, grid) − aᵀA) / d,

after which the mean and variance change by ``row · c_new`` and ``−row²``: O(n |X||Ω|) per step
instead of re-solving. The kernel itself is :func:`ev_nav.gp.exact.stationary_kernel` (the
shared GP core); this module only adds the grid cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ev_nav.errors import ConfigError, InvalidObservation
from ev_nav.gp.exact import KERNEL_KINDS, KernelKind, stationary_kernel

DTYPE = torch.float64


@dataclass(frozen=True)
class GridKernel:
    """A stationary kernel on the joint input ``(x, w)``.

    Attributes
    ----------
    kind
        ``"se"``, ``"matern52"`` or ``"matern32"``.
    lengthscale
        Scalar or ARD tuple of length ``d_x + d_w`` (GP input units).
    outputscale
        Prior variance ``σ_ker²`` (units of f squared).
    """

    kind: KernelKind = "se"
    lengthscale: float | tuple[float, ...] = 1.0
    outputscale: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KERNEL_KINDS:
            raise ConfigError(f"unknown kernel {self.kind!r}; use one of {KERNEL_KINDS}")
        if np.any(np.asarray(self.lengthscale) <= 0) or self.outputscale <= 0:
            raise ConfigError("kernel lengthscales and outputscale must be positive")

    def ls_tensor(self, dim: int) -> Tensor:
        """Lengthscale as a ``(dim,)`` tensor."""
        ls = torch.as_tensor(self.lengthscale, dtype=DTYPE)
        return ls.expand(dim).clone() if ls.ndim == 0 else ls

    def __call__(self, A: Tensor, B: Tensor) -> Tensor:
        """Kernel matrix ``k(A, B)``."""
        return stationary_kernel(self.kind, A, B, self.ls_tensor(A.shape[1]), self.outputscale)


@dataclass(frozen=True)
class ProductGrid:
    """The candidate set ``X`` times the environment grid ``Ω``.

    Flat index of ``(i_x, i_w)`` is ``i_x * n_w + i_w`` (row-major, matching ``(n_x, n_w)``
    arrays).
    """

    x_points: np.ndarray
    w_points: np.ndarray
    Z: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        xp = np.atleast_2d(np.asarray(self.x_points, dtype=np.float64).T).T
        wp = np.atleast_2d(np.asarray(self.w_points, dtype=np.float64).T).T
        object.__setattr__(self, "x_points", xp)
        object.__setattr__(self, "w_points", wp)
        zx = np.repeat(xp, wp.shape[0], axis=0)
        zw = np.tile(wp, (xp.shape[0], 1))
        object.__setattr__(self, "Z", torch.as_tensor(np.hstack([zx, zw]), dtype=DTYPE))

    @property
    def n_x(self) -> int:
        return int(self.x_points.shape[0])

    @property
    def n_w(self) -> int:
        return int(self.w_points.shape[0])

    @property
    def d_x(self) -> int:
        return int(self.x_points.shape[1])

    def flat(self, ix: int, iw: int) -> int:
        """Flat index of grid point ``(i_x, i_w)``."""
        return int(ix) * self.n_w + int(iw)


class GridPosterior:
    """Exact GP posterior (zero or constant prior mean) on every point of a product grid.

    Parameters
    ----------
    grid
        The product grid.
    kernel
        Prior covariance.
    noise_var
        Observation-noise variance σ² (units of f squared).
    prior_mean
        Constant prior mean.
    capacity
        Initial number of observation slots (grows by doubling).
    """

    def __init__(
        self,
        grid: ProductGrid,
        kernel: GridKernel,
        noise_var: float,
        prior_mean: float = 0.0,
        capacity: int = 64,
    ) -> None:
        if noise_var < 0:
            raise ConfigError(f"noise variance must be >= 0, got {noise_var}")
        self.grid = grid
        self.kernel = kernel
        self.noise_var = float(noise_var)
        self.prior_mean = float(prior_mean)
        N = grid.n_x * grid.n_w
        self._N = N
        self._A = torch.zeros(capacity, N, dtype=DTYPE)
        self._L = torch.zeros(capacity, capacity, dtype=DTYPE)
        self._c = torch.zeros(capacity, dtype=DTYPE)
        self._mean = torch.full((N,), self.prior_mean, dtype=DTYPE)
        self._var = torch.full((N,), kernel.outputscale, dtype=DTYPE)
        self.obs_index: list[int] = []
        self.y: list[float] = []
        # Floor on the Schur complement: keeps a repeated noise-free query from dividing by zero.
        self._d2_floor = max(1e-12 * kernel.outputscale, 1e-300)

    # ------------------------------------------------------------------ updates
    @property
    def n(self) -> int:
        """Number of observations conditioned on."""
        return len(self.obs_index)

    def _grow(self) -> None:
        cap = self._A.shape[0] * 2
        A = torch.zeros(cap, self._N, dtype=DTYPE)
        A[: self.n] = self._A[: self.n]
        L = torch.zeros(cap, cap, dtype=DTYPE)
        L[: self.n, : self.n] = self._L[: self.n, : self.n]
        c = torch.zeros(cap, dtype=DTYPE)
        c[: self.n] = self._c[: self.n]
        self._A, self._L, self._c = A, L, c

    def add(self, ix: int, iw: int, y: float) -> None:
        """Condition on one observation ``y = f(x_ix, w_iw) + ε``."""
        if not np.isfinite(y):
            raise InvalidObservation(f"observation at ({ix}, {iw}) is not finite: {y}")
        j = self.grid.flat(ix, iw)
        n = self.n
        if n == self._A.shape[0]:
            self._grow()
        Z = self.grid.Z
        k_row = self.kernel(Z[j : j + 1], Z)[0]
        a = self._A[:n, j]
        d2 = float(k_row[j]) + self.noise_var - float(a @ a)
        d = float(np.sqrt(max(d2, self._d2_floor)))
        row = (k_row - a @ self._A[:n]) / d
        c_new = (float(y) - self.prior_mean - float(a @ self._c[:n])) / d
        self._A[n] = row
        self._L[n, :n] = a
        self._L[n, n] = d
        self._c[n] = c_new
        self._mean += row * c_new
        self._var -= row * row
        self.obs_index.append(j)
        self.y.append(float(y))

    def refit(self, kernel: GridKernel, noise_var: float, prior_mean: float | None = None) -> None:
        """Replace the hyperparameters and re-condition on the same data (batch, O(n²N))."""
        idx, ys = list(self.obs_index), list(self.y)
        self.__init__(  # type: ignore[misc]
            self.grid,
            kernel,
            noise_var,
            self.prior_mean if prior_mean is None else prior_mean,
            capacity=max(64, len(idx) + 1),
        )
        for j, y in zip(idx, ys, strict=True):
            self.add(j // self.grid.n_w, j % self.grid.n_w, y)

    # ------------------------------------------------------------------ predictions
    @property
    def mean(self) -> np.ndarray:
        """Latent posterior mean, shape ``(n_x, n_w)`` (a view: copy before mutating)."""
        return self._mean.numpy().reshape(self.grid.n_x, self.grid.n_w)

    @property
    def var(self) -> np.ndarray:
        """Latent posterior variance, shape ``(n_x, n_w)``, floored at zero."""
        return np.maximum(self._var.numpy(), 0.0).reshape(self.grid.n_x, self.grid.n_w)

    @property
    def A(self) -> Tensor:
        """``L⁻¹ K(Z_n, grid)``, shape ``(n, N)``."""
        return self._A[: self.n]

    @property
    def L(self) -> Tensor:
        """Cholesky factor of ``K_nn + σ²I``, shape ``(n, n)``."""
        return self._L[: self.n, : self.n]

    def condition_correction(self, residual: Tensor) -> Tensor:
        """``K(grid, Z_n)(K_nn + σ²I)⁻¹ r`` for residuals ``r`` of shape ``(n, s)`` → ``(s, N)``.

        This is the Matheron update of a prior sample (see :mod:`ev_nav.bo.ptr.sampling`).
        """
        v = torch.linalg.solve_triangular(self.L, residual, upper=False)
        return (self.A.T @ v).T

    def expectation_moments(self, p_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of ``g(x) = Σ_w p(w) f(x, w)`` (the BQO baselines).

        Uses ``σ_g²(x) = pᵀK_ΩΩ p − |A_x p|²`` with ``A_x`` the columns of ``A`` at ``(x, Ω)``.
        The prior term is computed at ``x_0``; it is the same for every ``x`` because the kernel
        is stationary.
        """
        p = torch.as_tensor(p_w, dtype=DTYPE)
        nx, nw = self.grid.n_x, self.grid.n_w
        Zx0 = self.grid.Z[:nw]
        prior = float(p @ self.kernel(Zx0, Zx0) @ p)
        mean_g = self.mean @ p_w
        if self.n == 0:
            return mean_g, np.full(nx, prior)
        B = self.A.reshape(self.n, nx, nw) @ p  # (n, n_x)
        var_g = prior - (B * B).sum(0)
        return mean_g, np.maximum(var_g.numpy(), 0.0)

    def covariance_rows(self, ix: int) -> np.ndarray:
        """Posterior covariance of ``f(x_ix, ·)`` over Ω, shape ``(n_w, n_w)`` (for tests)."""
        nw = self.grid.n_w
        sl = slice(ix * nw, (ix + 1) * nw)
        Zs = self.grid.Z[sl]
        prior = self.kernel(Zs, Zs)
        if self.n == 0:
            return prior.numpy()
        As = self.A[:, sl]
        return (prior - As.T @ As).numpy()
