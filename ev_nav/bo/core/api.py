"""The shape every family's Python API shares: configure → ``ask()`` → ``tell(x, y)`` → result.

In the manner of BoTorch/Ax's ask-tell loops: an optimiser object is configured once (the problem
structure, the method, a seed), then alternately asked for the next point to evaluate and told
the value observed there; :meth:`AskTell.result` reports the recommendation at any time. The
caller owns the evaluation, so the same object drives a simulation (the families' runners are
loops over it) or a real experiment.

Points are NumPy arrays in the objective's own units (the declared bounds). Families add what
their setting needs: the cost-varying family leaves the coordinates the environment sets as
``NaN`` in :attr:`Suggestion.x` and takes the realised cost in ``tell``; PTR suggests a design
*and* an environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray


@dataclass(frozen=True)
class Suggestion:
    """The next point to evaluate.

    Attributes
    ----------
    x
        The point, shape ``(d,)``, in the objective's units; ``NaN`` marks coordinates that the
        environment sets (the random variables of a cost-varying-subset query).
    detail
        Family-specific facts about the choice (control set, environment index, step kind, …).
    """

    x: NDArray[np.float64]
    detail: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class BOResult:
    """What an optimiser recommends after the evaluations it was told about.

    Attributes
    ----------
    x_best
        The recommended point ``(d,)`` (objective units; ``NaN`` where the environment decides).
    value
        The family's estimate at ``x_best``: a posterior mean (cost-varying subsets, PTR) or the
        best observed value (BOKE), in the objective's units (PTR: a probability).
    X, y
        Every evaluated point ``(n, d)`` and its observation ``(n,)``, in order.
    detail
        Family-specific extras (chosen control set, level-set masks, spend, …).
    """

    x_best: NDArray[np.float64]
    value: float
    X: NDArray[np.float64]
    y: NDArray[np.float64]
    detail: Mapping[str, object] = field(default_factory=dict)

    @property
    def n_evaluations(self) -> int:
        return int(self.y.shape[0])


@runtime_checkable
class AskTell(Protocol):
    """An optimiser driven by its caller, one evaluation at a time."""

    def ask(self) -> Suggestion:
        """The next point; asking again before :meth:`tell` returns the same suggestion."""
        ...

    def tell(self, x: ArrayLike, y: float) -> None:
        """Record the observation ``y`` at the evaluated point ``x``."""
        ...

    def result(self) -> BOResult:
        """The current recommendation."""
        ...
