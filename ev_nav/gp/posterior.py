"""The posterior protocol shared by every segment model (GP, BI) and by the bandit/BO code.

A model exposes its belief about the expected energy of every segment as a
:class:`SegmentPosterior` (vectorised mean and std, plus the observation-noise std ς) and learns
from per-segment observations (:meth:`SegmentModel.update`) or from the total energy of a trip
(:meth:`SegmentModel.update_total`). A trip total is a weighted sum: a trip between two points
drives only part of its first and last segment, and each segment counts with the share driven
(:func:`combine_weights`; :meth:`SegmentModel.predict_sum` predicts such sums from the joint
posterior). The exact learner also absorbs many batches as one update (``absorb``, used by
``ev_nav.trips.session.apply_batches`` where a model has it). Input validation is shared here
so every model rejects bad input with the same named errors and leaves its state unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import InvalidObservation, UnknownSegmentError

#: An optional ambient temperature [°C]: one number (a trip's), one per reading, or None (not
#: recorded: the model's reference conditions; ``docs/temperature.md``).
TemperatureArg = ArrayLike | None


@dataclass(frozen=True)
class SegmentPosterior:
    """Marginal posterior of the expected energy per segment.

    Attributes
    ----------
    mean : ndarray of float64, shape (n_segments,)
        Posterior mean μ_e [Wh].
    std : ndarray of float64, shape (n_segments,)
        Posterior standard deviation σ_e of the expected energy (not including noise) [Wh].
    noise_std : float
        Observation-noise standard deviation ς of one segment observation [Wh].
    joint_draw : callable, optional
        ``rng -> z``: the standard scores ``(f − μ)/σ`` of one draw of every segment from the
        model's *joint* posterior (correlations included), for models that hold one (the exact
        learner). ``None``: the segments' posteriors are treated as independent.
    """

    mean: NDArray[np.float64]
    std: NDArray[np.float64]
    noise_std: float
    joint_draw: Callable[[np.random.Generator], NDArray[np.float64]] | None = field(
        default=None, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        for arr in (self.mean, self.std):
            arr.setflags(write=False)

    @property
    def n_segments(self) -> int:
        """Number of segments covered."""
        return int(self.mean.shape[0])

    def joint_scores(self, rng: np.random.Generator) -> NDArray[np.float64]:
        """Standard scores ``(f − μ)/σ`` of one joint posterior draw of every segment.

        Where the model gives no joint form the scores are independent standard normals, one
        ``rng.standard_normal(n)`` draw, which is what the joint form reduces to for independent
        segments (BI) and what the paper's Thompson index draws.
        """
        if self.joint_draw is None:
            return rng.standard_normal(self.n_segments)
        return self.joint_draw(rng)

    def path_mean(self, segment_ids: ArrayLike) -> float:
        """Predicted total energy of a path (sum of means) [Wh]."""
        return float(self.mean[np.asarray(segment_ids, dtype=np.int64)].sum())


@runtime_checkable
class SegmentModel(Protocol):
    """What the bandit, routing and BO code need from a segment-energy model."""

    #: The ``kind`` field of its :meth:`state_dict` (which checkpoints it can load).
    checkpoint_kind: str

    @property
    def noise_std(self) -> float:
        """Current observation-noise standard deviation ς [Wh]."""
        ...

    def posterior(self, temperature: TemperatureArg = None) -> SegmentPosterior:
        """Marginal posterior over all segments (cached while nothing changes), on a trip at
        ``temperature`` [°C] where the model takes one (:mod:`ev_nav.gp.temperature`)."""
        ...

    def update(
        self, segment_ids: ArrayLike, energies: ArrayLike, temperature: TemperatureArg = None
    ) -> None:
        """Learn from one observation per listed segment (repeats allowed) [Wh], made at
        ``temperature`` [°C] (one per trip or per reading; None: not recorded)."""
        ...

    def update_total(
        self,
        segment_ids: ArrayLike,
        total_energy: float,
        weights: ArrayLike | None = None,
        temperature: TemperatureArg = None,
    ) -> None:
        """Learn from the total energy [Wh] of driving the listed segments: the observation is
        ``Σ_i weights_i·f(segment_ids_i) + noise`` with noise variance ``ς²·Σ weights``
        (weights default 1; a partly driven first or last segment of a trip counts with the
        fraction of it driven), on a trip at ``temperature`` [°C]."""
        ...

    def predict_sum(
        self,
        segment_ids: ArrayLike,
        weights: ArrayLike | None = None,
        temperature: TemperatureArg = None,
    ) -> tuple[float, float]:
        """Mean [Wh] and variance [Wh²] of ``Σ_i weights_i·f(segment_ids_i)`` under the joint
        posterior (correlations included; the noise not), on a trip at ``temperature``."""
        ...

    def noise_variance(self, segment_ids: ArrayLike, weights: ArrayLike | None = None) -> float:
        """Variance [Wh²] of the observation noise of ``Σ_i weights_i·y(segment_ids_i)``: what
        a trip's measured energy adds to :meth:`predict_sum`'s variance. ``ς² Σ weights`` for
        the paper's uniform noise; ``ς² Σ weights_i s_i`` where each segment has its own noise
        scale ``s`` (``segment_scale="loss"``)."""
        ...

    def noise_variances(self, segment_ids: ArrayLike) -> NDArray[np.float64]:
        """Noise variance [Wh²] of one observation of each listed segment (vectorised):
        ``ς²``, or ``ς² s_e`` with per-segment noise scales."""
        ...

    def route_covariance(
        self, segment_ids: ArrayLike, temperature: TemperatureArg = None
    ) -> NDArray[np.float64]:
        """Joint posterior covariance [Wh²] of the latent energies of ``segment_ids`` on a
        trip at ``temperature`` [°C]."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to restore the model bit-identically."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> Any:
        """Restore a state produced by :meth:`state_dict` of a model on the same network."""
        ...


