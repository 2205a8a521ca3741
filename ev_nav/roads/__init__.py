"""Road networks: from OpenStreetMap or the synthetic town to an immutable :class:`RoadNetwork`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ev_nav.roads.network import RoadNetwork

__all__ = ["RoadNetwork"]


def __getattr__(name: str) -> object:
    # Lazy, so that light modules of the package (``roads.partial``, used by the store) do not
    # pull in SciPy with the network class.
    if name == "RoadNetwork":
        from ev_nav.roads.network import RoadNetwork

        return RoadNetwork
    raise AttributeError(f"module 'ev_nav.roads' has no attribute {name!r}")
