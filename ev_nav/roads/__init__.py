"""Road networks: from OpenStreetMap or the synthetic town to an immutable :class:`RoadNetwork`."""

from ev_nav.roads.network import RoadNetwork

__all__ = ["RoadNetwork"]
