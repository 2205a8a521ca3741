"""BOKE: Bayesian optimisation by kernel regression and density-based exploration (Zhu et al.,
arXiv:2502.06178 v1), with the study's GP baselines.

Python API (the same shape in every family)::

    from ev_nav.bo.boke import BOKEOptimizer

    opt = BOKEOptimizer([(-2.0, 2.0), (0.0, 1.0)], "boke", seed=0)
    for _ in range(40):
        s = opt.ask()
        opt.tell(s.x, f(s.x))
    opt.result().x_best

Experiments: :func:`run_experiment` with a :class:`BOKERunConfig` (``ev-nav bo boke run``).
"""

from ev_nav.bo.boke.api import BOKEOptimizer
from ev_nav.bo.boke.methods import BOKEConfig, BOKEMaximizerConfig
from ev_nav.bo.boke.problems import BENCHMARKS, Benchmark, get_benchmark
from ev_nav.bo.boke.registry import METHODS, BOKEMethodConfig, make_method
from ev_nav.bo.boke.runner import BOKERunConfig, RunResult, run_experiment, summarise

__all__ = [
    "BENCHMARKS",
    "METHODS",
    "BOKEConfig",
    "BOKEMaximizerConfig",
    "BOKEMethodConfig",
    "BOKEOptimizer",
    "BOKERunConfig",
    "Benchmark",
    "RunResult",
    "get_benchmark",
    "make_method",
    "run_experiment",
    "summarise",
]
