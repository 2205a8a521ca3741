"""Your own objective: a Python callable with declared bounds, named ``module:function``.

Write the function to **maximise** (negate a cost to minimise it) and declare its box, plus what
the family needs, with :func:`objective`::

    # my_problem.py
    from ev_nav.bo import objective

    @objective(bounds=[(-2.0, 2.0), (0.0, 1.0)])
    def f(x):                      # x: numpy array (d,) in the declared units
        return -(x[0] - 0.5) ** 2 - (x[1] - 0.25) ** 2

Inputs may be whole numbers or choices: an entry of ``bounds`` is a ``(lower, upper)`` pair
(continuous) or :class:`~ev_nav.bo.core.space.Integer` / :class:`~ev_nav.bo.core.space.Categorical`
(``bounds=[(0.0, 1.0), Integer(1, 8), Categorical(["adam", "sgd"])]``); the function then receives
an object array holding a float, an int and the chosen value (:mod:`ev_nav.bo.core.space`).

Then ``ev-nav bo boke run --objective my_problem:f`` (the current folder is importable, or name
a file: ``path/to/my_problem.py:f``) or, from Python, :func:`load_objective`
(docs/bo-overview.md, "Your own objective"). Family extras:

* cost-varying subsets (``cvs``/``ucvs``): ``control_sets`` (lists of 0-based inputs the
  learner sets; the others are random) and ``costs`` (one per control set; for ``ucvs`` the
  mean of the simulated cost, unknown to the learner) and optionally ``uncontrolled``, the
  distribution of the inputs the environment sets (``"normal"``, the default, ``"uniform"``
  or one entry per input; :func:`ev_nav.bo.cvs.benchmarks.random_inputs`);
* PTR: the function takes ``f(x, w)``; ``environment`` (grid of ``w`` values, ``(n_w, d_w)``),
  ``weights`` (``p(w)``, default uniform), ``threshold`` ``h`` and, for level sets, ``alpha``;
  ``design_points`` replaces the default design grid;
* every family: ``noise_std``, the observation noise if known (BOKE, PTR, the cost-varying
  family's initial GP noise), and ``optimum``, a known maximiser: BOKE's and the cost-varying
  family's summaries report simple regret against ``f(optimum)``; without it the runs report
  recommendations and best observations, never a regret.

Command-line options (``--bounds``, ``--control-sets``, ``--costs``, …) override declarations.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.bo.core.space import Categorical, Continuous, Integer, Parameter, Space
from ev_nav.errors import ConfigError

F = TypeVar("F", bound=Callable[..., float])

#: Attribute the :func:`objective` decorator sets on the function.
DECLARATION = "__bo_objective__"

#: Extras a declaration may hold (anything else is a typo and is refused).
KNOWN_EXTRAS = frozenset(
    {
        "control_sets",
        "costs",
        "environment",
        "weights",
        "threshold",
        "alpha",
        "design_points",
        "noise_std",
        "optimum",
        "uncontrolled",
    }
)


@dataclass(frozen=True)
class UserObjective:
    """A user function to maximise with its box and family-specific extras.

    Attributes
    ----------
    fn
        ``fn(x) -> float`` for one point ``x`` of shape ``(d,)`` in the declared units
        (PTR: ``fn(x, w)``).
    bounds
        One entry per input: a ``(lower, upper)`` pair (continuous), or an
        :class:`~ev_nav.bo.core.space.Integer` or :class:`~ev_nav.bo.core.space.Categorical`.
    name
        ``module:function`` (for results and messages).
    extras
        Family-specific declarations (see the module docstring).
    """

    fn: Callable[..., float]
    bounds: tuple[tuple[float, float] | Parameter, ...]
    name: str = "objective"
    extras: Mapping[str, Any] = field(default_factory=dict)
    space: Space = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", check_bounds(self.bounds, self.name))
        object.__setattr__(self, "space", Space(list(self.bounds)))
        unknown = set(self.extras) - KNOWN_EXTRAS
        if unknown:
            raise ConfigError(
                f"objective {self.name}: unknown declaration(s) {sorted(unknown)}; "
                f"use {', '.join(sorted(KNOWN_EXTRAS))}"
            )

    @property
    def dim(self) -> int:
        return len(self.bounds)

    def require_call(self, form: str, family: str) -> None:
        """Refuse a function that cannot be called as ``form`` (``"f(x)"`` or ``"f(x, w)"``),
        the way ``family`` calls it, before any run starts: it failed with a ``TypeError``
        inside every run. A function whose signature cannot be read is let through.

        Raises
        ------
        ConfigError
            ``fn`` does not accept that many positional arguments.
        """
        import inspect

        n = form.count(",") + 1
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):  # a builtin or C callable: nothing to read
            return
        try:
            signature.bind(*([None] * n))
        except TypeError:
            star = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
            names = ", ".join(  # without annotations: the message stays one short line
                star.get(q.kind, "") + q.name + ("=…" if q.default is not q.empty else "")
                for q in signature.parameters.values()
            )
            other = "f(x, w) is PTR's form" if n == 1 else "f(x) is the other families' form"
            raise ConfigError(
                f"objective {self.name} takes ({names}), but {family} calls {form} ({other})"
            ) from None

    @property
    def code_fingerprint(self) -> str:
        """A hash of what the objective computes: its module's source file (the function's
        compiled code where no file can be read), the function's name, its box and its
        declarations; not where the file lies or how it was named (``my_problem:bowl`` and
        ``./my_problem.py:bowl`` are one objective). A resumed run compares it, so that runs
        of an edited objective are not mixed with the earlier runs."""
        import hashlib
        import inspect
        import json

        from ev_nav.provenance import to_jsonable

        digest = hashlib.sha256()
        try:
            source = inspect.getsourcefile(self.fn)
            digest.update(Path(source).read_bytes() if source else b"")
        except (OSError, TypeError):
            source = None
        if not source:
            code = getattr(self.fn, "__code__", None)
            digest.update(code.co_code if code is not None else repr(self.fn).encode())
        declared = {"function": getattr(self.fn, "__qualname__", repr(self.fn)),
                    "bounds": [to_jsonable(b) for b in self.bounds],
                    "extras": to_jsonable(dict(self.extras))}
        digest.update(json.dumps(declared, sort_keys=True, default=repr).encode())
        return "objective-sha256:" + digest.hexdigest()[:32]

    @property
    def lower(self) -> NDArray[np.float64]:
        """Lower bounds (continuous inputs only; see :attr:`space` otherwise)."""
        self._continuous_only("lower")
        return np.array([b[0] for b in self.bounds], dtype=float)  # type: ignore[index]

    @property
    def upper(self) -> NDArray[np.float64]:
        """Upper bounds (continuous inputs only; see :attr:`space` otherwise)."""
        self._continuous_only("upper")
        return np.array([b[1] for b in self.bounds], dtype=float)  # type: ignore[index]

    def from_unit(self, u: ArrayLike) -> NDArray[np.float64]:
        """Unit-cube coordinates → declared units (``lower + (upper - lower) u``; continuous
        inputs only, where it equals ``space.decode`` without its clipping)."""
        return self.lower + (self.upper - self.lower) * np.asarray(u, dtype=float)

    def to_unit(self, x: ArrayLike) -> NDArray[np.float64]:
        """Declared units → unit-cube coordinates (continuous inputs only)."""
        return (np.asarray(x, dtype=float) - self.lower) / (self.upper - self.lower)

    def _continuous_only(self, what: str) -> None:
        if not self.space.is_continuous:
            raise ConfigError(
                f"objective {self.name} has integer or categorical inputs: {what} is defined for "
                "continuous ones only (use .space.encode / .space.decode)"
            )

    def __call__(self, *args: NDArray[np.float64]) -> float:
        """``fn(*args)`` as a float; a non-finite or non-numeric value raises.

        An error the function itself raises propagates as it is, with its traceback (it was
        reported as "did not return a number", without the line of the user's code)."""
        result = self.fn(*args)
        try:
            value = float(result)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"objective {self.name} did not return a number ({exc})") from None
        if not np.isfinite(value):
            raise ConfigError(f"objective {self.name} returned {value} at {args[0].tolist()}")
        return value

    def with_overrides(self, **overrides: Any) -> UserObjective:
        """A copy with ``bounds`` and extras replaced where the overrides are not ``None``."""
        given = {k: v for k, v in overrides.items() if v is not None}
        bounds = given.pop("bounds", self.bounds)
        return UserObjective(self.fn, bounds, self.name, {**self.extras, **given})


