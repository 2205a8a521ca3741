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
before it writes). The token and the body's size are checked before the body is read
(:class:`RequestGuard`); numbers are strict (a string or boolean is a 422, never converted);
messages name the request's fields, not the command line's options (:func:`api_terms`).

Offline: the page, Leaflet and the OpenAPI page's Swagger UI are all served from the package
(``ev_nav/static``); no response links anything on the internet.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import parse_qsl

import numpy as np
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator
from pydantic_core import to_json
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ev_nav import __version__
from ev_nav.errors import (
    ConfigError,
    EvNavError,
    InvalidObservation,
    OutsideNetworkError,
    RouteOptionError,
    StateBusyError,
    StateIOError,
    UnknownSegmentError,
    UnknownTripError,
    UnreachableError,
)
from ev_nav.server.service import MAX_SEGMENTS_PER_OBSERVATION, FleetService, ServiceClosed
from ev_nav.trips.route_options import MAX_TIME_WEIGHT, MAX_VIA, ROAD_KINDS

__all__ = ["MAX_BODY_BYTES", "create_app", "static_dir"]

log = logging.getLogger("ev_nav.server")

#: Largest request body accepted [bytes] (a per-segment observation of a long route is ~10 kB).
MAX_BODY_BYTES = 4_000_000

# Numbers are strict: a JSON string ("500") or boolean (true) where a number belongs is a 422,
# never converted (a client that sends them has a bug the answer must show). An integer is a
# number where a float is asked for.
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]
Integer = Annotated[int, Strict()]
Flag = Annotated[bool, Strict()]
Lat = Annotated[Number, Field(ge=-90.0, le=90.0, description="latitude [deg]")]
Lon = Annotated[Number, Field(ge=-180.0, le=180.0, description="longitude [deg]")]


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
        "mean",
        description="mean is the best guess (the default for a fleet: its many different trips "
        "teach the shared model without exploring; docs/objective.md), ts explores by "
        "sampling, bucb/ucb optimistically, safe the least sum of the segments' 95% energy "
        "quantiles",
    )
    vehicle: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[\w .:@#/-]+$",
        description="name of the vehicle asking (stored with the trip, shown in history)",
    )
    vehicle_model: str | None = Field(
        None,
        min_length=1,  # "" was taken for no model: a client's empty field went unnoticed
        max_length=64,
        description="catalogue model whose physics and battery the energy and arrival "
        "forecasts use ('ev-nav vehicles' lists them; default: the state's vehicle)",
    )
    soc: str | None = Field(
        None,
        max_length=32,
        description="state of charge at departure, e.g. '80%' or '24.5kWh': adds the arrival "
        "charge of every route",
    )
    reserve: str | None = Field(
        None, max_length=32,
        description="charge to keep at arrival, with soc (default 10%; without soc a 422)",
    )
    seed: Integer | None = Field(
        None, ge=0, lt=2**63, description="Thompson draw seed (default: trip)"
    )
    max_snap_m: Number = Field(500.0, gt=0, le=100_000, description="max distance to a road [m]")
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
        + ". toll and unpaved need a network built from OSM (which tags them); ferry crossings "
        "are not loaded, so no network has one to avoid (a notice, not an error)",
    )
    time_weight: Number = Field(
        0.0,
        ge=0,
        le=MAX_TIME_WEIGHT,
        allow_inf_nan=False,
        description="price of time [Wh per minute]: the plan minimises predicted energy + "
        "time_weight · minutes (0: energy only)",
    )
    temperature: Number | None = Field(
        None, ge=-60, le=60, allow_inf_nan=False,
        description="ambient temperature [°C]: predict the routes at it (docs/temperature.md)",
    )
    alternatives: Flag = Field(
        True,
        description="also route and describe the rows shown for comparison (best guess, "
        "shortest, fastest; safe with soc); false: the planned route alone, what a vehicle "
        "that drives the plan needs (one route search instead of three or four)",
    )


