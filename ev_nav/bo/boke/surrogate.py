"""BOKE: Bayesian optimisation by kernel regression and density-based exploration.

Zhu et al. (arXiv:2502.06178, v1) replace the Gaussian-process surrogate of GP-UCB by

* the Nadaraya–Watson (NW) kernel-regression mean ``m_t(x) = sum_i k_i y_i / sum_i k_i``,
* the un-normalised kernel density ``W_t(x) = sum_i k(x, x_i; h)``, and
* the density-based exploration term ``sigma_hat_t(x) = W_t(x) ** -0.5``,

combined in the IKR-UCB criterion ``a_t(x) = m_t(x) + sqrt(beta_t) * sigma_hat_t(x)``. Nothing is
factorised, so evaluating the surrogate at ``m`` candidates costs ``O(m t d)``: linear in the
number of observations ``t`` where the GP's triangular solves cost ``O(m t^2)`` plus an
``O(t^3)`` Cholesky per iteration.

Everything here works in the unit cube ``[0, 1]^d`` with the isotropic Gaussian kernel
``k = exp(-|x - x'|^2 / (2 h^2))`` and in the **log domain**: the NW weights are a softmax of the
log-kernel values and ``log W`` is a log-sum-exp. Far from the data ``W`` underflows double
precision (``W ~ exp(-r^2 / 2h^2)``), which the naive formulas turn into ``0/0``; the log-domain
form stays finite and reproduces the paper's nearest-neighbour fallback exactly.

This module holds the surrogate maths (with analytic gradients), the ``beta_t`` and bandwidth
schedules and the acquisition values; the methods built on them are in
:mod:`ev_nav.bo.boke.methods`, the GP baselines in :mod:`ev_nav.bo.boke.baselines`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from ev_nav.errors import ConfigError, InvalidObservation

BandwidthRule = Literal["scott", "silverman", "fixed"]
BetaRule = Literal["general", "finite"]

#: The bandwidth constant (scipy's Scott factor for uniform data on [0, 1]; the paper reports none).
DEFAULT_C_H: float = 1.0 / math.sqrt(12.0)
#: Guard added inside ``log(m - y_min + eps)`` so the log is finite at the worst observed value.
_LOG_EPS: float = 1e-12
#: Candidate rows per chunk in the ``m x t`` kernel computations (bounds peak memory to ~32 MB).
_CHUNK_ELEMS: int = 1 << 22


# --------------------------------------------------------------------------------------------
# schedules
# --------------------------------------------------------------------------------------------
def scott_bandwidth(t: int, d: int, c_h: float = DEFAULT_C_H) -> float:
    """Scott's rule on the unit cube, ``h_t = c_h * t^(-1/(d+4))``.

    Parameters
    ----------
    t : int
        Number of observations already made (initial design included), ``t >= 1``.
    d : int
        Input dimension.
    c_h : float
        Proportionality constant (unit-cube units); the paper does not report it; the
        default ``1/sqrt(12)`` matches scipy's Scott factor applied to uniform data.
    """
    _check_schedule_args(t, d, c_h)
    return c_h * t ** (-1.0 / (d + 4))


def silverman_bandwidth(t: int, d: int, c_h: float = DEFAULT_C_H) -> float:
    """Silverman's rule, ``h_t = c_h * (t (d + 2) / 4)^(-1/(d+4))`` (equals Scott for d = 2)."""
    _check_schedule_args(t, d, c_h)
    return c_h * (t * (d + 2) / 4.0) ** (-1.0 / (d + 4))


def bandwidth(rule: BandwidthRule, t: int, d: int, c_h: float = DEFAULT_C_H) -> float:
    """Bandwidth for ``t`` observations under ``rule`` (``"fixed"`` returns ``c_h`` itself)."""
    if rule == "scott":
        return scott_bandwidth(t, d, c_h)
    if rule == "silverman":
        return silverman_bandwidth(t, d, c_h)
    if rule == "fixed":
        _check_schedule_args(max(t, 1), d, c_h)
        return c_h
    raise ConfigError(f"unknown bandwidth rule {rule!r}; use 'scott', 'silverman' or 'fixed'")


