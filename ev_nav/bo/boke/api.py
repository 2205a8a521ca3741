"""Ask/tell API of the BOKE family: one method of the study on a box or a mixed space.

:class:`BOKEOptimizer` suggests a Latin-hypercube initial design (``max(5, 2d)`` points unless
given), then the method's proposals. ``tell(x, y)`` records an observation at **any** point of
the domain: the suggested one, or data from elsewhere (earlier experiments, points a colleague
chose); a batch ``(n, d)`` may be told at once. Data told before the design is exhausted counts
towards it (the design asks only for what is missing). The benchmarks' runner
(:mod:`ev_nav.bo.boke.runner`) is a loop over this class.

Everything inside works on the internal unit cube of a :class:`~ev_nav.bo.core.space.Space`:
continuous inputs affinely, integers as equal cells, categoricals one-hot; integer and
categorical suggestions are always valid values (the acquisition is maximised at snapped points).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from scipy.stats import qmc

from ev_nav.bo.boke.registry import BOKEMethodConfig, Method, make_method
from ev_nav.bo.core.api import BOResult, Suggestion
from ev_nav.bo.core.maximize import single_threaded
from ev_nav.bo.core.space import Parameter, Space
from ev_nav.errors import ConfigError, InvalidObservation

DTYPE = torch.float64


def initial_size(dim: int) -> int:
    """Initial-design size ``max(5, 2d)`` (docs/bo-boke.md, protocol)."""
    return max(5, 2 * dim)


class BOKEOptimizer:
    """One method of the BOKE study driven by ask/tell.

    Parameters
    ----------
    dim_or_space
        The input dimension (points are then unit-cube coordinates), the box
        ``[(lower, upper), ...]``, or a :class:`~ev_nav.bo.core.space.Space` (or a list of
        its parameters) with integer and categorical inputs.
    method
        A registered name (``ev-nav bo boke list``) or a method object.
    seed
        Seeds the method's generator (candidates, BOKE+ coin flips) and, without
        ``initial_design``, the Latin-hypercube design.
    method_config
        Method settings (default :class:`BOKEMethodConfig`: GP baselines fit their
        hyperparameters by marginal likelihood every 5 observations).
    noise_std
        Known observation-noise standard deviation in the caller's units of ``y`` (0: none).
    initial_design
        Internal (unit-cube) design points ``(n0, D)`` to evaluate first; snapped to valid
        points of a mixed space.
    """

    def __init__(
        self,
        dim_or_space: int | Space | Sequence[tuple[float, float] | Parameter],
        method: str | Method,
        *,
        seed: int = 0,
        method_config: BOKEMethodConfig | None = None,
        noise_std: float = 0.0,
        initial_design: NDArray[np.float64] | None = None,
    ) -> None:
        if isinstance(dim_or_space, (int, np.integer)):
            if dim_or_space < 1:
                raise ConfigError("the dimension must be >= 1")
            self.space = Space.from_bounds([(0.0, 1.0)] * int(dim_or_space))
        else:
            self.space = dim_or_space if isinstance(dim_or_space, Space) else Space(dim_or_space)
        #: internal (unit-cube) dimension
        self.dim = self.space.internal_dim
        self.method = (
            make_method(method, method_config, noise_std) if isinstance(method, str) else method
        )
        self.gen = torch.Generator().manual_seed(int(seed))
        if initial_design is None:
            rng = np.random.default_rng(int(seed))
            n0 = initial_size(self.space.dim)  # one per user input, not per one-hot coordinate
            initial_design = qmc.LatinHypercube(self.dim, seed=rng).random(n0)
        design = np.atleast_2d(np.asarray(initial_design, dtype=float))
        if design.shape[1] != self.dim:
            raise ConfigError(f"initial design needs {self.dim} columns, got {design.shape[1]}")
        self.design = self.space.snap(design)
        self._design_left = list(range(self.design.shape[0]))
        self.X = torch.empty(0, self.dim, dtype=DTYPE)
        self.y = torch.empty(0, dtype=DTYPE)
        self.steps: dict[str, int] = {}
        self._pending: tuple[torch.Tensor, str] | None = None

    @property
    def initialising(self) -> bool:
        """True while the data holds fewer points than the initial design."""
        return self.X.shape[0] < self.design.shape[0] and bool(self._design_left)

    # ------------------------------------------------------------------------ ask / tell
    def ask(self) -> Suggestion:
        """The next point: a design point not yet evaluated, then the method's proposal."""
        if self.initialising:
            u = self.design[self._design_left[0]]
            return Suggestion(self._to_user(u[None, :])[0], {"step": "design"})
        if self._pending is None:
            with single_threaded():  # tiny matrices: thread hand-offs cost more than they save
                if self.space.is_continuous:  # (a method written without the space argument)
                    prop = self.method.propose(self.X, self.y, self.gen)
                else:
                    prop = self.method.propose(self.X, self.y, self.gen, self.space)
            x = prop.x.clamp(0.0, 1.0).reshape(1, -1)
            if not torch.isfinite(x).all():
                raise InvalidObservation(f"{self.method.name} proposed a non-finite point")
            x = self.space.snap(x)
            self._pending = (x, prop.step)
        x, step = self._pending
        return Suggestion(self._to_user(x.numpy())[0], {"step": step})

    def tell(self, x: ArrayLike, y: float | ArrayLike) -> None:
        """Record ``y`` at ``x``: one point ``(d,)`` or a batch ``(n, d)``, anywhere in the domain.

        Raises
        ------
        OutOfDomainError
            A point outside the domain (bounds, whole numbers, choices).
        InvalidObservation
            Non-finite values, or as many points as values.
        """
        xu = self._to_unit(x)
        yv = np.atleast_1d(np.asarray(y, dtype=float))
        if xu.shape[0] != yv.size:
            raise InvalidObservation(f"got {xu.shape[0]} points but {yv.size} observations")
        if not np.all(np.isfinite(yv)):
            raise InvalidObservation("observations must be finite")
        X_new = torch.as_tensor(xu, dtype=DTYPE)
        for row in xu:
            # a design point told (whatever its order) is no longer asked for
            for k in self._design_left:
                if np.allclose(row, self.design[k], rtol=0.0, atol=1e-9):
                    self._design_left.remove(k)
                    break
        if self._pending is not None:
            px, step = self._pending
            if any(np.allclose(row, px[0].numpy(), rtol=0.0, atol=1e-9) for row in xu):
                self.steps[step] = self.steps.get(step, 0) + 1
            # any new data makes a pending proposal stale: the next ask() recomputes it
            self._pending = None
        self.X = torch.cat([self.X, X_new])
        self.y = torch.cat([self.y, torch.as_tensor(yv, dtype=DTYPE)])

    # ------------------------------------------------------------------------ result
    def result(self) -> BOResult:
        """The best observed point (``detail``: how many steps of each kind were taken)."""
        if self.X.shape[0] == 0:
            raise ConfigError("no observations yet: nothing to recommend")
        j = int(torch.argmax(self.y))
        X = self._to_user(self.X.numpy())
        return BOResult(
            x_best=X[j].copy(),
            value=float(self.y[j]),
            X=X,
            y=self.y.numpy().copy(),
            detail={"steps": dict(self.steps), "method": self.method.name},
        )

    # ------------------------------------------------------------------------ units
    def _to_user(self, U: NDArray[np.float64]) -> NDArray[np.float64]:
        """Internal points ``(n, D)`` → the caller's points ``(n, d)``."""
        return self.space.decode(U)

    def _to_unit(self, x: ArrayLike) -> NDArray[np.float64]:
        """The caller's point(s) → validated internal points ``(n, D)``."""
        return self.space.encode(x)
