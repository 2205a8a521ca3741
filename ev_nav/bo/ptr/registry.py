"""The PTR methods by name: the BPT-* methods, the baselines of Iwazaki et al. (Sec. 6, App. E.1)
and their PTR-reporting variants, each tagged with its task (optimization or level sets)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ev_nav.bo.core.registry import Registry
from ev_nav.bo.ptr import baselines as bl
from ev_nav.bo.ptr.context import Policy, Task
from ev_nav.bo.ptr.measure import BPTLSE, BPTTS, BPTUCB
from ev_nav.bo.ptr.policies import BPTLSEPolicy, BPTTSPolicy, BPTUCBPolicy
from ev_nav.errors import ConfigError


@dataclass(frozen=True)
class PTRMethodConfig:
    """Settings the methods read.

    Attributes
    ----------
    alpha
        LSE probability level (required by level-set methods).
    beta, m, eta
        PTR-interval β (``None``: the method's paper default — 2 for BPT-UCB, 1.5 for BPT-LSE
        and eq. 5), moment order ``m ≥ 2`` and threshold slack ``η ≥ 0``. The baselines' own
        ``β^{1/2} = 2`` (BQLSE: 3) are fixed as in App. E.1.
    """

    alpha: float | None = None
    beta: float | None = None
    m: float = 2.0
    eta: float = 0.0


@dataclass(frozen=True)
class PTRMethod:
    """A registered method: its task and how to build it."""

    task: Task
    build: Callable[[PTRMethodConfig], Policy]


METHODS: Registry[PTRMethod] = Registry("method", "ptr")


def _alpha(s: PTRMethodConfig) -> float:
    if s.alpha is None:
        raise ConfigError("a level-set method needs an LSE level alpha (the benchmark has none)")
    return float(s.alpha)


def _eq5_beta(s: PTRMethodConfig) -> float:
    return 1.5 if s.beta is None else s.beta


_add = METHODS.add
_add(
    "bpt-ucb",
    "BPT-UCB, Algorithm 1 (proposed)",
    PTRMethod("opt", lambda s: BPTUCBPolicy(BPTUCB(2.0 if s.beta is None else s.beta, s.m, s.eta))),
)
_add(
    "bpt-ts",
    "BPT-TS, Thompson sampling on the PTR (proposed)",
    PTRMethod("opt", lambda s: BPTTSPolicy(BPTTS(s.eta))),
)
_OPT_BASES: dict[str, tuple[str, Callable[[], Policy]]] = {
    "gp-ucb": ("GP-UCB on f(x, E[w])", bl.GPUCB),
    "stableopt": ("StableOpt, worst case over the central 50 % of p(w)", bl.StableOpt),
    "bqo-ei": ("BQO with expected improvement on E_w f", bl.BQOEI),
    "bqo-ucb": ("BQO with UCB on E_w f", bl.BQOUCB),
    "bqo-ts": ("BQO with Thompson sampling on E_w f", bl.BQOTS),
}
for _name, (_text, _cls) in _OPT_BASES.items():
    _add(_name, _text, PTRMethod("opt", lambda s, c=_cls: c()))
for _name, (_text, _cls) in _OPT_BASES.items():
    _add(
        f"pmax-{_name}",
        f"{_text}; reports argmax of the PTR mean",
        PTRMethod("opt", lambda s, c=_cls: bl.PmaxVariant(c())),
    )
_add("rs", "random search, PTR-aware report", PTRMethod("opt", lambda s: bl.RandomSearch()))


def _bpt_lse(name: str) -> PTRMethod:
    return PTRMethod(
        "lse",
        lambda s: BPTLSEPolicy(
            BPTLSE(alpha=_alpha(s), beta=_eq5_beta(s), m=s.m, eta=s.eta),
            stop_when_classified=name.endswith("stop"),
            name=name,
        ),
    )


_add(
    "bpt-lse",
    "BPT-LSE, Algorithm 2 (proposed; keeps sampling after U is empty)",
    _bpt_lse("bpt-lse"),
)
_add(
    "bpt-lse-stop",
    "BPT-LSE stopping when every design is classified (faithful)",
    _bpt_lse("bpt-lse-stop"),
)
_LSE_BASES: dict[str, tuple[str, Callable[[], Policy]]] = {
    "lse": ("LSE on f(x, E[w])", bl.LSE),
    "stablelse": ("StableLSE, worst case over the central 50 % of p(w)", bl.StableLSE),
    "bqlse": ("BQLSE on E_w f", bl.BQLSE),
}
for _name, (_text, _cls) in _LSE_BASES.items():
    _add(_name, _text, PTRMethod("lse", lambda s, c=_cls: c()))
for _name, (_text, _cls) in _LSE_BASES.items():
    _add(
        f"p-{_name}",
        f"{_text}; classified by eq. 5",
        PTRMethod(
            "lse", lambda s, c=_cls: bl.PVariant(c(), alpha=_alpha(s), beta=_eq5_beta(s), m=s.m)
        ),
    )
_add(
    "rs-lse",
    "random search, classified by eq. 5",
    PTRMethod("lse", lambda s: bl.RandomSearchLSE(alpha=_alpha(s), beta=_eq5_beta(s), m=s.m)),
)

OPT_METHODS: tuple[str, ...] = tuple(e.name for e in METHODS if e.value.task == "opt")
LSE_METHODS: tuple[str, ...] = tuple(e.name for e in METHODS if e.value.task == "lse")


def method_task(name: str) -> Task:
    """``"opt"`` or ``"lse"`` for a registered method name."""
    return METHODS.get(name).task


def make_policy(name: str, settings: PTRMethodConfig | None = None) -> Policy:
    """Instantiate method ``name`` (paper defaults unless ``settings`` say otherwise)."""
    return METHODS.get(name).build(settings or PTRMethodConfig())
