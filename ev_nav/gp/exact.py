"""Exact Gaussian-process building blocks for BO over continuous inputs.

Everything here is float64 torch, vectorised over test points and differentiable with respect to
them, so acquisition functions built on top can be maximised with autograd L-BFGS-B.

Contents
--------
* :func:`stationary_kernel` — squared-exponential and Matérn-5/2 / -3/2 kernels with ARD
  lengthscales (Matérn-5/2 and the jittered Cholesky are the shared ones of
  :mod:`ev_nav.gp.numerics`, whose parameter convention every kernel here follows).
* :class:`ExactGP` — conditioning on data with a cached (jitter-safe) Cholesky factor, O(n^2)
  rank-extension updates, latent posterior marginals / covariances, joint posterior samples and
  type-II maximum-likelihood hyperparameters.
* :class:`RandomFourierFeatures` and :func:`rff_posterior_sample` — spectral feature maps whose
  Bayesian linear regression gives cheap, differentiable approximate posterior function draws
  (Thompson sampling on continuous domains).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from ev_nav.errors import ConfigError, InvalidObservation
from ev_nav.gp.numerics import (
    cholesky_jitter,
    fourier_features,
    matern52,
    student_t_frequencies,
)

KernelKind = Literal["se", "matern52", "matern32"]
#: ``((ls_lo, ls_hi), (outputscale_lo, outputscale_hi), (noise_lo, noise_hi))``, natural units.
HyperBounds = tuple[tuple[float, float], tuple[float, float], tuple[float, float]]
KERNEL_KINDS: tuple[str, ...] = ("se", "matern52", "matern32")
DTYPE = torch.float64


def _check_kind(kind: str) -> None:
    if kind not in KERNEL_KINDS:
        raise ConfigError(f"unknown kernel kind {kind!r}; use one of {', '.join(KERNEL_KINDS)}")


def _as_tensor(value: float | Tensor | object) -> Tensor:
    return torch.as_tensor(value, dtype=DTYPE)


def _scaled_sqdist(X1: Tensor, X2: Tensor, lengthscale: Tensor) -> Tensor:
    """Squared distances between rows after dividing every input by its lengthscale.

    Uses the ``|a|^2 + |b|^2 - 2ab`` expansion: memory is O(n1 n2), not O(n1 n2 d), which matters
    for Monte Carlo acquisitions with ~10^5 test rows.
    """
    A = X1 / lengthscale
    B = X2 / lengthscale
    sq = (A * A).sum(-1)[:, None] + (B * B).sum(-1)[None, :] - 2.0 * (A @ B.T)
    return sq.clamp_min(0.0)


def stationary_kernel(
    kind: KernelKind,
    X1: Tensor,
    X2: Tensor,
    lengthscale: float | Tensor,
    outputscale: float | Tensor,
) -> Tensor:
    """Stationary kernel matrix ``k(X1, X2)``.

    Parameters
    ----------
    kind
        ``"se"`` (squared exponential), ``"matern52"`` or ``"matern32"``.
    X1, X2
        Inputs of shape ``(n1, d)`` and ``(n2, d)``.
    lengthscale
        Scalar or ARD vector of shape ``(d,)``, in input units.
    outputscale
        Prior variance ``k(x, x)``.

    Returns
    -------
    Tensor
        Kernel matrix of shape ``(n1, n2)``.
    """
    _check_kind(kind)
    ls = _as_tensor(lengthscale)
    s = _as_tensor(outputscale)
    if kind == "matern52":
        return s * matern52(X1.to(DTYPE), X2.to(DTYPE), ls)
    r2 = _scaled_sqdist(X1.to(DTYPE), X2.to(DTYPE), ls)
    if kind == "se":
        return s * torch.exp(-0.5 * r2)
    # clamp_min has zero gradient below the floor, which keeps d sqrt(r2) finite at r = 0.
    r = torch.sqrt(r2.clamp_min(1e-30))
    a = math.sqrt(3.0) * r
    return s * (1.0 + a) * torch.exp(-a)


def _robust_cholesky(K: Tensor, scale: float) -> tuple[Tensor, float]:
    """Cholesky factor of ``K``, adding the smallest diagonal jitter that makes it succeed."""
    return cholesky_jitter(
        K,
        scale,
        message="the GP covariance is not positive definite even with jitter; remove duplicate "
        "inputs or increase the noise variance",
    )


class ExactGP:
    """Exact GP regression with a fixed constant prior mean and a stationary kernel.

    Parameters
    ----------
    kind
        Kernel family (see :func:`stationary_kernel`).
    lengthscale
        Scalar or ARD vector ``(d,)``.
    outputscale
        Prior variance of the latent function.
    noise_var
        Gaussian observation-noise variance (the regulariser λ of the GP-UCB literature).
    mean
        Constant prior mean (not learned).

    Notes
    -----
    Posterior quantities are those of the *latent* function ``f`` (no noise added to the
    variance), which is what UCB/LCB rules and Thompson sampling need.
    """

    def __init__(
        self,
        kind: KernelKind = "se",
        lengthscale: float | Tensor = 1.0,
        outputscale: float = 1.0,
        noise_var: float = 1e-4,
        mean: float = 0.0,
    ) -> None:
        _check_kind(kind)
        if float(outputscale) <= 0.0 or float(noise_var) < 0.0:
            raise ConfigError("outputscale must be > 0 and noise_var >= 0")
        if bool((_as_tensor(lengthscale) <= 0).any()):
            raise ConfigError("lengthscales must be positive")
        self.kind: KernelKind = kind
        self.lengthscale = _as_tensor(lengthscale).clone()
        self.outputscale = float(outputscale)
        self.noise_var = float(noise_var)
        self.mean = float(mean)
        self.X_train: Tensor | None = None
        self.y_train: Tensor | None = None
        self._L: Tensor | None = None
        self._alpha: Tensor | None = None
        self._jitter = 0.0

    # ---------------------------------------------------------------- conditioning
    @property
    def n_train(self) -> int:
        """Number of conditioning observations."""
        return 0 if self.X_train is None else int(self.X_train.shape[0])

    def kernel(self, X1: Tensor, X2: Tensor) -> Tensor:
        """Prior covariance ``k(X1, X2)`` with this model's hyperparameters."""
        return stationary_kernel(self.kind, X1, X2, self.lengthscale, self.outputscale)

    @staticmethod
    def _validate(X: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        X = torch.as_tensor(X, dtype=DTYPE)
        y = torch.as_tensor(y, dtype=DTYPE).reshape(-1)
        if X.ndim != 2 or X.shape[0] != y.shape[0]:
            raise InvalidObservation(
                f"X must be (n, d) and y (n,); got {tuple(X.shape)} and {tuple(y.shape)}"
            )
        if not (torch.isfinite(X).all() and torch.isfinite(y).all()):
            raise InvalidObservation("X and y must be finite; drop NaN/inf observations first")
        return X, y

    def fit(self, X: Tensor, y: Tensor) -> ExactGP:
        """Condition on ``(X, y)``; caches the Cholesky factor of ``K + noise I``."""
        X, y = self._validate(X, y)
        K = self.kernel(X, X) + self.noise_var * torch.eye(X.shape[0], dtype=DTYPE)
        self._L, self._jitter = _robust_cholesky(K, self.outputscale)
        self.X_train, self.y_train = X, y
        self._refresh_alpha()
        return self

    def _refresh_alpha(self) -> None:
        assert self._L is not None and self.y_train is not None
        r = (self.y_train - self.mean).unsqueeze(-1)
        self._alpha = torch.cholesky_solve(r, self._L).squeeze(-1)

    def update(self, x_new: Tensor, y_new: Tensor) -> ExactGP:
        """Add observations by extending the Cholesky factor blockwise (O(n^2 k) for k rows).

        Equivalent to :meth:`fit` on the concatenated data (same jitter), without refactorising.
        """
        x_new, y_new = self._validate(torch.atleast_2d(torch.as_tensor(x_new)), y_new)
        if self._L is None:
            return self.fit(x_new, y_new)
        assert self.X_train is not None and self.y_train is not None
        if x_new.shape[1] != self.X_train.shape[1]:
            raise InvalidObservation("new inputs have a different dimension than the training data")
        K_on = self.kernel(self.X_train, x_new)
        K_nn = self.kernel(x_new, x_new)
        K_nn = K_nn + (self.noise_var + self._jitter) * torch.eye(x_new.shape[0], dtype=DTYPE)
        B = torch.linalg.solve_triangular(self._L, K_on, upper=False)
        S = K_nn - B.T @ B
        Lc, info = torch.linalg.cholesky_ex(S)
        if int(info) != 0:  # numerically singular extension: fall back to a full refit
            return self.fit(torch.cat([self.X_train, x_new]), torch.cat([self.y_train, y_new]))
        n, k = self._L.shape[0], x_new.shape[0]
        L = torch.zeros(n + k, n + k, dtype=DTYPE)
        L[:n, :n] = self._L
        L[n:, :n] = B.T
        L[n:, n:] = Lc
        self._L = L
        self.X_train = torch.cat([self.X_train, x_new])
        self.y_train = torch.cat([self.y_train, y_new])
        self._refresh_alpha()
        return self

    # ---------------------------------------------------------------- predictions
    def posterior(self, Xs: Tensor) -> tuple[Tensor, Tensor]:
        """Latent posterior mean and variance at ``Xs`` (``(m, d)`` → two ``(m,)`` tensors)."""
        Xs = Xs.to(DTYPE)
        if self._L is None:
            m = Xs.shape[0]
            return (
                torch.full((m,), self.mean, dtype=DTYPE) + 0.0 * Xs.sum(-1),
                torch.full((m,), self.outputscale, dtype=DTYPE) + 0.0 * Xs.sum(-1),
            )
        assert self.X_train is not None and self._alpha is not None
        Ks = self.kernel(Xs, self.X_train)
        mu = self.mean + Ks @ self._alpha
        V = torch.linalg.solve_triangular(self._L, Ks.T, upper=False)
        var = (self.outputscale - (V * V).sum(0)).clamp_min(1e-12)
        return mu, var

    def posterior_cov(self, Xs: Tensor) -> tuple[Tensor, Tensor]:
        """Latent posterior mean ``(m,)`` and full covariance ``(m, m)`` at ``Xs``."""
        Xs = Xs.to(DTYPE)
        Kss = self.kernel(Xs, Xs)
        if self._L is None:
            return torch.full((Xs.shape[0],), self.mean, dtype=DTYPE), Kss
        assert self.X_train is not None and self._alpha is not None
        Ks = self.kernel(Xs, self.X_train)
        mu = self.mean + Ks @ self._alpha
        V = torch.linalg.solve_triangular(self._L, Ks.T, upper=False)
        cov = Kss - V.T @ V
        return mu, 0.5 * (cov + cov.T)

    def sample(self, Xs: Tensor, n_samples: int, generator: torch.Generator) -> Tensor:
        """Joint posterior draws of the latent function at ``Xs``: shape ``(n_samples, m)``."""
        mu, cov = self.posterior_cov(Xs)
        L, _ = _robust_cholesky(cov, self.outputscale)
        z = torch.randn(n_samples, mu.shape[0], dtype=DTYPE, generator=generator)
        return mu + z @ L.T

    # ---------------------------------------------------------------- hyperparameters
    def log_marginal_likelihood(self, X: Tensor, y: Tensor) -> float:
        """Log evidence ``log p(y | X)`` under the current hyperparameters (nats)."""
        X, y = self._validate(X, y)
        with torch.no_grad():
            return float(
                _neg_lml(
                    self.kind,
                    X,
                    y - self.mean,
                    self.lengthscale.log(),
                    torch.tensor(math.log(self.outputscale), dtype=DTYPE),
                    torch.tensor(math.log(max(self.noise_var, 1e-12)), dtype=DTYPE),
                ).neg()
            )

    def fit_hyperparameters(
        self,
        X: Tensor,
        y: Tensor,
        *,
        n_restarts: int = 3,
        generator: torch.Generator | None = None,
        max_iter: int = 100,
        min_noise_var: float = 1e-6,
        bounds: HyperBounds | None = None,
    ) -> ExactGP:
        """Maximise the log marginal likelihood over ARD lengthscales, outputscale and noise.

        Optimises log-parameters with ``torch.optim.LBFGS`` (autograd gradients) from the current
        values and ``n_restarts - 1`` random initialisations, keeps the best, then calls
        :meth:`fit`. The prior mean stays fixed.

        ``bounds`` (``((ls_lo, ls_hi), (s_lo, s_hi), (noise_lo, noise_hi))``, natural units)
        keeps every parameter inside its interval through a sigmoid reparametrisation of its
        logarithm: with few points the unconstrained likelihood can prefer degenerate values
        (a lengthscale and outputscale growing together without end on a smooth objective).
        """
        X, y = self._validate(X, y)
        d = X.shape[1]
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        yc = y - self.mean
        ls0 = self.lengthscale.expand(d) if self.lengthscale.ndim == 0 else self.lengthscale
        starts = [(ls0.log(), math.log(self.outputscale), math.log(max(self.noise_var, 1e-6)))]
        for _ in range(max(n_restarts, 1) - 1):
            u = torch.rand(d + 2, dtype=DTYPE, generator=gen)
            starts.append(
                (
                    math.log(0.05) + u[:d] * math.log(40.0),  # lengthscales in [0.05, 2]
                    float(math.log(0.1) + u[d] * math.log(100.0)),  # outputscale in [0.1, 10]
                    float(math.log(1e-5) + u[d + 1] * math.log(1e4)),  # noise in [1e-5, 0.1]
                )
            )
        log_min_noise = math.log(min_noise_var)
        if bounds is not None:
            (ls_lo, ls_hi), (s_lo, s_hi), (n_lo, n_hi) = bounds
            if not (0 < ls_lo < ls_hi and 0 < s_lo < s_hi and 0 < n_lo < n_hi):
                raise ConfigError("hyperparameter bounds must be positive increasing pairs")
            lo = torch.tensor([math.log(ls_lo)] * d + [math.log(s_lo), math.log(n_lo)], dtype=DTYPE)
            hi = torch.tensor([math.log(ls_hi)] * d + [math.log(s_hi), math.log(n_hi)], dtype=DTYPE)

        def unpack(q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            """Log lengthscales, log outputscale, log noise from the free parameters ``q``."""
            if bounds is not None:
                p = lo + (hi - lo) * torch.sigmoid(q)
                return p[:d], p[d], p[d + 1]
            log_noise = log_min_noise + torch.nn.functional.softplus(q[d + 1] - log_min_noise)
            return q[:d], q[d], log_noise

        best: tuple[float, Tensor, Tensor, Tensor] | None = None
        for log_ls0, log_s0, log_n0 in starts:
            p0 = torch.cat([log_ls0.detach().clone(), torch.tensor([log_s0, log_n0], dtype=DTYPE)])
            if bounds is not None:  # the free parameter is the logit of the position in the box
                frac = ((p0 - lo) / (hi - lo)).clamp(1e-3, 1 - 1e-3)
                p0 = torch.log(frac / (1 - frac))
            p = p0.requires_grad_(True)
            opt = torch.optim.LBFGS([p], max_iter=max_iter, line_search_fn="strong_wolfe")

            def closure(p: Tensor = p, opt: torch.optim.LBFGS = opt) -> Tensor:
                opt.zero_grad()
                loss = _neg_lml(self.kind, X, yc, *unpack(p))
                loss.backward()
                return loss

            try:
                opt.step(closure)
            except InvalidObservation:
                continue
            with torch.no_grad():
                log_ls, log_s, log_noise = unpack(p)
                try:
                    loss = float(_neg_lml(self.kind, X, yc, log_ls, log_s, log_noise))
                except InvalidObservation:
                    continue
            if math.isfinite(loss) and (best is None or loss < best[0]):
                best = (loss, log_ls.detach().exp(), log_s.detach().exp(), log_noise.exp())
        if best is None:
            raise InvalidObservation("hyperparameter fitting failed from every start")
        _, ls, s, noise = best
        self.lengthscale = ls
        self.outputscale = float(s)
        self.noise_var = float(noise)
        return self.fit(X, y)


def _neg_lml(
    kind: KernelKind, X: Tensor, yc: Tensor, log_ls: Tensor, log_s: Tensor, log_noise: Tensor
) -> Tensor:
    """Negative log marginal likelihood of centred targets ``yc`` (differentiable)."""
    n = X.shape[0]
    K = stationary_kernel(kind, X, X, log_ls.exp(), log_s.exp())
    K = K + (log_noise.exp() + 1e-10) * torch.eye(n, dtype=DTYPE)
    L, info = torch.linalg.cholesky_ex(K)
    if int(info) != 0:
        raise InvalidObservation("covariance not positive definite during hyperparameter fitting")
    alpha = torch.cholesky_solve(yc.unsqueeze(-1), L).squeeze(-1)
    return 0.5 * (yc @ alpha) + torch.log(torch.diagonal(L)).sum() + 0.5 * n * math.log(2 * math.pi)


class RandomFourierFeatures:
    """Random Fourier features ``phi`` with ``phi(X) phi(X')^T ≈ k(X, X')``.

    Frequencies are drawn from the kernel's spectral density: Gaussian for ``"se"`` and
    multivariate Student-t with ``2ν`` degrees of freedom for Matérn-ν, both scaled by the ARD
    lengthscales. Each frequency gives a cosine and a sine feature, so ``n_features`` must be even
    (``n_features = 2048`` is "1024 frequencies" in the cost-varying BO papers).

    Parameters
    ----------
    kind, lengthscale, outputscale
        Kernel to approximate.
    dim
        Input dimension ``d``.
    n_features
        Total number of features (twice the number of frequencies).
    generator
        Source of the random frequencies.
    """

    def __init__(
        self,
        kind: KernelKind,
        lengthscale: float | Tensor,
        outputscale: float,
        dim: int,
        n_features: int,
        generator: torch.Generator,
    ) -> None:
        _check_kind(kind)
        if n_features < 2 or n_features % 2:
            raise ConfigError("n_features must be a positive even number (cos and sin pairs)")
        self.kind = kind
        self.dim = int(dim)
        self.n_features = int(n_features)
        self.outputscale = float(outputscale)
        n_freq = n_features // 2
        ls = (
            _as_tensor(lengthscale).expand(dim)
            if _as_tensor(lengthscale).ndim == 0
            else (_as_tensor(lengthscale))
        )
        z = torch.randn(dim, n_freq, dtype=DTYPE, generator=generator)
        if kind == "se":
            self.W = z / ls.reshape(-1, 1)  # (d, n_freq), angular frequencies in 1 / input units
        else:
            dof = 5 if kind == "matern52" else 3  # 2ν, an integer: chi-square as a sum of squares
            chi2 = (torch.randn(dof, n_freq, dtype=DTYPE, generator=generator) ** 2).sum(0)
            self.W = student_t_frequencies(z, chi2, dof, ls.reshape(-1, 1))

    def __call__(self, X: Tensor) -> Tensor:
        """Feature matrix of shape ``(n, n_features)`` (cosine and sine pairs)."""
        return fourier_features(X.to(DTYPE) @ self.W, self.outputscale)


def rff_posterior_sample(
    rff: RandomFourierFeatures,
    X: Tensor,
    y: Tensor,
    noise_var: float,
    generator: torch.Generator,
    mean: float = 0.0,
) -> Callable[[Tensor], Tensor]:
    """One approximate posterior function draw ``f̃`` via Bayesian linear regression on features.

    With prior weights ``θ ~ N(0, I)`` the posterior draw is computed by Matheron's rule in the
    dual (n × n) form, ``θ = z + Φᵀ(ΦΦᵀ + s² I)⁻¹(y − Φz − s e)``, which avoids factorising the
    (n_features × n_features) posterior covariance.

    Returns
    -------
    Callable
        ``f̃(Xs) -> (m,)``, cheap and differentiable in ``Xs``.
    """
    X = torch.as_tensor(X, dtype=DTYPE)
    y = torch.as_tensor(y, dtype=DTYPE).reshape(-1)
    F = rff.n_features
    z = torch.randn(F, dtype=DTYPE, generator=generator)
    theta = z
    if X.shape[0] > 0:
        Phi = rff(X)
        e = torch.randn(X.shape[0], dtype=DTYPE, generator=generator)
        A = Phi @ Phi.T + noise_var * torch.eye(X.shape[0], dtype=DTYPE)
        L, _ = _robust_cholesky(A, rff.outputscale)
        r = (y - mean) - Phi @ z - math.sqrt(noise_var) * e
        theta = z + Phi.T @ torch.cholesky_solve(r.unsqueeze(-1), L).squeeze(-1)
    theta = theta.detach()

    def f_tilde(Xs: Tensor) -> Tensor:
        return mean + rff(Xs) @ theta

    return f_tilde