def validate_reset(
    segment_ids: ArrayLike,
    counts: ArrayLike,
    sums: ArrayLike,
    sums_sq: ArrayLike,
    n_segments: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Check the arguments of a model's ``reset_segments`` (distinct ids; per id a count ≥ 0 and
    the sum [Wh] and sum of squares [Wh²] of the readings kept)."""
    ids = np.asarray(segment_ids)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise UnknownSegmentError("segment ids must be a 1-D array of integers")
    ids = ids.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= n_segments):
        raise UnknownSegmentError(f"segment ids must lie in 0..{n_segments - 1}")
    if np.unique(ids).size != ids.size:
        raise InvalidObservation("reset_segments takes each segment once")
    cnt = np.asarray(counts)
    s1 = np.asarray(sums, dtype=np.float64)
    s2 = np.asarray(sums_sq, dtype=np.float64)
    if not (cnt.shape == s1.shape == s2.shape == ids.shape):
        raise InvalidObservation("counts, sums and sums of squares need one entry per segment")
    if cnt.size and (not np.issubdtype(cnt.dtype, np.integer) or cnt.min() < 0):
        raise InvalidObservation("counts must be integers >= 0")
    if not (np.all(np.isfinite(s1)) and np.all(np.isfinite(s2))):
        raise InvalidObservation("sums must be finite")
    return ids, cnt.astype(np.int64), s1, s2


def validate_observations(
    segment_ids: ArrayLike, energies: ArrayLike, n_segments: int
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Check and convert a batch of per-segment observations.

    Returns
    -------
    ids : ndarray of int64
    y : ndarray of float64

    Raises
    ------
    UnknownSegmentError
        If an id is not an integer in ``0 .. n_segments - 1``.
    InvalidObservation
        On a length mismatch, a non-1-D input, or NaN/inf energies.
    """
    ids = validate_segment_ids(segment_ids, n_segments)
    y = np.asarray(energies, dtype=np.float64)
    if y.ndim != 1:
        raise InvalidObservation(f"energies must be a 1-D array, got shape {y.shape}")
    if y.shape[0] != ids.shape[0]:
        raise InvalidObservation(
            f"{ids.shape[0]} segment ids but {y.shape[0]} energies: pass one energy per segment"
        )
    if not np.all(np.isfinite(y)):
        raise InvalidObservation(
            f"{int((~np.isfinite(y)).sum())} energies are NaN or infinite; drop those segments "
            "from the observation"
        )
    return ids, y


