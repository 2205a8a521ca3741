"""PTR benchmark problems of Iwazaki et al. (Sec. 6, App. E) and the decisions of docs/bo-ptr.md.

Every problem is a :class:`PTRProblem` on a product grid: designs ``x`` (first input) and
environments ``w`` with known weights ``p(w)``, a threshold ``h``, the GP prior of the paper and
the noise-free values ``f_true`` on the grid, from which the true ``p_upper`` (for the inference
regret) and the true level set ``H`` (for F1) follow.

* Artificial test functions (the package's maximisation forms) mapped to ``[-1, 1]²`` with 50
  points per axis: Rosenbrock, McCormick, Himmelblau, Goldstein–Price.
* ``gp-test``: one draw of GP(0, RBF(0.5, 1)) per trial, rejecting degenerate draws (A2).
* ``sir``: infection control, our reconstruction of the SIR setting (A5).
* ``newsvendor``: the two-product newsvendor under dynamic substitution (A6, A9).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import stats

from ev_nav.bo.core.functions import (
    GOLDSTEIN_PRICE,
    HIMMELBLAU,
    MCCORMICK,
    ROSENBROCK2,
    TestFunction,
)
from ev_nav.bo.core.objective import UserObjective
from ev_nav.bo.core.registry import Registry
from ev_nav.bo.ptr.grid import GridKernel, ProductGrid
from ev_nav.bo.ptr.measure import ptr_of_values
from ev_nav.bo.ptr.sampling import KroneckerPriorSampler
from ev_nav.errors import ConfigError

GRID50 = np.linspace(-1.0, 1.0, 50)
EULER_GAMMA = 0.5772156649015329


class DegenerateProblemWarning(UserWarning):
    """The true level set is empty or all of X, or the maximiser of p_upper is not unique."""


# ------------------------------------------------------------------------------ weights
def gamma_weights(w: np.ndarray, convention: str = "scale") -> np.ndarray:
    """Gam-w weights: ``p(w) ∝ Gamma_pdf(w + 1; shape 2, 0.5)`` on the grid, renormalised (A3).

    ``convention="scale"`` (default, numpy/scipy) reads 0.5 as a scale, ``"rate"`` as a rate.
    """
    if convention not in ("scale", "rate"):
        raise ConfigError("gamma convention must be 'scale' or 'rate'")
    scale = 0.5 if convention == "scale" else 2.0
    p = stats.gamma.pdf(np.asarray(w) + 1.0, a=2.0, scale=scale)
    return p / p.sum()


def normal_weights(w: np.ndarray) -> np.ndarray:
    """N-w weights: ``p(w) ∝ φ(w)`` on the grid, renormalised."""
    p = stats.norm.pdf(np.asarray(w))
    return p / p.sum()


def to_domain(u: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Map ``u ∈ [-1, 1]`` linearly to ``[lo, hi]``."""
    return lo + (np.asarray(u) + 1.0) * (hi - lo) / 2.0


