"""Errors as JSON: the product's typed errors with the HTTP status R-API names.

Every answer that is not a success has one shape, ``ErrorBody``: ``status``,
a stable machine ``reason``, a human ``message`` and ``fix``, the field
``path`` when one field is at fault, and every problem of a rejected document
in ``errors``. The mapping is by type, so a new error class only needs its
``http_status`` and ``reason``. Anything unexpected becomes a 500 with a
generic body and a request id; the traceback goes to the server log only.
"""

# Decisions embodied here (docs/decisions.md):
# * “A backend's failure is answered as `core_unavailable` (503) or `core_refused` (502)”

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from gps_dagster.domain.documents import format_path
from gps_dagster.domain.errors import FieldError, GpsError, SpecInvalid, TemporaryError
from gps_dagster.domain.gps.errors import ReservationError
from gps_dagster.ports import CoreError
from gps_dagster.store.errors import StoreUnavailable

log = logging.getLogger("gps_dagster.api")


class FieldProblem(BaseModel):
    path: str = Field(description="Field path in the request document, e.g. windows[0].cron.")
    reason: str = Field(description="Stable machine reason code.")
    fix: str = Field(description="What to change.")


class ErrorBody(BaseModel):
    """The body of every error answer."""

    status: int
    reason: str = Field(
        description="Stable machine code, e.g. target_owned, busy, version_mismatch."
    )
    message: str
    fix: str
    path: str | None = None
    errors: list[FieldProblem] = Field(default_factory=list)
    request_id: str | None = Field(
        default=None, description="Set on 500s: quote it to the operator."
    )


class ApiError(Exception):
    """An error the API raises itself (auth, limits, surface rules)."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        fix: str,
        *,
        path: str | None = None,
        errors: Sequence[FieldError] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status, self.reason, self.message, self.fix, self.path = (
            status,
            reason,
            message,
            fix,
            path,
        )
        self.errors, self.headers = tuple(errors), headers or {}
        super().__init__(message)


_RESERVATION_STATUS = {
    "reservation_not_found": 404,
    "reservation_exists": 409,
    "stale_generation": 412,
    "invalid_transition": 409,
    "gpu_already_reserved": 409,
}


CORE_UNAVAILABLE = "core_unavailable"
"""A core (Kubernetes, the simulated pool) call that did not answer: timed out, unreachable
(503)."""
CORE_REFUSED = "core_refused"
"""A core call the backend refused while the API only needed to read (502)."""
CORE_REASONS = (CORE_UNAVAILABLE, CORE_REFUSED)
"""Every reason an error of the core's port is answered with: a backend's own reasons
(``api_timeout``, ``api_unreachable``, …) are an open set, so they go in the message, never
in ``reason`` — the document can list every reason an operation answers."""
CORE_STATUSES = (502, 503)
STORE_REASONS = (StoreUnavailable.reason,)
"""The store's outage: every authenticated request reads the store (its token, its session)."""
STORE_STATUSES = (StoreUnavailable.http_status,)


def _core_problem(exc: CoreError) -> ApiError:
    if exc.http_status == 503:
        return ApiError(
            503,
            CORE_UNAVAILABLE,
            f"the deploy backend did not answer ({exc.reason}): {exc}",
            "retry shortly; if it persists, ask the operator to check the backend the server "
            "runs against (the Kubernetes API server, or the simulated pool's database)",
            headers={"Retry-After": "5"},
        )
    return ApiError(
        502,
        CORE_REFUSED,
        f"the deploy backend refused a read ({exc.reason}): {exc}",
        "retry; if it persists, give the operator this message (the backend's reason is in it)",
    )


