"""Synthetic test functions, in BoTorch's manner, with one sign convention: **maximise**.

Every :class:`TestFunction` maps native inputs ``x`` of shape ``(n, d)`` (float64 torch, batched,
differentiable) to ``(n,)`` values to be *maximised*: the textbook minimisation form ``g`` is
negated once, here, so ``optimal_value = -min g`` and :attr:`TestFunction.optimizers` are the
textbook minimisers. ``bounds`` is the native box; :meth:`TestFunction.unit` evaluates on the
unit cube mapped affinely onto it (``x = lower + (upper - lower) u``), which is how every BO
family of the package poses its problems. NumPy callers use :meth:`TestFunction.numpy`.

BoTorch itself is not a dependency of ev-nav, so the formulas are written out (the same
constants as ``botorch.test_functions``); they are the only copies in the package. Sources:
Surjanovic & Bingham's virtual library of simulation experiments and Picheny et al. (2013) for
the rescaled forms used by the BOKE study.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from ev_nav.errors import ConfigError

DTYPE = torch.float64
Formula = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class TestFunction:
    """A box-bounded synthetic function to maximise, with its known optimum.

    Attributes
    ----------
    name
        Registry name.
    dim
        Input dimension ``d``.
    bounds
        Native box, one ``(lower, upper)`` pair per input.
    optimal_value
        ``max_x f(x)`` over the box.
    optimizers
        Maximisers in native units (all known ones for multi-modal functions).
    formula
        ``x (n, d) -> (n,)`` on native inputs, already in maximisation form.
    """

    __test__ = False  # a test *function*, not a pytest test class

    name: str
    dim: int
    bounds: tuple[tuple[float, float], ...]
    optimal_value: float
    optimizers: tuple[tuple[float, ...], ...]
    formula: Formula = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.bounds) != self.dim or any(lo >= hi for lo, hi in self.bounds):
            raise ConfigError(f"{self.name}: need {self.dim} increasing (lower, upper) bounds")

    @cached_property
    def lower(self) -> Tensor:
        """Lower corner of the box, ``(d,)``."""
        return torch.tensor([b[0] for b in self.bounds], dtype=DTYPE)

    @cached_property
    def upper(self) -> Tensor:
        """Upper corner of the box, ``(d,)``."""
        return torch.tensor([b[1] for b in self.bounds], dtype=DTYPE)

    def __call__(self, x: Tensor) -> Tensor:
        """Values at native inputs ``(n, d)``; no bound check (PTR evaluates outside the box)."""
        return self.formula(_check(x, self.dim, self.name))

    def unit(self, u: Tensor) -> Tensor:
        """Values at unit-cube inputs ``(n, d)`` mapped onto the native box."""
        u = _check(u, self.dim, self.name)
        lo, hi = self.lower, self.upper
        return self.formula(lo + (hi - lo) * u)

    def numpy(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """NumPy front end of :meth:`__call__` (native inputs)."""
        with torch.no_grad():
            return self(torch.as_tensor(np.atleast_2d(np.asarray(x, dtype=np.float64)))).numpy()

    def embedded(self, dim: int) -> TestFunction:
        """This function on the first ``self.dim`` of ``dim`` inputs; the rest are dummies.

        The dummy inputs get the unit interval as their box (only the first inputs matter).
        """
        if dim < self.dim:
            raise ConfigError(f"cannot embed {self.name} ({self.dim}-D) in {dim} dimensions")
        k, inner = self.dim, self.formula
        pad = tuple(tuple(o) + (0.5,) * (dim - k) for o in self.optimizers)
        return TestFunction(
            f"{self.name}-in-{dim}d",
            dim,
            self.bounds + ((0.0, 1.0),) * (dim - k),
            self.optimal_value,
            pad,
            lambda x: inner(x[:, :k]),
        )

    def shifted(self, offset: float) -> TestFunction:
        """``x -> f(x - offset)`` (moves the optimum by ``offset`` in every input)."""
        inner = self.formula
        return TestFunction(
            f"{self.name}-shifted",
            self.dim,
            self.bounds,
            self.optimal_value,
            tuple(tuple(v + offset for v in o) for o in self.optimizers),
            lambda x: inner(x - offset),
        )


def _check(x: Tensor, dim: int, name: str) -> Tensor:
    x = torch.as_tensor(x, dtype=DTYPE)
    if x.ndim != 2 or x.shape[1] != dim:
        raise ConfigError(f"{name} expects inputs of shape (n, {dim}); got {tuple(x.shape)}")
    return x


# ------------------------------------------------------------------------------------ Hartmann
_H_ALPHA = torch.tensor([1.0, 1.2, 3.0, 3.2], dtype=DTYPE)
_H3_A = torch.tensor(
    [[3.0, 10.0, 30.0], [0.1, 10.0, 35.0], [3.0, 10.0, 30.0], [0.1, 10.0, 35.0]], dtype=DTYPE
)
_H3_P = 1e-4 * torch.tensor(
    [[3689, 1170, 2673], [4699, 4387, 7470], [1091, 8732, 5547], [381, 5743, 8828]], dtype=DTYPE
)
_H6_A = torch.tensor(
    [
        [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
        [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
        [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
        [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
    ],
    dtype=DTYPE,
)
_H6_P = 1e-4 * torch.tensor(
    [
        [1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381],
    ],
    dtype=DTYPE,
)


def _hartmann(A: Tensor, P: Tensor) -> Formula:
    def f(x: Tensor) -> Tensor:
        inner = (A * (x[:, None, :] - P) ** 2).sum(-1)  # (n, 4)
        return (_H_ALPHA * torch.exp(-inner)).sum(-1)

    return f


# -------------------------------------------------------------------------- Ackley, Levy
def _ackley(x: Tensor) -> Tensor:
    # clamp_min keeps the gradient of the square root finite at the optimum
    rms = torch.sqrt((x * x).mean(-1).clamp_min(1e-30))
    return (
        20.0 * torch.exp(-0.2 * rms)
        + torch.exp(torch.cos(2 * math.pi * x).mean(-1))
        - 20.0
        - (math.e)
    )


def _levy(x: Tensor) -> Tensor:
    w = 1.0 + (x - 1.0) / 4.0
    head = torch.sin(math.pi * w[:, 0]) ** 2
    mid = ((w[:, :-1] - 1.0) ** 2 * (1.0 + 10.0 * torch.sin(math.pi * w[:, :-1] + 1.0) ** 2)).sum(
        -1
    )
    tail = (w[:, -1] - 1.0) ** 2 * (1.0 + torch.sin(2 * math.pi * w[:, -1]) ** 2)
    return -(head + mid + tail)


# ------------------------------------------------------------------------- two-dimensional
def _forrester(x: Tensor) -> Tensor:
    x = x[:, 0]
    return -((6 * x - 2) ** 2 * torch.sin(12 * x - 4))


def _goldstein_price_min(x1: Tensor, x2: Tensor) -> Tensor:
    a = 1 + (x1 + x2 + 1) ** 2 * (19 - 14 * x1 + 3 * x1**2 - 14 * x2 + 6 * x1 * x2 + 3 * x2**2)
    b = 30 + (2 * x1 - 3 * x2) ** 2 * (
        18 - 32 * x1 + 12 * x1**2 + 48 * x2 - 36 * x1 * x2 + 27 * x2**2
    )
    return a * b


def _goldstein_price(x: Tensor) -> Tensor:
    return -_goldstein_price_min(x[:, 0], x[:, 1])


def _goldstein_price_rescaled(u: Tensor) -> Tensor:
    xb = 4 * u - 2
    return -((torch.log(_goldstein_price_min(xb[:, 0], xb[:, 1])) - 8.693) / 2.427)


def _six_hump_camel(x: Tensor) -> Tensor:
    x1, x2 = x[:, 0], x[:, 1]
    return -((4 - 2.1 * x1**2 + x1**4 / 3) * x1**2 + x1 * x2 + (-4 + 4 * x2**2) * x2**2)


def _mccormick(x: Tensor) -> Tensor:
    a, b = x[:, 0], x[:, 1]
    return -(torch.sin(a + b) + (a - b) ** 2 - 1.5 * a + 2.5 * b + 1.0)


def _himmelblau(x: Tensor) -> Tensor:
    a, b = x[:, 0], x[:, 1]
    return -((a * a + b - 11.0) ** 2 + (a + b * b - 7.0) ** 2)


# --------------------------------------------------------------------- any-dimensional
def _rosenbrock_min(z: Tensor) -> Tensor:
    return (100 * (z[:, 1:] - z[:, :-1] ** 2) ** 2 + (1 - z[:, :-1]) ** 2).sum(1)


def _rosenbrock(x: Tensor) -> Tensor:
    return -_rosenbrock_min(x)


def _rosenbrock_rescaled(u: Tensor) -> Tensor:
    return -((_rosenbrock_min(15 * u - 5) - 3.827e5) / 3.755e5)


def _sphere_rescaled(x: Tensor) -> Tensor:
    w = 2.0 ** torch.arange(1, x.shape[1] + 1, dtype=DTYPE)
    return -(((w * x**2).sum(1) - 1745) / 899)


# ---------------------------------------------------------------------------- registry
def _unit(d: int) -> tuple[tuple[float, float], ...]:
    return ((0.0, 1.0),) * d


HARTMANN3 = TestFunction(
    "hartmann3",
    3,
    _unit(3),
    3.862779787332663,
    ((0.114589, 0.555649, 0.852547),),
    _hartmann(_H3_A, _H3_P),
)
HARTMANN6 = TestFunction(
    "hartmann6",
    6,
    _unit(6),
    3.3223680114155147,
    ((0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573),),
    _hartmann(_H6_A, _H6_P),
)
ACKLEY6 = TestFunction("ackley6", 6, ((-32.768, 32.768),) * 6, 0.0, ((0.0,) * 6,), _ackley)
LEVY6 = TestFunction("levy6", 6, ((-10.0, 10.0),) * 6, 0.0, ((1.0,) * 6,), _levy)
FORRESTER = TestFunction("forrester", 1, _unit(1), 6.020740055767, ((0.75725,),), _forrester)
GOLDSTEIN_PRICE = TestFunction(
    "goldstein-price", 2, ((-2.0, 2.0),) * 2, -3.0, ((0.0, -1.0),), _goldstein_price
)
GOLDSTEIN_PRICE_RESCALED = TestFunction(
    "goldstein-price-rescaled",
    2,
    _unit(2),
    3.1291255506106,
    ((0.5, 0.25),),
    _goldstein_price_rescaled,
)
SIX_HUMP_CAMEL = TestFunction(
    "six-hump-camel",
    2,
    ((-3.0, 3.0), (-2.0, 2.0)),
    1.0316284534899,
    ((0.08984, -0.71266), (-0.08984, 0.71266)),
    _six_hump_camel,
)
MCCORMICK = TestFunction(
    "mccormick",
    2,
    ((-1.5, 4.0), (-3.0, 4.0)),
    1.9132229549810367,
    ((-0.547198, -1.547198),),
    _mccormick,
)
HIMMELBLAU = TestFunction(
    "himmelblau",
    2,
    ((-5.0, 5.0),) * 2,
    0.0,
    ((3.0, 2.0), (-2.805118, 3.131312), (-3.779310, -3.283186), (3.584428, -1.848126)),
    _himmelblau,
)
ROSENBROCK2 = TestFunction("rosenbrock", 2, ((-5.0, 10.0),) * 2, 0.0, ((1.0, 1.0),), _rosenbrock)
ROSENBROCK4_RESCALED = TestFunction(
    "rosenbrock4-rescaled", 4, _unit(4), 3.827e5 / 3.755e5, ((0.4,) * 4,), _rosenbrock_rescaled
)
SPHERE6_RESCALED = TestFunction(
    "sphere6-rescaled", 6, _unit(6), 1745 / 899, ((0.0,) * 6,), _sphere_rescaled
)

#: Every test function by name.
FUNCTIONS: dict[str, TestFunction] = {
    f.name: f
    for f in (
        HARTMANN3,
        HARTMANN6,
        ACKLEY6,
        LEVY6,
        FORRESTER,
        GOLDSTEIN_PRICE,
        GOLDSTEIN_PRICE_RESCALED,
        SIX_HUMP_CAMEL,
        MCCORMICK,
        HIMMELBLAU,
        ROSENBROCK2,
        ROSENBROCK4_RESCALED,
        SPHERE6_RESCALED,
    )
}


def get_function(name: str) -> TestFunction:
    """The test function called ``name`` (see :data:`FUNCTIONS`)."""
    try:
        return FUNCTIONS[name]
    except KeyError:
        raise ConfigError(
            f"unknown test function {name!r}; use one of {', '.join(FUNCTIONS)}"
        ) from None
