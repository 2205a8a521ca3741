"""Bayesian optimisation on the shared GP core, one subpackage per paper family.

* :mod:`ev_nav.bo.cvs` — cost-varying variable subsets, known costs (Tay et al. 2023) and unknown
  random costs (Hoang et al. 2025);
* :mod:`ev_nav.bo.ptr` — probability-threshold robustness (Iwazaki et al.);
* :mod:`ev_nav.bo.boke` — BO by kernel regression and density-based exploration (Zhu et al.);
* :mod:`ev_nav.bo.core` — what the families share.

Each family exposes the same Python API (configure → ``ask()`` → ``tell(x, y)`` → ``result()``)
and the command line ``ev-nav bo FAMILY run | list | report``. Declare your own objective with
:func:`objective` (docs/bo-cvs.md, "Your own objective"); integer and categorical inputs with
:class:`Integer` and :class:`Categorical` (:mod:`ev_nav.bo.core.space`).
"""

from ev_nav.bo.core.objective import load_objective, objective
from ev_nav.bo.core.space import Categorical, Continuous, Integer, Space

__all__ = ["Categorical", "Continuous", "Integer", "Space", "load_objective", "objective"]
