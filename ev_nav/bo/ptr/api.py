"""Ask/tell API of the PTR family: one learner on a design × environment grid.

:class:`PTROptimizer` suggests a design *and* an environment (``Suggestion.x`` is their
concatenation in the user's coordinates, ``detail`` holds the grid indices ``ix``/``iw``);
``tell(x, y)`` records the value observed there, or at any other point of the domain (prior
data; the model lives on the grid, so an off-grid point counts at its nearest grid point).
``result().X`` lists the told points as given. The report is the recommended design
(optimization: the queried design with the highest posterior PTR mean) or the level-set masks
(Ĥ, L̂). The benchmarks' runner
(:mod:`ev_nav.bo.ptr.runner`) is a loop over this class.

Random streams (a trial's seed ``s``): ``SeedSequence(s).spawn(4)`` gives the initial design, the
policy (ties, random search), the observation noise (the caller's: a simulation draws it) and the
joint posterior samples; hyperparameter refits use ``s`` (after the initial design) and
``s + t`` (after step ``t``).
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

from ev_nav.bo.core.api import BOResult, Suggestion
from ev_nav.bo.ptr.context import Policy, StepContext
from ev_nav.bo.ptr.grid import GridKernel, GridPosterior, ProductGrid
from ev_nav.bo.ptr.measure import ptr_posterior
from ev_nav.bo.ptr.policies import TheoryBeta, UncontrollableW
from ev_nav.bo.ptr.problems import PTRProblem
from ev_nav.bo.ptr.registry import PTRMethodConfig, make_policy
from ev_nav.errors import ConfigError, InvalidObservation, OutOfDomainError
from ev_nav.gp.exact import ExactGP


def fit_hyperparameters(
    gp: GridPosterior, seed: int, *, standardise: bool = False, first: bool = False
) -> GridKernel:
    """Refit the kernel and noise of ``gp`` by marginal likelihood (shared ExactGP core).

    The fit runs on ``(y - m) / s`` and the result is scaled back: the optimiser's random
    restarts assume O(1) outputs. Without ``standardise`` (the benchmarks' published set-up)
    ``m`` is the fixed prior mean and ``s`` the RMS of ``y - m``; with it ``m`` is the mean of
    the observations (it becomes the prior mean) and ``s`` their standard deviation, and the
    ``first`` fit starts from signal variance 1 and noise variance 0.01 in those units, so the
    run does not depend on the units of ``y``. If every start fails, the previous
    hyperparameters are kept.
    """
    Z = gp.grid.Z[torch.as_tensor(gp.obs_index)]
    y_raw = torch.as_tensor(gp.y, dtype=torch.float64)
    mean = float(y_raw.mean()) if standardise else gp.prior_mean
    y = y_raw - mean
    s2 = max(float((y * y).mean()), 1e-12)
    if standardise and first:
        outputscale0, noise0 = 1.0, 1e-2
    else:
        outputscale0 = min(max(gp.kernel.outputscale / s2, 1e-3), 1e3)
        noise0 = min(max(gp.noise_var / s2, 1e-6), 0.5)
    model = ExactGP(gp.kernel.kind, gp.kernel.ls_tensor(Z.shape[1]), outputscale0, noise0)
    try:
        model.fit_hyperparameters(
            Z, y / s2**0.5, n_restarts=3, generator=torch.Generator().manual_seed(seed)
        )
    except InvalidObservation:
        return gp.kernel
    kernel = GridKernel(gp.kernel.kind, tuple(model.lengthscale.tolist()), model.outputscale * s2)
    gp.refit(kernel, model.noise_var * s2, prior_mean=mean if standardise else None)
    return kernel


class PTROptimizer:
    """One PTR learner driven by ask/tell.

    Parameters
    ----------
    problem
        The grid, ``p(w)``, threshold ``h``, level ``alpha``, GP prior and noise level (its
        ``f_true`` is never read).
    method
        A registered name (``ev-nav bo ptr list``) or a policy object.
    seed
        The trial seed (module docstring).
    method_config
        ``alpha``, ``beta``, ``m``, ``eta`` (default: the paper's; ``alpha`` the problem's).
    n_init
        Random initial queries (default: the problem's).
    refit_every
        Hyperparameter refit period for problems that learn them.
    beta_schedule, delta
        ``"theory"``: BPT-UCB/BPT-LSE with ``β_t = |X|π²t²/(3δ)``.
    uncontrollable_w
        Nature draws ``w_t ~ p(w)`` instead of the method choosing it (an extension).
    capacity
        Initial observation slots of the grid posterior.
    """

    def __init__(
        self,
        problem: PTRProblem,
        method: str | Policy,
        *,
        seed: int = 0,
        method_config: PTRMethodConfig | None = None,
        n_init: int | None = None,
        refit_every: int = 10,
        beta_schedule: str = "constant",
        delta: float = 0.1,
        uncontrollable_w: bool = False,
        capacity: int = 64,
    ) -> None:
        if beta_schedule not in ("constant", "theory"):
            raise ConfigError("beta_schedule must be 'constant' or 'theory'")
        self.problem = problem
        if isinstance(method, str):
            settings = method_config or PTRMethodConfig(alpha=problem.alpha)
            if settings.alpha is None:
                settings = PTRMethodConfig(problem.alpha, settings.beta, settings.m, settings.eta)
            policy = make_policy(method, settings)
        else:
            policy = method
        if beta_schedule == "theory":
            policy = TheoryBeta(policy, delta)  # type: ignore[arg-type]
        if uncontrollable_w:
            policy = UncontrollableW(policy)
        self.policy: Policy = policy
        self.seed = int(seed)
        self.refit_every = int(refit_every)
        s_init, s_policy, self._s_noise, s_torch = np.random.SeedSequence(self.seed).spawn(4)
        self._rng_init = np.random.default_rng(s_init)
        tgen = torch.Generator().manual_seed(int(s_torch.generate_state(1)[0]))
        self.gp = GridPosterior(
            ProductGrid(problem.x_points, problem.w_points),
            problem.kernel,
            problem.noise_std**2,
            capacity=capacity,
        )
        self.ctx = StepContext(problem, self.gp, [], np.random.default_rng(s_policy), tgen)
        self.n_init = problem.n_init if n_init is None else int(n_init)
        self.t = 0  # BO steps told (initial design excluded)
        self._pending: tuple[int, int, str] | None = None
        self._fitted = False
        #: every told point as given (user coordinates)
        self.told_X: list[NDArray[np.float64]] = []

    @property
    def noise_seed(self) -> np.random.SeedSequence:
        """The trial's observation-noise stream (for a simulation of the same trial)."""
        return self._s_noise

    @property
    def task(self) -> str:
        return self.policy.task

    @property
    def initialising(self) -> bool:
        return len(self.ctx.queried_x) < self.n_init

    # ------------------------------------------------------------------------ ask / tell
    def ask(self) -> Suggestion:
        """The next ``(design, environment)`` pair (user coordinates); random during the initial
        design."""
        if self._pending is None:
            if self.initialising:
                ix = int(self._rng_init.integers(self.problem.n_x))
                iw = int(self._rng_init.integers(self.problem.n_w))
                self._pending = (ix, iw, "init")
            else:
                ix, iw = self.policy.select(self.ctx)
                self._pending = (ix, iw, "bo")
        ix, iw, phase = self._pending
        x = np.concatenate([self.problem.designs[ix], self.problem.environments[iw]])
        return Suggestion(x, {"ix": ix, "iw": iw, "phase": phase})

    def grid_point(self, x: ArrayLike) -> tuple[int, int]:
        """The grid indices ``(ix, iw)`` of the grid point nearest to ``x = (design, w)``.

        Distances are taken per input relative to the grid's extent along it (the GP's input
        scaling). The model of PTR lives on the design × environment grid, so an observation
        off the grid is attached to its nearest grid point.

        Raises
        ------
        OutOfDomainError
            ``x`` has the wrong length or lies outside the box spanned by the grid.
        """
        X, W = self.problem.designs, self.problem.environments
        v = np.asarray(x, dtype=float).ravel()
        dx, dw = X.shape[1], W.shape[1]
        if v.size != dx + dw or not np.all(np.isfinite(v)):
            raise OutOfDomainError(
                f"a point is {dx} design value(s) then {dw} environment value(s), got {v.tolist()}"
            )
        ix = _nearest(X, v[:dx], "design")
        iw = _nearest(W, v[dx:], "environment")
        return ix, iw

    def tell(self, x: ArrayLike, y: float) -> None:
        """Record ``y`` observed at ``x = (design, w)``: the suggested point or any other point
        of the domain (prior data; an off-grid point counts at its nearest grid point, see
        :meth:`grid_point`). Data told during the initial design counts towards it."""
        v = np.asarray(x, dtype=float).ravel()
        pending = self._pending
        if pending is not None and np.array_equal(
            v,
            np.concatenate(
                [self.problem.designs[pending[0]], self.problem.environments[pending[1]]]
            ),
        ):
            ix, iw = pending[0], pending[1]  # the suggestion itself (also on a grid with twins)
        else:
            ix, iw = self.grid_point(v)
        if not np.isfinite(float(y)):
            raise InvalidObservation(f"observation at {np.asarray(x).tolist()} is not finite")
        if self._pending is not None and self._pending[:2] == (ix, iw):
            phase = self._pending[2]
        else:
            phase = "init" if self.initialising else "data"
        # any observation makes a pending suggestion stale: the next ask() recomputes it
        self._pending = None
        self.told_X.append(np.asarray(x, dtype=float).ravel().copy())
        self.gp.add(ix, iw, float(y))
        self.ctx.queried_x.append(ix)
        if phase == "init":
            if not self.initialising and self.problem.fit_hyperparameters and self.gp.n >= 2:
                self._refit(self.seed)
            return
        if phase == "data":
            return
        if self.problem.fit_hyperparameters and (self.t + 1) % self.refit_every == 0:
            self._refit(self.seed + self.t)
        self.t += 1

    def _refit(self, seed: int) -> None:
        fit_hyperparameters(
            self.gp, seed, standardise=self.problem.standardise, first=not self._fitted
        )
        self._fitted = True
        self.ctx.invalidate_sampler()

    # ------------------------------------------------------------------------ reports
    def report(self) -> int | tuple[NDArray[np.bool_], NDArray[np.bool_]]:
        """The method's current answer: a design index, or the masks ``(Ĥ, L̂)``."""
        return self.policy.report(self.ctx)

    def ptr_mean(self) -> NDArray[np.float64]:
        """Posterior mean of ``p_upper(x)`` at every design (plain threshold ``h``)."""
        return ptr_posterior(self.gp.mean, self.gp.var, self.problem.p_w, self.problem.h).mean

    def result(self) -> BOResult:
        """The recommended design (optimization) or the estimated level set (``detail``)."""
        if self.gp.n == 0:
            raise ConfigError("no observations yet: nothing to recommend")
        mu = self.ptr_mean()
        rep = self.report()
        detail: dict[str, object] = {"task": self.task}
        if isinstance(rep, tuple):
            high, low = rep
            ix = int(np.argmax(np.where(high, mu, -np.inf))) if high.any() else int(np.argmax(mu))
            detail.update(high=high.tolist(), low=low.tolist())
        else:
            ix = int(rep)
        detail["ix"] = ix
        detail["grid_index"] = [
            (j // self.gp.grid.n_w, j % self.gp.grid.n_w) for j in self.gp.obs_index
        ]
        return BOResult(
            x_best=self.problem.designs[ix].copy(),
            value=float(mu[ix]),
            X=np.array(self.told_X),
            y=np.asarray(self.gp.y, dtype=float),
            detail=detail,
        )


def _nearest(grid: NDArray[np.float64], v: NDArray[np.float64], what: str) -> int:
    """Index of the row of ``grid`` nearest to ``v`` (per-column extent scaling); refuses a ``v``
    outside the grid's box (a relative slack of 1e-9)."""
    lo, hi = grid.min(0), grid.max(0)
    span = np.where(hi > lo, hi - lo, 1.0)
    if np.any(v < lo - 1e-9 * span) or np.any(v > hi + 1e-9 * span):
        raise OutOfDomainError(
            f"{what} {v.tolist()} is outside the grid's box [{lo.tolist()}, {hi.tolist()}]"
        )
    d2 = (((grid - v) / span) ** 2).sum(1)
    return int(np.argmin(d2))