def beta_schedule(
    t: int,
    varsigma: float = 0.3,
    delta: float = 0.1,
    m_psi: float = 1.0,
    rule: BetaRule = "general",
) -> float:
    """Exploration weight ``beta_t`` of IKR-UCB.

    ``"general"`` is Thm 4.13 (used in the paper's experiments),
    ``beta_t = 2 varsigma^2 M_psi log(2 pi^2 t^2 / (3 delta))``; ``"finite"`` is Thm 4.10,
    ``beta_t = 4 varsigma^2 M_psi log t``.

    Parameters
    ----------
    t : int
        Number of observations already made, ``t >= 1``.
    varsigma : float
        Sub-Gaussian noise parameter in units of the (standardised) response; ``0`` gives pure
        exploitation.
    delta : float
        Failure probability in ``(0, 1)``.
    m_psi : float
        Upper bound of the kernel profile (1 for the Gaussian kernel).
    """
    if t < 1:
        raise ConfigError(f"beta_t needs t >= 1 observations, got t={t}")
    if varsigma < 0 or m_psi <= 0:
        raise ConfigError("beta_t needs varsigma >= 0 and m_psi > 0")
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"beta_t needs delta in (0, 1), got {delta}")
    if rule == "general":
        return 2.0 * varsigma**2 * m_psi * math.log(2.0 * math.pi**2 * t**2 / (3.0 * delta))
    if rule == "finite":
        return 4.0 * varsigma**2 * m_psi * math.log(t)
    raise ConfigError(f"unknown beta rule {rule!r}; use 'general' or 'finite'")


def _check_schedule_args(t: int, d: int, c_h: float) -> None:
    if t < 1 or d < 1:
        raise ConfigError(f"bandwidth schedule needs t >= 1 and d >= 1, got t={t}, d={d}")
    if not c_h > 0:
        raise ConfigError(f"bandwidth constant c_h must be positive, got {c_h}")


