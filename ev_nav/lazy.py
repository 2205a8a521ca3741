"""Re-exports imported on first use (PEP 562), so that importing a package stays light.

``ev_nav`` and ``ev_nav.trips`` re-export names from their modules; importing every module up
front made each command pay for all of them (``ev-nav history`` imported the observation rules,
the change detector and the store's hashing threads it never uses). Each package maps a name to
``"module"`` or ``"module:attribute"`` and installs :func:`lazy_exports`' two functions as its
``__getattr__`` and ``__dir__``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence


def lazy_exports(
    package: str,
    namespace: MutableMapping[str, object],
    exports: Mapping[str, str],
    public: Sequence[str],
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose globals are ``namespace``.

    Parameters
    ----------
    package : str
        The package's name (for the AttributeError of an unknown name).
    namespace : MutableMapping
        The package's ``globals()``: a name once imported is stored there, so later lookups do
        not come back.
    exports : Mapping[str, str]
        Public name -> ``"module"`` (the same name in it) or ``"module:attribute"``.
    public : Sequence[str]
        What ``dir(package)`` lists (its ``__all__``).

    Returns
    -------
    (callable, callable)
        The package's ``__getattr__(name)`` (imports the name's module, keeps the value) and
        ``__dir__()``.
    """

    def __getattr__(name: str) -> object:
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = target.partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(public)

    return __getattr__, __dir__
