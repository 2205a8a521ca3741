"""Mixed parameter spaces: continuous, integer and categorical inputs on one internal unit cube.

A user declares each input as one of

* :class:`Continuous` ``(lower, upper)`` — a real interval (a plain ``(lower, upper)`` pair in a
  declaration means this);
* :class:`Integer` ``(lower, upper)`` — the whole numbers ``lower, …, upper`` (inclusive);
* :class:`Categorical` ``(choices)`` — one of a finite list of values (strings, numbers, …).

The learners never see these units. :meth:`Space.encode` maps user points to the *internal* unit
cube ``[0, 1]^D`` and :meth:`Space.decode` maps internal points back:

* a continuous input is one coordinate, ``(x - lower) / (upper - lower)``;
* an integer input is one coordinate split into ``n = upper - lower + 1`` equal cells; the value
  ``k`` sits at the centre of its cell, ``(k - lower + 0.5) / n``, and decoding takes the cell
  that holds the coordinate. Equal cells (rather than ``(k - lower) / (upper - lower)`` with
  rounding) give every value the same share of the cube, so uniform or Latin-hypercube points
  reach the end values as often as the middle ones;
* a categorical input with ``k`` choices is a **one-hot** block of ``k`` coordinates; decoding
  takes the largest coordinate of the block. One-hot, not ordinal: an ordinal code would put
  choice 0 nearer choice 1 than choice 2, and a stationary kernel would read that invented order
  as similarity; in a one-hot block every pair of choices is the same distance apart, and with
  one lengthscale per coordinate the GP learns how much each choice matters. It costs ``k``
  coordinates instead of one, which is cheap for the short choice lists BO is used with.

:meth:`Space.snap` maps any internal point to the nearest point that encodes a valid user point
(integer coordinates to their cell centre, categorical blocks to a vertex). Learners keep their
observations snapped, so the GP sees each user value at one place.

**Acquisition maximisers** (:func:`ev_nav.bo.core.maximize.maximize`) search the continuous cube;
:meth:`Space.discrete_objective` wraps an acquisition so that it is evaluated at the snapped
point and its gradient along the discrete coordinates is zero (the acquisition is piecewise
constant in them, as in Garrido-Merchán and Hernández-Lobato, 2020). Raw points then score the
discrete configurations they snap to, L-BFGS-B refines only the continuous coordinates of each
start, and the caller snaps the returned maximiser. A space without discrete inputs returns the
objective unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from torch import Tensor

from ev_nav.errors import ConfigError, OutOfDomainError

#: ``objective(Z (n, D), with_grad) -> (values (n,), gradients (n, D) or None)``, maximised
#: (the protocol of :data:`ev_nav.bo.core.maximize.Objective`).
Objective = Callable[[Tensor, bool], tuple[Tensor, Tensor | None]]

#: Relative slack when checking continuous bounds (a value read back from a CSV may differ from
#: the bound in its last digits); values inside the slack are clipped to the bound.
_SLACK = 1e-9


@dataclass(frozen=True)
class Continuous:
    """A real input in ``[lower, upper]`` (declared units)."""

    lower: float
    upper: float
    name: str = ""

    def __post_init__(self) -> None:
        lo, hi = _float(self.lower, self.name), _float(self.upper, self.name)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ConfigError(
                f"parameter {self.name or '?'}: bounds must be finite with lower < upper, "
                f"got ({self.lower}, {self.upper})"
            )
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)

    @property
    def width(self) -> int:
        return 1


@dataclass(frozen=True)
class Integer:
    """A whole-number input in ``lower, …, upper`` (both included)."""

    lower: int
    upper: int
    name: str = ""

    def __post_init__(self) -> None:
        lo, hi = _int(self.lower, self.name), _int(self.upper, self.name)
        if lo >= hi:
            raise ConfigError(
                f"parameter {self.name or '?'}: integer bounds need lower < upper, "
                f"got ({self.lower}, {self.upper})"
            )
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)

    @property
    def n_values(self) -> int:
        return self.upper - self.lower + 1

    @property
    def width(self) -> int:
        return 1


@dataclass(frozen=True)
class Categorical:
    """An input taking one of ``choices`` (single hashable values such as strings or numbers;
    at least two, distinct)."""

    choices: tuple[Hashable, ...]
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.choices, (str, bytes)):
            raise ConfigError(
                f"parameter {self.name or '?'}: choices must be a list, got the string "
                f"{self.choices!r}"
            )
        try:
            choices = tuple(self.choices)
            distinct = len(set(choices)) == len(choices)
        except TypeError:
            raise ConfigError(
                f"parameter {self.name or '?'}: choices must be a list of hashable values, "
                f"got {self.choices!r}"
            ) from None
        if any(isinstance(c, (list, tuple, np.ndarray)) for c in choices):
            raise ConfigError(
                f"parameter {self.name or '?'}: choices must be single values (strings, "
                f"numbers), got {list(choices)}"
            )
        if len(choices) < 2 or not distinct:
            raise ConfigError(
                f"parameter {self.name or '?'}: a categorical needs at least two distinct "
                f"choices, got {list(choices)}"
            )
        object.__setattr__(self, "choices", choices)

    @property
    def width(self) -> int:
        return len(self.choices)


Parameter = Continuous | Integer | Categorical


class Space:
    """An ordered list of parameters and the map between user points and the unit cube.

    Parameters
    ----------
    parameters
        :class:`Continuous`, :class:`Integer` or :class:`Categorical` objects, or plain
        ``(lower, upper)`` pairs (continuous). Unnamed parameters are called ``x0, x1, …`` by
        position.

    Attributes
    ----------
    parameters
        The parameters, named.
    dim
        Number of user inputs (the length of a user point).
    internal_dim
        Number of unit-cube coordinates (one per continuous or integer input, one per choice of
        each categorical).
    """

    def __init__(self, parameters: Sequence[Parameter | Sequence[float]]) -> None:
        if isinstance(parameters, (str, bytes)) or not isinstance(parameters, Sequence):
            raise ConfigError(f"a space is a list of parameters, got {parameters!r}")
        params: list[Parameter] = []
        for i, p in enumerate(parameters):
            if isinstance(p, (Continuous, Integer, Categorical)):
                q = p
            else:
                try:
                    lo, hi = p  # type: ignore[misc]
                except (TypeError, ValueError):
                    raise ConfigError(
                        f"parameter {i}: expected a (lower, upper) pair, Continuous, Integer "
                        f"or Categorical, got {p!r}"
                    ) from None
                q = Continuous(lo, hi)
            if not q.name:
                q = _renamed(q, f"x{i}")
            params.append(q)
        if not params:
            raise ConfigError("a space needs at least one parameter")
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise ConfigError(f"parameter names must be distinct, got {names}")
        self.parameters: tuple[Parameter, ...] = tuple(params)
        self.dim = len(params)
        # slices of the internal cube, one per parameter
        starts = np.cumsum([0] + [p.width for p in params])
        self._slices = [slice(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]
        self.internal_dim = int(starts[-1])
        discrete = np.zeros(self.internal_dim, dtype=bool)
        for p, s in zip(params, self._slices, strict=True):
            discrete[s] = not isinstance(p, Continuous)
        self.discrete_mask: NDArray[np.bool_] = discrete

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_bounds(cls, bounds: Sequence[Sequence[float]]) -> Space:
        """A space of continuous inputs from ``[(lower, upper), ...]``."""
        return cls([Continuous(*_pair(b, i)) for i, b in enumerate(bounds)])

    @property
    def is_continuous(self) -> bool:
        """True when every input is continuous (encode/decode are then affine maps)."""
        return not bool(self.discrete_mask.any())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    @property
    def bounds(self) -> tuple[tuple[float, float], ...]:
        """``(lower, upper)`` per input; categoricals report ``(0, k - 1)`` (their indices)."""
        out: list[tuple[float, float]] = []
        for p in self.parameters:
            if isinstance(p, Categorical):
                out.append((0.0, float(len(p.choices) - 1)))
            else:
                out.append((float(p.lower), float(p.upper)))
        return tuple(out)

    def __repr__(self) -> str:
        return f"Space({list(self.parameters)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Space) and self.parameters == other.parameters

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ validation
    def validate(self, x: ArrayLike | Sequence[Any]) -> NDArray[Any]:
        """Check one user point and return it in canonical form.

        Continuous values inside a relative slack of ``1e-9`` of a bound are clipped to it;
        integers may be given as whole floats (``3.0``).

        Returns
        -------
        numpy.ndarray
            ``(dim,)``: float when every input is continuous, else an object array of ``float``
            (continuous), ``int`` (integer) and the choice itself (categorical).

        Raises
        ------
        OutOfDomainError
            Wrong length, a value outside its bounds, not a whole number, or not a choice; the
            message names the parameter.
        """
        values = self._as_row(x)
        out: list[Any] = []
        for p, v in zip(self.parameters, values, strict=True):
            out.append(_check(p, v))
        return self._pack([out])[0]

    def validate_many(self, X: ArrayLike | Sequence[Sequence[Any]]) -> NDArray[Any]:
        """:meth:`validate` for a batch ``(n, dim)`` (a single point is taken as ``n = 1``)."""
        rows = self._as_rows(X)
        return self._pack(
            [[_check(p, v) for p, v in zip(self.parameters, r, strict=True)] for r in rows]
        )

    # ------------------------------------------------------------------ encode / decode
    def encode(self, X: ArrayLike | Sequence[Sequence[Any]]) -> NDArray[np.float64]:
        """User points ``(n, dim)`` (or one ``(dim,)``) → internal points ``(n, internal_dim)``.

        Every point is validated first (:class:`~ev_nav.errors.OutOfDomainError`). The result is
        snapped: integer values at their cell centres, categoricals as one-hot vectors.
        """
        rows = self._as_rows(X)
        U = np.zeros((len(rows), self.internal_dim))
        for j, (p, s) in enumerate(zip(self.parameters, self._slices, strict=True)):
            col = [_check(p, r[j]) for r in rows]
            if isinstance(p, Continuous):
                U[:, s.start] = (np.asarray(col, dtype=float) - p.lower) / (p.upper - p.lower)
            elif isinstance(p, Integer):
                U[:, s.start] = (np.asarray(col, dtype=float) - p.lower + 0.5) / p.n_values
            else:
                idx = [p.choices.index(v) for v in col]
                U[np.arange(len(rows)), s.start + np.asarray(idx, dtype=int)] = 1.0
        return U

    def decode(self, U: ArrayLike | Tensor) -> NDArray[Any]:
        """Internal points ``(n, internal_dim)`` (or one) → user points ``(n, dim)``.

        Coordinates are clipped to ``[0, 1]``; integers take the cell holding the coordinate,
        categoricals the largest coordinate of their block (the first on a tie). The dtype is as
        in :meth:`validate`.
        """
        Un = self._internal_rows(U)
        cols: list[list[Any]] = []
        for p, s in zip(self.parameters, self._slices, strict=True):
            if isinstance(p, Continuous):
                cols.append((p.lower + (p.upper - p.lower) * Un[:, s.start]).tolist())
            elif isinstance(p, Integer):
                k = _cell(Un[:, s.start], p.n_values)
                cols.append([p.lower + int(i) for i in k])
            else:
                cols.append([p.choices[int(i)] for i in np.argmax(Un[:, s], axis=1)])
        return self._pack([list(r) for r in zip(*cols, strict=True)])

    def snap(self, U: ArrayLike | Tensor) -> Any:
        """The nearest internal point(s) that encode a valid user point.

        Accepts and returns a NumPy array or a torch tensor (same type, dtype and shape;
        ``(internal_dim,)`` or ``(n, internal_dim)``). Continuous coordinates are only clipped to
        ``[0, 1]``. Differentiable nowhere along discrete coordinates; use
        :meth:`discrete_objective` inside a gradient-based maximiser.
        """
        if isinstance(U, Tensor):
            if self.is_continuous:
                return U.clamp(0.0, 1.0)
            snapped = self.snap(U.detach().cpu().numpy())
            return torch.as_tensor(snapped, dtype=U.dtype, device=U.device)
        A = np.asarray(U, dtype=float)
        single = A.ndim == 1
        A2 = np.clip(np.atleast_2d(A), 0.0, 1.0).copy()
        if A2.shape[1] != self.internal_dim:
            raise OutOfDomainError(
                f"internal points need {self.internal_dim} coordinates, got {A2.shape[1]}"
            )
        for p, s in zip(self.parameters, self._slices, strict=True):
            if isinstance(p, Integer):
                A2[:, s.start] = (_cell(A2[:, s.start], p.n_values) + 0.5) / p.n_values
            elif isinstance(p, Categorical):
                hot = np.argmax(A2[:, s], axis=1)
                A2[:, s] = 0.0
                A2[np.arange(A2.shape[0]), s.start + hot] = 1.0
        return A2[0] if single else A2

    def discrete_objective(self, objective: Objective) -> Objective:
        """Wrap a maximiser objective on the internal cube to respect the discrete inputs.

        The wrapped objective evaluates ``objective`` at :meth:`snap` ``(Z)`` and zeroes the
        gradient along the discrete coordinates (they stay where each start put them; the
        continuous coordinates of ``snap(Z)`` equal those of ``Z``, so their gradient is exact).
        Snap the maximiser's returned point to get the point whose value it reports.
        """
        if self.is_continuous:
            return objective
        mask = torch.as_tensor(self.discrete_mask)

        def wrapped(Z: Tensor, with_grad: bool) -> tuple[Tensor, Tensor | None]:
            v, g = objective(self.snap(Z), with_grad)
            if g is not None:
                g = g.masked_fill(mask.to(g.device), 0.0)
            return v, g

        return wrapped

    # ------------------------------------------------------------------ internals
    def _as_row(self, x: ArrayLike | Sequence[Any]) -> list[Any]:
        rows = self._as_rows(x)
        if len(rows) != 1:
            raise OutOfDomainError(
                f"a point needs {self.dim} values ({', '.join(self.names)}), got {len(rows)} rows"
            )
        return rows[0]

    def _as_rows(self, X: ArrayLike | Sequence[Sequence[Any]]) -> list[list[Any]]:
        if isinstance(X, Tensor):
            X = X.detach().cpu().numpy()
        if isinstance(X, (str, bytes)):
            rows = None
        elif isinstance(X, np.ndarray):
            rows = [X.tolist()] if X.ndim == 1 else X.tolist() if X.ndim == 2 else None
        else:
            try:
                items = list(X)  # type: ignore[arg-type]
            except TypeError:
                items = None
            if items is None:
                rows = None
            elif items and all(isinstance(r, (list, tuple, np.ndarray)) for r in items):
                rows = [list(r) for r in items]
            else:
                rows = [items]
        if rows is None or any(len(r) != self.dim for r in rows):
            raise OutOfDomainError(
                f"a point needs {self.dim} values ({', '.join(self.names)}), got {X!r}"
            )
        return rows

    def _internal_rows(self, U: ArrayLike | Tensor) -> NDArray[np.float64]:
        A = U.detach().cpu().numpy() if isinstance(U, Tensor) else np.asarray(U, dtype=float)
        A = np.atleast_2d(A)
        if A.ndim != 2 or A.shape[1] != self.internal_dim:
            raise OutOfDomainError(
                f"internal points need {self.internal_dim} coordinates, got shape {A.shape}"
            )
        if not np.all(np.isfinite(A)):
            raise OutOfDomainError("internal points must be finite")
        return np.clip(A, 0.0, 1.0)

    def _pack(self, rows: list[list[Any]]) -> NDArray[Any]:
        if self.is_continuous:
            return np.asarray(rows, dtype=float).reshape(len(rows), self.dim)
        out = np.empty((len(rows), self.dim), dtype=object)
        for i, r in enumerate(rows):
            out[i, :] = r
        return out


def as_space(spec: Space | Sequence[Parameter | Sequence[float]]) -> Space:
    """A :class:`Space` as is, or one built from a list of parameters or ``(lower, upper)``."""
    return spec if isinstance(spec, Space) else Space(spec)


# ---------------------------------------------------------------------- helpers
def _cell(u: NDArray[np.float64], n: int) -> NDArray[np.int64]:
    """Index of the equal cell of ``[0, 1]`` (``n`` cells) that holds each ``u``."""
    return np.minimum(np.floor(np.clip(u, 0.0, 1.0) * n), n - 1).astype(np.int64)


def _check(p: Parameter, v: Any) -> Any:
    """One value of ``p`` in canonical form, or :class:`OutOfDomainError` naming ``p``."""
    if isinstance(p, Categorical):
        try:
            p.choices.index(v)
        except ValueError:
            raise OutOfDomainError(
                f"{p.name} = {v!r} is not one of its choices {list(p.choices)}"
            ) from None
        # the declared choice itself (a NumPy scalar read back becomes the Python value)
        return p.choices[p.choices.index(v)]
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise OutOfDomainError(f"{p.name} = {v!r} is not a number") from None
    if not math.isfinite(f):
        raise OutOfDomainError(f"{p.name} = {v!r} is not finite")
    if isinstance(p, Integer):
        if f != round(f):
            raise OutOfDomainError(f"{p.name} = {v!r} is not a whole number")
        k = int(round(f))
        if not p.lower <= k <= p.upper:
            raise OutOfDomainError(f"{p.name} = {k} is outside [{p.lower}, {p.upper}]")
        return k
    slack = _SLACK * (p.upper - p.lower)
    if not p.lower - slack <= f <= p.upper + slack:
        raise OutOfDomainError(f"{p.name} = {f} is outside [{p.lower}, {p.upper}]")
    return min(max(f, p.lower), p.upper)


def _renamed(p: Parameter, name: str) -> Parameter:
    if isinstance(p, Categorical):
        return Categorical(p.choices, name)
    return type(p)(p.lower, p.upper, name)


def _pair(b: Any, i: int) -> tuple[float, float]:
    try:
        lo, hi = b
    except (TypeError, ValueError):
        raise ConfigError(f"bounds[{i}] must be a (lower, upper) pair, got {b!r}") from None
    return lo, hi


def _float(v: Any, name: str) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"parameter {name or '?'}: bound {v!r} is not a number") from None


def _int(v: Any, name: str) -> int:
    f = _float(v, name)
    if not math.isfinite(f) or f != round(f):
        raise ConfigError(f"parameter {name or '?'}: integer bound {v!r} is not a whole number")
    return int(round(f))
