"""Wording of user-facing messages: counts with the right grammatical number."""

from __future__ import annotations


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``count`` and its noun: ``1 segment``, ``2 segments`` (``plural_form`` for irregular
    nouns: ``plural(n, "batch", "batches")``)."""
    noun = singular if count == 1 else plural_form or f"{singular}s"
    return f"{count:,} {noun}"