# ------------------------------------------------------------------------------ the problem
@dataclass
class PTRProblem:
    """A PTR benchmark on a product grid.

    Attributes
    ----------
    name
        Benchmark name.
    x_points, w_points
        Grid coordinates as seen by the GP, shapes ``(n_x, d_x)`` and ``(n_w, d_w)``.
    p_w
        Environment weights, ``(n_w,)``, summing to one.
    h
        Threshold on f.
    alpha
        Probability level of the LSE task (``None``: optimization only).
    kernel
        GP prior on the joint input.
    noise_std
        Observation-noise standard deviation (units of f).
    f_true
        Noise-free f on the grid, ``(n_x, n_w)`` (a high-accuracy estimate for simulators);
        ``None`` for a user objective (a black box: no regret or F1 can be scored).
    observe
        Optional ``(i_x, i_w, rng) -> y``; default ``f_true + N(0, noise_std²)``.
    fit_hyperparameters
        Fit kernel and noise by marginal likelihood inside the loop (newsvendor).
    n_init
        Random initial queries before the first acquisition (shared across methods per seed).
    info
        Free-form description (domain, conventions, reconstruction notes, rejections).
    x_user, w_user
        The same grids in the user's coordinates (a user objective's declared units; default:
        the GP's coordinates): what suggestions, results and files report.
    standardise
        Refit with the prior mean at the mean of the observations and the hyperparameters
        fitted on standardised outputs (user objectives: the run does not depend on the units
        of ``f``); the benchmarks keep their published zero-mean set-up.
    """

    name: str
    x_points: np.ndarray
    w_points: np.ndarray
    p_w: np.ndarray
    h: float
    alpha: float | None
    kernel: GridKernel
    noise_std: float
    f_true: np.ndarray | None
    observe: Callable[[int, int, np.random.Generator], float] | None = None
    fit_hyperparameters: bool = False
    n_init: int = 0
    info: dict[str, object] = field(default_factory=dict)
    x_user: np.ndarray | None = None
    w_user: np.ndarray | None = None
    standardise: bool = False

    def __post_init__(self) -> None:
        self.x_points = np.atleast_2d(np.asarray(self.x_points, dtype=np.float64).T).T
        self.w_points = np.atleast_2d(np.asarray(self.w_points, dtype=np.float64).T).T
        xu = self.x_points if self.x_user is None else self.x_user
        wu = self.w_points if self.w_user is None else self.w_user
        self.x_user = np.atleast_2d(np.asarray(xu, dtype=np.float64).T).T
        self.w_user = np.atleast_2d(np.asarray(wu, dtype=np.float64).T).T
        if self.x_user.shape[0] != self.x_points.shape[0] or (
            self.w_user.shape[0] != self.w_points.shape[0]
        ):
            raise ConfigError("x_user / w_user must list the same grid points as the GP's")
        self.p_w = np.asarray(self.p_w, dtype=np.float64)
        if self.f_true is not None and self.f_true.shape != (
            len(self.x_points),
            len(self.w_points),
        ):
            raise ConfigError("f_true must have shape (n_x, n_w)")
        if self.f_true is None and self.observe is None:
            raise ConfigError("a problem without f_true needs an observe function")
        if not np.isclose(self.p_w.sum(), 1.0) or np.any(self.p_w < 0):
            raise ConfigError("p(w) must be non-negative and sum to one")

    @property
    def designs(self) -> np.ndarray:
        """The design grid in the user's coordinates, ``(n_x, d_x)``."""
        assert self.x_user is not None
        return self.x_user

    @property
    def environments(self) -> np.ndarray:
        """The environment grid in the user's coordinates, ``(n_w, d_w)``."""
        assert self.w_user is not None
        return self.w_user

    @property
    def n_x(self) -> int:
        return int(self.x_points.shape[0])

    @property
    def n_w(self) -> int:
        return int(self.w_points.shape[0])

    @property
    def p_true(self) -> np.ndarray:
        """True ``p_upper(x)`` on the design grid."""
        if self.f_true is None:
            raise ConfigError(f"{self.name}: the true PTR of a black-box objective is unknown")
        return ptr_of_values(self.f_true, self.p_w, self.h)

    def true_level_set(self, alpha: float | None = None) -> np.ndarray:
        """Boolean mask of ``H = {x : p_upper(x) ≥ α}``."""
        a = self.alpha if alpha is None else alpha
        if a is None:
            raise ConfigError(f"benchmark {self.name!r} has no LSE level alpha; pass --alpha")
        return self.p_true >= a

    @property
    def ew_index(self) -> int:
        """Grid index of ``E[w]`` snapped to the nearest grid point (A8)."""
        ew = self.p_w @ self.w_points
        return int(np.argmin(((self.w_points - ew) ** 2).sum(1)))

    @property
    def delta_indices(self) -> np.ndarray:
        """Central 50% set Δ of p(w): smallest contiguous grid run covering CDF [0.25, 0.75] (A13).

        For multi-dimensional ``w`` the grid order is used (only meaningful for 1-D w).
        """
        cdf = np.cumsum(self.p_w)
        lo = int(np.searchsorted(cdf, 0.25, side="left"))
        hi = int(np.searchsorted(cdf, 0.75, side="left"))
        return np.arange(lo, min(hi, self.n_w - 1) + 1)

    def observe_y(self, ix: int, iw: int, rng: np.random.Generator) -> float:
        """One noisy evaluation ``y = f(x_ix, w_iw) + ε``."""
        if self.observe is not None:
            return float(self.observe(ix, iw, rng))
        assert self.f_true is not None
        return float(self.f_true[ix, iw] + self.noise_std * rng.standard_normal())

    def degeneracy(self, alpha: float | None = None) -> list[str]:
        """Human-readable degeneracy findings (empty list: fine)."""
        out = []
        p = self.p_true
        n_tied = int(np.sum(p >= p.max() - 1e-12))
        if n_tied > 1:
            out.append(f"{n_tied} designs tie at max p_upper={p.max():.3f}")
        a = self.alpha if alpha is None else alpha
        if a is not None:
            nh = int(np.sum(p >= a))
            if nh in (0, self.n_x):
                out.append(f"|H| = {nh} of {self.n_x} at alpha={a}: F1 is trivial")
        return out

    def summary(self) -> dict[str, object]:
        """Landscape numbers (maximum, argmax, level-set size) quoted in docs/bo-ptr.md."""
        p = self.p_true
        s: dict[str, object] = {
            "max_p_upper": float(p.max()),
            "argmax": int(np.argmax(p)),
            "min_p_upper": float(p.min()),
        }
        if self.alpha is not None:
            s["H_size"] = int(np.sum(p >= self.alpha))
        return s


