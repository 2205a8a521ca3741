"""The HTTP API of ``ev-nav serve`` (FastAPI): JSON in, JSON out, the OpenAPI page, the web page.

Why FastAPI on uvicorn: a maintained, widely deployed ASGI stack whose request models (pydantic)
validate input into the one-line errors the CLI gives, whose OpenAPI page documents the API from
the same declarations, and whose synchronous endpoints run in a thread pool, so a route request
never waits for another one's I/O. The trip logic is not here: every endpoint calls
:class:`ev_nav.server.service.FleetService`, which calls :mod:`ev_nav.trips`.

Errors are HTTP 4xx with a JSON body ``{"error": "<one line>", "type": "<ExceptionName>"}``:
422 for readings, coordinates or parameters that cannot be right, 400 for a body that is not
JSON, 404 for an unknown trip, 401/403 for a missing/wrong token, 413 for an oversized body, 503
while the service is shutting down. Each error leaves the state as it was (the library checks
before it writes).

Offline: the page, Leaflet and the OpenAPI page's Swagger UI are all served from the package
(``ev_nav/static``); no response links anything on the internet.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from ev_nav import __version__
from ev_nav.errors import (
    ConfigError,
    EvNavError,
    InvalidObservation,
    OutsideNetworkError,
    RouteOptionError,
    StateIOError,
    UnknownSegmentError,
    UnknownTripError,
    UnreachableError,
)
from ev_nav.server.service import MAX_SEGMENTS_PER_OBSERVATION, FleetService, ServiceClosed
from ev_nav.trips.route_options import MAX_VIA, ROAD_KINDS

__all__ = ["MAX_BODY_BYTES", "create_app", "static_dir"]

log = logging.getLogger("ev_nav.server")

#: Largest request body accepted [bytes] (a per-segment observation of a long route is ~10 kB).
MAX_BODY_BYTES = 4_000_000

Lat = Annotated[float, Field(ge=-90.0, le=90.0, allow_inf_nan=False, description="latitude [deg]")]
Lon = Annotated[
    float, Field(ge=-180.0, le=180.0, allow_inf_nan=False, description="longitude [deg]")
]


def static_dir() -> Path:
    """The package's static files (Leaflet, Swagger UI, the page)."""
    return Path(str(resources.files("ev_nav").joinpath("static")))


# ====================================================================== request/response models
class RouteRequest(BaseModel):
    """Plan a trip from ``origin`` to ``goal`` and record it (as ``ev-nav route``)."""

    model_config = ConfigDict(extra="forbid")

    origin: tuple[Lat, Lon] = Field(description="[lat, lon] of the start [deg]")
    goal: tuple[Lat, Lon] = Field(description="[lat, lon] of the destination [deg]")
    policy: Literal["ts", "bucb", "ucb", "mean", "safe"] = Field(
        "ts",
        description="ts explores by sampling, bucb/ucb optimistically, mean is the best guess, "
        "safe the least 95% energy quantile",
    )
    vehicle: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[\w .:@#/-]+$",
        description="name of the vehicle asking (stored with the trip, shown in history)",
    )
    soc: str | None = Field(
        None,
        max_length=32,
        description="state of charge at departure, e.g. '80%' or '24.5kWh': adds the arrival "
        "charge of every route",
    )
    reserve: str = Field("10%", max_length=32, description="charge to keep at arrival")
    seed: int | None = Field(None, ge=0, lt=2**63, description="Thompson draw seed (default: trip)")
    max_snap_m: float = Field(
        500.0, gt=0, le=100_000, allow_inf_nan=False, description="max distance to a road [m]"
    )
    via: list[tuple[Lat, Lon]] = Field(
        default_factory=list,
        max_length=MAX_VIA,
        description="[[lat, lon], …] points the route passes, in order [deg]",
    )
    avoid: list[Literal[tuple(ROAD_KINDS)]] = Field(  # type: ignore[valid-type]
        default_factory=list,
        max_length=len(ROAD_KINDS),
        description="road kinds no route may use: "
        + "; ".join(f"{k} ({v})" for k, v in ROAD_KINDS.items())
        + ". toll, unpaved and ferry need a network built from OSM (which tags them)",
    )
    time_weight: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="price of time [Wh per minute]: the plan minimises predicted energy + "
        "time_weight · minutes (0: energy only)",
    )


