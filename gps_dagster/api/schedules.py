"""The deploy-schedule operations of one surface: admin, or one CMP project's.

``schedule_routes`` adds the same operations under a surface's base path;
what differs between surfaces is only the scope its dependency resolves
(``admin`` or ``cmp:<project>``). A schedule of another scope is answered
exactly like a schedule that does not exist (404), so no surface shows or
touches another's schedules. Every operation is a thin call into
``engine.operations``, ``engine.dry_run`` or the domain timeline — the same
calls the CLI makes.
"""

# Decisions embodied here (docs/decisions.md):
# * “One URL per schedule”
# * “If-Match is optional”

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Header, Query, Response
from starlette.convertors import Convertor, register_url_convertor

from gps_dagster.api import auth, documents
from gps_dagster.api.errors import ApiError, FieldProblem, error_responses
from gps_dagster.api.models import (
    ApplyNowOut,
    DryRunIn,
    DryRunOut,
    ScheduleOut,
    SchedulePage,
    StatusOut,
    TimelineOut,
)
from gps_dagster.api.services import ApiServices
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.evaluator import max_range_days
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.timeline_doc import build_timeline, window_occurrences
from gps_dagster.engine import operations
from gps_dagster.engine.dry_run import DryRunReport, engine_dry_run
from gps_dagster.engine.dry_run_range import dry_run_range
from gps_dagster.engine.errors import Busy
from gps_dagster.store.errors import ScheduleNotFound, TargetOwned
from gps_dagster.store.records import ScheduleRecord
from gps_dagster.store.tokens import TokenRecord


class ScheduleName(Convertor[str]):
    """A path segment that can be a schedule name: ``…/{name}:apply-now`` never matches
    ``…/{name}``."""

    regex = r"[a-z0-9][a-z0-9._-]{0,127}"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


NAME_CONVERTOR = "schedule_name"
register_url_convertor(NAME_CONVERTOR, ScheduleName())

EXAMPLE = {
    "name": "gpu-pool-h100-shared",
    "timezone": "Asia/Ho_Chi_Minh",
    "targets": [
        {
            "model_deploy_id": "md-llama70b",
            "default_state": "stopped",
            "default_allow_downtime": True,
        },
        {"model_deploy_id": "md-qwen32b", "default_state": "running"},
    ],
    "windows": [
        {
            "name": "business-hours",
            "kind": "recurring",
            "priority": 10,
            "cron": "0 8 * * 1-5",
            "duration": "10h",
            "states": [
                {"model_deploy_id": "md-llama70b", "desired_state": "running"},
                {"model_deploy_id": "md-qwen32b", "desired_state": "stopped"},
            ],
        }
    ],
}
ScheduleBody = Annotated[
    dict[str, Any],
    Body(
        description="A deploy schedule document (SPEC §2); validated like a schedule file.",
        openapi_examples={"seed": {"summary": "the seed's schedule", "value": EXAMPLE}},
    ),
]
IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        description=(
            'The version you read, e.g. "3" (the ETag of GET); required on the tenant surface '
            '(428 without it), "*" to overwrite whatever is stored.'
        ),
    ),
]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls, the scope of the surface they call, and the services."""

    who: TokenRecord
    scope: str
    services: ApiServices

    @property
    def now(self) -> datetime:
        return self.services.clock.now()

    def key(self, name: str) -> str:
        """The stored name of this surface's schedule ``name``: ``<project>/<name>`` on a tenant's.

        Names are unique per scope (R-API), so a tenant's names can neither reveal
        nor block another scope's: the same ``name`` in two projects is two schedules.
        """
        return name if self.scope == "admin" else f"{self.scope[4:]}/{name}"

    def visible(self, name: str) -> ScheduleRecord:
        """The schedule ``name`` of this surface's scope, else the 404 of an absent one."""
        record = self.services.store.find_schedule(self.key(name))
        if record is None or record.spec.scope != self.scope:
            raise ScheduleNotFound(name)
        return record


