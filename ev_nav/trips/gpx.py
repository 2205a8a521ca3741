"""Reading (and writing) GPS tracks in GPX 1.1, the format phones and loggers export.

Only what map matching and energy recording need is read: every ``<trkpt lat= lon=>`` of every
``<trk>``/``<trkseg>`` in document order, with its optional ``<ele>`` [m], ``<time>`` (ISO 8601)
and an optional per-point energy counter.

**Energy convention.** A logger that knows the battery's energy puts it in the point's
extensions, in any namespace, as an element named ``energy_wh``::

    <trkpt lat="43.7384" lon="7.4246">
      <time>2024-05-01T08:00:03Z</time>
      <extensions><ev:energy_wh>12.5</ev:energy_wh></extensions>
    </trkpt>

The value is the *cumulative* energy drawn from the battery since any fixed moment [Wh] (a trip
computer's counter: it falls while regenerating). Only differences are used, so the origin does
not matter, and a point without the element simply has no reading.

The file is untrusted input: it is parsed with expat and any document type declaration is refused
before it is read (no entity expansion, so no "billion laughs" and no external entities), and
the number of points is bounded.
"""

from __future__ import annotations

import datetime as _dt
import math
import xml.parsers.expat as expat
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import EmptyTrackError, TrackFileError, require_file
from ev_nav.provenance import atomic_write_text

__all__ = ["MAX_TRACK_POINTS", "Track", "read_gpx", "write_gpx"]

#: More points than any one drive records (a day at 10 Hz): a longer file is not one trip.
MAX_TRACK_POINTS = 1_000_000

#: Namespace of the energy extension written by :func:`write_gpx` (any namespace is read).
ENERGY_NS = "urn:ev-nav:gpx-energy:1"


@dataclass(frozen=True)
class Track:
    """A GPS track, one entry per point in recording order.

    Attributes
    ----------
    lat, lon : ndarray of float64
        Position [degrees, WGS84].
    ele : ndarray of float64
        Elevation [m]; NaN where the point has none.
    time_s : ndarray of float64
        Time [s since the Unix epoch, UTC]; NaN where the point has none.
    energy_wh : ndarray of float64
        Cumulative energy counter [Wh] (see the module docstring); NaN where the point has none.
    source : str
        Where the track was read from (for messages).
    """

    lat: NDArray[np.float64]
    lon: NDArray[np.float64]
    ele: NDArray[np.float64]
    time_s: NDArray[np.float64]
    energy_wh: NDArray[np.float64]
    source: str = "track"

    @property
    def n_points(self) -> int:
        """Number of track points."""
        return int(self.lat.size)

    @property
    def has_energy(self) -> bool:
        """Whether at least two points carry an energy reading (enough for a difference)."""
        return int(np.isfinite(self.energy_wh).sum()) >= 2


_FIELDS = ("ele", "time", "energy_wh")


class _Reader:
    """expat callbacks collecting track points; errors carry the file's line number."""

    def __init__(self, parser: expat.XMLParserType, source: str) -> None:
        self.parser = parser
        self.source = source
        self.rows: list[tuple[float, float, float, float, float]] = []
        self.root: str | None = None
        self.in_point = False
        self.point: dict[str, str] = {}
        self.field: str | None = None
        self.text: list[str] = []

    def fail(self, what: str) -> TrackFileError:
        return TrackFileError(f"{self.source}, line {self.parser.CurrentLineNumber}: {what}")

    def doctype(self, *_args: object) -> None:
        raise self.fail("document type declarations are refused (GPX needs none; they can "
                        "hide entity expansion)")

    def start(self, name: str, attrs: dict[str, str]) -> None:
        local = name.rsplit(" ", 1)[-1]
        if self.root is None:
            self.root = local
            if local != "gpx":
                raise self.fail(f"the root element is <{local}>, not <gpx>: not a GPX file")
        if local == "trkpt":
            if self.in_point:
                raise self.fail("a <trkpt> inside another <trkpt>")
            self.in_point = True
            self.point = {"lat": attrs.get("lat", ""), "lon": attrs.get("lon", "")}
        elif self.in_point and local in _FIELDS:
            self.field = local
            self.text = []

    def chars(self, data: str) -> None:
        if self.field is not None:
            self.text.append(data)

    def end(self, name: str) -> None:
        local = name.rsplit(" ", 1)[-1]
        if self.field is not None and local == self.field:
            self.point[self.field] = "".join(self.text).strip()
            self.field = None
        elif local == "trkpt" and self.in_point:
            self.in_point = False
            self.rows.append(self.parse_point(self.point))
            if len(self.rows) > MAX_TRACK_POINTS:
                raise self.fail(
                    f"more than {MAX_TRACK_POINTS:,} track points: not one trip's track"
                )

    def parse_point(self, p: dict[str, str]) -> tuple[float, float, float, float, float]:
        lat = self.number(p["lat"], "lat", required=True)
        lon = self.number(p["lon"], "lon", required=True)
        if not (-90.0 <= lat <= 90.0 and -180.0 <= lon <= 180.0):
            raise self.fail(f"track point lat={lat}, lon={lon} is outside the globe")
        ele = self.number(p.get("ele", ""), "ele")
        energy = self.number(p.get("energy_wh", ""), "energy_wh")
        t = math.nan
        if p.get("time"):
            try:
                stamp = _dt.datetime.fromisoformat(p["time"])
            except ValueError:
                raise self.fail(f"cannot read the time {p['time']!r} (ISO 8601 expected)") from None
            if stamp.tzinfo is None:  # GPX times are UTC
                stamp = stamp.replace(tzinfo=_dt.UTC)
            t = stamp.timestamp()
        return lat, lon, ele, t, energy

    def number(self, text: str, what: str, *, required: bool = False) -> float:
        if not text:
            if required:
                raise self.fail(f"a <trkpt> without its {what} attribute")
            return math.nan
        try:
            value = float(text)
        except ValueError:
            raise self.fail(f"cannot read {what} {text!r} as a number") from None
        if not math.isfinite(value):
            raise self.fail(f"{what} must be a finite number, got {text!r}")
        return value


