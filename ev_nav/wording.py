"""Wording of user-facing messages: counts with the right grammatical number."""

from __future__ import annotations


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``count`` and its noun: ``1 segment``, ``2 segments``, ``3 observation batches``.

    The plural adds ``es`` after s, x, z, ch and sh, else ``s``; ``plural_form`` gives an
    irregular one (``plural(n, "segment energy", "segment energies")``).
    """
    if count == 1:
        noun = singular
    elif plural_form is not None:
        noun = plural_form
    else:
        noun = singular + ("es" if singular.endswith(("s", "x", "z", "ch", "sh")) else "s")
    return f"{count:,} {noun}"


def signed(value: float, digits: int = 1) -> str:
    """``value`` with its sign at ``digits`` decimals, never ``-0.0``: a difference that rounds
    to nothing reads ``+0.0`` (``signed(-0.04)``), not a negative zero."""
    return f"{round(float(value), digits) + 0.0:+.{digits}f}"
