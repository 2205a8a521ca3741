"""The step interface shared by all PTR methods, the BPT-* policies and the method registry.

A *policy* chooses the next query ``(i_x, i_w)`` from a :class:`StepContext` and reports its
current answer: the recommended design ``x̂_t`` (optimization) or the masks ``(Ĥ_t, L̂_t)``
(level-set estimation). Baselines live in :mod:`ev_nav.bo.ptr_baselines`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

import numpy as np
import torch

from ev_nav.bo.ptr import (
    BPTLSE,
    BPTTS,
    BPTUCB,
    argmax_random,
    classify_level_set,
    credible_interval,
    ptr_posterior,
    theory_beta,
)
from ev_nav.bo.ptr_benchmarks import PTRProblem
from ev_nav.bo.ptr_gp import GridPosterior
from ev_nav.bo.ptr_sampling import (
    KroneckerPriorSampler,
    RFFPriorSampler,
    make_prior_sampler,
    posterior_samples,
)
from ev_nav.errors import ConfigError

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


# ------------------------------------------------------------------------------ BPT policies
@dataclass
class BPTUCBPolicy:
    """BPT-UCB (Algorithm 1)."""

    rule: BPTUCB = field(default_factory=BPTUCB)
    name: str = "bpt-ucb"
    task: Task = "opt"

    def select(self, ctx: StepContext) -> tuple[int, int]:
        return self.rule.select(ctx.gp.mean, ctx.gp.var, ctx.problem.p_w, ctx.problem.h, ctx.rng)

    def report(self, ctx: StepContext) -> int:
        return report_ptr_mean(ctx)


@dataclass
class BPTTSPolicy:
    """BPT-TS: PTR of one exact joint posterior sample."""

    rule: BPTTS = field(default_factory=BPTTS)
    name: str = "bpt-ts"
    task: Task = "opt"

    def select(self, ctx: StepContext) -> tuple[int, int]:
        f_hat = ctx.sample()
        return self.rule.select(
            f_hat, ctx.gp.mean, ctx.gp.var, ctx.problem.p_w, ctx.problem.h, ctx.rng
        )

    def report(self, ctx: StepContext) -> int:
        return report_ptr_mean(ctx)


@dataclass
class BPTLSEPolicy:
    """BPT-LSE (Algorithm 2). ``stop_when_classified`` selects the faithful termination (A10)."""

    rule: BPTLSE = field(default_factory=BPTLSE)
    stop_when_classified: bool = False
    name: str = "bpt-lse"
    task: Task = "lse"

    def select(self, ctx: StepContext) -> tuple[int, int]:
        return self.rule.select(ctx.gp.mean, ctx.gp.var, ctx.problem.p_w, ctx.problem.h, ctx.rng)

    def report(self, ctx: StepContext) -> tuple[np.ndarray, np.ndarray]:
        return self.rule.classify(ctx.gp.mean, ctx.gp.var, ctx.problem.p_w, ctx.problem.h)


@dataclass
class UncontrollableW:
    """Extension (spec §1.5, not covered by the paper's guarantees): nature draws ``w_t ~ p(w)``.

    The base method still chooses ``x_t`` (and reports as before); only its ``w_t`` is replaced by
    a draw from ``p(w)``, as when learning from live trips whose weather cannot be chosen.
    """

    base: Policy

    @property
    def name(self) -> str:
        return f"{self.base.name}+uncontrollable-w"

    @property
    def task(self) -> Task:
        return self.base.task

    def select(self, ctx: StepContext) -> tuple[int, int]:
        ix, _ = self.base.select(ctx)
        return ix, int(ctx.rng.choice(ctx.problem.n_w, p=ctx.problem.p_w))

    def report(self, ctx: StepContext) -> int | tuple[np.ndarray, np.ndarray]:
        return self.base.report(ctx)


@dataclass
class TheoryBeta:
    """Theory mode (spec §2.6): BPT-UCB/BPT-LSE with ``β_t = |X|π²t²/(3δ)`` instead of a constant.

    ``t`` counts the observations the next query will make (initial design included). The
    authors call these schedules far too conservative; this mode exists to reproduce that.
    """

    base: BPTUCBPolicy | BPTLSEPolicy
    delta: float = 0.1

    def __post_init__(self) -> None:
        if not 0 < self.delta < 1:
            raise ConfigError(f"delta must be in (0, 1), got {self.delta}")

    @property
    def name(self) -> str:
        return f"{self.base.name}+theory-beta"

    @property
    def task(self) -> Task:
        return self.base.task

    @property
    def stop_when_classified(self) -> bool:
        return getattr(self.base, "stop_when_classified", False)

    def _set_beta(self, ctx: StepContext, t: int) -> None:
        beta = theory_beta(ctx.problem.n_x, max(t, 1), self.delta, "ucb")
        self.base.rule = replace(self.base.rule, beta=beta)  # type: ignore[assignment]

    def select(self, ctx: StepContext) -> tuple[int, int]:
        self._set_beta(ctx, ctx.gp.n + 1)
        return self.base.select(ctx)

    def report(self, ctx: StepContext) -> int | tuple[np.ndarray, np.ndarray]:
        self._set_beta(ctx, ctx.gp.n)
        return self.base.report(ctx)


# ------------------------------------------------------------------------------ registry
OPT_METHODS: tuple[str, ...] = (
    "bpt-ucb",
    "bpt-ts",
    "gp-ucb",
    "stableopt",
    "bqo-ei",
    "bqo-ucb",
    "bqo-ts",
    "pmax-gp-ucb",
    "pmax-stableopt",
    "pmax-bqo-ei",
    "pmax-bqo-ucb",
    "pmax-bqo-ts",
    "rs",
)
LSE_METHODS: tuple[str, ...] = (
    "bpt-lse",
    "bpt-lse-stop",
    "lse",
    "stablelse",
    "bqlse",
    "p-lse",
    "p-stablelse",
    "p-bqlse",
    "rs-lse",
)
METHODS: tuple[str, ...] = OPT_METHODS + LSE_METHODS


def method_task(name: str) -> Task:
    """``"opt"`` or ``"lse"`` for a registered method name."""
    if name in OPT_METHODS:
        return "opt"
    if name in LSE_METHODS:
        return "lse"
    raise ConfigError(f"unknown PTR method {name!r}; choose one of {', '.join(METHODS)}")


def make_policy(
    name: str,
    *,
    alpha: float | None = None,
    beta: float | None = None,
    m: float = 2.0,
    eta: float = 0.0,
) -> Policy:
    """Instantiate method ``name`` with the paper's defaults unless ``beta``/``m`` are given.

    ``beta`` is the PTR-interval β of the BPT methods and of eq. 5 (defaults 2 for BPT-UCB,
    1.5 for BPT-LSE / eq. 5); the baselines' own β^{1/2} = 2 (BQLSE: 3) are fixed as in E.1.
    """
    from ev_nav.bo import ptr_baselines as bl

    task = method_task(name)
    if task == "lse" and alpha is None:
        raise ConfigError(f"method {name!r} needs an LSE level alpha (the benchmark has none)")
    if name == "bpt-ucb":
        return BPTUCBPolicy(BPTUCB(beta=2.0 if beta is None else beta, m=m, eta=eta))
    if name == "bpt-ts":
        return BPTTSPolicy(BPTTS(eta=eta))
    if name in ("bpt-lse", "bpt-lse-stop"):
        rule = BPTLSE(alpha=float(alpha), beta=1.5 if beta is None else beta, m=m, eta=eta)  # type: ignore[arg-type]
        return BPTLSEPolicy(rule, stop_when_classified=name.endswith("stop"), name=name)
    eq5_beta = 1.5 if beta is None else beta
    if name == "rs":
        return bl.RandomSearch()
    if name == "rs-lse":
        return bl.RandomSearchLSE(alpha=float(alpha), beta=eq5_beta, m=m)  # type: ignore[arg-type]
    base_name = name.removeprefix("pmax-").removeprefix("p-")
    base: Policy = {
        "gp-ucb": bl.GPUCB,
        "stableopt": bl.StableOpt,
        "bqo-ei": bl.BQOEI,
        "bqo-ucb": bl.BQOUCB,
        "bqo-ts": bl.BQOTS,
        "lse": bl.LSE,
        "stablelse": bl.StableLSE,
        "bqlse": bl.BQLSE,
    }[base_name]()
    if name.startswith("pmax-"):
        return bl.PmaxVariant(base)
    if name.startswith("p-"):
        return bl.PVariant(base, alpha=float(alpha), beta=eq5_beta, m=m)  # type: ignore[arg-type]
    return base
