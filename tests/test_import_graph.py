"""The package's import graph: no module cycle, and no function-level import that hides one.

Function-level ``from ev_nav ...`` imports exist to keep command start-up light (a command
imports torch, SciPy, numba or osmnx only when it needs them; see bench_cli). This test makes
sure none of them is there to dodge a cycle: for each, the imported module must not reach the
importing module through top-level imports (package ``__init__`` files included).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ev_nav"


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        # "from pkg import submodule" needs the submodule; "from pkg import name" the package
        names = [
            f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
            for a in node.names
        ]
    else:
        return []
    return [m for n in names if n.startswith("ev_nav") and (m := _resolve(n))]


def _graphs() -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    top: dict[str, set[str]] = {m: set() for m in MODULES}
    lazy: list[tuple[str, str, int]] = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level (TYPE_CHECKING blocks are ast.If: not counted)
            top[name].update(_targets(node))
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for sub in ast.walk(fn):
                    lazy.extend((name, t, sub.lineno) for t in _targets(sub))
    return top, lazy


def _reach(top: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        mod = stack.pop()
        if mod in seen:
            continue
        seen.add(mod)
        parts = mod.split(".")
        stack.extend(p for i in range(1, len(parts)) if (p := ".".join(parts[:i])) in MODULES)
        stack.extend(top[mod])
    return seen


def test_no_function_level_import_hides_a_cycle():
    top, lazy = _graphs()
    assert len(lazy) > 50  # the scan sees the lazy imports (it would pass vacuously otherwise)
    hiding = [(m, t, line) for m, t, line in lazy if t != m and m in _reach(top, t)]
    assert hiding == []


def test_no_module_cycle_at_top_level():
    top, _ = _graphs()

    def explicit_reach(start: str) -> set[str]:  # explicit imports only, no implicit parents
        seen: set[str] = set()
        stack = [start]
        while stack:
            mod = stack.pop()
            if mod not in seen:
                seen.add(mod)
                stack.extend(top[mod])
        return seen

    cycles = sorted(m for m in MODULES if any(m in explicit_reach(t) for t in top[m] - {m}))
    assert cycles == []
