"""Road networks: from OpenStreetMap or the synthetic town to an immutable
:class:`~ev_nav.roads.network.RoadNetwork` (also re-exported as ``ev_nav.RoadNetwork``).

The package itself imports nothing, so its light modules (``roads.partial``, which the store
uses) do not pull in SciPy with the network class.
"""