def out(record: ScheduleRecord, warnings: Sequence[FieldError] = ()) -> ScheduleOut:
    document = record.spec.to_document()
    document["name"] = record.spec.local_name  # the surface's name: a GET → PUT round trip works
    return ScheduleOut(
        name=record.spec.local_name,
        id=record.name,
        version=record.version,
        scope=record.spec.scope,
        enabled=record.enabled,
        created_at=record.created_at,
        updated_at=record.updated_at,
        document=document,
        warnings=[FieldProblem(**w.as_dict()) for w in warnings],
    )


def _hide_foreign_owner(caller: Caller, exc: TargetOwned) -> TargetOwned:
    """A tenant is not told the name of a schedule outside its scope that owns a deploy."""
    owner = caller.services.store.find_schedule(exc.owner)
    if caller.scope == "admin" or (owner is not None and owner.spec.scope == caller.scope):
        return exc
    hidden = TargetOwned(exc.deploy_id, "<another schedule>", exc.path)
    hidden.fix = "ask the platform team to release the deploy from its current schedule"
    return hidden


def _write(caller: Caller, spec: Schedule, expected: int | None) -> ScheduleRecord:
    try:
        record = operations.apply(
            caller.services.store,
            caller.services.core,
            spec,
            now=caller.now,
            actor=caller.who.actor,
            expected_version=expected,
            source=documents.SOURCE,
        )
    except TargetOwned as exc:
        raise _hide_foreign_owner(caller, exc) from None
    caller.services.schedule_changed(record.name)
    return record


def _tag(response: Response, record: ScheduleRecord) -> None:
    response.headers["ETag"] = f'"{record.version}"'


def _dry_run(caller: Caller, spec: Schedule, body: DryRunIn, version: int | None) -> DryRunOut:
    svc = caller.services
    if caller.scope != "admin":  # a tenant may not read other projects' deploys through a dry-run
        problems = [
            p for p in operations.target_problems(svc.core, spec) if p.reason == "unknown_deploy"
        ]
        if problems:
            raise SpecInvalid(problems, source=documents.SOURCE)
    if body.at is not None and (body.from_ is not None or body.to is not None):
        raise ApiError(
            422,
            "ambiguous_request",
            "give either 'at' or 'from' and 'to'",
            "drop one of them",
            path="at",
        )
    if (body.from_ is None) != (body.to is None):
        raise ApiError(
            422,
            "incomplete_range",
            "a range needs both 'from' and 'to'",
            "add the missing end",
            path="to",
        )
    if body.from_ is not None and body.to is not None:
        documents.checked_range(body.from_, body.to, max_days=_max_days(svc, spec))
        rng = dry_run_range(
            spec,
            svc.core,
            body.from_,
            body.to,
            pool=_pool_for(svc, spec),
            pins=svc.store.pins_for(list(spec.target_ids)),
        )
        return DryRunOut(
            schedule=spec.name,
            version=version,
            instant=_at(rng.instant),
            boundaries=[_at(r) for r in rng.at_boundaries],
            warnings=rng.warnings,
        )
    report = engine_dry_run(
        svc.store,
        svc.engine.planner.ready_by,
        spec,
        svc.core,
        body.at or caller.now,
        pool=_pool_for(svc, spec),
    )
    return DryRunOut(schedule=spec.name, version=version, instant=_at(report))


def _max_days(svc: ApiServices, spec: Schedule) -> int:
    """The API's range limit, shorter for a schedule too dense to evaluate that long (R-EVAL-4)."""
    return max(1, min(svc.limits.max_range_days, max_range_days(spec)))


def _timings(svc: ApiServices, spec: Schedule) -> Any:
    """The engine's learned ready-by figures of ``spec``'s targets (R-NEXT-1)."""
    return svc.engine.planner.ready_by.for_timeline(svc.store, spec)


def _at(report: DryRunReport) -> Any:
    return report.as_dict()