# ------------------------------------------------------------------------------ test functions
@dataclass(frozen=True)
class _TestFunctionSpec:
    """A test function (maximisation form, :mod:`ev_nav.bo.core.functions`) posed as PTR."""

    func: TestFunction
    x_domain: tuple[float, float]
    w_domain: tuple[float, float]
    h: float
    alpha: float | None
    lengthscale: float
    sigma_ker: float
    scale: float = 1.0


TEST_FUNCTIONS: dict[str, _TestFunctionSpec] = {
    "rosenbrock": _TestFunctionSpec(ROSENBROCK2, (-5, 10), (-5, 10), -1000.0, None, 0.5, 150.0),
    "rosenbrock-small": _TestFunctionSpec(
        ROSENBROCK2, (-2.048, 2.048), (-2.048, 2.048), -1000.0, None, 0.5, 150.0
    ),
    "mccormick": _TestFunctionSpec(MCCORMICK, (-1.5, 4), (-3, 4), -5.0, None, 1.0, 4.0),
    "himmelblau": _TestFunctionSpec(HIMMELBLAU, (-5, 5), (-5, 5), -150.0, 0.8, 0.5, 200.0),
    "goldstein-price": _TestFunctionSpec(
        GOLDSTEIN_PRICE, (-2, 2), (-2, 2), -1.0, 0.5, 0.4, 200.0, 1e-5
    ),
    "goldstein-price-a09": _TestFunctionSpec(
        GOLDSTEIN_PRICE, (-2, 2), (-2, 2), -1.0, 0.9, 0.4, 200.0, 1e-5
    ),
}


def test_function_problem(name: str, gamma_convention: str = "scale") -> PTRProblem:
    """A test function (maximisation form) on the 50 × 50 grid with Gam-w weights."""
    spec = TEST_FUNCTIONS[name]
    A, B = np.meshgrid(
        to_domain(GRID50, *spec.x_domain), to_domain(GRID50, *spec.w_domain), indexing="ij"
    )
    f = spec.scale * spec.func.numpy(np.stack([A.ravel(), B.ravel()], 1)).reshape(A.shape)
    prob = PTRProblem(
        name=name,
        x_points=GRID50,
        w_points=GRID50,
        p_w=gamma_weights(GRID50, gamma_convention),
        h=spec.h,
        alpha=spec.alpha,
        kernel=GridKernel("se", spec.lengthscale, spec.sigma_ker**2),
        noise_std=0.01,
        f_true=f,
        info={
            "x_domain": spec.x_domain,
            "w_domain": spec.w_domain,
            "negated": True,
            "weights": f"Gam-w ({gamma_convention})",
        },
    )
    issues = prob.degeneracy()
    if any("|H|" in s for s in issues):
        warnings.warn(f"{name}: " + "; ".join(issues), DegenerateProblemWarning, stacklevel=2)
    prob.info["degeneracy"] = issues
    return prob


