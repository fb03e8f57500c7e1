"""Reservations over HTTP: read-only for tenants, managed by admins (R-GPS, R-API).

A tenant sees the reservations of its project's namespace (``cmp-<project>``)
and nothing else; another project's reservation is a 404 like a missing one.
``:admission-check`` is a what-if, also for tenants: would a member with a
changed ``memory_mib`` be admitted (R-GPS-3)? The members counted are those
running at ``at`` — by the schedule's intent for its targets, by their
current state for the rest — and the answer is the pure admission rule of
``domain.gps.admission``, the one the core applies at start.
"""

# Decisions embodied here (docs/decisions.md):
# * “Admission what-if”

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI

from gps_dagster.api.errors import error_responses
from gps_dagster.api.models import (
    AdmissionIn,
    AdmissionOut,
    Member,
    RepinIn,
    ReservationList,
    ReservationOut,
)
from gps_dagster.api.schedules import NAME_CONVERTOR, Caller
from gps_dagster.domain.evaluator import effective_intent
from gps_dagster.domain.gps.admission import Admitted, admit
from gps_dagster.domain.gps.errors import ReservationNotFound
from gps_dagster.domain.gps.reservations import Reservation, load_reservation_spec
from gps_dagster.domain.spec import DesiredState
from gps_dagster.engine.plan_inputs import RUNNING_STATES
from gps_dagster.ports import DeployView

RESERVATION_EXAMPLE = {
    "id": "rsv-gpu42-shared",
    "node": "hla-worker-042",
    "gpu_uuids": ["GPU-6b167f5c-6cc2-532d-abb5-84dd1e9ffaa0"],
    "namespace": "cmp-vision",
    "mode": "time_sliced",
    "gpu_memory_mib": 143771,
    "headroom": 0.95,
}


def visible(c: Caller, reservation_id: str) -> Reservation:
    rsv = c.services.reservations.get(reservation_id)
    if c.scope != "admin" and rsv.namespace != f"cmp-{c.scope[4:]}":
        raise ReservationNotFound(reservation_id)
    return rsv


def _members(c: Caller, rsv: Reservation) -> list[DeployView]:
    return [
        d
        for d in c.services.core.reservation_deploys(rsv.id)
        if d.reservation is not None and rsv.id in d.reservation.reservation_ids
    ]


def reservation_out(c: Caller, rsv: Reservation) -> ReservationOut:
    return ReservationOut(
        id=rsv.id,
        state=rsv.state.value,
        generation=rsv.generation,
        node=rsv.node,
        namespace=rsv.namespace,
        mode=rsv.mode.value,
        gpus=list(rsv.gpu_uuids),
        gpu_memory_mib=rsv.gpu_memory_mib,
        headroom=str(rsv.headroom),
        budget_mib=rsv.budget_mib,
        members=[
            Member(
                deploy_id=d.id,
                memory_mib=d.reservation.memory_mib if d.reservation else None,
                state=d.state.value,
            )
            for d in _members(c, rsv)
        ],
    )


def _running_at(c: Caller, deploy: DeployView, schedule: str | None, at: datetime) -> bool:
    if schedule is not None:
        record = c.visible(schedule)
        if deploy.id in record.spec.target_ids:
            return (
                effective_intent(record.spec, deploy.id, at).desired_state is DesiredState.RUNNING
            )
    return deploy.state in RUNNING_STATES


def admission_check(c: Caller, rsv: Reservation, ask: AdmissionIn) -> AdmissionOut:
    at = ask.at or c.now
    members = _members(c, rsv)
    running = {
        d.id: d.reservation.memory_mib or 0
        for d in members
        if d.reservation is not None and _running_at(c, d, ask.schedule, at)
    }
    decision = admit(rsv, running=running, in_flight={}, proposed=(ask.deploy_id, ask.memory_mib))
    running_mib = sum(v for k, v in running.items() if k != ask.deploy_id)
    reason = fix = None
    if not isinstance(decision, Admitted):
        reason, fix = decision.reason, decision.fix
    return AdmissionOut(
        reservation_id=rsv.id,
        deploy_id=ask.deploy_id,
        memory_mib=ask.memory_mib,
        admitted=isinstance(decision, Admitted),
        reason=reason,
        fix=fix,
        budget_mib=rsv.budget_mib,
        running_mib=running_mib,
        proposed_mib=ask.memory_mib,
        total_mib=running_mib + ask.memory_mib,
        members=[
            Member(
                deploy_id=d.id,
                memory_mib=d.reservation.memory_mib if d.reservation else None,
                state="running" if d.id in running else "stopped",
            )
            for d in members
        ],
    )


