"""The ASGI application of ``gps-dagster serve``: the schedule API and the timeline page.

Two surfaces with the same operations (R-API): ``/admin/…`` for the
platform team and ``/api/v1/cmp/projects/{project}/…`` for tenants. The
OpenAPI document is served at ``/openapi.json`` and checked in as
``docs/openapi.json`` (a test keeps them equal). ``/ui/…`` serves the
timeline page, outside the OpenAPI document.
"""

# Decisions embodied here (docs/decisions.md):
# * “The API is FastAPI on uvicorn, one process”
# * “API bodies are JSON only; HEAD as GET; no slash redirects”

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query
from starlette.types import ASGIApp

from gps_dagster import __version__
from gps_dagster.api import auth, errors, openapi, ui
from gps_dagster.api.body_keys import DocumentRoute
from gps_dagster.api.headers import SecurityHeaders
from gps_dagster.api.limits import BodyLimit
from gps_dagster.api.models import AuditEntry, AuditPage
from gps_dagster.api.protocol import Protocol
from gps_dagster.api.refusals import RefusalLog
from gps_dagster.api.reservations import admin_reservation_routes, reservation_routes
from gps_dagster.api.schedules import Caller, schedule_routes
from gps_dagster.api.services import ApiServices
from gps_dagster.store.tokens import TokenRecord

ADMIN = "/admin"
TENANT = "/api/v1/cmp/projects/{project}"
DESCRIPTION = (
    """Deploy schedules, their status, timeline, apply-now and dry-run, and GPU """
    """reservations.

Authenticate with `Authorization: Bearer <token>` (`gps-dagster tokens create`). An `admin`
token may use every surface; a `cmp:<project>` token only its own project's. Errors share one
body: `status`, `reason`, `message`, `fix`, `path`, `errors[]`. Each operation's `x-reasons` lists
every `reason` (of the answer or of an `errors[]` entry) it can refuse with, including the rules a
schema cannot state (an unknown target, overlapping windows); integers are spelled without a
fraction (`10`, not `10.0`).
"""
)


class _Api(FastAPI):
    """FastAPI whose security headers wrap the whole stack, Starlette's error middleware included.

    ``add_middleware`` places a middleware inside ``ServerErrorMiddleware``, which answers an
    unhandled exception (the generic 500) itself: that answer went out without CSP, nosniff,
    frame-ancestors, Referrer-Policy or ``Cache-Control: no-store``.
    """

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def create_app(services: ApiServices) -> FastAPI:
    """The app over ``services`` (store, core, engine, clock, pool, limits)."""
    app = _Api(
        title="gps-dagster schedule API",
        version=__version__,
        description=DESCRIPTION,
        docs_url="/docs",
        redoc_url=None,
        redirect_slashes=False,
    )
    app.router.route_class = DocumentRoute  # a key given twice is refused at its path (R-MODEL-7)
    app.state.services = services
    errors.install(app, on_refused=RefusalLog().record)

    def admin(who: Annotated[TokenRecord, Depends(auth.principal)]) -> Caller:
        auth.require_admin(who)
        return Caller(who, "admin", services)

    def tenant(project: str, who: Annotated[TokenRecord, Depends(auth.principal)]) -> Caller:
        return Caller(who, auth.tenant_scope(who, project), services)

    schedule_routes(app, base=f"{ADMIN}/deploy-schedules", tag="admin", caller=admin)
    schedule_routes(app, base=f"{TENANT}/deploy-schedules", tag="tenant", caller=tenant)
    reservation_routes(app, base=f"{ADMIN}/reservations", tag="admin", caller=admin)
    admin_reservation_routes(app, base=f"{ADMIN}/reservations", caller=admin)
    reservation_routes(app, base=f"{TENANT}/reservations", tag="tenant", caller=tenant)
    _audit_route(app, admin, services)

    @app.get("/healthz", tags=["health"], operation_id="healthz", summary="Liveness (no auth)")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    ui.install(app, services)
    _tighten_document(app)
    app.add_middleware(BodyLimit, max_bytes=services.limits.max_body_bytes)
    app.add_middleware(Protocol)  # 415 for a non-JSON body, HEAD on GET routes
    # SecurityHeaders wraps everything (``_Api``): a 413, a 415 and an unhandled 500 carry them too
    return app


def _tighten_document(app: FastAPI) -> None:
    """Serve the derived document tightened to the server's real input rules
    (``api/openapi.py``)."""
    derive = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openapi.tighten(derive())
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]


def _audit_route(app: FastAPI, admin: Any, services: ApiServices) -> None:
    limits = services.limits

    @app.get(
        f"{ADMIN}/audit",
        response_model=AuditPage,
        tags=["admin"],
        operation_id="admin_audit",
        responses=errors.error_responses(400, 401, 403),
        summary="Every write: who, what, when, version",
    )
    def audit(
        c: Annotated[Caller, Depends(admin)],
        limit: Annotated[int, Query(ge=1, le=limits.max_page_size)] = limits.default_page_size,
        page_token: Annotated[int, Query(ge=0, le=2**62)] = 0,
        name: Annotated[str | None, Query(max_length=200)] = None,
    ) -> AuditPage:
        rows = c.services.store.list_audit(after_id=page_token, limit=limit + 1, name=name)
        more = len(rows) > limit
        rows = rows[:limit]
        items = [
            AuditEntry(
                id=r.id,
                at=r.at,
                actor=r.actor,
                actor_token_id=r.token_id,
                action=r.action,
                object_kind=r.object_kind,
                object_name=r.object_name,
                scope=r.scope,
                version=r.version,
                detail=r.detail,
            )
            for r in rows
        ]
        return AuditPage(items=items, next_page_token=str(rows[-1].id) if more else None)
