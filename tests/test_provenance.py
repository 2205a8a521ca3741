"""Run metadata names the code a process actually loaded (issue 4: results record their config,
seeds, versions and code)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from ev_nav import provenance

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
PACKAGE = Path(provenance.__file__).resolve().parent


def _git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)


def test_metadata_records_the_commit_loaded_at_import_not_at_write(monkeypatch):
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=PACKAGE, capture_output=True, text=True, check=False
    )
    if head.returncode != 0:
        pytest.skip("ev_nav is not inside a git checkout here")
    meta = provenance.run_metadata({"a": 1})
    assert meta["git_commit"] == provenance.LOADED_SOURCE["git_commit"]
    assert meta["source_modified"] == provenance.LOADED_SOURCE["modified"]

    # the checkout moving on later (a new commit) does not relabel results of this process
    def moved(cwd=None):
        return "0" * 40

    monkeypatch.setattr(provenance, "git_commit", moved)
    assert provenance.run_metadata({})["git_commit"] == provenance.LOADED_SOURCE["git_commit"]


def test_source_modified_sees_uncommitted_edits(tmp_path):
    _git("init", "-q", cwd=tmp_path)
    (tmp_path / "m.py").write_text("x = 1\n")
    _git("add", "m.py", cwd=tmp_path)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c", cwd=tmp_path)
    assert provenance.source_modified(tmp_path) is False
    assert provenance.git_commit(tmp_path) == _git("rev-parse", "HEAD", cwd=tmp_path).stdout.strip()
    (tmp_path / "m.py").write_text("x = 2\n")
    assert provenance.source_modified(tmp_path) is True
    assert provenance.source_modified(tmp_path.parent / "no-such-dir") is None


def test_an_atomic_write_that_cannot_start_names_the_file_asked_for(tmp_path):
    """The error named the hidden temporary file ('/proc/.x.npz.e00_cr8u.npz'), which the CLI
    then printed as the path the user had given."""
    target = Path("/proc/ev-nav-provenance-test.txt")
    with pytest.raises(OSError) as info:
        provenance.atomic_write_text(target, "x")
    assert info.value.filename == str(target)
    assert not target.exists()