# ------------------------------------------------------------------------------ GP test function
def gp_test_problem(seed: int, task: str = "opt", max_tries: int = 1000) -> PTRProblem:
    """One non-degenerate draw of GP(0, RBF(l=0.5, σ=1)) on the 50 × 50 grid (A2).

    Optimization draws need a unique argmax with max p_upper < 0.999; LSE draws need
    ``1 ≤ |H| ≤ 49`` at α = 0.8. The number of rejected draws is recorded in ``info``.
    """
    kernel = GridKernel("se", 0.5, 1.0)
    sampler = KroneckerPriorSampler(ProductGrid(GRID50, GRID50), kernel)
    gen = torch.Generator().manual_seed(int(seed))
    p_w = normal_weights(GRID50)
    for tries in range(max_tries):
        f = sampler(1, gen).numpy().reshape(50, 50)
        p = ptr_of_values(f, p_w, 0.0)
        if task == "opt":
            ok = p.max() < 0.999 and np.sum(p >= p.max() - 1e-12) == 1
        else:
            ok = 1 <= np.sum(p >= 0.8) <= 49
        if ok:
            return PTRProblem(
                name="gp-test",
                x_points=GRID50,
                w_points=GRID50,
                p_w=p_w,
                h=0.0,
                alpha=0.8,
                kernel=kernel,
                noise_std=0.001,
                f_true=f,
                info={"seed": int(seed), "rejected_draws": tries, "weights": "N-w"},
            )
    raise ConfigError(f"no non-degenerate GP test draw in {max_tries} tries for seed {seed}")


# ------------------------------------------------------------------------------ SIR (A5)
SIR_BETA_RANGE = (0.1, 0.6)
SIR_C, SIR_SHAPE, SIR_RATE = 0.5, 5.0, 4.0