class ChargingRequest(BaseModel):
    """Plan a trip with charging stops (as ``ev-nav route --confidence``); nothing is recorded."""

    model_config = ConfigDict(extra="forbid")

    origin: tuple[Lat, Lon] = Field(description="[lat, lon] of the start [deg]")
    goal: tuple[Lat, Lon] = Field(description="[lat, lon] of the destination [deg]")
    soc: str = Field(max_length=32, description="charge at departure, e.g. '35%' or '20kWh'")
    reserve: str = Field("10%", max_length=32, description="charge every arrival must keep")
    confidence: Number = Field(
        0.95, gt=0.5, lt=1.0, allow_inf_nan=False,
        description="required probability that every arrival (each stop and the destination) "
        "keeps the reserve, under the model's joint posterior of the legs' energies",
    )
    stop_minutes: Number = Field(
        5.0, ge=0, le=600, allow_inf_nan=False,
        description="time a stop costs besides charging [min]",
    )
    max_charge: str = Field("100%", max_length=32, description="highest charge to plan to")
    max_stops: Integer = Field(4, ge=0, le=10, description="most stops")
    max_snap_m: Number = Field(500.0, gt=0, le=100_000, description="max distance to a road [m]")
    vehicle_model: str | None = Field(
        None,
        min_length=1,  # "" was taken for no model: a client's empty field went unnoticed
        max_length=64,
        description="catalogue model whose battery, charging curve and plugs the plan uses "
        "('ev-nav vehicles' lists them; default: the state's vehicle)",
    )
    temperature: Number | None = Field(
        None, ge=-60, le=60, allow_inf_nan=False,
        description="ambient temperature [°C]: the legs' energies at it (docs/temperature.md)",
    )


class SegmentEnergy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    segment: Integer = Field(ge=0, lt=2**63, description="segment id (GeoJSON 'segment')")
    energy_wh: Number = Field(
        description="energy used on it [Wh]: on the trip's first and last segment, on the part "
        "of it driven (the route's start_fraction / end_fraction)",
    )


class ObservationRequest(BaseModel):
    """What a driven trip cost: its ``total_wh`` (trip computer) or per-segment energies."""

    model_config = ConfigDict(extra="forbid")

    total_wh: Number | None = Field(None, description="trip total [Wh]")
    segments: list[SegmentEnergy] | None = Field(
        None, max_length=MAX_SEGMENTS_PER_OBSERVATION,
        description="per-segment energies, one per pass (a segment the route drives twice: two)",
    )
    force: Flag = Field(False, description="record a reading the plausibility checks refuse")
    partial: Flag = Field(False, description="accept segments covering only part of the route")
    temperature: Number | None = Field(
        None, ge=-60, le=60, allow_inf_nan=False,
        description="ambient temperature of the drive [°C]: stored with the readings and "
        "learned with them (docs/temperature.md)",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> ObservationRequest:
        if (self.total_wh is None) == (self.segments is None):
            raise ValueError("give exactly one of total_wh and segments")
        if self.partial and self.segments is None:
            # a total is the whole trip's: learned as if the trip were driven end to end
            raise ValueError('"partial": true goes with "segments" only; a total is the whole '
                             "trip's (for part of a trip, post the energies of the segments "
                             "driven)")
        return self


# ====================================================================== errors
def _status_of(exc: EvNavError) -> int:
    if isinstance(exc, UnknownTripError):
        return 404
    if isinstance(exc, ServiceClosed):
        return 503
    if isinstance(exc, StateIOError | StateBusyError):  # the server's trouble, not the request's
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


#: The library's messages name the command line's options and commands (it serves ``ev-nav
#: observe``); an API client sets request fields and reads endpoints instead. (No option here
#: is a prefix of another.) A state's vehicle is its operator's choice (``ev-nav init
#: --vehicle``), said as such.
API_TERMS: tuple[tuple[str, str], ...] = (
    ("--total-wh", '"total_wh"'),
    ("--partial", '"partial": true'),
    ("--force", '"force": true'),
    ("'ev-nav history'", "GET /api/trips"),
    ("--vehicle-model NAME", 'the request field "vehicle_model"'),
    ("a state made with 'ev-nav init --vehicle NAME'", "a state its operator made for one"),
)


def api_terms(message: str) -> str:
    """``message`` with the CLI's option names replaced by the API's request fields."""
    for cli, api in API_TERMS:
        message = message.replace(cli, api)
    return message


def json_body(doc: object, status_code: int = 200) -> Response:
    """A document the service built, as the JSON response FastAPI would send for it.

    The bytes are those of FastAPI's own path for a returned ``dict``/``list`` (pydantic-core's
    serializer, ``application/json``), made once in the request's worker thread. FastAPI would
    first validate the document against the declared ``dict[str, object]`` in another trip to
    its thread pool: a walk of every coordinate of four routes, with nothing to find in a
    document built here. Each endpoint still declares that response model for the OpenAPI page.
    """
    return Response(to_json(doc), status_code=status_code, media_type="application/json")


def error_response(
    status: int, message: str, kind: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The API's error body: ``{"error": one line, "type": name}``."""
    return JSONResponse({"error": _one_line(message), "type": kind}, status_code=status,
                        headers=headers)


class ErrorBody(BaseModel):
    """Every error's body (for the OpenAPI page; :func:`error_response` writes it)."""

    error: str = Field(description="what went wrong, one line")
    type: str = Field(description="the error's name, e.g. InvalidRequest, InvalidObservation")


#: Each error status with :class:`ErrorBody`, for the OpenAPI page (FastAPI's own 422 entry
#: describes its ``{"detail": [...]}``, which this server never sends).
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorBody, "description": what}
    for status, what in (
        (400, "malformed request body, or a request the state cannot serve"),
        (401, "a token is required (Authorization: Bearer TOKEN)"),
        (403, "wrong token"),
        (404, "no such trip or path"),
        (413, "request body too large"),
        (422, "a field is missing, of the wrong type or out of range, or a reading is "
              "implausible"),
        (503, "the server is shutting down, its storage failed, or another process holds the "
              "state's lock (Retry-After: seconds)"),
    )
}

