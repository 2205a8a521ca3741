"""The BPT-* policies (Algorithms 1 and 2 of Iwazaki et al.) and two wrappers.

Each policy turns a :class:`~ev_nav.bo.ptr.context.StepContext` into the next query with the
selection rules of :mod:`ev_nav.bo.ptr.measure`; :class:`UncontrollableW` (nature draws ``w``)
and :class:`TheoryBeta` (the theory's ``β_t``) wrap any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ev_nav.bo.ptr.context import Policy, StepContext, Task, report_ptr_mean
from ev_nav.bo.ptr.measure import BPTLSE, BPTTS, BPTUCB, theory_beta
from ev_nav.errors import ConfigError


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
    """Extension (not in the paper and not covered by its guarantees): nature draws ``w_t ~ p(w)``.

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
    """Theory mode: BPT-UCB/BPT-LSE with the theorems' ``β_t = |X|π²t²/(3δ)`` for a constant.

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