def sir_peak_infected(
    beta: np.ndarray,
    gamma: np.ndarray,
    population: float = 1000.0,
    i0: float = 1.0,
    days: float = 100.0,
    dt: float = 0.05,
) -> np.ndarray:
    """Peak number of infected of the deterministic SIR ODE, vectorised over parameter arrays.

    ``dS = -β S I / N``, ``dI = β S I / N - γ I`` integrated by classical RK4 with step ``dt``
    days (R follows from conservation). Rates in 1/day.
    """
    b, g = np.broadcast_arrays(np.asarray(beta, float), np.asarray(gamma, float))
    S = np.full(b.shape, population - i0)
    I = np.full(b.shape, i0)
    peak = I.copy()

    def rhs(S: np.ndarray, I: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inf = b * S * I / population
        return -inf, inf - g * I

    for _ in range(int(round(days / dt))):
        k1 = rhs(S, I)
        k2 = rhs(S + 0.5 * dt * k1[0], I + 0.5 * dt * k1[1])
        k3 = rhs(S + 0.5 * dt * k2[0], I + 0.5 * dt * k2[1])
        k4 = rhs(S + dt * k3[0], I + dt * k3[1])
        S = S + dt / 6.0 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        I = I + dt / 6.0 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        np.maximum(peak, I, out=peak)
    return peak


def sir_problem() -> PTRProblem:
    """Infection control (reconstruction, A5): PTR of ``f' = 150·x − peak infected``, ``h' = −135``.

    x rescales the infection rate β ∈ [0.1, 0.6]; w rescales the recovery rate γ = c/(1 + G),
    G ~ Gamma(5, rate 4), over its 99.9% central interval; p(w) is the transformed density.
    """
    g_dist = stats.gamma(a=SIR_SHAPE, scale=1.0 / SIR_RATE)
    g_lo, g_hi = g_dist.ppf(0.0005), g_dist.ppf(0.9995)
    gam_lo, gam_hi = SIR_C / (1.0 + g_hi), SIR_C / (1.0 + g_lo)
    gam = to_domain(GRID50, gam_lo, gam_hi)
    p_w = g_dist.pdf(SIR_C / gam - 1.0) * SIR_C / gam**2
    p_w = p_w / p_w.sum()
    beta = to_domain(GRID50, *SIR_BETA_RANGE)
    B, G = np.meshgrid(beta, gam, indexing="ij")
    f = 150.0 * GRID50[:, None] - sir_peak_infected(B, G)
    return PTRProblem(
        name="sir",
        x_points=GRID50,
        w_points=GRID50,
        p_w=p_w,
        h=-135.0,
        alpha=0.9,
        kernel=GridKernel("se", 0.5, 250.0**2),
        noise_std=math.sqrt(0.025),
        f_true=f,
        info={
            "reconstruction": "A5: SIR ODE (RK4, dt=0.05 d), N=1000, I0=1, 100 days, peak I; "
            "PTR of -risk = 150x - peak against -135, i.e. P(risk < 135)",
            "beta_range": SIR_BETA_RANGE,
            "gamma_range": (float(gam_lo), float(gam_hi)),
        },
    )


# ------------------------------------------------------------------------------ newsvendor (A6)
NV_COST = np.array([4.0, 13.0])
NV_PRICE = np.array([10.0, 23.0])
NV_CUSTOMERS = 50
NV_OMEGA = (29.95, 76.58)


def newsvendor_profit(
    x: np.ndarray, w: np.ndarray, reps: int, rng: np.random.Generator, mu: float = 1.0
) -> np.ndarray:
    """Mean profit over ``reps`` replications for inventories ``x`` and environments ``w``.

    Parameters
    ----------
    x
        Initial inventories, shape ``(P, 2)`` (units).
    w
        Environment values ``w_j = Σ_i Exp⁻¹(Ψ(ξ_i^j))``, shape ``(P, 2)``.
    reps
        Monte-Carlo replications per point (common random numbers across points).
    rng
        Source of the Dirichlet splits.

    Notes
    -----
    Given ``w_j``, the per-customer exponential transforms are ``w_j · Dirichlet(1, …, 1)``
    (exact conditional law of i.i.d. exponentials given their sum); each maps back to a
    mean-zero Gumbel utility shock. Customers buy the in-stock product of highest positive
    utility ``1 + ξ``.
    """
    x = np.asarray(x, float)
    w = np.asarray(w, float)
    P, n = x.shape[0], NV_CUSTOMERS
    # Dirichlet(1,...,1) splits, shared across points (common random numbers): (reps, 2, n)
    e = rng.exponential(size=(reps, 2, n))
    split = e / e.sum(-1, keepdims=True)
    E = w[:, None, :, None] * split[None]  # (P, reps, 2, n)
    u = -np.expm1(-mu * E)
    u = np.clip(u, 1e-300, 1.0 - 1e-16)
    util = 1.0 + mu * (-np.log(-np.log(u)) - EULER_GAMMA)
    stock = np.broadcast_to(x[:, None, :], (P, reps, 2)).copy()
    sold = np.zeros((P, reps, 2))
    for i in range(n):
        ui = np.where(stock > 0, util[..., i], -np.inf)
        best = np.argmax(ui, axis=-1)
        buy = np.take_along_axis(ui, best[..., None], -1)[..., 0] > 0
        onehot = (best[..., None] == np.arange(2)) & buy[..., None]
        stock -= onehot
        sold += onehot
    profit = sold @ NV_PRICE - (x @ NV_COST)[:, None]
    return profit.mean(axis=1)


def newsvendor_problem(
    x_step: int = 5, n_w_axis: int = 8, reps_true: int = 500, reps_query: int = 100, seed: int = 0
) -> PTRProblem:
    """Newsvendor under dynamic substitution on an integer design grid (A6, A9).

    X = ``{0, x_step, …, 50}²``; Ω = a uniform ``n_w_axis²`` grid on [29.95, 76.58]² with weights
    ∝ Gamma(50, 1) ⊗ Gamma(50, 1). ``f_true`` uses ``reps_true`` common-random-number replications
    (≥ 2000 would be needed for a final metric; 500 keeps the build to seconds); each query
    averages ``reps_query`` fresh replications. GP inputs are rescaled to [-1, 1]; the Matérn-5/2
    ARD kernel and the noise are fitted by marginal likelihood inside the loop.
    """
    xs = np.arange(0, NV_CUSTOMERS + 1, x_step, dtype=float)
    ws = np.linspace(*NV_OMEGA, n_w_axis)
    X = np.array([(a, b) for a in xs for b in xs])
    W = np.array([(a, b) for a in ws for b in ws])
    p_w = stats.gamma.pdf(W[:, 0], a=50) * stats.gamma.pdf(W[:, 1], a=50)
    p_w = p_w / p_w.sum()
    rng = np.random.default_rng(seed)
    Xr = np.repeat(X, len(W), axis=0)
    Wr = np.tile(W, (len(X), 1))
    f = np.concatenate(
        [
            newsvendor_profit(Xr[i : i + 512], Wr[i : i + 512], reps_true, rng)
            for i in range(0, len(Xr), 512)
        ]
    ).reshape(len(X), len(W))

    def observe(ix: int, iw: int, r: np.random.Generator) -> float:
        return float(newsvendor_profit(X[ix : ix + 1], W[iw : iw + 1], reps_query, r)[0])

    def scale(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
        return 2.0 * (v - lo) / (hi - lo) - 1.0

    return PTRProblem(
        name="newsvendor",
        x_points=scale(X, 0.0, NV_CUSTOMERS),
        w_points=scale(W, *NV_OMEGA),
        p_w=p_w,
        h=350.0,
        alpha=None,
        kernel=GridKernel("matern52", (0.5, 0.5, 0.5, 0.5), 200.0**2),
        noise_std=2.3,
        f_true=f,
        observe=observe,
        fit_hyperparameters=True,
        n_init=10,
        info={
            "x_grid": f"{{0,{x_step},...,50}}^2",
            "w_grid": f"{n_w_axis}x{n_w_axis} on {NV_OMEGA}^2",
            "reps_true": reps_true,
            "reps_query": reps_query,
            "reconstruction": "A6: Gumbel scale 1, utilities 1, Exp(1) transform",
        },
    )


# ------------------------------------------------------------------------------ user objectives
def design_grid(bounds: Sequence[tuple[float, float]], points_per_axis: int) -> np.ndarray:
    """A regular grid over a box, ``(points_per_axis ** d, d)`` (first input slowest)."""
    axes = [np.linspace(lo, hi, points_per_axis) for lo, hi in bounds]
    return np.stack([a.ravel() for a in np.meshgrid(*axes, indexing="ij")], axis=1)


def _to_unit_interval(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Map ``[lo, hi]`` to ``[-1, 1]`` per column (the GP's input units, as the benchmarks)."""
    span = np.where(hi > lo, hi - lo, 1.0)
    return 2.0 * (v - lo) / span - 1.0


def user_problem(user: UserObjective, points_per_axis: int | None = None) -> PTRProblem:
    """A PTR problem on a user objective ``f(x, w)`` (maximised; PTR of ``f > threshold``).

    The design grid is ``design_points`` if declared, else a regular grid over the bounds
    (``points_per_axis``, default 50 in 1-D, 15 in 2-D, 7 in 3-D); the environment is the
    declared ``environment`` grid with ``weights`` (default uniform). Both are rescaled to
    ``[-1, 1]`` for the GP. Outputs are standardised (prior mean at the mean of the data, signal
    and noise fitted in units of its standard deviation): the squared-exponential kernel's ARD
    lengthscales (start 0.5), signal variance and noise are fitted by marginal likelihood after
    the 5 random initial queries and then every ``refit_every`` steps (default 10). The
    environment's distribution is the declared ``weights`` on the grid; undeclared, every
    grid value is equally likely.
    """
    ex = user.extras
    if ex.get("environment") is None or ex.get("threshold") is None:
        raise ConfigError(
            f"objective {user.name}: PTR needs environment=[...] (the w grid) and threshold=h"
        )
    user.require_call("f(x, w)", "PTR")
    try:  # text or ragged rows were a ValueError traceback
        W = np.atleast_2d(np.asarray(ex["environment"], dtype=float).T).T
    except (TypeError, ValueError):
        W = np.empty((0, 0))
    if W.size == 0 or not np.isfinite(W).all():  # was a ZeroDivisionError traceback
        raise ConfigError(
            f"objective {user.name}: the environment grid needs at least one point, each a "
            f"finite number (got {ex['environment']!r})"
        )
    try:
        threshold = float(ex["threshold"])  # type: ignore[arg-type]
    except (TypeError, ValueError):
        threshold = math.nan  # said below, as a NaN is
    if not np.isfinite(threshold):  # a NaN threshold ran, and recommended an arbitrary point
        raise ConfigError(f"objective {user.name}: threshold must be a finite number, "
                          f"got {ex['threshold']!r}")
    try:
        p_w = (
            np.full(W.shape[0], 1.0 / W.shape[0])
            if ex.get("weights") is None
            else np.asarray(ex["weights"], dtype=float)
        )
    except (TypeError, ValueError):
        p_w = np.full(0, np.nan)  # refused below, as other bad weights are
    if (p_w.shape != (W.shape[0],) or not np.isfinite(p_w).all() or np.any(p_w < 0)
            or not np.isfinite(p_w.sum()) or not p_w.sum() > 0):
        raise ConfigError(f"objective {user.name}: need one non-negative weight per environment")
    p_w = p_w / p_w.sum()
    if ex.get("design_points") is not None:
        try:
            X = np.atleast_2d(np.asarray(ex["design_points"], dtype=float).T).T
        except (TypeError, ValueError):
            raise ConfigError(f"objective {user.name}: design points must be rows of numbers, "
                              f"got {ex['design_points']!r}") from None
    else:
        n = {1: 50, 2: 15, 3: 7}.get(user.dim, 4) if points_per_axis is None else points_per_axis
        # (0 became the default grid, -1 a traceback from the grid's sampler)
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError(
                f"objective {user.name}: points per axis must be a whole number >= 2, got {n!r}"
            )
        X = design_grid(user.bounds, n)
    if X.shape[1] != user.dim:
        raise ConfigError(f"objective {user.name}: design points must have {user.dim} columns")

    def observe(ix: int, iw: int, _rng: np.random.Generator) -> float:
        return user(X[ix], W[iw])

    return PTRProblem(
        name=user.name,
        x_points=_to_unit_interval(X, user.lower, user.upper),
        w_points=_to_unit_interval(W, W.min(0), W.max(0)),
        p_w=p_w,
        h=threshold,
        alpha=None if ex.get("alpha") is None else float(ex["alpha"]),  # type: ignore[arg-type]
        kernel=GridKernel("se", 0.5, 1.0),
        noise_std=float(ex.get("noise_std", 0.01)),  # type: ignore[arg-type]
        f_true=None,
        observe=observe,
        fit_hyperparameters=True,
        n_init=5,
        info={"design_points": X, "environment": W, "objective": user.name},
        x_user=X,
        w_user=W,
        standardise=True,
    )


# ------------------------------------------------------------------------------ registry
BENCHMARKS: Registry[Callable[..., PTRProblem]] = Registry("benchmark", "ptr")
BENCHMARKS.add(
    "gp-test", "one non-degenerate GP(0, RBF(0.5, 1)) draw per trial, N-w", gp_test_problem
)
for _name, _text in (
    ("rosenbrock", "Rosenbrock on [-5, 10]^2, Gam-w"),
    ("rosenbrock-small", "Rosenbrock on [-2.048, 2.048]^2, Gam-w"),
    ("mccormick", "McCormick, Gam-w (optimization)"),
    ("himmelblau", "Himmelblau, Gam-w, alpha 0.8"),
    ("goldstein-price", "Goldstein-Price, Gam-w, alpha 0.5 (degenerate: flagged)"),
    ("goldstein-price-a09", "Goldstein-Price, Gam-w, alpha 0.9"),
):
    BENCHMARKS.add(_name, _text, lambda n=_name, **kw: test_function_problem(n, **kw))
BENCHMARKS.add("sir", "infection control on an SIR model (reconstruction), alpha 0.9", sir_problem)
BENCHMARKS.add(
    "newsvendor", "two-product newsvendor under substitution, fitted kernel", newsvendor_problem
)

#: Benchmarks whose problem changes with the trial seed.
PER_TRIAL_BENCHMARKS: frozenset[str] = frozenset({"gp-test"})


def make_problem(name: str, seed: int = 0, task: str = "opt", **kw: object) -> PTRProblem:
    """Build benchmark ``name`` (``seed`` and ``task`` only matter for ``gp-test``)."""
    build = BENCHMARKS.get(name)
    if name == "gp-test":
        return build(seed, task)
    return build(**kw)
