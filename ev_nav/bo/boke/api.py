"""Ask/tell API of the BOKE family: one method of the study on a box.

:class:`BOKEOptimizer` suggests a Latin-hypercube initial design (``max(5, 2d)`` points unless
given), then the method's proposals; ``tell(x, y)`` records observations (a batch ``(n, d)`` of
the design may be told at once). The benchmarks' runner (:mod:`ev_nav.bo.boke.runner`) is a loop
over this class. Everything inside works on the unit cube; ``bounds`` maps the caller's box.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from scipy.stats import qmc

from ev_nav.bo.boke.registry import BOKEMethodConfig, Method, make_method
from ev_nav.bo.core.api import BOResult, Suggestion
from ev_nav.errors import ConfigError, InvalidObservation

DTYPE = torch.float64


def initial_size(dim: int) -> int:
    """Initial-design size ``max(5, 2d)`` (docs/bo-boke.md, protocol)."""
    return max(5, 2 * dim)


class BOKEOptimizer:
    """One method of the BOKE study driven by ask/tell.

    Parameters
    ----------
    dim_or_bounds
        The input dimension (unit cube) or the box ``[(lower, upper), ...]``.
    method
        A registered name (``ev-nav bo boke list``) or a method object.
    seed
        Seeds the method's generator (candidates, BOKE+ coin flips) and, without
        ``initial_design``, the Latin-hypercube design.
    method_config
        Method settings.
    noise_std
        Known observation-noise standard deviation in the caller's units of ``y`` (0: none).
    initial_design
        Unit-cube design points ``(n0, d)`` to evaluate first.
    """

    def __init__(
        self,
        dim_or_bounds: int | Sequence[tuple[float, float]],
        method: str | Method,
        *,
        seed: int = 0,
        method_config: BOKEMethodConfig | None = None,
        noise_std: float = 0.0,
        initial_design: NDArray[np.float64] | None = None,
    ) -> None:
        if isinstance(dim_or_bounds, int):
            self.dim, self._lower, self._upper = dim_or_bounds, None, None
        else:
            b = np.asarray(dim_or_bounds, dtype=float)
            if b.ndim != 2 or b.shape[1] != 2 or not np.all(b[:, 0] < b[:, 1]):
                raise ConfigError("bounds must be increasing (lower, upper) pairs")
            self.dim, self._lower, self._upper = b.shape[0], b[:, 0], b[:, 1]
        if self.dim < 1:
            raise ConfigError("the dimension must be >= 1")
        self.method = (
            make_method(method, method_config, noise_std) if isinstance(method, str) else method
        )
        self.gen = torch.Generator().manual_seed(int(seed))
        if initial_design is None:
            rng = np.random.default_rng(int(seed))
            initial_design = qmc.LatinHypercube(self.dim, seed=rng).random(initial_size(self.dim))
        self.design = np.atleast_2d(np.asarray(initial_design, dtype=float))
        self.X = torch.empty(0, self.dim, dtype=DTYPE)
        self.y = torch.empty(0, dtype=DTYPE)
        self.steps: dict[str, int] = {}
        self._pending: tuple[torch.Tensor, str] | None = None

    @property
    def initialising(self) -> bool:
        return self.X.shape[0] < self.design.shape[0]

    # ------------------------------------------------------------------------ ask / tell
    def ask(self) -> Suggestion:
        """The next point: a design point, then the method's proposal."""
        if self.initialising:
            return Suggestion(self._to_user(self.design[self.X.shape[0]]), {"step": "design"})
        if self._pending is None:
            prop = self.method.propose(self.X, self.y, self.gen)
            x = prop.x.clamp(0.0, 1.0).reshape(1, -1)
            if not torch.isfinite(x).all():
                raise InvalidObservation(f"{self.method.name} proposed a non-finite point")
            self._pending = (x, prop.step)
        x, step = self._pending
        return Suggestion(self._to_user(x[0].numpy()), {"step": step})

    def tell(self, x: ArrayLike, y: float | ArrayLike) -> None:
        """Record ``y`` at ``x``; during the design, a batch ``(n, d)`` of it may be told."""
        xu = np.atleast_2d(self._to_unit(x))
        yv = np.atleast_1d(np.asarray(y, dtype=float))
        if xu.shape != (yv.size, self.dim):
            raise InvalidObservation(f"got {xu.shape[0]} points but {yv.size} observations")
        if not np.all(np.isfinite(yv)):
            raise InvalidObservation("observations must be finite")
        if self.initialising:
            k = self.X.shape[0]
            if xu.shape[0] > self.design.shape[0] - k or not np.allclose(
                xu, self.design[k : k + xu.shape[0]], rtol=0.0, atol=1e-12
            ):
                raise ConfigError("tell(): expected the suggested design point(s)")
            X_new = torch.as_tensor(self.design[k : k + xu.shape[0]], dtype=DTYPE)
        else:
            if self._pending is None or xu.shape[0] != 1:
                raise ConfigError("tell() without a pending suggestion: call ask() first")
            X_new, step = self._pending
            if not np.allclose(xu[0], X_new[0].numpy(), rtol=0.0, atol=1e-12):
                raise ConfigError("tell(): the point differs from the pending suggestion")
            self._pending = None
            self.steps[step] = self.steps.get(step, 0) + 1
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
    def _to_user(self, u: NDArray[np.float64]) -> NDArray[np.float64]:
        u = np.asarray(u, dtype=float)
        return u.copy() if self._lower is None else self._lower + (self._upper - self._lower) * u

    def _to_unit(self, x: ArrayLike) -> NDArray[np.float64]:
        x = np.asarray(x, dtype=float)
        return x if self._lower is None else (x - self._lower) / (self._upper - self._lower)
