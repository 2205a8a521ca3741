"""BO with cost-varying variable subsets: known costs (Tay et al., NeurIPS 2023) and unknown
random costs (Hoang, Nguyen & Tran, AAAI 2025).

Python API (the same shape in every family)::

    from ev_nav.bo.cvs import CVSOptimizer, make_problem

    problem = make_problem("hartmann3", costs="moderate")
    opt = CVSOptimizer(problem, "etcada", budget=20.0, seed=0)
    s = opt.ask()                    # s.x: control values, NaN where the environment decides
    ...                              # fill the NaNs, evaluate f(x), pay the cost
    opt.tell(x, y, cost=c)
    opt.result().x_best

Experiments: :func:`run_experiment` with a :class:`CVSRunConfig` (``ev-nav bo cvs run``).
``tell`` accepts any point of the domain (prior data, plays decided elsewhere); the GP's
hyperparameter treatment is a :class:`SurrogateConfig` (``CVSLoopConfig(surrogate=...)``).
"""

from ev_nav.bo.cvs.api import CVSLoopConfig, CVSOptimizer, Episode, run_episode
from ev_nav.bo.cvs.benchmarks import BENCHMARKS, make_problem
from ev_nav.bo.cvs.problems import CostModel, Problem, TruncatedNormal
from ev_nav.bo.cvs.registry import KNOWN_COST_METHODS, UNKNOWN_COST_METHODS, CVSMethodConfig
from ev_nav.bo.cvs.runner import CVSExperiment, CVSRunConfig, run_experiment, summarise
from ev_nav.bo.cvs.surrogate import SurrogateConfig

__all__ = [
    "BENCHMARKS",
    "KNOWN_COST_METHODS",
    "UNKNOWN_COST_METHODS",
    "CVSExperiment",
    "CVSLoopConfig",
    "CVSMethodConfig",
    "CVSOptimizer",
    "CVSRunConfig",
    "CostModel",
    "Episode",
    "Problem",
    "SurrogateConfig",
    "TruncatedNormal",
    "make_problem",
    "run_episode",
    "run_experiment",
    "summarise",
]
