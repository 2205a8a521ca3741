"""Numbers and counts in user-facing messages."""

import pytest

from ev_nav.wording import plural, signed


@pytest.mark.parametrize(
    ("value", "digits", "text"),
    [(-0.04, 1, "+0.0"), (-0.0, 1, "+0.0"), (0.04, 1, "+0.0"), (-0.06, 1, "-0.1"),
     (2, 1, "+2.0"), (-1.6, 0, "-2"), (-0.4, 0, "+0"), (1234.5678, 2, "+1234.57")],
)
def test_a_difference_that_rounds_to_nothing_has_no_minus_sign(value, digits, text):
    # 'exploring: +0.1 Wh, -0.0 min' was printed for a route 2 s shorter than the best guess
    assert signed(value, digits) == text


def test_plural_counts():
    assert plural(1, "segment") == "1 segment"
    assert plural(2, "batch") == "2 batches"
    assert plural(1200, "segment energy", "segment energies") == "1,200 segment energies"
