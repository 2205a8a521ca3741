"""Reproducibility helpers: atomic file writes and run metadata (config, seeds, versions).

Every experiment writes its results next to a ``metadata.json`` produced by
:func:`run_metadata`, so a result file can always be traced back to the code, packages and seeds
that made it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from importlib import metadata as _md
from pathlib import Path
from typing import Any

#: Packages whose versions are recorded with every result.
RECORDED_PACKAGES: tuple[str, ...] = (
    "ev_nav",
    "numpy",
    "scipy",
    "torch",
    "gpytorch",
    "networkx",
    "osmnx",
    "pandas",
)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success rename it over ``path``.

    The rename is atomic on POSIX, so readers see either the old file or the complete new one,
    never a partial write. On an exception the temporary file is removed and ``path`` is untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=suffix or ".tmp", dir=target.parent
        )
    except OSError as exc:  # name the file asked for, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(target)) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:  # make the bytes durable before the rename
            os.fsync(fh.fileno())
        # mkstemp creates 0600 files; give results the permissions a plain open() would
        os.chmod(tmp_path, _default_file_mode(target))
        os.replace(tmp_path, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def _default_file_mode(target: Path) -> int:
    if target.exists():
        return target.stat().st_mode & 0o777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2, sort_keys=True) + "\n")


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses, paths, NumPy scalars/arrays and tuples into JSON-friendly values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # NumPy arrays and scalars, torch tensors
        return obj.tolist()
    return obj


def package_versions(names: tuple[str, ...] = RECORDED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``names`` (``None`` for a package that is not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = _md.version(name)
        except _md.PackageNotFoundError:
            out[name] = None
    return out


def _git(args: list[str], cwd: str | os.PathLike[str] | None) -> str | None:
    """Standard output of ``git *args`` in ``cwd`` (default: this package), ``None`` on failure."""
    try:
        res = subprocess.run(
            ["git", *args],
            cwd=cwd or Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str | None:
    """The current git commit of the source tree, or ``None`` outside a checkout."""
    out = _git(["rev-parse", "HEAD"], cwd)
    return (out.strip() or None) if out is not None else None


def source_modified(cwd: str | os.PathLike[str] | None = None) -> bool | None:
    """Whether the package's files differ from the checked-out commit (``None``: unknown)."""
    out = _git(["status", "--porcelain", "--", "."], cwd)
    return bool(out.strip()) if out is not None else None


#: The commit (and whether the package had uncommitted edits) when this process imported ev_nav:
#: the code a long-lived worker runs, even after the checkout has moved on. Recording HEAD at the
#: time a result is written would name later commits for runs made by older code.
LOADED_SOURCE: dict[str, Any] = {"git_commit": git_commit(), "modified": source_modified()}


def run_metadata(config: Any, seeds: Any = None, **extra: Any) -> dict[str, Any]:
    """Metadata to store next to results: config, seeds, versions, platform, time, git commit.

    ``git_commit``/``source_modified`` describe the code this process loaded (see
    :data:`LOADED_SOURCE`).
    """
    return {
        "config": to_jsonable(config),
        "seeds": to_jsonable(seeds),
        "versions": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git_commit": LOADED_SOURCE["git_commit"],
        "source_modified": LOADED_SOURCE["modified"],
        "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        **{k: to_jsonable(v) for k, v in extra.items()},
    }
