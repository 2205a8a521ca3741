"""``ev-nav serve``: the routing server of a fleet.

One long-running process holds the network and the learned model in memory; vehicles ask it for
routes and post what their trips cost over HTTP, and the model learns from all of them.

* :mod:`ev_nav.server.service` — the fleet service: model snapshots for readers, one model writer,
  the operations (plan, observe, forget, history, layers, health) on the :mod:`ev_nav.trips`
  library, the same layer as the command line.
* :mod:`ev_nav.server.app` — the HTTP API (FastAPI): JSON in and out, one-line JSON errors,
  OpenAPI page, the web page and its static files (Leaflet shipped with the package).
* :mod:`ev_nav.server.client` — a small standard-library HTTP client, and a simulated fleet that
  drives a running server (``ev-nav fleet drive``; ``scripts/load_server.py``).
* :mod:`ev_nav.server.cli` — the ``serve`` command.

The submodules are imported on use: ``import ev_nav.server`` loads no web framework.
"""