# --------------------------------------------------------------------------------------------
# surrogate maths
# --------------------------------------------------------------------------------------------
def _sqdist(Xc: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances ``(m, t)`` via one matrix product (clamped at 0)."""
    d2 = (Xc * Xc).sum(1, keepdim=True) + (X * X).sum(1)[None, :] - 2.0 * (Xc @ X.T)
    return d2.clamp_min_(0.0)


@dataclass
class KRPosterior:
    """NW mean and log kernel density at a batch of points (optionally with gradients).

    Attributes
    ----------
    mean : Tensor (m,)
        NW mean ``m_t(x)``.
    log_density : Tensor (m,)
        ``log W_t(x)``.
    grad_mean, grad_log_density : Tensor (m, d) or None
        Gradients w.r.t. ``x`` when requested.
    """

    mean: torch.Tensor
    log_density: torch.Tensor
    grad_mean: torch.Tensor | None = None
    grad_log_density: torch.Tensor | None = None

    @property
    def sigma_hat(self) -> torch.Tensor:
        """Density-based exploration term ``W^{-1/2}`` (may be ``inf`` far from the data)."""
        return torch.exp(-0.5 * self.log_density)


def kr_posterior(
    Xc: torch.Tensor,
    X: torch.Tensor,
    y: torch.Tensor,
    h: float,
    *,
    with_grad: bool = False,
    numpy_exp: bool = True,
) -> KRPosterior:
    """NW mean, log density and (optionally) their gradients at candidates ``Xc``.

    Cost ``O(m t d)`` time, computed in candidate chunks so memory stays bounded.

    Parameters
    ----------
    Xc : Tensor (m, d)
        Points to evaluate.
    X : Tensor (t, d)
        Observed inputs (``t >= 1``).
    y : Tensor (t,)
        Observed responses.
    h : float
        Gaussian-kernel bandwidth (same units as ``X``).
    with_grad : bool
        Also return ``grad m`` and ``grad log W`` (analytic, docs/bo-boke.md "Numerics").
    numpy_exp : bool
        Exponentiate the ``m x t`` kernel matrix with NumPy in place (shared memory). On the
        project's torch 2.13 CPU build ``torch.exp`` on float64 is ~15x slower than NumPy's SIMD
        ``exp``, and this exp is the dominant cost; ``False`` keeps everything in torch.
    """
    if X.shape[0] == 0:
        raise InvalidObservation("the kernel-regression surrogate needs at least one observation")
    inv2h2 = 0.5 / (h * h)
    chunk = max(1, _CHUNK_ELEMS // max(1, X.shape[0]))
    means, logws, gms, glws = [], [], [], []
    for s in range(0, Xc.shape[0], chunk):
        xc = Xc[s : s + chunk]
        logk = _sqdist(xc, X).mul_(-inv2h2)
        # Shift by the row maximum before exponentiating (one exp pass instead of logsumexp's
        # plus softmax's): the nearest point gets k = 1, so the row sum is >= 1 and never 0/0.
        mx = logk.amax(dim=1)
        # Terms below e^-700 are < 1e-300 of the largest (= 1): flushing them avoids slow
        # subnormal arithmetic and changes no result beyond rounding.
        k = logk.sub_(mx[:, None]).clamp_(min=-700.0)
        if numpy_exp and not k.requires_grad:
            np.exp(k.numpy(), out=k.numpy())
        else:
            k = k.exp_()
        s = k.sum(1)
        m = (k @ y) / s
        logw = mx + torch.log(s)
        means.append(m)
        logws.append(logw)
        if with_grad:
            w = k.div_(s[:, None])  # the NW (softmax) weights
            # grad log W = -(x - sum_i w_i x_i) / h^2 ;  grad m = sum_i w_i (y_i - m) x_i / h^2
            glws.append(-(xc - w @ X) * (2.0 * inv2h2))
            gms.append(((w * (y[None, :] - m[:, None])) @ X) * (2.0 * inv2h2))
    return KRPosterior(
        mean=torch.cat(means),
        log_density=torch.cat(logws),
        grad_mean=torch.cat(gms) if with_grad else None,
        grad_log_density=torch.cat(glws) if with_grad else None,
    )


def log_density_at_data(X: torch.Tensor, h: float) -> torch.Tensor:
    """``log W_t(x_j)`` for every observed point ``x_j`` (``O(t^2 d)``, used by KR-UCB)."""
    inv2h2 = 0.5 / (h * h)
    return torch.logsumexp(_sqdist(X, X).mul_(-inv2h2), dim=1)


def ikr_ucb(post: KRPosterior, beta: float) -> torch.Tensor:
    """Raw IKR-UCB values ``m + sqrt(beta) W^{-1/2}`` (overflows to ``inf`` far from the data)."""
    return post.mean + math.sqrt(beta) * post.sigma_hat


def log_ikr_ucb(
    post: KRPosterior, beta: float, y_min: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Monotone log transform of IKR-UCB and its gradient.

    ``g(x) = logaddexp(log(m - y_min + eps), 0.5 log beta - 0.5 log W)`` equals
    ``log(a_t(x) - y_min + eps)``, so it has the same argmax as ``a_t`` but is finite everywhere
    (``m >= y_min`` because NW is a convex combination of the observations).
    """
    a = torch.log((post.mean - y_min).clamp_min(0.0) + _LOG_EPS)
    if beta > 0:
        b = 0.5 * math.log(beta) - 0.5 * post.log_density
        g = torch.logaddexp(a, b)
    else:
        b = None
        g = a
    if post.grad_mean is None or post.grad_log_density is None:
        return g, None
    grad_a = post.grad_mean / ((post.mean - y_min).clamp_min(0.0) + _LOG_EPS)[:, None]
    if b is None:
        return g, grad_a
    pa = torch.exp(a - g)[:, None]  # softmax weights of the two log terms
    pb = torch.exp(b - g)[:, None]
    return g, pa * grad_a + pb * (-0.5 * post.grad_log_density)


# --------------------------------------------------------------------------------------------
# the surrogate with O(d) appends and an O(m) incremental candidate cache
# --------------------------------------------------------------------------------------------
class KernelRegressionModel:
    """NW kernel regression + KDE on a growing data set (the BOKE surrogate).

    Adding an observation costs ``O(d)`` amortised (rows are appended to a buffer that doubles);
    nothing is refit. :meth:`posterior` follows the GP core's protocol: mean and an uncertainty
    (here the "variance" ``sigma_hat^2 = 1 / W``) per candidate.
    """

    def __init__(self, dim: int, capacity: int = 64) -> None:
        if dim < 1:
            raise ConfigError(f"dimension must be >= 1, got {dim}")
        self.dim = dim
        self._X = torch.empty(max(1, capacity), dim, dtype=torch.float64)
        self._y = torch.empty(max(1, capacity), dtype=torch.float64)
        self.n_train = 0

    @property
    def X_train(self) -> torch.Tensor:
        return self._X[: self.n_train]

    @property
    def y_train(self) -> torch.Tensor:
        return self._y[: self.n_train]

    def add(self, X: torch.Tensor, y: torch.Tensor) -> KernelRegressionModel:
        """Append observations ``X (n, d)``, ``y (n,)``; raises on NaN/inf or bad shapes."""
        X = torch.as_tensor(X, dtype=torch.float64).reshape(-1, self.dim)
        y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
        if X.shape[0] != y.shape[0]:
            raise InvalidObservation(f"got {X.shape[0]} inputs but {y.shape[0]} responses")
        if not (torch.isfinite(X).all() and torch.isfinite(y).all()):
            raise InvalidObservation("observations must be finite; drop NaN/inf rows first")
        need = self.n_train + X.shape[0]
        if need > self._X.shape[0]:
            cap = max(need, 2 * self._X.shape[0])
            newX = torch.empty(cap, self.dim, dtype=torch.float64)
            newy = torch.empty(cap, dtype=torch.float64)
            newX[: self.n_train] = self.X_train
            newy[: self.n_train] = self.y_train
            self._X, self._y = newX, newy
        self._X[self.n_train : need] = X
        self._y[self.n_train : need] = y
        self.n_train = need
        return self

    def evaluate(self, Xs: torch.Tensor, h: float, *, with_grad: bool = False) -> KRPosterior:
        """NW mean / log density at ``Xs`` for bandwidth ``h`` (``O(m t d)``)."""
        return kr_posterior(Xs, self.X_train, self.y_train, h, with_grad=with_grad)

    def posterior(self, Xs: torch.Tensor, h: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, 1 / W)`` at ``Xs``: the posterior protocol of the GP core."""
        post = self.evaluate(Xs, h)
        return post.mean, torch.exp(-post.log_density)


class CandidateCache:
    """Running NW mean and log density on a fixed candidate set for a fixed bandwidth.

    :meth:`add` folds one observation in with ``O(m d)`` work (independent of how many
    observations came before): ``log W <- logaddexp(log W, log k)`` and
    ``m <- m + w_new (y - m)`` with ``w_new = k / W_new`` (an exact online weighted mean).
    With an empty data set ``log W = -inf``; the first observation gets weight 1, so the
    nearest-neighbour limit is reproduced without special cases.

    The cached mean is on the raw response scale. NW is affine-equivariant, so a standardised
    mean is ``(m - mu) / sd`` and no recomputation is needed when the standardisation changes.
    """

    def __init__(self, candidates: torch.Tensor, h: float) -> None:
        if candidates.ndim != 2 or candidates.shape[0] == 0:
            raise ConfigError("candidate set must be a non-empty (m, d) tensor")
        if not h > 0:
            raise ConfigError(f"bandwidth must be positive, got {h}")
        self.candidates = candidates.to(torch.float64)
        self.h = float(h)
        m = self.candidates.shape[0]
        self.log_density = torch.full((m,), -math.inf, dtype=torch.float64)
        self.mean = torch.zeros(m, dtype=torch.float64)
        self.n_obs = 0

    def add(self, x: torch.Tensor, y: float) -> None:
        """Fold in one observation ``(x (d,), y)`` in ``O(m d)``."""
        x = torch.as_tensor(x, dtype=torch.float64).reshape(1, -1)
        if not (torch.isfinite(x).all() and math.isfinite(float(y))):
            raise InvalidObservation("observations must be finite")
        logk = -((self.candidates - x) ** 2).sum(1) / (2.0 * self.h * self.h)
        new_logw = torch.logaddexp(self.log_density, logk)
        w_new = torch.exp(logk - new_logw)
        self.mean += w_new * (float(y) - self.mean)
        self.log_density = new_logw
        self.n_obs += 1

    def posterior(self) -> KRPosterior:
        """Current mean and log density at all candidates (no gradients)."""
        if self.n_obs == 0:
            raise InvalidObservation("the candidate cache has no observations yet")
        return KRPosterior(mean=self.mean.clone(), log_density=self.log_density.clone())
