"""README.md and docs/**/*.md read as the product's documentation, not as a work log.

A measured figure carries the command that produces it and the machine (and, where it matters,
the commit) it was measured on. Notes about who produced a figure or in which working session
("run in this session", "an earlier session's run", "the lead", "another engineer's job") say
nothing a reader can reproduce, so the pages must not contain them. The API class
``ev_nav.trips.session.Session``, the module ``trips/session.py`` and a variable named ``session``
in an example are product terms and stay allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Words that turn "session" into a point in the project's history rather than the API object.
# Only the qualifier is case-insensitive: "session" itself must be lower case, so "this Session"
# (the class) is not flagged while "This session" at the start of a sentence is.
_WHEN = (
    r"this|that|these|those|earlier|previous|prior|last|latest|first|second|third|fourth|fifth|"
    r"next|later|one|two|three|four|five|several|other|same|current|final"
)
PROVENANCE = [
    re.compile(rf"\b(?i:{_WHEN})\s+sessions?\b"),
    re.compile(r"\b(?i:helper)\s+sessions?\b"),
    re.compile(r"\b(?i:end|start|beginning)\s+of\s+the\s+session\b"),
    re.compile(r"\bsession\s+(?:start|end)\b"),
    re.compile(r"\b(?i:sittings?)\b"),
    re.compile(r"\b(?i:another|other|the\s+other)\s+engineer(?:s|'s|s')?\b"),
    re.compile(r"\b(?i:another|other|the\s+other)\s+helpers?\b"),
    re.compile(r"\b(?i:the)\s+lead(?:'s)?\b(?!\s+(?i:time|vehicle|car|segment))"),
    re.compile(r"\b(?i:issue)[- ]\d+\s+(?i:package\s+)?(?i:layout)\b"),
    re.compile(r"\b(?i:layout)\s+of\s+(?i:issue)\s+\d+\b"),
    re.compile(r"\b[A-Z]+_SESSION(?:_[A-Z]+)*\b"),  # an unfilled placeholder
]


def _doc_files() -> list[Path]:
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [f for f in files if f.is_file()]


def _offences(text: str) -> list[str]:
    return [m.group(0) for pattern in PROVENANCE for m in pattern.finditer(text)]


@pytest.mark.parametrize(
    "phrase",
    [
        "run in this session (2 shared cores)",
        "An earlier session's run (same script)",
        "Re-run after the second session's changes; the first session's run gave",
        "(earlier session†)",
        "It was run in five parts over three sessions",
        "the last session's Fig. 2 grids",
        "This session (2 shared cores, load average 7–9)",
        "a helper session measured it",
        "measured in one sitting",
        "another engineer's single-threaded job",
        "the lead merges it",
        "with the issue-18 layout every method prints",
        "before the package layout of issue 18",
        "THIS_SESSION_RERUN",
        "On a quiet machine at the end of the session (final code)",
        "| config | session start | now |",
        "the third\n  session, quiet machine",
    ],
)
def test_provenance_phrases_are_caught(phrase: str) -> None:
    assert _offences(phrase), phrase


@pytest.mark.parametrize(
    "phrase",
    [
        "the driver's workflow (`ev_nav.trips.session.Session`)",
        "with ev_nav.open_state(state) as session:",
        "`trips/session.py`: open the store, restore the model",
        "open this Session with `ev_nav.open_state`",
        "Session objects are context managers",
        "code of commit `99cba92`, 2-core x86-64, 24 GiB",
        "a regret figure drawn by the one plot helper",
        "the lead time of a forecast",
        "the package layout of commit `aab670b`",
        "workers capped to one BLAS thread each",
    ],
)
def test_product_terms_are_not_flagged(phrase: str) -> None:
    assert not _offences(phrase), phrase


def test_docs_carry_no_session_provenance() -> None:
    files = _doc_files()
    assert REPO / "README.md" in files and len(files) > 5
    found = []
    for path in files:
        # Whole text, so a phrase wrapped over two lines ("third\nsession") is caught too.
        text = path.read_text(encoding="utf-8")
        for pattern in PROVENANCE:
            for m in pattern.finditer(text):
                lineno = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(REPO)}:{lineno}: {' '.join(m.group(0).split())!r}")
    assert not found, (
        "docs must state a figure's command, machine and commit, not who produced it or in "
        "which session:\n" + "\n".join(sorted(found))
    )