def validate_segment_ids(segment_ids: ArrayLike, n_segments: int) -> NDArray[np.int64]:
    """Check segment ids (integers in range, 1-D) and return them as int64."""
    raw = np.asarray(segment_ids)
    if raw.ndim != 1:
        raise InvalidObservation(f"segment ids must be a 1-D array, got shape {raw.shape}")
    if raw.size and not np.issubdtype(raw.dtype, np.integer):
        if not (np.all(np.isfinite(raw)) and np.all(np.mod(raw, 1) == 0)):
            raise UnknownSegmentError("segment ids must be integers (segment indices)")
    ids = raw.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= n_segments):
        bad = ids[(ids < 0) | (ids >= n_segments)]
        raise UnknownSegmentError(
            f"unknown segment id(s) {bad[:5].tolist()}: valid ids are 0..{n_segments - 1} for "
            "this network (was the model built for another network?)"
        )
    return ids


def combine_weights(
    segment_ids: ArrayLike, weights: ArrayLike | None
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Distinct segment ids and the summed weight of each: the row ``h`` of a linear
    observation ``Σ_i weights_i·f(segment_ids_i) = Σ_e h_e·f(e)`` (weights default 1, so a
    repeated id counts once per listing)."""
    ids = np.asarray(segment_ids, dtype=np.int64)
    w = np.ones(ids.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    u, inv = np.unique(ids, return_inverse=True)
    return u, np.bincount(inv.reshape(-1), weights=w, minlength=u.size)


def stored_total(
    entry: tuple[ArrayLike, ...],
) -> tuple[NDArray[np.int64], NDArray[np.float64], float]:
    """A trip total as a checkpoint holds it: ``(ids, weights, total)``, or ``(ids, total)`` as
    checkpoints wrote it before weighted totals (every listed id driven once, repeats counted).
    """
    if len(entry) == 2:
        u, h = combine_weights(entry[0], None)
        return u, h, float(entry[1])
    ids, h, total = entry
    return (
        np.asarray(ids, dtype=np.int64).copy(),
        np.asarray(h, dtype=np.float64).copy(),
        float(total),
    )


def validate_total(
    segment_ids: ArrayLike,
    total_energy: float,
    n_segments: int,
    weights: ArrayLike | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.float64], float]:
    """Check a total-energy observation and return it as ``(ids, h, total)``.

    ``ids`` are the distinct segments driven and ``h`` how much of each was driven (a repeat
    counts 1 each time; a partly driven first or last segment counts with its fraction).

    Raises
    ------
    UnknownSegmentError
        On ids out of range.
    InvalidObservation
        On no segments, a non-finite total, or weights that are not finite, in (0, ∞), and one
        per listed segment.
    """
    ids = validate_segment_ids(segment_ids, n_segments)
    if ids.size == 0:
        raise InvalidObservation("a total-energy observation needs at least one segment")
    total = float(np.asarray(total_energy, dtype=np.float64))
    if not np.isfinite(total):
        raise InvalidObservation(f"total energy must be finite, got {total_energy!r}")
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != ids.shape:
            raise InvalidObservation(
                f"{ids.size} segment ids but weights of shape {w.shape}: one weight per segment"
            )
        if not (np.all(np.isfinite(w)) and np.all(w > 0)):
            raise InvalidObservation("segment weights of a total must be finite and positive")
    u, h = combine_weights(ids, weights)
    return u, h, total
