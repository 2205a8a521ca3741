"""The vehicles registered in a state (schema 2): each trip records the vehicle that drove it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ev_nav.errors import StateError
from ev_nav.store.connection import StoreConnection, _utcnow


@dataclass(frozen=True)
class RegisteredVehicle:
    """A vehicle registered in the state (``spec`` is the caller's JSON description, e.g.
    :meth:`ev_nav.energy.Vehicle.to_dict`; this record is the store's row, not the physics)."""

    id: int
    name: str
    spec: dict[str, Any]
    created: str


class VehiclesMixin(StoreConnection):
    """Registered vehicles and the current one (``meta.current_vehicle``)."""

    def vehicles(self) -> list[RegisteredVehicle]:
        """All registered vehicles, by id."""
        rows = self._conn.execute("SELECT id, name, spec, created FROM vehicles ORDER BY id")
        return [self._vehicle_from_row(row) for row in rows]

    def vehicle(self, vehicle_id: int | None = None) -> RegisteredVehicle:
        """The vehicle ``vehicle_id`` (default: the current one)."""
        vid = int(self._meta_get("current_vehicle") or 1) if vehicle_id is None else vehicle_id
        row = self._conn.execute(
            "SELECT id, name, spec, created FROM vehicles WHERE id = ?", (int(vid),)
        ).fetchone()
        if row is None:
            known = [v.id for v in self.vehicles()]
            raise StateError(f"unknown vehicle id {vid}; known vehicles: {known}")
        return self._vehicle_from_row(row)

    def _vehicle_from_row(self, row: Any) -> RegisteredVehicle:
        try:
            spec = json.loads(row[2])
            if not isinstance(spec, dict):
                raise ValueError(f"a vehicle description is a JSON object, not {spec!r}")
            return RegisteredVehicle(int(row[0]), str(row[1]), spec, str(row[3]))
        except (TypeError, ValueError) as exc:
            raise self._damaged_record(f"vehicle {row[0]}", exc) from None

    def add_vehicle(self, spec: dict[str, Any], *, make_current: bool = True) -> int:
        """Register a vehicle (JSON description); optionally make it the current one."""
        try:
            spec_json = json.dumps(spec, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise StateError(f"vehicle description is not JSON-serialisable: {exc}") from None
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO vehicles(name, spec, created) VALUES (?, ?, ?)",
                (str(spec.get("name", "vehicle")), spec_json, _utcnow()),
            )
            vid = int(cur.lastrowid)
            if make_current:
                conn.execute("UPDATE meta SET value = ? WHERE key = 'current_vehicle'", (str(vid),))
        return vid
