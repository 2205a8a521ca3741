"""ev-nav: energy-efficient EV navigation that learns per-segment energy with GP bandits.

The public API, re-exported here (imported on first use, so that ``import ev_nav`` and the
command line's start-up stay light):

* the driver's workflow (:mod:`ev_nav.trips`): :func:`create_state`, :func:`open_state`,
  :func:`plan_trip`, :func:`record_total`, :func:`record_segments`, :func:`record_track`
  (a GPS track, map-matched), :func:`forget_trip`, :func:`trip_history`,
  :func:`write_trip_files`, :func:`read_gpx`;
* networks and vehicles: :class:`RoadNetwork`, :func:`load_osm`, :func:`synthetic_town`,
  :func:`match_track`, :class:`Vehicle`, :func:`get_vehicle`, :func:`catalogue` (the vehicle
  catalogue: current EV models with sourced values);
* charging sites: :class:`Chargers` (a network's table, ``RoadNetwork.chargers``),
  :func:`read_osm_chargers`, :func:`read_charger_csv`, :func:`generated_chargers`;
* charging stops (``docs/charging.md``): :func:`plan_charging` with :class:`ChargeSettings`
  and the sites a car can use (:func:`vehicle_sites`), between the positions
  :func:`trip_ends` picks among two points' snap candidates, giving a :class:`ChargingPlan`; for a
  catalogue car other than the one a model learned for, :func:`e_det_shift` (the per-segment
  energy ``plan_charging`` adds to the learned mean);
* roads that change (``docs/changes.md``): :class:`ChangeDetector` with :class:`ChangeConfig`,
  flagging :class:`ChangeEvent` s (a per-segment CUSUM; the learners forget a changed road's
  old readings through ``reset_segments``); in a state, :func:`dismiss_changes` un-flags a
  road (``Store.segment_changes`` lists the flagged ones);
* physics: :func:`node_potential`, :func:`potential_change`, :func:`loss_scale`,
  :func:`loss_lower_bound`;
* ambient temperature (``docs/temperature.md``): :class:`ClimateModel` (the physics model's
  heating, cooling and cold-battery terms; the learners' ``temperature=`` arguments) and
  :class:`AtTemperature` (a model read at one temperature, for planning);
* simulation: :class:`RunSpec`, :func:`run_one`, :func:`run_grid`, :func:`save_truth` (a
  world as a truth file for ``[truth] kind = "file"``);
* errors: :class:`EvNavError` (every user-facing error derives from it).
"""

from __future__ import annotations

from ev_nav.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "create_state": "ev_nav.trips.session",
    "open_state": "ev_nav.trips.session:open_session",
    "plan_trip": "ev_nav.trips.planning",
    "write_trip_files": "ev_nav.trips.planning",
    "record_total": "ev_nav.trips.observations",
    "record_segments": "ev_nav.trips.observations",
    "forget_trip": "ev_nav.trips.observations",
    "record_track": "ev_nav.trips.tracks",
    "read_gpx": "ev_nav.trips.gpx",
    "trip_history": "ev_nav.trips.session",
    "RoadNetwork": "ev_nav.roads.network",
    "load_osm": "ev_nav.roads.load",
    "synthetic_town": "ev_nav.roads.synthetic",
    "match_track": "ev_nav.roads.matching",
    "Chargers": "ev_nav.roads.chargers",
    "plan_charging": "ev_nav.trips.charging",
    "ChargeSettings": "ev_nav.trips.charging",
    "ChargingPlan": "ev_nav.trips.charging",
    "vehicle_sites": "ev_nav.trips.charging",
    "trip_ends": "ev_nav.trips.charging",
    "e_det_shift": "ev_nav.trips.battery",
    "read_osm_chargers": "ev_nav.roads.chargers",
    "read_charger_csv": "ev_nav.roads.chargers",
    "generated_chargers": "ev_nav.roads.synthetic",
    "ChangeDetector": "ev_nav.gp.changes",
    "ChangeConfig": "ev_nav.gp.changes",
    "ChangeEvent": "ev_nav.gp.changes",
    "dismiss_changes": "ev_nav.trips.changes",
    "Vehicle": "ev_nav.energy",
    "get_vehicle": "ev_nav.energy",
    "catalogue": "ev_nav.vehicles",
    "ClimateModel": "ev_nav.energy",
    "AtTemperature": "ev_nav.gp.temperature",
    "node_potential": "ev_nav.potential",
    "potential_change": "ev_nav.potential",
    "loss_scale": "ev_nav.potential",
    "loss_lower_bound": "ev_nav.potential",
    "RunSpec": "ev_nav.sim.fleet",
    "run_one": "ev_nav.sim.fleet",
    "run_grid": "ev_nav.sim.grid",
    "save_truth": "ev_nav.sim.environment",
    "EvNavError": "ev_nav.errors",
}

__all__ = ["__version__", *_EXPORTS]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)
