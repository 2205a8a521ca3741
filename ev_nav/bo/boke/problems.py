"""Test problems of the BOKE study (the paper's Sec. 5 and their stand-ins), all maximised.

* Six synthetic functions of Fig. 6/7: Forrester (1-D), Goldstein–Price (2-D, rescaled form by
  default), six-hump camel (2-D), Hartmann-3, Rosenbrock-4 (rescaled), Sphere-6 (rescaled): the
  package's test functions (:mod:`ev_nav.bo.core.functions`, maximisation form).
* The 8-D sprinkler model of Fig. 8 is not available (GPL-2 obfuscated C, project decision §6.3);
  it is replaced by **Hartmann-6 embedded in 8-D** (two inactive inputs), an 8-D multimodal
  problem with a known optimum.
* The HPO task of Fig. 9 (California Housing / Wine Quality need downloads, project decision
  §6.4) is replaced by tuning a scikit-learn random forest (5 hyperparameters, mean 5-fold CV R²)
  on the diabetes data set that ships with scikit-learn.

Every benchmark maps unit-cube inputs ``u`` to its box ``x = lb + (ub - lb) u``; the noisy
variants add Gaussian noise with std ``0.1 * std_X(f)`` (docs/bo-boke.md), where ``std_X(f)`` is
computed once on a fixed scrambled Sobol sample of ``2^14`` points.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ev_nav.bo.core.functions import (
    FORRESTER,
    GOLDSTEIN_PRICE,
    GOLDSTEIN_PRICE_RESCALED,
    HARTMANN3,
    HARTMANN6,
    ROSENBROCK4_RESCALED,
    SIX_HUMP_CAMEL,
    SPHERE6_RESCALED,
    TestFunction,
)
from ev_nav.bo.core.registry import Registry
from ev_nav.bo.core.space import Space
from ev_nav.errors import ConfigError

ArrayFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Benchmark:
    """A box-constrained maximisation problem.

    Attributes
    ----------
    name : str
    dim : int
    lower, upper : tuple of float
        Box bounds in the function's own units.
    fn : callable
        ``fn(x (n, d)) -> (n,)`` values to maximise, on raw (box) inputs.
    f_max : float or None
        Known global maximum (``None``: unknown, regret is taken against the best value found).
    x_opt : tuple of float or None
        A maximiser in raw units, for tests.
    budget : int
        Default total number of evaluations ``T``.
    user : bool
        A user's objective (``--objective``) rather than one of the study's benchmarks: its
        runs draw from the seed alone, never from its name (see
        :func:`~ev_nav.bo.boke.runner.run_streams`).
    space : Space or None
        A user objective's parameter space; ``dim`` is then its internal dimension and
        :meth:`to_raw` decodes internal points to the user's values.
    """

    name: str
    dim: int
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    fn: ArrayFn
    f_max: float | None
    x_opt: tuple[float, ...] | None
    budget: int
    user: bool = False
    space: Space | None = None

    def to_raw(self, u: np.ndarray) -> np.ndarray:
        """Map unit-cube points ``(n, d)`` to the box (or decode them in a user's space)."""
        if self.space is not None:
            return self.space.decode(u)
        lb, ub = np.asarray(self.lower), np.asarray(self.upper)
        return lb + (ub - lb) * np.atleast_2d(u)

    def f_unit(self, u: np.ndarray) -> np.ndarray:
        """Noise-free objective on unit-cube inputs ``(n, d) -> (n,)``."""
        return self.fn(self.to_raw(u))

    @property
    def n_init(self) -> int:
        """Initial-design size ``max(5, 2d)`` (``d`` inputs, however many one-hot coordinates)."""
        return max(5, 2 * (self.dim if self.space is None else self.space.dim))

    @property
    def noise_std(self) -> float:
        """Noise std of the noisy variant: ``0.1 * std of f`` over the box."""
        return 0.1 * domain_std(self.name)


# --- HPO: random forest on sklearn's diabetes data --------------------------------------------
#: Bounds of (n_estimators, max_depth, min_samples_split, max_features, min_impurity_decrease).
#: ``n_estimators`` is capped at 100 (200 recommended) to keep one evaluation below ~0.5 s.
RF_BOUNDS: tuple[tuple[float, float], ...] = (
    (10, 100),
    (2, 30),
    (2, 20),
    (0.1, 1.0),
    (0.0, 0.05),
)


@functools.lru_cache(maxsize=1)
def _diabetes() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    return X, y


def rf_diabetes_cv_r2(x: np.ndarray) -> np.ndarray:
    """Mean 5-fold CV R² of a random forest on the diabetes data, per hyperparameter row.

    Integers are rounded to the nearest value and clipped; folds and the forest seed
    are fixed so the objective is deterministic.
    """
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.model_selection import KFold, cross_val_score

    Xd, yd = _diabetes()
    out = np.empty(x.shape[0])
    cv = KFold(5, shuffle=True, random_state=0)
    for i, row in enumerate(np.atleast_2d(x)):
        ints = [int(np.clip(round(row[j]), RF_BOUNDS[j][0], RF_BOUNDS[j][1])) for j in range(3)]
        model = RandomForestRegressor(
            n_estimators=ints[0],
            max_depth=ints[1],
            min_samples_split=ints[2],
            max_features=float(np.clip(row[3], *RF_BOUNDS[3])),
            min_impurity_decrease=float(np.clip(row[4], *RF_BOUNDS[4])),
            random_state=0,
            n_jobs=1,
        )
        out[i] = cross_val_score(model, Xd, yd, cv=cv, scoring="r2").mean()
    return out


# --- registry ---------------------------------------------------------------------------------
def _synthetic(name: str, fn: TestFunction, budget: int) -> Benchmark:
    """A benchmark on one of the package's test functions (its box, optimum and maximiser)."""
    return Benchmark(
        name,
        fn.dim,
        tuple(b[0] for b in fn.bounds),
        tuple(b[1] for b in fn.bounds),
        fn.numpy,
        fn.optimal_value,
        fn.optimizers[0],
        budget,
    )


def _rf_diabetes() -> Benchmark:
    lo = tuple(float(b[0]) for b in RF_BOUNDS)
    hi = tuple(float(b[1]) for b in RF_BOUNDS)
    return Benchmark("rf-diabetes", 5, lo, hi, rf_diabetes_cv_r2, None, None, 60)


BENCHMARKS: Registry[Callable[[], Benchmark]] = Registry("benchmark", "boke")
for _name, _text, _fn, _budget in (
    ("forrester", "Forrester (1-D)", FORRESTER, 100),
    (
        "goldstein-price",
        "Goldstein-Price, rescaled form on [0, 1]^2",
        GOLDSTEIN_PRICE_RESCALED,
        100,
    ),
    ("six-hump-camel", "six-hump camel on [-3, 3] x [-2, 2]", SIX_HUMP_CAMEL, 100),
    ("hartmann3", "Hartmann-3", HARTMANN3, 100),
    ("rosenbrock4", "Rosenbrock-4, rescaled", ROSENBROCK4_RESCALED, 150),
    ("sphere6", "weighted Sphere-6, rescaled (optimum in a corner)", SPHERE6_RESCALED, 150),
    ("goldstein-price-std", "Goldstein-Price, standard form on [-2, 2]^2", GOLDSTEIN_PRICE, 100),
    (
        "sphere6-shifted",
        "Sphere-6 with the optimum moved to 0.37 (off the corner)",
        SPHERE6_RESCALED.shifted(0.37),
        150,
    ),
    (
        "hartmann6-8d",
        "Hartmann-6 on 6 of 8 inputs (stands in for the 8-D sprinkler)",
        HARTMANN6.embedded(8),
        150,
    ),
):
    BENCHMARKS.add(_name, _text, lambda n=_name, f=_fn, b=_budget: _synthetic(n, f, b))
BENCHMARKS.add(
    "rf-diabetes",
    "random-forest HPO on sklearn's diabetes data (stands in for Fig. 9)",
    _rf_diabetes,
)

#: The six synthetic functions of Fig. 6/7, in the paper's (inferred) panel order.
SYNTHETIC: tuple[str, ...] = BENCHMARKS.names[:6]
BENCHMARK_NAMES: tuple[str, ...] = BENCHMARKS.names


@functools.cache
def get_benchmark(name: str) -> Benchmark:
    """The benchmark called ``name`` (see :data:`BENCHMARKS`)."""
    return BENCHMARKS.get(name)()


@functools.cache
def domain_std(name: str) -> float:
    """Std of the noise-free objective over its box (``2^14`` scrambled Sobol points, seed 0)."""
    from scipy.stats import qmc

    b = get_benchmark(name)
    if b.f_max is None:
        raise ConfigError(f"benchmark {name!r} has no noisy variant (it is too expensive)")
    u = qmc.Sobol(b.dim, scramble=True, seed=0).random(1 << 14)
    return float(np.std(b.f_unit(u)))