#: The statuses every endpoint may answer; :func:`_errors` adds the others where they apply.
COMMON_ERRORS = (400, 422, 503)
#: What an endpoint that changes the state may answer besides: no token, a wrong one, a body too
#: large (:class:`RequestGuard`).
WRITE_ERRORS = (401, 403, 413)


def _errors(*statuses: int) -> dict[int | str, dict[str, object]]:
    """The OpenAPI entries of an endpoint's error statuses beyond :data:`COMMON_ERRORS`."""
    return {status: ERROR_RESPONSES[status] for status in statuses}


#: Seconds a client is asked to wait after a 503 for a state locked by another process.
BUSY_RETRY_AFTER_S = 5


#: FastAPI's 400 for a body that Python's json module cannot decode (bytes not in UTF-8/16/32,
#: an integer of more than 4,300 digits, nesting deeper than the recursion limit).
_FASTAPI_BODY_ERROR = "There was an error parsing the body"
UNREADABLE_BODY = (
    "the body cannot be read as JSON: send UTF-8 text, numbers of at most 4,300 digits and "
    "at most a few hundred levels of nesting"
)

#: pydantic's error types for a whole body that is missing or not an object.
_NOT_AN_OBJECT = frozenset({"missing", "model_attributes_type", "dict_type", "model_type"})


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        ctx = first.get("ctx") or {}
        return 400, f"malformed JSON body: {ctx.get('error', first.get('msg', 'invalid JSON'))}"
    if tuple(first.get("loc", ())) == ("body",) and first.get("type") in _NOT_AN_OBJECT:
        # no body, or one that is not a JSON object (a list, a form, JSON sent as text/plain,
        # which arrives as a string): pydantic's "Field required" / "valid dictionary" names
        # neither what to send nor how
        return 422, (
            "the body must be a JSON object of the request's fields, sent with "
            "Content-Type: application/json (the OpenAPI page /docs lists them)"
        )
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
        responses=_errors(*COMMON_ERRORS),
        docs_url=None,  # served below from the package's Swagger UI, not a CDN
        redoc_url=None,
        lifespan=lifespan,
    )
    static = static_dir()
    app.mount("/static", StaticFiles(directory=static), name="static")

    # -------------------------------------------------------------- errors as one-line JSON
    @app.exception_handler(EvNavError)
    async def _ev_nav_error(_request: Request, exc: EvNavError) -> JSONResponse:
        headers = ({"Retry-After": str(BUSY_RETRY_AFTER_S)}
                   if isinstance(exc, StateBusyError) else None)
        return error_response(_status_of(exc), api_terms(str(exc)), type(exc).__name__, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = _validation_message(exc)
        return error_response(status, message, "InvalidRequest")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = str(exc.detail)
        if exc.status_code == 400 and detail == _FASTAPI_BODY_ERROR:
            # FastAPI's words for a body json could not decode (not a JSON syntax error,
            # which is a RequestValidationError): say what such a body is
            detail = UNREADABLE_BODY
        # exc.headers carries what the status needs, e.g. a 405's Allow (where GET is allowed,
        # so is HEAD: RequestGuard answers it)
        headers = dict(exc.headers or {})
        allow = [m.strip() for m in headers.get("Allow", "").split(",") if m.strip()]
        if "GET" in allow and "HEAD" not in allow:
            headers["Allow"] = ", ".join([*allow, "HEAD"])
        return error_response(exc.status_code, detail, "HTTPError", headers or None)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(500, f"internal error ({type(exc).__name__}: {exc})", "InternalError")

    # -------------------------------------------------------------- the token
    def token_problem(authorization: str | None) -> _TokenError | None:
        """Why a request that changes the state may not (None: it may)."""
        if token is None:
            return None
        if not authorization:
            return _TokenError(401, "this server requires a token: send 'Authorization: Bearer "
                               "TOKEN' (the token its operator gave the server)")
        scheme, _, given = authorization.partition(" ")
        # constant-time comparison: the answer time says nothing about the token
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            return _TokenError(403, "wrong token")
        return None

    async def require_token(
        authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> None:
        # a coroutine: FastAPI runs a plain function dependency in its thread pool, a trip
        # between threads per request for a string comparison
        problem = token_problem(authorization)
        if problem is not None:
            raise problem

    @app.exception_handler(_TokenError)
    async def _token_error(_request: Request, exc: _TokenError) -> JSONResponse:
        resp = error_response(exc.status, exc.message, "TokenError")
        if exc.status == 401:
            resp.headers["WWW-Authenticate"] = "Bearer"
        return resp

    writes = [Depends(require_token)]

    # -------------------------------------------------------------- API
    @app.get("/api/health", tags=["server"], summary="what is served and how fresh the model is",
             response_model=dict[str, object])
    def health() -> Response:
        out = service.health()
        out["token_required"] = token is not None
        out["version"] = __version__
        return json_body(out)

    @app.post(
        "/api/routes",
        tags=["trips"],
        dependencies=writes,
        responses=_errors(*WRITE_ERRORS),
        summary="plan a route and record the trip",
        response_model=dict[str, object],
        description="Snaps origin and goal to roads and returns the planned route beside the "
        "best guess, shortest and fastest (and safe with a departure charge): km, minutes, "
        "predicted Wh ± model sd (joint posterior: the model's uncertainty about the mean, "
        "without one drive's noise, which the arrival charge adds), arrival charge, coordinates "
        "[lon, lat, elevation m]. Every route starts and ends at the exact points, passes the "
        "via points and uses no avoided road kind; notices lists avoided kinds the network has "
        "no segment of.",
    )
    def plan_route(req: RouteRequest) -> Response:
        return json_body(service.plan(
            req.origin,
            req.goal,
            policy=req.policy,
            soc=req.soc,
            reserve=req.reserve,
            seed=req.seed,
            max_snap_m=req.max_snap_m,
            vehicle=req.vehicle,
            vehicle_model=req.vehicle_model,
            via=req.via,
            avoid=req.avoid,
            time_weight=req.time_weight,
            temperature=req.temperature,
            alternatives=req.alternatives,
        ))

    @app.post(
        "/api/charging-plans",
        tags=["trips"],
        dependencies=writes,
        responses=_errors(*WRITE_ERRORS),
        summary="plan a long trip with charging stops (nothing recorded)",
        response_model=dict[str, object],
        description="The route and charging stops that minimise total time (driving, charging "
        "along the car's curve at each charger's power, a fixed time per stop) such that every "
        "arrival keeps the reserve with the requested confidence under the learned model "
        "(docs/charging.md). feasible is false when no plan reaches it: the plan least likely "
        "to run empty (then to miss the reserve) is returned with probability_at_least. Needs "
        "chargers on the network.",
    )
    def plan_charging(req: ChargingRequest) -> Response:
        return json_body(service.plan_charging(
            req.origin,
            req.goal,
            soc=req.soc,
            reserve=req.reserve,
            confidence=req.confidence,
            stop_minutes=req.stop_minutes,
            max_charge=req.max_charge,
            max_stops=req.max_stops,
            max_snap_m=req.max_snap_m,
            vehicle_model=req.vehicle_model,
            temperature=req.temperature,
        ))

    @app.post(
        "/api/trips/{trip_id}/observations",
        tags=["trips"],
        dependencies=writes,
        responses=_errors(*WRITE_ERRORS, 404),
        status_code=201,
        summary="record what a trip cost",
        response_model=dict[str, object],
        description="Durable when answered (the store first); the model learns in the "
        "background. Implausible readings (more than 8 sd from the prediction, a likely "
        "kWh/Wh mix-up) are refused unless force; a trip is observed once. A trip planned "
        "for a vehicle_model is that car's reading, judged against its prediction and learned "
        "converted to the state's vehicle (the answer's learned_wh, learned_for). The answer's "
        "predicted_wh, predicted_sd_wh (model sd) and sd_with_noise_wh (the sd the readings "
        "were judged by) are the trip's, or for a partial record its predicted_segments "
        "segments' (null: the whole trip), as 'ev-nav observe --json'.",
    )
    def record(trip_id: int, req: ObservationRequest) -> Response:
        segments = None
        if req.segments is not None:
            segments = (
                np.array([s.segment for s in req.segments], dtype=np.int64),
                np.array([s.energy_wh for s in req.segments], dtype=np.float64),
            )
        return json_body(service.record(
            trip_id, total_wh=req.total_wh, segments=segments, force=req.force,
            partial=req.partial, temperature=req.temperature,
        ), status_code=201)

    @app.delete(
        "/api/trips/{trip_id}/observations",
        tags=["trips"],
        dependencies=writes,
        responses=_errors(*WRITE_ERRORS, 404),
        summary="forget a trip's observations (the model forgets them too)",
        response_model=dict[str, object],
    )
    def forget(trip_id: int) -> Response:
        return json_body(service.forget(trip_id))

    @app.get("/api/trips", tags=["trips"], summary="past trips: predicted vs observed energy",
             response_model=list[dict[str, object]],
             description="One row per trip (as 'ev-nav history --json'): the trip, its predicted "
             "and observed energy [Wh], recorded (true with observed_wh null: observations "
             "of only part of the route, no trip total), temperature_c, the ambient "
             "temperature [°C] its "
             "observations were recorded at (null when none was given), and vehicle_model, "
             "the catalogue car it was planned for (null: the state's vehicle; its figures are "
             "then the state's vehicle's, as learned), and vehicle, the name of the vehicle "
             "that asked for it (the route request's vehicle; null for trips planned with "
             "'ev-nav route').")
    def history(
        limit: Annotated[int | None, Query(ge=1, le=100_000, description="newest N")] = None,
    ) -> Response:
        return json_body(service.history(limit))

    @app.get(
        "/api/changes",
        tags=["model"],
        summary="roads flagged as changed, with the evidence",
        response_model=list[dict[str, object]],
        description="One row per flagged change (as 'ev-nav changes --json'): segment, road "
        "class and length, when flagged, direction, CUSUM statistic and threshold [sd], mean "
        "shift of the readings since the change [Wh and predictive sd], readings since, and "
        "how many older readings the model set aside (kept in the state). all=true adds the "
        "dismissed ones (dismissed: when).",
    )
    def changes(
        all: Annotated[bool, Query(description="include dismissed changes")] = False,  # noqa: A002
    ) -> Response:
        return json_body(service.changes(include_dismissed=all))

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

    # outermost: the token and the size are checked before a byte of the body is read
    app.add_middleware(RequestGuard, token_problem=token_problem, max_body=MAX_BODY_BYTES)
    return app


#: Methods that only read: no token, and no body worth reading.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class RequestGuard:
    """ASGI middleware that checks a request before its body is read.

    HEAD is answered as GET without the body. A request that changes the state (any method but
    GET/HEAD/OPTIONS) needs the token first:
    without it the answer is 401/403 and the body is never read. Then the body is read here, at
    most ``max_body`` bytes: a ``Content-Length`` above it is refused at once, and a chunked
    body (no length announced) is refused with 413 as soon as it passes the limit, so a client
    cannot make the server hold more than ``max_body`` bytes of one request. The body read is
    handed to the app unchanged.

    After a refusal the connection is closed, and the rest of the body is never read. Closing a
    socket that still has unread data makes the kernel reset the connection, which can destroy
    the answer on its way to a client still sending (most clients send the whole body before
    they read); so the answer is sent first and the connection lingers, discarding at most
    :data:`LINGER_BYTES` more or for :data:`LINGER_S` (nothing is kept), before it is closed.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token_problem: Callable[[str | None], _TokenError | None],
        max_body: int,
    ) -> None:
        self.app = app
        self.token_problem = token_problem
        self.max_body = int(max_body)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if scope["method"] not in READ_METHODS:
            problem = self.token_problem(headers.get("authorization"))
            if problem is not None:
                await self._refuse(scope, receive, send, problem.status, problem.message,
                                   "TokenError")
                return
        repeated = _repeated_query_key(scope) if scope["path"].startswith("/api/") else None
        if repeated is not None:
            # the app would take the last one silently (?all=true&all=false is "false")
            await self._refuse(scope, receive, send, 422, f"query parameter {repeated!r} is "
                               "given more than once; give it once", "InvalidRequest")
            return
        if scope["method"] == "HEAD":
            await self._head(scope, receive, send)
            return
        if scope["method"] in READ_METHODS:
            await self.app(scope, receive, send)
            return
        length = headers.get("content-length")
        too_large = f"request body larger than {self.max_body:,} bytes"
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await self._refuse(scope, receive, send, 413, too_large, "InvalidRequest")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await self._refuse(scope, receive, send, 413, too_large, "InvalidRequest")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _head(self, scope: Scope, receive: Receive, send: Send) -> None:
        """HEAD is GET without the body (RFC 9110 §9.3.2): the app's routes answer GET only, and
        monitoring probes ask with HEAD. The headers are GET's, Content-Length included."""

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        # without "pathsend" (a server's way to send a file by its path): a file's body could
        # not be held back
        extensions = {k: v for k, v in (scope.get("extensions") or {}).items()
                      if k != "http.response.pathsend"}
        await self.app({**scope, "method": "GET", "extensions": extensions}, receive,
                       headers_only)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, message: str, kind: str
    ) -> None:
        response = error_response(status, message, kind)
        if status == 401:
            response.headers["WWW-Authenticate"] = "Bearer"
        # the unread rest of the body must not be taken for the next request
        response.headers["Connection"] = "close"
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": response.raw_headers})
        # the whole answer, but not yet complete: the server closes the connection then
        await send({"type": "http.response.body", "body": response.body, "more_body": True})
        if Headers(scope=scope).get("expect", "").lower() != "100-continue":
            # (a client that waits for "100 Continue" has sent no body: nothing to linger for)
            await _linger(receive)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _repeated_query_key(scope: Scope) -> str | None:
    """The first query parameter a request names twice, or None."""
    query = scope.get("query_string", b"")
    if not query:
        return None
    seen: set[str] = set()
    for key, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if key in seen:
            return key
        seen.add(key)
    return None


#: After refusing a request, how much more of its body is read and discarded at most [bytes],
#: and for how long at most [s], so that the answer reaches the client before the connection
#: is closed (see :class:`RequestGuard`).
LINGER_BYTES = 8 << 20
LINGER_S = 2.0


async def _linger(receive: Receive) -> None:
    """Read and discard the request body until it ends, or :data:`LINGER_BYTES` or
    :data:`LINGER_S` are reached, whichever comes first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LINGER_S
    drained = 0
    while drained < LINGER_BYTES:
        left = deadline - loop.time()
        if left <= 0:
            return
        try:
            message = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            return
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        drained += len(message.get("body", b""))


class _TokenError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
