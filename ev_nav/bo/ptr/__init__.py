"""Probability-threshold robustness (PTR) BO: Iwazaki, Inatsu & Takeuchi, "Bayesian quadrature
optimization for probability threshold robustness measure" (Neural Computation 2021).

Python API (the same shape in every family)::

    from ev_nav.bo.ptr import PTROptimizer, make_problem

    problem = make_problem("mccormick")
    opt = PTROptimizer(problem, "bpt-ucb", seed=0)
    s = opt.ask()                    # s.x = (design, environment); s.detail["ix"], ["iw"]
    opt.tell(s.x, y)                 # y = f(design, environment) observed
    opt.result().x_best              # the design with the highest posterior P[f > h]

Experiments: :func:`run_experiments` with :class:`PTRRunConfig` objects (``ev-nav bo ptr run``).
"""

from ev_nav.bo.ptr.api import PTROptimizer
from ev_nav.bo.ptr.problems import BENCHMARKS, PTRProblem, make_problem, user_problem
from ev_nav.bo.ptr.registry import METHODS, PTRMethodConfig, make_policy
from ev_nav.bo.ptr.runner import (
    ExperimentResult,
    PTRRunConfig,
    run_experiment,
    run_experiments,
    run_trial,
)

__all__ = [
    "BENCHMARKS",
    "METHODS",
    "ExperimentResult",
    "PTRMethodConfig",
    "PTROptimizer",
    "PTRProblem",
    "PTRRunConfig",
    "make_policy",
    "make_problem",
    "run_experiment",
    "run_experiments",
    "run_trial",
    "user_problem",
]
