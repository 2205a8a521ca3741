"""Ask/tell API of the PTR family: one learner on a design × environment grid.

:class:`PTROptimizer` suggests a design *and* an environment (``Suggestion.x`` is their
concatenation, ``detail`` holds the grid indices ``ix``/``iw``); ``tell(x, y)`` records the value
observed there. The report is the recommended design (optimization: the queried design with the
highest posterior PTR mean) or the level-set masks (Ĥ, L̂). The benchmarks' runner
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
from ev_nav.errors import ConfigError, InvalidObservation
from ev_nav.gp.exact import ExactGP


def fit_hyperparameters(gp: GridPosterior, seed: int) -> GridKernel:
    """Refit the kernel and noise of ``gp`` by marginal likelihood (shared ExactGP core).

    The fit runs on ``y / s`` with ``s`` the RMS of the observations (the prior mean stays zero,
    so this is only a change of units) and the result is scaled back: the optimiser's random
    restarts assume O(1) outputs. If every start fails, the previous hyperparameters are kept.
    """
    Z = gp.grid.Z[torch.as_tensor(gp.obs_index)]
    y = torch.as_tensor(gp.y, dtype=torch.float64) - gp.prior_mean
    s2 = max(float((y * y).mean()), 1e-12)
    model = ExactGP(
        gp.kernel.kind,
        gp.kernel.ls_tensor(Z.shape[1]),
        min(max(gp.kernel.outputscale / s2, 1e-3), 1e3),
        min(max(gp.noise_var / s2, 1e-6), 0.5),
    )
    try:
        model.fit_hyperparameters(
            Z, y / s2**0.5, n_restarts=3, generator=torch.Generator().manual_seed(seed)
        )
    except InvalidObservation:
        return gp.kernel
    kernel = GridKernel(gp.kernel.kind, tuple(model.lengthscale.tolist()), model.outputscale * s2)
    gp.refit(kernel, model.noise_var * s2)
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
        """The next ``(design, environment)`` pair; random during the initial design."""
        if self._pending is None:
            if self.initialising:
                ix = int(self._rng_init.integers(self.problem.n_x))
                iw = int(self._rng_init.integers(self.problem.n_w))
                self._pending = (ix, iw, "init")
            else:
                ix, iw = self.policy.select(self.ctx)
                self._pending = (ix, iw, "bo")
        ix, iw, phase = self._pending
        x = np.concatenate([self.problem.x_points[ix], self.problem.w_points[iw]])
        return Suggestion(x, {"ix": ix, "iw": iw, "phase": phase})

    def tell(self, x: ArrayLike, y: float) -> None:
        """Record ``y`` observed at the suggested ``(design, environment)`` point ``x``."""
        if self._pending is None:
            raise ConfigError("tell() without a pending suggestion: call ask() first")
        ix, iw, phase = self._pending
        expected = np.concatenate([self.problem.x_points[ix], self.problem.w_points[iw]])
        if not np.allclose(np.asarray(x, dtype=float).ravel(), expected, rtol=0.0, atol=1e-12):
            raise ConfigError("tell(): the point differs from the pending suggestion")
        self._pending = None
        self.gp.add(ix, iw, float(y))
        self.ctx.queried_x.append(ix)
        if phase == "init":
            if not self.initialising and self.problem.fit_hyperparameters and self.gp.n >= 2:
                self._refit(self.seed)
            return
        if self.problem.fit_hyperparameters and (self.t + 1) % self.refit_every == 0:
            self._refit(self.seed + self.t)
        self.t += 1

    def _refit(self, seed: int) -> None:
        fit_hyperparameters(self.gp, seed)
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
        grid = self.gp.grid
        Z = grid.Z[torch.as_tensor(self.gp.obs_index)].numpy()
        # a user objective's designs in its own units (the grid holds them rescaled)
        designs = self.problem.info.get("design_points", grid.x_points)
        return BOResult(
            x_best=np.asarray(designs, dtype=float)[ix].copy(),
            value=float(mu[ix]),
            X=Z,
            y=np.asarray(self.gp.y, dtype=float),
            detail=detail,
        )
