"""docs/architecture.md matches the package tree, so the page cannot drift from the code.

Every module under ``ev_nav/`` (shipped web assets in ``static/`` aside) must be named on the
page — by its path relative to ``ev_nav/``, a package's ``__init__.py`` by its folder — and every
``*.py`` path the page names must exist (relative to ``ev_nav/`` or to the repository root).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "ev_nav"
DOC = REPO / "docs" / "architecture.md"

# A path such as ``store/facade.py`` or ``ev_nav/trips/cli.py``; a glob (``fig*.py``) is not one.
_PY_PATH = re.compile(r"(?<![\w*./-])((?:[\w-]+/)*[\w-]+\.py)\b")
# A folder in backticks, such as ``store/`` or ``bo/core/``.
_FOLDER = re.compile(r"`((?:[\w-]+/)+)`")


def _package_modules() -> list[str]:
    """Every module of the package as the page names it: ``gp/kernels.py``, ``store/``."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "static":
            continue
        if rel.name == "__init__.py" and len(rel.parts) > 1:
            out.append(rel.parent.as_posix() + "/")
        else:
            out.append(rel.as_posix())
    return out


def _strip_package(name: str) -> str:
    return name.removeprefix("ev_nav/")


def _named_on_page(text: str) -> set[str]:
    paths = {_strip_package(p) for p in _PY_PATH.findall(text)}
    folders = {_strip_package(f) for f in _FOLDER.findall(text)}
    folders |= {p.removesuffix("__init__.py") for p in paths if p.endswith("/__init__.py")}
    return paths | folders


def test_the_scan_sees_the_package_and_the_page():
    modules = _package_modules()
    # The scan is not vacuous: it finds the big packages and the page's own table rows.
    assert {"cli.py", "store/", "store/facade.py", "trips/cli.py", "bo/core/"} <= set(modules)
    assert len(modules) > 50
    named = _named_on_page(DOC.read_text(encoding="utf-8"))
    assert {"store/facade.py", "trips/", "gp/kernels.py"} <= named
    # A glob and a prose word ending in .py are not taken for paths.
    assert _named_on_page("see `*cli.py` and fig*.py") == set()


def test_every_module_is_named_on_the_page():
    named = _named_on_page(DOC.read_text(encoding="utf-8"))
    missing = [m for m in _package_modules() if m not in named]
    assert missing == [], (
        f"docs/architecture.md does not name {missing}: add them to 'Where each concept lives'"
    )


def test_every_python_path_on_the_page_exists():
    text = DOC.read_text(encoding="utf-8")
    stale = sorted(
        p
        for p in set(_PY_PATH.findall(text))
        if not (PACKAGE / _strip_package(p)).is_file() and not (REPO / p).is_file()
    )
    assert stale == [], f"docs/architecture.md names files that do not exist: {stale}"
