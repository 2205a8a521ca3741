"""Probability-threshold robustness (PTR): posterior quantities and the BPT-* selection rules.

Iwazaki, Inatsu & Takeuchi, "Bayesian quadrature optimization for probability threshold
robustness measure" (Neural Computation 2021). A design ``x`` is judged by

    p_upper(x) = sum_w p(w) 1[f(x, w) > h],

the probability that it meets the requirement ``h`` when the environment ``w ~ p(w)`` varies.
Under a GP posterior p_upper is a (non-Gaussian) random variable; this module turns the GP
marginals on a product grid ``X × Ω`` into

* its exact posterior mean ``μ^(p)`` and the variance bound ``γ²`` (Sec. 3 of the paper),
* the moment credible interval ``μ^(p) ± β^{1/m} γ^{2/m}`` (Lemma 3.1),
* the modified threshold ``h + 2η`` (the theory's η-slack),
* the shared w-selection rule (eq. 4) in its numerically safe ``argmin |z|`` form,
* the BPT-UCB / BPT-TS / BPT-LSE rules (:class:`BPTUCB`, :class:`BPTTS`, :class:`BPTLSE`).

All arrays are NumPy float64 with shape ``(n_x, n_w)`` for grid quantities; the GP itself lives
in :mod:`ev_nav.bo.ptr.grid`. "Decision A…" refers to the table of decisions on what the paper
leaves open in docs/bo-ptr.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from ev_nav.errors import ConfigError

#: Floor on the posterior standard deviation before forming z-scores (decision A16, docs/bo-ptr.md).
STD_FLOOR = 1e-12


# ------------------------------------------------------------------------------ core quantities
def modified_threshold(mean: np.ndarray, h: float, eta: float = 0.0) -> np.ndarray:
    """Pointwise threshold ``h_{t-1,x,w;η}``: ``h + 2η`` where ``|μ - h| < η``, else ``h``.

    With ``η = 0`` (every experiment in the paper) this is ``h`` everywhere.
    """
    if eta < 0:
        raise ConfigError(f"eta must be >= 0, got {eta}")
    h_arr = np.full(np.shape(mean), float(h))
    if eta > 0:
        h_arr = np.where(np.abs(mean - h) < eta, h + 2.0 * eta, h_arr)
    return h_arr


def exceedance_z(mean: np.ndarray, var: np.ndarray, h: float, eta: float = 0.0) -> np.ndarray:
    """z-scores ``(μ - h̃) / σ`` of the pointwise events ``f(x, w) > h̃`` (σ floored at 1e-12)."""
    std = np.sqrt(np.maximum(var, 0.0))
    return (mean - modified_threshold(mean, h, eta)) / np.maximum(std, STD_FLOOR)


@dataclass(frozen=True)
class PTRPosterior:
    """Posterior summary of ``p_upper(x)`` for every design on the grid.

    Attributes
    ----------
    mean
        ``μ^(p)(x) = Σ_w p(w) π(x, w)``, shape ``(n_x,)``.
    gamma2
        ``γ²(x) = Σ_w p(w) π(1 - π)``, an upper bound on ``Var[p_upper(x) | D]``, ``(n_x,)``.
    pi
        Pointwise exceedance probabilities ``π(x, w) = Φ(z)``, ``(n_x, n_w)``.
    z
        The z-scores ``(μ - h̃)/σ``, ``(n_x, n_w)``.
    """

    mean: np.ndarray
    gamma2: np.ndarray
    pi: np.ndarray
    z: np.ndarray


def ptr_posterior(
    mean: np.ndarray, var: np.ndarray, p_w: np.ndarray, h: float, eta: float = 0.0
) -> PTRPosterior:
    """PTR posterior mean and variance bound from GP marginals on the ``X × Ω`` grid.

    Parameters
    ----------
    mean, var
        Latent GP posterior mean and variance, shape ``(n_x, n_w)``.
    p_w
        Environment probabilities, shape ``(n_w,)``, summing to one.
    h
        Performance threshold (same units as ``f``).
    eta
        Threshold slack η ≥ 0 of the modified PTR.
    """
    z = exceedance_z(mean, var, h, eta)
    pi = ndtr(z)
    # Φ(z)Φ(-z) instead of π(1-π): no cancellation when π is within 1e-16 of one.
    bern = pi * ndtr(-z)
    return PTRPosterior(mean=pi @ p_w, gamma2=bern @ p_w, pi=pi, z=z)


def half_width(gamma2: np.ndarray, beta: float, m: float) -> np.ndarray:
    """Half-width ``β^{1/m} γ^{2/m}`` of the moment credible interval (Lemma 3.1)."""
    if beta <= 0 or m < 2:
        raise ConfigError(f"need beta > 0 and m >= 2, got beta={beta}, m={m}")
    return beta ** (1.0 / m) * np.maximum(gamma2, 0.0) ** (1.0 / m)


def credible_interval(post: PTRPosterior, beta: float, m: float) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper ends of ``Q(x) = μ^(p) ± β^{1/m} γ^{2/m}`` (not clipped to [0, 1], A16)."""
    hw = half_width(post.gamma2, beta, m)
    return post.mean - hw, post.mean + hw