def _pool_for(svc: ApiServices, spec: Schedule) -> Any:
    """The pool for the GPU line, if it knows every target (else the line is left out)."""
    pool = svc.pool
    if pool is None or any(pool.deploy(t) is None for t in spec.target_ids):
        return None
    return pool


def _timeline(
    caller: Caller, record: ScheduleRecord, start: str | None, end: str | None
) -> dict[str, Any]:
    spec, svc = record.spec, caller.services
    a, b = documents.instant(start, "from"), documents.instant(end, "to")
    if a is None:
        a = documents.week_of(caller.now, spec)[0]
    if b is None:
        b = a + timedelta(days=min(7, _max_days(svc, spec)))
    documents.checked_range(a, b, max_days=_max_days(svc, spec))
    timings = _timings(svc, spec)
    try:
        doc, _gpu = build_timeline(spec, _pool_for(svc, spec), a, b, timings=timings)
    except SpecInvalid:
        doc, _gpu = build_timeline(spec, None, a, b, timings=timings)
    doc["windows"] = window_occurrences(spec, a, b)
    return doc


def schedule_routes(app: FastAPI, *, base: str, tag: str, caller: Callable[..., Caller]) -> None:
    """Add the schedule operations of one surface under ``base``."""
    svc: ApiServices = app.state.services
    limits = svc.limits
    named = f"{base}/{{name:{NAME_CONVERTOR}}}"
    who = Annotated[Caller, Depends(caller)]
    common = (400, 401, 403, 404)

    @app.post(
        base,
        status_code=201,
        response_model=ScheduleOut,
        tags=[tag],
        operation_id=f"{tag}_create",
        responses=error_responses(*common, 409, 413, 422, 503),
        summary="Create a schedule",
    )
    def create(body: ScheduleBody, c: who, response: Response) -> ScheduleOut:
        auth.require_write(c.who)
        spec, warnings = documents.schedule_from_body(body, scope=c.scope, now=c.now)
        record = _write(c, spec, documents.expected_version(None, create=True))
        _tag(response, record)
        response.headers["Location"] = f"{base}/{record.spec.local_name}".replace(
            "{project}", c.scope[4:]
        )
        return out(record, warnings)

    @app.get(
        base,
        response_model=SchedulePage,
        tags=[tag],
        operation_id=f"{tag}_list",
        responses=error_responses(*common),
        summary="List schedules (paged by name)",
    )
    def list_(
        c: who,
        limit: Annotated[int, Query(ge=1, le=limits.max_page_size)] = limits.default_page_size,
        page_token: Annotated[str | None, Query(max_length=128)] = None,
    ) -> SchedulePage:
        rows = c.services.store.page_schedules(page_token, limit + 1, scope=c.scope)
        more = len(rows) > limit
        rows = rows[:limit]
        return SchedulePage(
            items=[out(r) for r in rows], next_page_token=rows[-1].name if more else None
        )

    @app.get(
        named,
        response_model=ScheduleOut,
        tags=[tag],
        operation_id=f"{tag}_get",
        responses=error_responses(*common),
        summary="Get a schedule (ETag = version)",
    )
    def get(name: str, c: who, response: Response) -> ScheduleOut:
        record = c.visible(name)
        _tag(response, record)
        return out(record)

    @app.put(
        named,
        response_model=ScheduleOut,
        tags=[tag],
        operation_id=f"{tag}_replace",
        responses=error_responses(*common, 409, 412, 413, 422, 428, 503),
        summary="Replace a schedule",
    )
    def replace(
        name: str, body: ScheduleBody, c: who, response: Response, if_match: IfMatch = None
    ) -> ScheduleOut:
        auth.require_write(c.who)
        expected = documents.expected_version(if_match, required=tag == "tenant")
        c.visible(name)
        spec, warnings = documents.schedule_from_body(body, scope=c.scope, now=c.now, name=name)
        record = _write(c, spec, expected)
        _tag(response, record)
        return out(record, warnings)

    @app.delete(
        named,
        status_code=204,
        tags=[tag],
        operation_id=f"{tag}_delete",
        responses=error_responses(*common, 412, 428),
        summary="Delete a schedule (deploys left as they are)",
    )
    def delete(name: str, c: who, if_match: IfMatch = None) -> Response:
        auth.require_write(c.who)
        expected = documents.expected_version(if_match, required=tag == "tenant")
        key = c.visible(name).name
        operations.delete(
            c.services.store, key, now=c.now, actor=c.who.actor, expected_version=expected
        )
        c.services.schedule_changed(key)
        return Response(status_code=204)

    @app.post(
        f"{named}:apply-now",
        response_model=ApplyNowOut,
        tags=[tag],
        operation_id=f"{tag}_apply_now",
        responses=error_responses(*common, 409, 429, 503),
        summary="Run a pass for the schedule now",
    )
    def apply_now(name: str, c: who) -> dict[str, Any]:
        auth.require_write(c.who)
        key, rate = c.visible(name).name, c.services.apply_now_rate
        with c.services.one_pass(key):  # busy here spends nothing of the rate budget
            rate.take(key)
            try:
                report = operations.apply_now(
                    c.services.engine, c.services.store, key, actor=c.who.actor
                )
            except Busy:
                rate.refund(key)  # refused, not taken (R-API)
                raise
        return operations.pass_summary(report)

    @app.post(
        f"{named}:dry-run",
        response_model=DryRunOut,
        tags=[tag],
        operation_id=f"{tag}_dry_run",
        responses=error_responses(*common, 413, 422, 503),
        summary="What a pass would do (an edit too)",
    )
    def dry_run_named(
        name: str, c: who, body: Annotated[DryRunIn, Body()] = DryRunIn()
    ) -> DryRunOut:
        record = c.visible(name)
        if body.schedule is not None:
            spec, _ = documents.schedule_from_body(
                body.schedule, scope=c.scope, now=c.now, name=name
            )
            return _dry_run(c, spec, body, None)
        return _dry_run(c, record.spec, body, record.version)

    @app.post(
        f"{base}:dry-run",
        response_model=DryRunOut,
        tags=[tag],
        operation_id=f"{tag}_dry_run_new",
        responses=error_responses(*common, 413, 422, 503),
        summary="Dry-run an unsaved new schedule",
    )
    def dry_run_new(c: who, body: Annotated[DryRunIn, Body()]) -> DryRunOut:
        if body.schedule is None:
            raise ApiError(
                422,
                "missing_schedule",
                "no schedule document in the body",
                "add 'schedule'",
                path="schedule",
            )
        spec, _ = documents.schedule_from_body(body.schedule, scope=c.scope, now=c.now)
        return _dry_run(c, spec, body, None)

    @app.get(
        f"{named}/status",
        response_model=StatusOut,
        tags=[tag],
        operation_id=f"{tag}_status",
        responses=error_responses(*common),
        summary="Per target: phase, reason, fix, interval",
    )
    def status(name: str, c: who) -> dict[str, Any]:
        record = c.visible(name)
        rows = operations.status_rows(c.services.store, record.name)
        return {
            "schedule": name,
            "version": record.version,
            "gate": c.services.store.get_gate(),
            "targets": rows,
        }

    @app.get(
        f"{named}/timeline",
        response_model=TimelineOut,
        response_model_by_alias=True,
        tags=[tag],
        operation_id=f"{tag}_timeline",
        responses=error_responses(*common),
        summary="Intent per target, windows, desired GPUs vs capacity",
    )
    def timeline(
        name: str,
        c: who,
        from_: Annotated[str | None, Query(alias="from", max_length=64)] = None,
        to: Annotated[str | None, Query(max_length=64)] = None,
    ) -> dict[str, Any]:
        return _timeline(c, c.visible(name), from_, to)