def problem(exc: BaseException) -> ApiError:
    """The API error for a product exception (raises nothing; unknown types are 500s)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, CoreError):
        return _core_problem(exc)
    if isinstance(exc, SpecInvalid):
        first = exc.errors[0] if exc.errors else None
        return ApiError(
            422,
            "invalid_document",
            f"{len(exc.errors)} problem(s) in the document",
            first.fix if first else "fix the document",
            path=first.path if first else None,
            errors=exc.errors,
        )
    if isinstance(exc, ReservationError):
        return ApiError(
            _RESERVATION_STATUS.get(exc.reason, 409), exc.reason, str(exc).split("; ")[0], exc.fix
        )
    status = getattr(exc, "http_status", None)
    if isinstance(exc, GpsError) and isinstance(status, int):
        reason = str(getattr(exc, "reason", type(exc).__name__))
        fix = str(
            getattr(exc, "fix", "") or ("retry shortly" if isinstance(exc, TemporaryError) else "")
        )
        headers = {"Retry-After": "5"} if isinstance(exc, TemporaryError) else None
        return ApiError(
            status if 400 <= status < 600 else 500,
            reason,
            str(exc),
            fix,
            path=getattr(exc, "path", None) or None,
            headers=headers,
        )
    raise TypeError("not a product error")


def respond(err: ApiError, request_id: str | None = None) -> JSONResponse:
    body = ErrorBody(
        status=err.status,
        reason=err.reason,
        message=err.message,
        fix=err.fix,
        path=err.path,
        errors=[FieldProblem(**e.as_dict()) for e in err.errors],
        request_id=request_id,
    )
    return JSONResponse(body.model_dump(), status_code=err.status, headers=err.headers)


def internal_error(request_id: str) -> ApiError:
    return ApiError(
        500,
        "internal_error",
        "the server failed to handle the request",
        f"retry; if it persists, give the operator request id {request_id}",
    )


def _validation(exc: RequestValidationError) -> ApiError:
    problems, in_body = [], False
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        in_body = in_body or (bool(loc) and loc[0] == "body")
        where = [p for p in loc[1:] if isinstance(p, (str, int))]
        problems.append(
            FieldError(
                format_path(where, "" if loc[:1] == ("body",) else str(loc[0])),
                str(err.get("type", "invalid")),
                str(err.get("msg", "fix the value")),
            )
        )
    status = 422 if in_body else 400
    first = problems[0] if problems else FieldError("", "invalid", "fix the request")
    if any(p.reason == "json_invalid" for p in problems):
        return ApiError(
            400, "invalid_json", "the body is not valid JSON", "send a JSON object", errors=problems
        )
    return ApiError(
        status,
        "invalid_request",
        f"{len(problems)} problem(s) in the request",
        first.fix,
        path=first.path or None,
        errors=problems,
    )


_HTTP_REASONS = {
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
}


OnRefused = Callable[[Request, "ApiError"], Awaitable[None]]


def install(app: FastAPI, on_refused: OnRefused | None = None) -> None:
    """Register the handlers: product errors, request validation, routing errors, and the catch-all.

    ``on_refused`` sees every error answer before it is sent (``api/refusals.py`` audits them).
    """

    async def refused(request: Request, err: ApiError) -> JSONResponse:
        if on_refused is not None:
            await on_refused(request, err)  # R-API: a probe leaves a trace
        return respond(err)

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return await refused(request, exc)

    @app.exception_handler(GpsError)
    async def _product(request: Request, exc: GpsError) -> JSONResponse:
        try:
            err = problem(exc)
        except TypeError:
            return _unexpected(request, exc)
        return await refused(request, err)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return respond(_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and "parsing the body" in str(
            exc.detail
        ):  # undecodable, too deep
            return await refused(
                request,
                ApiError(
                    400,
                    "invalid_json",
                    "the body is not valid JSON (undecodable, or nested too deep)",
                    "send a UTF-8 JSON object nested at most 32 levels",
                ),
            )
        reason = _HTTP_REASONS.get(exc.status_code, "http_error")
        fix = (
            "see /docs for the operations of this API"
            if exc.status_code in (404, 405)
            else "fix the request"
        )
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed(request))
        return await refused(
            request, ApiError(exc.status_code, reason, str(exc.detail), fix, headers=headers)
        )

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        return _unexpected(request, exc)


def _allowed(request: Request) -> list[str]:
    """Every method some route serves at this path (Starlette's own Allow names only the first
    route)."""
    return [
        m
        for m in ("DELETE", "GET", "POST", "PUT")
        if any(
            route.matches({**request.scope, "method": m})[0] is Match.FULL
            for route in request.app.routes
        )
    ]


def _unexpected(request: Request, exc: BaseException) -> JSONResponse:
    request_id = uuid.uuid4().hex[:16]
    log.error("request %s %s %s failed", request_id, request.method, request.url.path, exc_info=exc)
    return respond(internal_error(request_id), request_id)


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` for the error statuses an operation can answer."""
    return {code: {"model": ErrorBody} for code in sorted(set(codes))}