class SegmentEnergy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    segment: int = Field(ge=0, lt=2**63)
    energy_wh: float = Field(allow_inf_nan=False, description="energy used on it [Wh]")


class ObservationRequest(BaseModel):
    """What a driven trip cost: its ``total_wh`` (trip computer) or per-segment energies."""

    model_config = ConfigDict(extra="forbid")

    total_wh: float | None = Field(None, allow_inf_nan=False, description="trip total [Wh]")
    segments: list[SegmentEnergy] | None = Field(
        None, max_length=MAX_SEGMENTS_PER_OBSERVATION, description="per-segment energies"
    )
    force: bool = Field(False, description="record a reading the plausibility checks refuse")
    partial: bool = Field(False, description="accept segments covering only part of the route")

    @model_validator(mode="after")
    def _one_kind(self) -> ObservationRequest:
        if (self.total_wh is None) == (self.segments is None):
            raise ValueError("give exactly one of total_wh and segments")
        return self


# ====================================================================== errors
def _status_of(exc: EvNavError) -> int:
    if isinstance(exc, UnknownTripError):
        return 404
    if isinstance(exc, ServiceClosed):
        return 503
    if isinstance(exc, StateIOError):
        return 503
    if isinstance(
        exc,
        InvalidObservation | OutsideNetworkError | UnreachableError | UnknownSegmentError
        | ConfigError | RouteOptionError,
    ):
        return 422
    return 400


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def error_response(status: int, message: str, kind: str) -> JSONResponse:
    """The API's error body: ``{"error": one line, "type": name}``."""
    return JSONResponse({"error": _one_line(message), "type": kind}, status_code=status)


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        ctx = first.get("ctx") or {}
        return 400, f"malformed JSON body: {ctx.get('error', first.get('msg', 'invalid JSON'))}"
    loc = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    msg = str(first.get("msg", "invalid request"))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return 422, f"{loc or 'body'}: {msg}{more}"


