"""What a PTR method sees at each step, the method protocol and the reports methods share.

A *policy* chooses the next query ``(i_x, i_w)`` from a :class:`StepContext` and reports its
current answer: the recommended design ``x̂_t`` (optimization) or the masks ``(Ĥ_t, L̂_t)``
(level-set estimation). The BPT-* policies live in :mod:`ev_nav.bo.ptr.policies`, the baselines
in :mod:`ev_nav.bo.ptr.baselines`; both build on this module only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import torch

from ev_nav.bo.ptr.grid import GridPosterior
from ev_nav.bo.ptr.measure import (
    argmax_random,
    classify_level_set,
    credible_interval,
    ptr_posterior,
)
from ev_nav.bo.ptr.problems import PTRProblem
from ev_nav.bo.ptr.sampling import (
    KroneckerPriorSampler,
    RFFPriorSampler,
    make_prior_sampler,
    posterior_samples,
)

Task = Literal["opt", "lse"]


@dataclass
class StepContext:
    """Everything a policy may look at when choosing step ``t``.

    Attributes
    ----------
    problem
        The benchmark (its ``f_true`` must never be read by a policy).
    gp
        Posterior after ``t - 1`` observations.
    queried_x
        Design indices queried so far (including the initial design).
    rng
        Trial generator for ties and random search.
    torch_gen
        Trial generator for joint posterior samples.
    """

    problem: PTRProblem
    gp: GridPosterior
    queried_x: list[int]
    rng: np.random.Generator
    torch_gen: torch.Generator
    n_features: int = 1000
    _sampler: KroneckerPriorSampler | RFFPriorSampler | None = field(default=None, repr=False)

    def sample(self) -> np.ndarray:
        """One joint posterior draw of f on the grid, shape ``(n_x, n_w)``."""
        # Prior factors depend only on the kernel: cached until a refit invalidates them.
        if self._sampler is None:
            self._sampler = make_prior_sampler(self.gp.grid, self.gp.kernel, self.n_features)
        return posterior_samples(self.gp, self._sampler, 1, self.torch_gen)[0]

    def invalidate_sampler(self) -> None:
        """Drop cached sampler factors (after a hyperparameter refit)."""
        self._sampler = None

    @property
    def queried(self) -> np.ndarray:
        """Unique queried design indices (all designs if nothing was queried yet)."""
        if not self.queried_x:
            return np.arange(self.problem.n_x)
        return np.unique(np.asarray(self.queried_x))


class Policy(Protocol):
    """A PTR method."""

    name: str
    task: Task

    def select(self, ctx: StepContext) -> tuple[int, int]: ...

    def report(self, ctx: StepContext) -> int | tuple[np.ndarray, np.ndarray]: ...


# ------------------------------------------------------------------------------ shared reports
def best_queried(ctx: StepContext, score: np.ndarray) -> int:
    """``argmax`` of ``score`` over the queried designs (random tie-break)."""
    cand = ctx.queried
    return int(cand[argmax_random(score[cand], ctx.rng)])


def report_ptr_mean(ctx: StepContext) -> int:
    """PTR-aware report (A18): ``argmax_{queried x} μ^(p)_t(x)`` with the plain threshold h."""
    post = ptr_posterior(ctx.gp.mean, ctx.gp.var, ctx.problem.p_w, ctx.problem.h)
    return best_queried(ctx, post.mean)


def report_eq5(
    ctx: StepContext, alpha: float, beta: float = 1.5, m: float = 2.0, eps: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """The BPT-LSE classification rule (eq. 5) from the current posterior."""
    post = ptr_posterior(ctx.gp.mean, ctx.gp.var, ctx.problem.p_w, ctx.problem.h)
    lo, up = credible_interval(post, beta, m)
    return classify_level_set(lo, up, alpha, eps)