def check_bounds(
    bounds: object, name: str = "objective"
) -> tuple[tuple[float, float] | Parameter, ...]:
    """Validate ``[(lower, upper), Integer(...), Categorical(...), ...]`` (finite, increasing).

    Pairs become float pairs; :class:`Continuous` entries become pairs too, so a continuous box
    reads the same however it was declared; integer and categorical entries stay as they are.
    """
    entries: list[tuple[float, float] | Parameter] = []
    try:
        for b in bounds:  # type: ignore[attr-defined]
            if isinstance(b, Continuous):
                entries.append((b.lower, b.upper))
            elif isinstance(b, (Integer, Categorical)):
                entries.append(b)
            else:
                lo, hi = b
                entries.append((float(lo), float(hi)))
    except (TypeError, ValueError):
        raise ConfigError(
            f"{name}: bounds must be a list of (lower, upper) pairs, Integer or Categorical, "
            f"got {bounds!r}"
        ) from None
    pairs = [e for e in entries if isinstance(e, tuple)]
    if not entries or not all(np.isfinite(lo) and np.isfinite(hi) and lo < hi for lo, hi in pairs):
        raise ConfigError(f"{name}: bounds must be finite with lower < upper, got {tuple(entries)}")
    return tuple(entries)


def objective(*, bounds: object = None, **extras: Any) -> Callable[[F], F]:
    """Declare a function as a BO objective (its box and family extras); returns it unchanged."""

    def mark(fn: F) -> F:
        setattr(fn, DECLARATION, {"bounds": bounds, **extras})
        return fn

    return mark