# ====================================================================== the app
def create_app(service: FleetService, *, token: str | None = None) -> FastAPI:
    """The ASGI app serving ``service``. With ``token``, every request that changes the state
    (planning records a trip, observations, forgetting) must carry ``Authorization: Bearer
    TOKEN``; reading (health, history, layers, the page) is open."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        service.close()  # checkpoint what the model has absorbed

    app = FastAPI(
        title="ev-nav routing server",
        version=__version__,
        description=(
            "Energy-efficient EV routes from a model that learns from every vehicle's trips. "
            "Plan a route (POST /api/routes), drive it, post what it cost "
            "(POST /api/trips/{trip}/observations); the fleet's model learns in the background. "
            "Errors are JSON: {\"error\": one line, \"type\": name}."
        ),
        docs_url=None,  # served below from the package's Swagger UI, not a CDN
        redoc_url=None,
        lifespan=lifespan,
    )
    static = static_dir()
    app.mount("/static", StaticFiles(directory=static), name="static")

    # -------------------------------------------------------------- errors as one-line JSON
    @app.exception_handler(EvNavError)
    async def _ev_nav_error(_request: Request, exc: EvNavError) -> JSONResponse:
        return error_response(_status_of(exc), str(exc), type(exc).__name__)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = _validation_message(exc)
        return error_response(status, message, "InvalidRequest")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), "HTTPError")

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(500, f"internal error ({type(exc).__name__}: {exc})", "InternalError")

    @app.middleware("http")
    async def _limit_body(request: Request, call_next: Callable) -> Response:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return error_response(
                413, f"request body larger than {MAX_BODY_BYTES:,} bytes", "InvalidRequest"
            )
        return await call_next(request)

    # -------------------------------------------------------------- the token
    def require_token(
        authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> None:
        if token is None:
            return
        if not authorization:
            raise _TokenError(401, "this server requires a token: send 'Authorization: Bearer "
                              "TOKEN' (the token given to 'ev-nav serve')")
        scheme, _, given = authorization.partition(" ")
        # constant-time comparison: the answer time says nothing about the token
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            raise _TokenError(403, "wrong token")

    @app.exception_handler(_TokenError)
    async def _token_error(_request: Request, exc: _TokenError) -> JSONResponse:
        resp = error_response(exc.status, exc.message, "TokenError")
        if exc.status == 401:
            resp.headers["WWW-Authenticate"] = "Bearer"
        return resp

    writes = [Depends(require_token)]

    # -------------------------------------------------------------- API
    @app.get("/api/health", tags=["server"], summary="what is served and how fresh the model is")
    def health() -> dict[str, object]:
        out = service.health()
        out["token_required"] = token is not None
        out["version"] = __version__
        return out

    @app.post(
        "/api/routes",
        tags=["trips"],
        dependencies=writes,
        summary="plan a route and record the trip",
        description="Snaps origin and goal to roads and returns the planned route beside the "
        "best guess, shortest and fastest (and safe with a departure charge): km, minutes, "
        "predicted Wh ± sd (joint posterior), arrival charge, coordinates "
        "[lon, lat, elevation m]. Every route starts and ends at the exact points, passes the "
        "via points and uses no avoided road kind; notices lists avoided kinds the network has "
        "no segment of.",
    )
    def plan_route(req: RouteRequest) -> dict[str, object]:
        return service.plan(
            req.origin,
            req.goal,
            policy=req.policy,
            soc=req.soc,
            reserve=req.reserve,
            seed=req.seed,
            max_snap_m=req.max_snap_m,
            vehicle=req.vehicle,
            via=req.via,
            avoid=req.avoid,
            time_weight=req.time_weight,
        )

    @app.post(
        "/api/trips/{trip_id}/observations",
        tags=["trips"],
        dependencies=writes,
        status_code=201,
        summary="record what a trip cost",
        description="Durable when answered (the store first); the model learns in the "
        "background. Implausible readings (more than 8 sd from the prediction, a likely "
        "kWh/Wh mix-up) are refused unless force; a trip is observed once.",
    )
    def record(trip_id: int, req: ObservationRequest) -> dict[str, object]:
        segments = None
        if req.segments is not None:
            segments = (
                np.array([s.segment for s in req.segments], dtype=np.int64),
                np.array([s.energy_wh for s in req.segments], dtype=np.float64),
            )
        return service.record(
            trip_id, total_wh=req.total_wh, segments=segments, force=req.force,
            partial=req.partial,
        )

    @app.delete(
        "/api/trips/{trip_id}/observations",
        tags=["trips"],
        dependencies=writes,
        summary="forget a trip's observations (the model forgets them too)",
    )
    def forget(trip_id: int) -> dict[str, object]:
        return service.forget(trip_id)

    @app.get("/api/trips", tags=["trips"], summary="past trips: predicted vs observed energy")
    def history(
        limit: Annotated[int | None, Query(ge=1, le=100_000, description="newest N")] = None,
    ) -> list[dict[str, object]]:
        return service.history(limit)

    @app.get(
        "/api/layers",
        tags=["model"],
        summary="the learned layers of every segment as GeoJSON",
        description="FeatureCollection of LineStrings with properties wh_per_km, mean_wh, "
        "sd_wh (posterior, Wh), visits (observed trips through the segment), length_m.",
        response_class=Response,
    )
    def layers() -> Response:
        return Response(service.layers_geojson(), media_type="application/geo+json")

    # -------------------------------------------------------------- pages
    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(static / "server" / "index.html", media_type="text/html")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="ev-nav API",
            swagger_js_url="/static/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url="/static/swagger-ui/swagger-ui.css",
            swagger_favicon_url="/static/swagger-ui/favicon-32x32.png",
            # no validator badge: it would be fetched from the internet
            swagger_ui_parameters={"validatorUrl": None},
        )

    return app


class _TokenError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
