"""Named exceptions for everything a user can cause.

Every exception derives from :class:`EvNavError`; the CLI prints its message on one line and exits
non-zero, without a traceback. Messages say what went wrong *and* what to do about it.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path


class EvNavError(Exception):
    """Base class of all user-facing ev-nav errors."""

    exit_code: int = 2


# --- road networks -------------------------------------------------------------------------
class NetworkFileNotFound(EvNavError, FileNotFoundError):
    """An input file (OSM, DEM, cached network) does not exist."""


class NotOSMError(EvNavError, ValueError):
    """A file exists but is not readable OpenStreetMap XML."""


class NoDrivableRoadsError(EvNavError, ValueError):
    """The OSM data contains no drivable road network after filtering."""


class ElevationCoverageError(EvNavError, ValueError):
    """A DEM raster does not cover (all of) the network's nodes."""


class InvalidNetworkData(EvNavError, ValueError):
    """Segment data is inconsistent: NaN or non-positive lengths, bad arrays, etc."""


class NetworkCacheError(EvNavError, ValueError):
    """A cached network file is corrupt or from an incompatible version."""


class ChargerDataError(EvNavError, ValueError):
    """A charging-site table (a charger CSV) is malformed: a missing or unknown column, a bad
    number, a position off the Earth, a power that is not positive, an unknown connector."""


class OfflineError(EvNavError, ConnectionError):
    """An online operation (``ev-nav network fetch``) was requested without internet."""


# --- models / learning ---------------------------------------------------------------------
class UnknownSegmentError(EvNavError, IndexError):
    """Segment ids outside ``0 .. n_segments - 1``."""


class InvalidObservation(EvNavError, ValueError):
    """Observed energies that are NaN/inf, have the wrong length, or are otherwise unusable."""


class ModelStateError(EvNavError, ValueError):
    """A model checkpoint does not match the model or network it is loaded into."""


# --- routing -------------------------------------------------------------------------------
class UnreachableError(EvNavError, ValueError):
    """No path exists from the start segment to the goal segment."""


class OutsideNetworkError(EvNavError, ValueError):
    """Coordinates are too far from any road of the network."""


class NegativeCycleError(EvNavError, ValueError):
    """Energies with a reachable negative cycle: the optimal route is undefined."""


class RouteOptionError(EvNavError, ValueError):
    """A trip request or its options (via points, road kinds to avoid, time weight) that are
    invalid, or that the network cannot honour (a kind its data does not tag, a point on an
    avoided road, an origin that is the destination)."""


# --- state / CLI ---------------------------------------------------------------------------
class UnsafeCheckpointError(ModelStateError):
    """A checkpoint is not in ev-nav's pickle-free format (e.g. an old pickled one, or a planted
    file): it is refused unread, because unpickling a file can run arbitrary code."""


class StateError(EvNavError, ValueError):
    """A state directory is missing, corrupt, or belongs to another network."""


class StateIOError(StateError):
    """The medium holding a state failed (full disk, read-only file system, permissions); the
    state's data is not known to be damaged and must not be deleted."""


class StateBusyError(StateError):
    """Another process held a state's write lock for longer than a write waits for it; nothing
    was written, and the same request succeeds once that process has finished."""


class StateInUseError(StateError):
    """A state is already served by another ``ev-nav serve`` (one server per state)."""


class StateDamagedError(StateError):
    """A state's database file is damaged or not an ev-nav state at all.

    ``problem`` says what is damaged without the advice the message adds (``ev-nav doctor``
    lists it; the advice would send the user to the command they ran)."""

    def __init__(self, message: str, *, problem: str | None = None) -> None:
        super().__init__(message)
        self.problem = problem


class StateNotice(UserWarning):
    """A state was usable only after falling back (a damaged or old-format checkpoint, a cache
    file that failed verification); the CLI and the server print it as one line."""


class UnknownTripError(EvNavError, KeyError):
    """A trip id that the state does not know."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ConfigError(EvNavError, ValueError):
    """An experiment or vehicle configuration file is invalid."""


# --- recorded GPS tracks ---------------------------------------------------------------------
class TrackFileError(InvalidObservation):
    """A GPS track file (GPX) is missing, not GPX, malformed, or uses refused XML features."""


class EmptyTrackError(TrackFileError):
    """A GPS track file holds no track points."""


class TrackOffNetworkError(OutsideNetworkError):
    """A GPS track lies (mostly) away from the network's roads: it cannot be map-matched."""


# --- Bayesian optimisation -----------------------------------------------------------------
class OutOfDomainError(EvNavError, ValueError):
    """A point outside an objective's declared domain: wrong number of values, a value outside
    its bounds, a non-whole value for an integer input, or a value that is not one of a
    categorical input's choices."""


# --- input values -----------------------------------------------------------------------------
#: Seeds of NumPy's generators from Python are integers in 0..SEED_LIMIT-1 (SQLite and the
#: servers' JSON keep them as signed 64-bit integers).
SEED_LIMIT = 2**63


def require_seed(seed: object, what: str = "seed") -> int:
    """``seed`` as an int if it is a whole number in 0..2^63-1, else a :class:`ConfigError`
    naming ``what``: a float seed was truncated silently (1.5 seeded as 1), a negative one failed
    inside NumPy. ``bool`` is refused (``True`` is no seed anyone means)."""
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        value = int(seed)
        if 0 <= value < SEED_LIMIT:
            return value
    raise ConfigError(f"{what} must be an integer in 0..2^63-1, got {seed!r}")


def require_number(
    value: object,
    what: str,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
    whole: bool = False,
) -> float:
    """``value`` if it is a finite number in the range (``low``/``high`` included unless
    ``*_open``; a whole number with ``whole``), else a :class:`ConfigError` naming ``what``.

    The one check of a numeric setting given from Python or a command line: NaN passed the
    ``value < 0`` checks it replaces, infinity ran without end, and text reached NumPy.
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and whole:  # an int, not 3.0: counts go to range() and array sizes
        ok = isinstance(value, numbers.Integral)
    if ok:
        ok = (low < value if low_open else low <= value) and (
            value < high if high_open else value <= high)
    if ok:
        return value  # type: ignore[return-value]
    kind = "a whole number" if whole else "a number"
    bounds = []
    if low > -math.inf:
        bounds.append(f"{'>' if low_open else '>='} {low:g}")
    if high < math.inf:
        bounds.append(f"{'<' if high_open else '<='} {high:g}")
    where = f" {' and '.join(bounds)}" if bounds else " (finite)"
    raise ConfigError(f"{what} must be {kind}{where}, got {value!r}")


# --- input paths ------------------------------------------------------------------------------
def require_file(
    path: str | Path, what: str, error: type[EvNavError] = NetworkFileNotFound
) -> Path:
    """``path`` as a :class:`~pathlib.Path` if it is an existing file, else ``error`` naming it.

    The one check of every input file a user names (``--segments``, ``--gpx``, a network, a
    vehicle file, a charger CSV, an OSM file, a fleet config): a folder given where a file
    belongs is said to be a folder, not reported as missing.

    Parameters
    ----------
    path : str or Path
    what : str
        What the file is, for the message (``"observation file"``).
    error : type
        The named exception to raise.
    """
    p = Path(path)
    if p.is_file():
        return p
    if p.is_dir():
        raise error(f"{what} {p} is a directory; give the file itself")
    raise error(f"{what} not found: {p}")
