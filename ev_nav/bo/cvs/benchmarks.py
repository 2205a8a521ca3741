"""The benchmarks of the cost-varying-subset papers: objectives, control sets, costs.

Every objective is a vectorised, differentiable torch function of unit-cube inputs ``u`` of shape
``(n, d)`` returning ``(n,)`` float64 values to be **maximised**: the synthetic ones are the
package's test functions (:mod:`ev_nav.bo.core.functions`) on the unit cube, embedded in 12-D
for the unknown-cost paper; the two simulators (plant growth, airfoil self-noise) are GP
posterior means whose fitted parameters are read from the shared data folder
(:func:`ev_nav.settings.data_dir`, never copied into the repository); ``gpsample`` is a fresh smooth
GP-prior-like function per seed.

Sources: Tay et al. (NeurIPS 2023), Sec. 5 and App. C; Hoang et al. (AAAI 2025), Sec. 6.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ev_nav.bo.core.functions import ACKLEY6, HARTMANN3, HARTMANN6, LEVY6, TestFunction
from ev_nav.bo.core.objective import UserObjective
from ev_nav.bo.core.registry import Registry
from ev_nav.bo.core.space import Categorical, Continuous, Integer, Space
from ev_nav.bo.cvs.problems import (
    COST_PRESETS,
    Choice,
    CostModel,
    Problem,
    RandomInputs,
    TruncatedNormal,
    Uniform,
    input_slices,
)
from ev_nav.bo.cvs.surrogate import FITTED
from ev_nav.errors import ConfigError, NetworkFileNotFound
from ev_nav.gp.exact import stationary_kernel
from ev_nav.settings import data_dir

DTYPE = torch.float64
Objective = Callable[[Tensor], Tensor]


def _check_input(u: Tensor, dim: int, name: str) -> Tensor:
    u = torch.as_tensor(u, dtype=DTYPE)
    if u.ndim != 2 or u.shape[1] != dim:
        raise ConfigError(f"{name} expects inputs of shape (n, {dim}); got {tuple(u.shape)}")
    return u


# ------------------------------------------------------------------------------- GP sample
@dataclass(frozen=True)
class KernelInterpolant:
    """``f(u) = c + k(u, P) w``: a GP posterior mean / kernel interpolant, as a callable.

    Attributes
    ----------
    kind, lengthscale, outputscale
        Kernel of the interpolant.
    points
        Anchor inputs ``P`` (in the kernel's input units).
    weights
        Coefficients ``w``.
    constant
        Constant offset ``c``.
    lower, upper
        Affine map from the unit cube to the kernel's input units (``x = lower + u (upper-lower)``).
    """

    kind: str
    lengthscale: Tensor
    outputscale: float
    points: Tensor
    weights: Tensor
    constant: float = 0.0
    lower: Tensor | None = None
    upper: Tensor | None = None

    @property
    def dim(self) -> int:
        return int(self.points.shape[1])

    def __call__(self, u: Tensor) -> Tensor:
        u = _check_input(u, self.dim, "kernel interpolant")
        x = u if self.lower is None else self.lower + u * (self.upper - self.lower)
        K = stationary_kernel(self.kind, x, self.points, self.lengthscale, self.outputscale)
        return self.constant + K @ self.weights


def gp_sample_objective(
    generator: torch.Generator,
    dim: int = 3,
    n_points: int = 1000,
    lengthscale: float = 0.1,
    jitter: float = 1e-6,
) -> KernelInterpolant:
    """A smooth stand-in for a GP prior draw on ``[0,1]^dim`` (SE kernel, outputscale 1).

    Draws ``n_points`` uniform anchors ``P``, ``v ~ N(0, K + jitter I)`` and returns the
    interpolant ``f(u) = k(u, P) (K + jitter I)^{-1} v``. Because ``v = L z``, the weights are
    ``L^{-T} z``.
    """
    P = torch.rand(n_points, dim, dtype=DTYPE, generator=generator)
    ls = torch.full((dim,), float(lengthscale), dtype=DTYPE)
    K = stationary_kernel("se", P, P, ls, 1.0) + jitter * torch.eye(n_points, dtype=DTYPE)
    L = torch.linalg.cholesky(K)
    z = torch.randn(n_points, dtype=DTYPE, generator=generator)
    w = torch.linalg.solve_triangular(L.T, z.unsqueeze(-1), upper=True).squeeze(-1)
    return KernelInterpolant("se", ls, 1.0, P, w)


# ------------------------------------------------------------------------------- simulators
PLANT_MAX = 2.1941161755890883


def _load_npz(name: str, path: str | os.PathLike[str] | None) -> dict[str, np.ndarray]:
    file = Path(path) if path is not None else data_dir() / name
    if not file.is_file():
        raise NetworkFileNotFound(
            f"simulator parameters {file} not found; point EV_NAV_DATA at the folder "
            f"holding {name} (the shared data folder next to the repository)"
        )
    with np.load(file, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def load_plant(path: str | os.PathLike[str] | None = None) -> KernelInterpolant:
    """Plant-growth simulator: the whitened SVGP latent mean ``k(x, Z) L^{-T} q_mu`` (5-D).

    Inputs are Ca, B, NH3, K (log µM) and pH, mapped from the unit cube to their native boxes;
    the output is standardised maximum leaf area (max :data:`PLANT_MAX`).
    """
    p = _load_npz("plant_svgp_mean_params.npz", path)
    Z = torch.as_tensor(p["Z"], dtype=DTYPE)
    ls = torch.as_tensor(p["lengthscales"], dtype=DTYPE)
    var = float(p["kernel_variance"])
    K = stationary_kernel("se", Z, Z, ls, var)
    K = K + float(p["jitter"]) * torch.eye(Z.shape[0], dtype=DTYPE)
    L = torch.linalg.cholesky(K)
    q = torch.as_tensor(p["q_mu"], dtype=DTYPE).reshape(-1, 1)
    w = torch.linalg.solve_triangular(L.T, q, upper=True).squeeze(-1)
    return KernelInterpolant(
        "se",
        ls,
        var,
        Z,
        w,
        lower=torch.as_tensor(p["lower"], dtype=DTYPE),
        upper=torch.as_tensor(p["upper"], dtype=DTYPE),
    )


def load_airfoil(path: str | os.PathLike[str] | None = None) -> KernelInterpolant:
    """Airfoil self-noise simulator: posterior mean of a Matérn-5/2 ARD GP over 1503 points (5-D).

    ``f(x) = c + k(x, X)(K + σ_n² I)^{-1}(y − c)`` with the fitted hyperparameters; inputs are the
    preprocessed (log, min-max scaled) UCI variables, so the unit cube is the native domain.
    """
    p = _load_npz("airfoil_gp_mean_params.npz", path)
    if float(p["nu"]) != 2.5:
        raise ConfigError("airfoil parameters must describe a Matérn-5/2 kernel")
    X = torch.as_tensor(p["X"], dtype=DTYPE)
    y = torch.as_tensor(p["y"], dtype=DTYPE)
    ls = torch.as_tensor(p["lengthscales"], dtype=DTYPE)
    s = float(p["outputscale"])
    c = float(p["constant_mean"])
    K = stationary_kernel("matern52", X, X, ls, s) + float(p["noise"]) * torch.eye(
        X.shape[0], dtype=DTYPE
    )
    L = torch.linalg.cholesky(K)
    w = torch.cholesky_solve((y - c).unsqueeze(-1), L).squeeze(-1)
    return KernelInterpolant("matern52", ls, s, X, w, constant=c)


# --------------------------------------------------------------------------- benchmarks

SETS_3D = ((0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2))
SETS_12D = (
    (0, 1, 2),
    (3, 4, 5),
    (6, 7, 8),
    (9, 10, 11),
    (0, 1, 2, 3, 4, 5),
    (6, 7, 8, 9, 10, 11),
    tuple(range(12)),
)
SETS_PLANT = ((0, 1), (2, 3), (3, 4), (0, 1, 2), (1, 2, 3), (2, 3, 4), (0, 1, 2, 3, 4))
SETS_AIRFOIL = ((3, 4), (1, 4), (0, 3), (1, 2), (2, 4), (0, 1), (2, 3))

#: Synthetic benchmarks: Hartmann-3 in 3-D; Hartmann-6, Ackley-6, Levy-6 on the first six of
#: twelve inputs (the unknown-cost paper's dummy-variable construction).
SYNTHETIC: dict[str, TestFunction] = {
    "hartmann3": HARTMANN3,
    "hartmann6": HARTMANN6.embedded(12),
    "ackley6": ACKLEY6.embedded(12),
    "levy6": LEVY6.embedded(12),
}


@dataclass(frozen=True)
class CVSBenchmark:
    """A benchmark's structure: dimension, control sets (cost order), surrogate lengthscale
    (unit-cube units), the paper's default budget and the known ``max f`` (``None``: unknown)."""

    dim: int
    control_sets: tuple[tuple[int, ...], ...]
    lengthscale: float
    budget: float
    f_max: float | None


BENCHMARKS: Registry[CVSBenchmark] = Registry("benchmark", "cvs")
BENCHMARKS.add(
    "gpsample",
    "3-D smooth GP-prior-like function, a new one per seed",
    CVSBenchmark(3, SETS_3D, 0.1, 50.0, None),
)
BENCHMARKS.add(
    "hartmann3",
    "Hartmann-3, 7 control sets",
    CVSBenchmark(3, SETS_3D, 0.1, 50.0, HARTMANN3.optimal_value),
)
for _name, _fn in SYNTHETIC.items():
    if _name != "hartmann3":
        BENCHMARKS.add(
            _name,
            f"{_fn.name.split('-')[0].capitalize()} on 6 of 12 inputs",
            CVSBenchmark(12, SETS_12D, 0.2, 100.0, _fn.optimal_value),
        )
BENCHMARKS.add(
    "plant",
    "plant-growth simulator (5-D GP mean, shared data)",
    CVSBenchmark(5, SETS_PLANT, 0.2, 200.0, PLANT_MAX),
)
BENCHMARKS.add(
    "airfoil",
    "airfoil self-noise simulator (5-D GP mean, no full set, shared data)",
    CVSBenchmark(5, SETS_AIRFOIL, 0.2, 50.0, None),
)


def make_problem(
    name: str,
    *,
    costs: str | Sequence[float] = "moderate",
    variance: float = 0.04,
    cost_noise_std: float = 0.0,
    generator: torch.Generator | None = None,
    noise_std: float = 0.01,
) -> Problem:
    """Build a benchmark problem with the papers' control sets, costs and distributions.

    Parameters
    ----------
    name
        A name in :data:`BENCHMARKS`.
    costs
        A preset name (``cheap``, ``moderate``, ``expensive``) or 7 mean costs.
    variance
        Truncated variance of every random coordinate (0.02, 0.04 or 0.08 in the papers).
    cost_noise_std
        0 for known deterministic costs; > 0 for random costs with unknown means.
    generator
        Needed only for ``gpsample`` (a new function per seed).
    """
    spec = BENCHMARKS.get(name)
    dim, sets, ls = spec.dim, spec.control_sets, spec.lengthscale
    if isinstance(costs, str):
        if costs not in COST_PRESETS:
            raise ConfigError(
                f"unknown cost preset {costs!r}; use one of {', '.join(COST_PRESETS)}"
            )
        means = COST_PRESETS[costs]
    else:
        means = tuple(float(c) for c in costs)
    obj: Objective
    f_max: float | None
    if name == "gpsample":
        if generator is None:
            raise ConfigError("the gpsample benchmark needs a seeded generator")
        obj, f_max = gp_sample_objective(generator, dim=dim, lengthscale=ls), None
    elif name in SYNTHETIC:
        obj, f_max = SYNTHETIC[name].unit, spec.f_max
    elif name == "plant":
        obj, f_max = load_plant(), spec.f_max
    else:
        obj, f_max = load_airfoil(), spec.f_max
    return Problem(
        name=name,
        objective=obj,
        dim=dim,
        control_sets=sets,
        costs=CostModel(means, noise_std=cost_noise_std),
        variable=TruncatedNormal.with_variance(variance),
        noise_std=noise_std,
        lengthscale=ls,
        f_max=f_max,
    )


#: Lengthscale of the SE surrogate for a user objective (unit-cube units) unless given; the
#: fitted treatment (the user-objective default) refits it by marginal likelihood.
USER_LENGTHSCALE = 0.2
#: Truncated unit-cube variance of an uncontrolled continuous or integer input by default.
USER_VARIANCE = 0.04


def user_problem(
    user: UserObjective,
    *,
    costs: Sequence[float] | None = None,
    variance: float = USER_VARIANCE,
    cost_noise_std: float = 0.0,
    lengthscale: float | None = None,
) -> Problem:
    """A cost-varying-subset problem on a user objective (evaluated one point at a time).

    Parameters
    ----------
    user
        The objective; its declared ``control_sets`` (0-based inputs per set, cheapest first as
        in the papers) and ``costs`` (one mean per set) apply unless ``costs`` is given. Its
        inputs may be continuous, integer or categorical (:mod:`ev_nav.bo.core.space`); the
        problem lives on their internal unit cube.
    variance
        Truncated unit-cube variance of an uncontrolled continuous or integer input whose
        distribution is not declared (see :func:`random_inputs`).
    cost_noise_std
        0: known deterministic costs; > 0: random costs around the means (unknown-cost setting).
    lengthscale
        Initial SE lengthscale of the surrogate on the unit cube (default
        :data:`USER_LENGTHSCALE`).

    The declared ``noise_std`` (if any) is the GP's initial noise level; the objective's values
    are taken as the observations (a simulation adds no noise). A declared ``optimum`` (a
    maximiser) gives ``f_max = f(optimum)``, against which runs report regret.
    """
    space = user.space
    sets = user.extras.get("control_sets")
    if not sets:
        raise ConfigError(
            f"objective {user.name}: declare control_sets=[[...], ...] (or pass --control-sets)"
        )
    slices = input_slices(space)
    control_sets = []
    for cs in sets:  # type: ignore[union-attr]
        inputs = sorted(int(j) for j in cs)
        valid = bool(inputs) and 0 <= inputs[0] and inputs[-1] < space.dim
        if not valid or len(set(inputs)) != len(inputs):
            raise ConfigError(
                f"objective {user.name}: bad control set {list(cs)} for {space.dim} inputs"
            )
        coords = (c for j in inputs for c in range(slices[j].start, slices[j].stop))
        control_sets.append(tuple(coords))
    means = costs if costs is not None else user.extras.get("costs")
    if means is None:
        raise ConfigError(f"objective {user.name}: declare costs=[...] (or pass --costs)")
    user.require_call("f(x)", "the cost-varying family")

    def objective(U: Tensor) -> Tensor:
        X = space.decode(U.detach().numpy())
        return torch.tensor([user(x) for x in X], dtype=DTYPE)

    optimum = user.extras.get("optimum")
    f_max = None if optimum is None else user(space.validate(optimum))
    noise = user.extras.get("noise_std")
    return Problem(
        name=user.name,
        objective=objective,
        dim=space.internal_dim,
        control_sets=tuple(control_sets),
        costs=CostModel(tuple(float(c) for c in means), noise_std=cost_noise_std),  # type: ignore[union-attr]
        variable=random_inputs(space, user.extras.get("uncontrolled"), variance, user.name),
        noise_std=None if noise is None else float(noise),  # type: ignore[arg-type]
        lengthscale=float(lengthscale or USER_LENGTHSCALE),
        f_max=f_max,
        space=space,
        surrogate=FITTED,
    )


def random_inputs(
    space: Space, spec: object, variance: float = USER_VARIANCE, name: str = "objective"
) -> RandomInputs:
    """The distribution of the inputs the environment sets, from a declaration ``spec``.

    * ``None`` or ``"normal"`` (the default): every continuous or integer input follows a
      normal centred in its box, truncated to it, with truncated variance ``variance`` on the
      unit cube (the papers' 0.02-0.08; 0.04 is a standard deviation of about 0.2 box widths),
      integers rounded to their value; every categorical input is uniform over its choices;
    * ``"uniform"``: uniform over every box (and choice list);
    * a list with one entry per input: ``"normal"``, ``"uniform"``, ``{"mean": m, "std": s}``
      (declared units; a normal with that mean and standard deviation truncated to the box) or,
      for a categorical input, ``{"probs": [p_1, ...]}`` (one probability per choice).
    """
    entries = spec if isinstance(spec, (list, tuple)) else [spec] * space.dim
    if len(entries) != space.dim:
        raise ConfigError(
            f"objective {name}: uncontrolled declares {len(entries)} entries for {space.dim} inputs"
        )
    pairs = zip(space.parameters, entries, strict=True)
    dists = [_input_dist(p, e, variance, name) for p, e in pairs]
    return RandomInputs(space, tuple(dists))


def _input_dist(p: object, entry: object, variance: float, name: str):
    where = f"objective {name}: uncontrolled input {getattr(p, 'name', '?')}"
    if isinstance(p, Categorical):
        k = len(p.choices)
        if entry in (None, "normal", "uniform"):
            return Choice(tuple([1.0 / k] * k))
        if isinstance(entry, dict) and set(entry) == {"probs"}:
            probs = entry["probs"]
            try:
                values = tuple(float(v) for v in probs)
            except (TypeError, ValueError):
                values = ()
            if len(values) != k:
                raise ConfigError(f"{where}: give {k} probabilities, one per choice")
            return Choice(values)
        raise ConfigError(f"{where}: use 'uniform' or {{'probs': [...]}} for a categorical input")
    if entry in (None, "normal"):
        return TruncatedNormal.with_variance(variance)
    if entry == "uniform":
        return Uniform()
    if isinstance(entry, dict) and "std" in entry and set(entry) <= {"mean", "std"}:
        assert isinstance(p, (Continuous, Integer))
        if isinstance(p, Integer):  # cell coordinates: value k sits at (k - lower + 0.5) / n
            lo, width, offset = float(p.lower), float(p.n_values), 0.5
        else:
            lo, width, offset = p.lower, p.upper - p.lower, 0.0
        mean = float(entry.get("mean", lo - offset + width / 2))
        std = float(entry["std"])
        if not (math.isfinite(mean) and std > 0 and math.isfinite(std)):
            raise ConfigError(f"{where}: need a finite mean and a positive std")
        return TruncatedNormal(std / width, (mean - lo + offset) / width)
    raise ConfigError(f"{where}: use 'normal', 'uniform' or {{'mean': m, 'std': s}}")
