"""Whether a reading can be right: the rule every recorded energy passes before it is stored.

More than any vehicle can use or recover over the distance driven is always refused; a reading
far from the model's prediction (more than :data:`PLAUSIBLE_SIGMAS` predictive standard
deviations, a drive's noise taken as at least :data:`PLAUSIBLE_NOISE_SPREAD` of each segment's
loss), a likely kWh/Wh mix-up or a blank reading is refused with the reason unless forced.
:mod:`ev_nav.trips.observations` applies it; the command line names its numbers without
importing the recording machinery.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import InvalidObservation

#: An observation further than this many predictive standard deviations from the model's
#: prediction is refused unless ``--force`` (a typo, a unit mix-up, a broken logger). Far beyond
#: what real variation produces, so honest surprises are still learned from.
PLAUSIBLE_SIGMAS = 8.0

#: The drive-to-drive variation a reading is always allowed, as a share of its segment's
#: deterministic loss ``a_e`` (:func:`ev_nav.potential.loss_scale`): one drive's noise sd is taken
#: as at least ``0.2 · a_e``, the documented spread of the physical world (``docs/objective.md``;
#: ``TruthSpec.noise_spread``, the loss-scaled learners' starting ς). Traffic, driving style and
#: weather act on the losses, so a 2 km road varies more in Wh than a 5 m link; a learner with one
#: noise variance for every segment (``segment_scale="uniform"``, the driver's store) pools them
#: and understates a long road's noise: on MoST Monaco by 2-11 times on the readings it refused
#: (5-9 % of honest readings refused before this floor). A typo or a unit mix-up is still far
#: outside ``PLAUSIBLE_SIGMAS`` of it.
PLAUSIBLE_NOISE_SPREAD = 0.2

#: A reading smaller than this [Wh] in magnitude is "no reading" unless the prediction makes it
#: plausible (within 3 sd).
NO_READING_WH = 0.5

#: What a refusal calls the sd a reading is judged by: the model's uncertainty plus one drive's
#: noise, larger than the route table's "model sd" (which counts only the former).
SD_WITH_NOISE = "sd with drive-to-drive noise"

#: No segment or trip of a road vehicle can use or recover this much [Wh] (the largest EV
#: batteries hold ~200 kWh); refused even with ``--force``.
HARD_LIMIT_WH = 1_000_000.0

#: Nor more than this per metre driven [Wh/m], on top of :data:`HARD_LIMIT_BASE_WH` (see
#: :func:`hard_limit_wh`): lifting a 40 t truck up a 10 % grade takes m·g·Δh = 40,000 kg ·
#: 9.81 m/s² · 100 m = 10.9 kWh per km, and its rolling and air losses about 1.5 kWh per km more;
#: 20 kWh per km is beyond every road vehicle, up or down (regeneration recovers less than the
#: potential energy).
HARD_LIMIT_WH_PER_M = 20.0

#: What a reading may hold beyond :data:`HARD_LIMIT_WH_PER_M` whatever the length [Wh]: heating
#: or cooling at full power (about 7 kW) through four hours at a standstill on a short road (a
#: GPS track's energy counter puts a long stop on the segment where the car stood).
HARD_LIMIT_BASE_WH = 30_000.0


def hard_limit_wh(length_m: ArrayLike) -> NDArray[np.float64]:
    """The most a reading can be in magnitude over a distance, refused beyond even with
    ``force``: ``HARD_LIMIT_BASE_WH + HARD_LIMIT_WH_PER_M · length``, at most
    :data:`HARD_LIMIT_WH`. A single forced reading beyond it (a total typed with three zeros
    too many) would drag the learned energies of every correlated road with it.

    Parameters
    ----------
    length_m : array_like
        The distance each reading covers [m].

    Returns
    -------
    ndarray
        The limit of each reading [Wh].
    """
    length = np.asarray(length_m, dtype=np.float64)
    return np.minimum(HARD_LIMIT_BASE_WH + HARD_LIMIT_WH_PER_M * length, HARD_LIMIT_WH)


def check_plausible(
    values: np.ndarray,
    mean: np.ndarray,
    sd: np.ndarray,
    what: Sequence[str],
    *,
    force: bool = False,
    length_m: ArrayLike | None = None,
) -> None:
    """Raise :class:`InvalidObservation` for readings that cannot be right (see the constants).

    ``values``, ``mean`` and ``sd`` [Wh] are the readings and their predictive distribution,
    ``sd`` the model's uncertainty plus one drive's noise (at least the plausible noise,
    :func:`ev_nav.trips.observations.plausible_noise_variance`); ``what`` names each reading
    for the message;
    ``length_m`` is the distance each reading covers [m] (None: only :data:`HARD_LIMIT_WH`
    applies). The message says why: too large for any vehicle over that distance
    (:func:`hard_limit_wh`; always), a likely kWh/Wh mix-up, a blank reading, or
    how many standard deviations from the prediction (the last three skipped with ``force``),
    and names the prediction's sd as "sd with drive-to-drive noise" (larger than the route
    table's model sd, which it includes). One rule for every sign: a negative reading
    (regeneration on a descent) is judged against the prediction like a positive one.
    """
    limit = np.broadcast_to(
        HARD_LIMIT_WH if length_m is None else hard_limit_wh(length_m), np.shape(values)
    )
    big = np.flatnonzero(np.abs(values) > limit)
    if big.size:
        k = int(big[0])
        over = "" if length_m is None else f" over {np.ravel(length_m)[k] / 1000:,.3g} km"
        raise InvalidObservation(
            f"{what[k]}: {values[k]:g} Wh is more than any vehicle can use or recover{over} "
            f"({limit[k]:,.0f} Wh); energies are in Wh"
        )
    if force:
        return
    sd = np.maximum(sd, 1e-9)
    z = np.abs(values - mean) / sd
    # A unit mix-up: the reading is off, but a thousand times it sits right on the prediction
    # (kWh from the trip computer typed where Wh are asked for).
    fits = (np.abs(values * 1000.0 - mean) / sd < 2.0) & (z > 3.0)
    if fits.any():
        k = int(np.flatnonzero(fits)[0])
        raise InvalidObservation(
            f"{what[k]}: {values[k]:g} looks like kWh ({_predicted(mean[k], sd[k])}); "
            "give energies in Wh, or --force to record it as it is"
        )
    # No reading: a logger that did not record shows 0 (or a denormal from a bad conversion).
    # Judged like every other reading, against the prediction, with the same sign rules: a
    # trip predicted near zero (a descent that regenerates what it uses) may read 0.
    blank = (np.abs(values) < NO_READING_WH) & (z > 3.0)
    if blank.any():
        k = int(np.flatnonzero(blank)[0])
        raise InvalidObservation(
            f"{what[k]}: {values[k]:g} Wh reads as no reading ({_predicted(mean[k], sd[k])}); "
            "the logger likely did not record this drive - --force to record it as it is"
        )
    bad = np.flatnonzero(z > PLAUSIBLE_SIGMAS)
    if not bad.size:
        return
    k = int(bad[np.argmax(z[bad])])
    more = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
    raise InvalidObservation(
        f"{what[k]}: {values[k]:g} Wh is {z[k]:.0f} standard deviations from the predicted "
        f"{mean[k]:.1f} Wh ({SD_WITH_NOISE} {sd[k]:.1f} Wh){more}; check the reading, or "
        "--force to record it"
    )


def _predicted(mean: float, sd: float) -> str:
    """A refusal's prediction [Wh] with its sd, named as the acknowledgement names it."""
    return f"predicted {mean:.1f} Wh, {SD_WITH_NOISE} {sd:.1f} Wh"
