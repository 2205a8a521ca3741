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


def percent(value: float) -> str:
    """A charge or share in percent as a driver typed or reads it: three significant digits,
    no trailing zeros (``80%``, ``2.8%``, ``0.25%``, ``12.3%``), never ``-0%``. Whole percents
    showed a 2.8 % departure as 3 % and 0.5 % as 0 %."""
    return f"{float(value) + 0.0:.3g}%"


def percent_range(low: float, high: float) -> str:
    """An interval of percents at one decimal: ``12.1-15.4%``, or ``-2.0 to -1.3%`` when it
    reaches below zero (a dash between negative numbers reads as a minus)."""
    sep = " to " if low < 0 or high < 0 else "-"
    return f"{round(low, 1) + 0.0:.1f}{sep}{round(high, 1) + 0.0:.1f}%"