def ptr_of_values(f: np.ndarray, p_w: np.ndarray, h: float) -> np.ndarray:
    """``Σ_w p(w) 1[f(x, w) > h]`` for a function (or sample) ``f`` of shape ``(..., n_x, n_w)``."""
    return (f > h).astype(np.float64) @ p_w


def theory_beta(n_x: int, t: int, delta: float, kind: str = "ucb") -> float:
    """The theorems' β schedules: ``|X|π²t²/(3δ)`` (UCB, LSE) or ``/(6δ)`` (plain interval)."""
    denom = 3.0 if kind in ("ucb", "lse") else 6.0
    return n_x * np.pi**2 * t**2 / (denom * delta)


# ------------------------------------------------------------------------------ tie-breaking
def argmax_random(values: np.ndarray, rng: np.random.Generator, rtol: float = 1e-12) -> int:
    """Index of the maximum of a 1-D array, ties broken uniformly at random (decision A14).

    Values within ``rtol * (1 + |max|)`` of the maximum count as tied; NaNs never win.
    """
    v = np.asarray(values, dtype=np.float64)
    finite = np.where(np.isnan(v), -np.inf, v)
    best = finite.max()
    ties = np.flatnonzero(finite >= best - rtol * (1.0 + abs(best)))
    return int(ties[0]) if ties.size == 1 else int(rng.choice(ties))


def argmin_random(values: np.ndarray, rng: np.random.Generator, rtol: float = 1e-12) -> int:
    """Index of the minimum of a 1-D array with random tie-breaking."""
    return argmax_random(-np.asarray(values, dtype=np.float64), rng, rtol)


def select_w(
    mean_row: np.ndarray,
    var_row: np.ndarray,
    h: float,
    rng: np.random.Generator,
    eta: float = 0.0,
) -> int:
    """The shared environment rule (eq. 4) for a chosen design ``x_t``.

    ``argmax_w π(1 - π)`` equals ``argmin_w |μ(x_t, w) - h̃| / σ(x_t, w)`` because Φ(z)Φ(-z) is
    symmetric and decreasing in ``|z|``; the latter has no underflow ties. ``p(w)`` is not used
    (faithful to the paper; decision A7, docs/bo-ptr.md).
    """
    return argmin_random(np.abs(exceedance_z(mean_row, var_row, h, eta)), rng)


def straddle(lower: np.ndarray, upper: np.ndarray, level: float) -> np.ndarray:
    """Straddle score ``min(u - level, level - l)`` of an interval ``[l, u]``."""
    return np.minimum(upper - level, level - lower)