def load_objective(spec: str, **overrides: Any) -> UserObjective:
    """Import ``module:function`` (or ``file.py:function``) and read its declaration.

    The current folder is importable, as for ``python -m``. ``overrides`` (``bounds=…``,
    ``costs=…``, …; ``None`` values are ignored) replace what the function declares.

    Raises
    ------
    ConfigError
        Bad spec, module or function not found, or no bounds declared or given.
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"objective {spec!r} must look like module:function or file.py:function")
    module = _import(module_name, spec)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"objective {spec!r}: {module_name} has no function {attr!r}")
    declared = dict(getattr(fn, DECLARATION, {}) or {})
    if declared.get("bounds") is None and overrides.get("bounds") is None:
        raise ConfigError(
            f"objective {spec!r} declares no bounds; decorate it with "
            "@ev_nav.bo.objective(bounds=[(low, high), ...]) or pass --bounds"
        )
    bounds = declared.pop("bounds") if declared.get("bounds") is not None else overrides["bounds"]
    declared.pop("bounds", None)
    return UserObjective(fn, bounds, spec, declared).with_overrides(**overrides)


def _import(module_name: str, spec: str) -> object:
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise ConfigError(f"objective {spec!r}: no file {path}")
            mod_spec = importlib.util.spec_from_file_location(f"_bo_objective_{path.stem}", path)
            assert mod_spec is not None and mod_spec.loader is not None
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
            return module
        # the current folder is importable for this import only (as for ``python -m``)
        sys.path.insert(0, os.getcwd())
        try:
            return importlib.import_module(module_name)
        finally:
            sys.path.remove(os.getcwd())
    except ConfigError:
        raise
    except Exception as exc:  # the user's module may raise anything while importing
        raise ConfigError(f"objective {spec!r}: cannot import {module_name} ({exc})") from None