def reservation_routes(app: FastAPI, *, base: str, tag: str, caller: Callable[..., Caller]) -> None:
    """Read operations (every surface) and the what-if admission check."""
    who = Annotated[Caller, Depends(caller)]
    named = f"{base}/{{reservation_id:{NAME_CONVERTOR}}}"

    @app.get(
        base,
        response_model=ReservationList,
        tags=[tag],
        operation_id=f"{tag}_list_reservations",
        responses=error_responses(400, 401, 403, 404),
        summary="List reservations",
    )
    def list_(c: who) -> ReservationList:
        rows = c.services.reservations.list()
        if c.scope != "admin":
            rows = [r for r in rows if r.namespace == f"cmp-{c.scope[4:]}"]
        return ReservationList(items=[reservation_out(c, r) for r in rows])

    @app.get(
        named,
        response_model=ReservationOut,
        tags=[tag],
        operation_id=f"{tag}_get_reservation",
        responses=error_responses(400, 401, 403, 404),
        summary="Get a reservation and its members",
    )
    def get(reservation_id: str, c: who) -> ReservationOut:
        return reservation_out(c, visible(c, reservation_id))

    @app.post(
        f"{named}:admission-check",
        response_model=AdmissionOut,
        tags=[tag],
        operation_id=f"{tag}_admission_check",
        responses=error_responses(400, 401, 403, 404, 422),
        summary="Would a changed memory_mib be admitted? (read-only)",
    )
    def check(reservation_id: str, c: who, body: Annotated[AdmissionIn, Body()]) -> AdmissionOut:
        return admission_check(c, visible(c, reservation_id), body)


def admin_reservation_routes(app: FastAPI, *, base: str, caller: Callable[..., Caller]) -> None:
    """Create, release and re-pin: admins only, audited in the ledger's own audit log."""
    who = Annotated[Caller, Depends(caller)]
    named = f"{base}/{{reservation_id:{NAME_CONVERTOR}}}"
    tag = "admin"

    @app.post(
        base,
        status_code=201,
        response_model=ReservationOut,
        tags=[tag],
        operation_id="admin_create_reservation",
        responses=error_responses(400, 401, 403, 409, 413, 422),
        summary="Create a reservation",
    )
    def create(
        c: who,
        body: Annotated[
            dict[str, Any],
            Body(
                openapi_examples={
                    "gpu42": {"summary": "rsv-gpu42-shared", "value": RESERVATION_EXAMPLE}
                }
            ),
        ],
    ) -> ReservationOut:
        spec = load_reservation_spec(body, source="request body")
        return reservation_out(c, c.services.reservations.create(spec, at=c.now, actor=c.who.actor))

    @app.post(
        f"{named}:release",
        response_model=ReservationOut,
        tags=[tag],
        operation_id="admin_release_reservation",
        responses=error_responses(400, 401, 403, 404, 409),
        summary="Release a reservation (billing stops)",
    )
    def release(reservation_id: str, c: who) -> ReservationOut:
        return reservation_out(
            c, c.services.reservations.release(reservation_id, at=c.now, actor=c.who.actor)
        )

    @app.post(
        f"{named}:repin",
        response_model=ReservationOut,
        tags=[tag],
        operation_id="admin_repin_reservation",
        responses=error_responses(400, 401, 403, 404, 409, 412, 422),
        summary="Move a reservation to other GPUs, fenced by generation",
    )
    def repin(reservation_id: str, c: who, body: Annotated[RepinIn, Body()]) -> ReservationOut:
        rsv = c.services.reservations.repin(
            reservation_id,
            body.gpu_uuids,
            expected_generation=body.generation,
            at=c.now,
            actor=c.who.actor,
        )
        return reservation_out(c, rsv)