def classify_level_set(
    lower: np.ndarray, upper: np.ndarray, alpha: float, eps: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 5: ``H = {l > α - ε/2}``, ``L = {u < α + ε/2}``; boolean masks ``(n_x,)``.

    ``H`` wins if both hold (only possible with ``ε > 0`` and a very narrow interval).
    """
    high = lower > alpha - eps / 2.0
    low = (upper < alpha + eps / 2.0) & ~high
    return high, low


# ------------------------------------------------------------------------------ the rules
@dataclass(frozen=True)
class BPTUCB:
    """BPT-UCB (Algorithm 1): ``x_t = argmax μ^(p) + β^{1/m} γ^{2/m}``; ``w_t`` by eq. 4.

    Experimental defaults ``β = 2, m = 2, η = 0`` give ``μ^(p) + √2 γ``.
    """

    beta: float = 2.0
    m: float = 2.0
    eta: float = 0.0

    def acquisition(self, post: PTRPosterior) -> np.ndarray:
        """UCB score per design, shape ``(n_x,)``."""
        return post.mean + half_width(post.gamma2, self.beta, self.m)

    def select(
        self,
        mean: np.ndarray,
        var: np.ndarray,
        p_w: np.ndarray,
        h: float,
        rng: np.random.Generator,
    ) -> tuple[int, int]:
        """Design and environment indices ``(i_x, i_w)`` to query next."""
        post = ptr_posterior(mean, var, p_w, h, self.eta)
        ix = argmax_random(self.acquisition(post), rng)
        return ix, select_w(mean[ix], var[ix], h, rng, self.eta)


@dataclass(frozen=True)
class BPTTS:
    """BPT-TS: maximise the PTR of one joint posterior sample ``f̂``; ``w_t`` by eq. 4.

    The sample is drawn by the caller (see :mod:`ev_nav.bo.ptr.sampling`); the threshold of the
    sample's PTR is ``h`` (decision A17, docs/bo-ptr.md; ``η`` only enters eq. 4 in theory mode).
    """

    eta: float = 0.0

    def select(
        self,
        f_sample: np.ndarray,
        mean: np.ndarray,
        var: np.ndarray,
        p_w: np.ndarray,
        h: float,
        rng: np.random.Generator,
    ) -> tuple[int, int]:
        """Indices ``(i_x, i_w)`` given a joint sample ``f_sample`` of shape ``(n_x, n_w)``."""
        ix = argmax_random(ptr_of_values(f_sample, p_w, h), rng)
        return ix, select_w(mean[ix], var[ix], h, rng, self.eta)


@dataclass(frozen=True)
class BPTLSE:
    """BPT-LSE (Algorithm 2): straddle on the PTR credible interval; ``w_t`` by eq. 4.

    Experimental defaults ``β = 1.5, m = 2, η = 0, ε = 0``. ``H`` and ``L`` are recomputed from
    the current intervals at every step (eq. 5), never accumulated.
    """

    alpha: float = 0.8
    beta: float = 1.5
    m: float = 2.0
    eta: float = 0.0
    eps: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"alpha must lie in (0, 1), got {self.alpha}")

    def intervals(
        self, mean: np.ndarray, var: np.ndarray, p_w: np.ndarray, h: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(l(x), u(x))`` of the PTR credible interval."""
        return credible_interval(ptr_posterior(mean, var, p_w, h, self.eta), self.beta, self.m)

    def classify(
        self, mean: np.ndarray, var: np.ndarray, p_w: np.ndarray, h: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Masks ``(H_t, L_t)``; the unclassified set is the rest."""
        lo, up = self.intervals(mean, var, p_w, h)
        return classify_level_set(lo, up, self.alpha, self.eps)

    def select(
        self,
        mean: np.ndarray,
        var: np.ndarray,
        p_w: np.ndarray,
        h: float,
        rng: np.random.Generator,
    ) -> tuple[int, int]:
        """Indices ``(i_x, i_w)`` maximising the straddle, then eq. 4."""
        lo, up = self.intervals(mean, var, p_w, h)
        ix = argmax_random(straddle(lo, up, self.alpha), rng)
        return ix, select_w(mean[ix], var[ix], h, rng, self.eta)