def read_gpx(path: str | Path) -> Track:
    """Read the track points of a GPX file (see the module docstring).

    Raises
    ------
    TrackFileError
        The file is missing, not XML, not GPX, declares a document type, has a point without
        valid coordinates, an unreadable time or number, times that run backwards, or too many
        points; the message names the line.
    EmptyTrackError
        The file has no track points.
    """
    p = require_file(path, "track file", TrackFileError)
    parser = expat.ParserCreate(namespace_separator=" ")
    reader = _Reader(parser, str(p))
    # refuse any DTD before its content is read: no internal entities to expand, no external
    # ones to fetch
    parser.StartDoctypeDeclHandler = reader.doctype
    parser.EntityDeclHandler = reader.doctype
    parser.ExternalEntityRefHandler = reader.doctype
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.chars
    try:
        with open(p, "rb") as fh:
            parser.ParseFile(fh)
    except expat.ExpatError as exc:
        raise TrackFileError(
            f"{p} is not well-formed XML ({expat.ErrorString(exc.code)}, line {exc.lineno})"
        ) from None
    except OSError as exc:
        raise TrackFileError(f"cannot read {p}: {exc.strerror or exc}") from None
    if not reader.rows:
        raise EmptyTrackError(f"{p} has no track points (<trkpt> in <trk>/<trkseg>)")
    arr = np.asarray(reader.rows, dtype=np.float64).reshape(-1, 5)
    t = arr[:, 3]
    timed = t[np.isfinite(t)]
    if timed.size > 1 and np.any(np.diff(timed) < 0):
        k = int(np.flatnonzero(np.diff(timed) < 0)[0])
        raise TrackFileError(
            f"{p}: the track's times run backwards after its {k + 1}th timed point; points "
            "must be in recording order"
        )
    return Track(
        lat=arr[:, 0], lon=arr[:, 1], ele=arr[:, 2], time_s=t, energy_wh=arr[:, 4], source=str(p)
    )


def write_gpx(
    path: str | Path,
    lat: ArrayLike,
    lon: ArrayLike,
    *,
    time_s: ArrayLike | None = None,
    energy_wh: ArrayLike | None = None,
    name: str = "ev-nav track",
) -> Path:
    """Write one track as GPX 1.1, atomically; ``time_s`` [s since the epoch, UTC] and the
    cumulative ``energy_wh`` counter [Wh] are optional (NaN entries are left out)."""
    la = np.asarray(lat, dtype=np.float64)
    lo = np.asarray(lon, dtype=np.float64)
    ts = None if time_s is None else np.asarray(time_s, dtype=np.float64)
    en = None if energy_wh is None else np.asarray(energy_wh, dtype=np.float64)
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<gpx version="1.1" creator="ev-nav" xmlns="http://www.topografix.com/GPX/1/1" '
        f'xmlns:ev="{ENERGY_NS}">',
        f"<trk><name>{escape(name)}</name><trkseg>",
    ]
    for i in range(la.size):  # one line per point of one track (not per segment)
        inner = ""
        if ts is not None and math.isfinite(ts[i]):
            stamp = _dt.datetime.fromtimestamp(float(ts[i]), _dt.UTC)
            iso = stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            inner += f"<time>{iso}</time>"
        if en is not None and math.isfinite(en[i]):
            inner += f"<extensions><ev:energy_wh>{en[i]:.4f}</ev:energy_wh></extensions>"
        lines.append(f'<trkpt lat="{la[i]:.7f}" lon="{lo[i]:.7f}">{inner}</trkpt>')
    lines.append("</trkseg></trk></gpx>")
    target = Path(path)
    atomic_write_text(target, "\n".join(lines) + "\n")
    return target
