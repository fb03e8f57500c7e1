"""Sensors: reconcile (paging), boundaries, capacity wait, apply-now, reservation partitions.

Each sensor is a few lines over one engine call; its durable state is the
Dagster cursor (visible in the UI), its output run requests with deterministic
run keys. Waiting never happens in an op: a sensor polls instead.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import dagster as dg

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.plans import (
    acquire_request,
    claim_launches,
    plan_requests,
    resume_request,
    sensor_origin,
)
from gps_dagster.engine.errors import Busy
from gps_dagster.store.errors import ScheduleNotFound

_IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


@dataclass
class ReconcileCursor:
    """Where paging stopped (last schedule visited) and the target status versions seen."""

    after: str = ""
    seen: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> ReconcileCursor:
        if not text:
            return cls()
        raw = json.loads(text)
        return cls(after=raw.get("after", ""), seen=dict(raw.get("seen", {})))

    def dump(self) -> str:
        return json.dumps({"after": self.after, "seen": self.seen}, sort_keys=True)


def status_observations(store: Any, seen: dict[str, int]) -> list[dg.AssetObservation]:
    """One observation of ``target_status`` per target whose status changed since ``seen``."""
    out: list[dg.AssetObservation] = []
    for row in store.list_status():
        key = f"{row.schedule}/{row.deploy_id}"
        if seen.get(key) == row.status_version:
            continue
        seen[key] = row.status_version
        out.append(
            dg.AssetObservation(
                asset_key=names.TARGET_STATUS_ASSET,
                metadata={
                    "schedule": row.schedule,
                    "deploy_id": row.deploy_id,
                    "phase": row.phase,
                    "reason": row.reason or "",
                    "fix": row.fix or "",
                    "interval_start": row.interval_start.isoformat() if row.interval_start else "",
                    "status_version": row.status_version,
                },
            )
        )
    return out


def open_plan_requests(runtime: Any, instance: dg.DagsterInstance, skip: set[str]) -> list[dg.RunRequest]:
    """Requests for open transitions whose steps are still ``pending``.

    Never launched (a tick's request lost in a daemon crash) or gate not
    enforcing: the plan run is requested again under its own run key, which
    the daemon drops once that run exists. Gate enforcing and the plan run
    finished with steps left pending: a resume run, at most one in flight per
    transition, and only when a pending step can move now. A step waiting for
    another one (``acquire_first``: the releases wait while the acquire loads)
    gets no run until the step it waits for is done.
    """
    gate = runtime.store.get_gate()
    out: list[dg.RunRequest] = []
    for tr in runtime.store.list_transitions(states=("open",)):
        if tr.id in skip:
            continue
        pending = runtime.store.list_actions(transition_id=tr.id, states=("pending",))
        if not pending:
            continue
        tags = {names.TAG_TRANSITION: tr.id}
        runs = instance.get_runs_count(dg.RunsFilter(tags=tags))
        if runs == 0 or gate != "enforce":
            out.extend(plan_requests([runtime.engine.pending_steps(tr.id)]))
        elif not _in_flight(instance, tags) and can_move(runtime, pending):
            plan = runtime.engine.pending_steps(tr.id)
            out.extend(resume_request(r, runs) for r in plan_requests([plan]))
    return out


def _in_flight(instance: dg.DagsterInstance, tags: dict[str, str]) -> int:
    return instance.get_runs_count(dg.RunsFilter(tags=tags, statuses=_IN_FLIGHT))


def can_move(runtime: Any, pending: Sequence[Any]) -> bool:
    """Whether a run would advance any of these steps now (the engine's own preview).

    The preview applies the step's prerequisites, capacity and staleness rules
    without submitting; a step it ends (cancelled behind a failed step,
    superseded by an edit) needs no run either.
    """
    return any(runtime.engine.runner.execute(a.id, submit=False).state == "ready" for a in pending)


def reconcile_tick(
    runtime: Any, cursor: ReconcileCursor, instance: dg.DagsterInstance
) -> tuple[list[dg.RunRequest], ReconcileCursor, list[dg.AssetObservation]]:
    """One engine pass over the next page of schedules (the engine keeps the durable
    cursor, R-PASS-3); launch the plans it opened and any open plan left pending.

    Plan requests go through the launch claims: a plan another origin launched
    is left to it (see ``claim_launches``).
    """
    report = runtime.engine.reconcile(trigger="sensor")
    new = ReconcileCursor(after=cursor.after, seen=dict(cursor.seen))
    requests: list[dg.RunRequest] = []
    if not report.busy:
        new.after = report.cursor or ""
        requests = plan_requests(report.plans)
    opened = {p.transition_id for p in report.plans}
    requests += open_plan_requests(runtime, instance, opened)
    origin = sensor_origin(names.RECONCILE_SENSOR)
    requests, _ = claim_launches(runtime, requests, origin=origin, instance=instance)
    observations = status_observations(runtime.store, new.seen)
    return requests, new, observations


def build_reconcile_sensor(jobs: Sequence[dg.JobDefinition], *, interval_s: int, default_status: dg.DefaultSensorStatus) -> dg.SensorDefinition:
    @dg.sensor(
        name=names.RECONCILE_SENSOR,
        jobs=list(jobs),
        minimum_interval_seconds=interval_s,
        required_resource_keys={"gps"},
        default_status=default_status,
        description="Pages over the schedules from a durable cursor, opens transitions and launches them.",
    )
    def reconcile(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        runtime = context.resources.gps.get_runtime()
        requests, cursor, observations = reconcile_tick(runtime, ReconcileCursor.parse(context.cursor), context.instance)
        return dg.SensorResult(run_requests=requests, cursor=cursor.dump(), asset_events=observations)

    return reconcile


def boundary_tick(
    runtime: Any, last: datetime | None, instance: dg.DagsterInstance | None = None
) -> tuple[list[dg.RunRequest], datetime]:
    """Passes for the schedules whose intent changed in ``[last, now)``."""
    from gps_dagster.domain.evaluator import boundaries

    now = runtime.clock.now()
    if last is None or last >= now:
        return [], now
    requests: list[dg.RunRequest] = []
    for record in runtime.store.list_schedules():
        if not boundaries(record.spec, last, now):
            continue
        try:
            report = runtime.engine.reconcile(schedule=record.name, trigger="boundary")
        except Busy:
            # another pass holds the lock: retry the same range next tick
            return _claimed(runtime, requests, instance), last
        requests.extend(plan_requests(report.plans))
    return _claimed(runtime, requests, instance), now


def _claimed(
    runtime: Any, requests: list[dg.RunRequest], instance: dg.DagsterInstance | None
) -> list[dg.RunRequest]:
    origin = sensor_origin(names.BOUNDARY_SENSOR)
    return claim_launches(runtime, requests, origin=origin, instance=instance)[0]


def build_boundary_sensor(jobs: Sequence[dg.JobDefinition], *, interval_s: int, default_status: dg.DefaultSensorStatus) -> dg.SensorDefinition:
    @dg.sensor(
        name=names.BOUNDARY_SENSOR,
        jobs=list(jobs),
        minimum_interval_seconds=interval_s,
        required_resource_keys={"gps"},
        default_status=default_status,
        description="Intent boundaries no cron can express (one-shot windows, DST-shifted ends): a pass at once.",
    )
    def boundary(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        runtime = context.resources.gps.get_runtime()
        last = datetime.fromisoformat(context.cursor) if context.cursor else None
        requests, now = boundary_tick(runtime, last, context.instance)
        return dg.SensorResult(run_requests=requests, cursor=now.isoformat())

    return boundary


def capacity_tick(runtime: Any, instance: dg.DagsterInstance) -> list[dg.RunRequest]:
    """Acquire-only runs for capacity-waiting steps that now fit, one per transition."""
    by_transition: dict[str, list[Any]] = defaultdict(list)
    for step in runtime.engine.capacity_waits():
        by_transition[step_transition(runtime, step)].append(step)
    requests: list[dg.RunRequest] = []
    for transition_id, steps in sorted(by_transition.items()):
        tags = {names.TAG_TRANSITION: transition_id, names.TAG_PHASE: "acquire"}
        if instance.get_runs_count(dg.RunsFilter(tags=tags, statuses=_IN_FLIGHT)):
            continue  # its acquire run is queued or running already
        attempt = instance.get_runs_count(dg.RunsFilter(tags=tags))
        plan = runtime.engine.pending_steps(transition_id)
        requests.append(acquire_request(plan, steps, attempt))
    return requests


def step_transition(runtime: Any, step: Any) -> str:
    tid = getattr(step, "transition_id", None)
    if tid is None:
        tid = runtime.store.get_action(step.step_id).transition_id
    return str(tid)


def build_capacity_sensor(jobs: Sequence[dg.JobDefinition], *, interval_s: int, default_status: dg.DefaultSensorStatus) -> dg.SensorDefinition:
    @dg.sensor(
        name=names.CAPACITY_WAIT_SENSOR,
        jobs=list(jobs),
        minimum_interval_seconds=interval_s,
        required_resource_keys={"gps"},
        default_status=default_status,
        description="Re-previews targets in capacity_wait; launches the acquire when it fits, times out to capacity_unavailable.",
    )
    def capacity_wait(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        runtime = context.resources.gps.get_runtime()
        requests = capacity_tick(runtime, context.instance)
        if not requests:
            return dg.SkipReason("no capacity-waiting step fits yet")
        return dg.SensorResult(run_requests=requests)

    return capacity_wait


def apply_now_tick(
    runtime: Any, instance: dg.DagsterInstance | None = None
) -> tuple[list[dg.RunRequest], list[str]]:
    """Serve pending apply-now requests: a pass for each schedule; busy answers 409."""
    requests: list[dg.RunRequest] = []
    log: list[str] = []
    for req in runtime.store.pending_apply_now():
        try:
            report = runtime.engine.reconcile(schedule=req.schedule, trigger="apply_now")
        except Busy as exc:
            runtime.store.finish_apply_now(req.id, result=f"{exc.http_status} busy", now=runtime.clock.now(), state="busy")
            log.append(f"apply-now #{req.id} {req.schedule}: {exc.http_status} busy")
            continue
        except ScheduleNotFound as exc:  # deleted since the request: answered, never blocks the others
            runtime.store.finish_apply_now(req.id, result=f"{exc.http_status} {exc.reason}", now=runtime.clock.now(), state="failed")
            log.append(f"apply-now #{req.id} {req.schedule}: {exc.http_status} {exc.reason}")
            continue
        now = runtime.clock.now()
        origin = sensor_origin(names.APPLY_NOW_SENSOR)
        plans, skipped = claim_launches(
            runtime, plan_requests(report.plans), origin=origin, instance=instance
        )
        log.extend(f"apply-now #{req.id} {req.schedule}: skipped {line}" for line in skipped)
        requests.extend(plans)
        runtime.store.finish_apply_now(req.id, result=f"200 ok: {len(plans)} run(s)", now=now)
        log.append(f"apply-now #{req.id} {req.schedule}: {len(plans)} run(s)")
    return requests, log


def build_apply_now_sensor(jobs: Sequence[dg.JobDefinition], *, interval_s: int, default_status: dg.DefaultSensorStatus) -> dg.SensorDefinition:
    @dg.sensor(
        name=names.APPLY_NOW_SENSOR,
        jobs=list(jobs),
        minimum_interval_seconds=interval_s,
        required_resource_keys={"gps"},
        default_status=default_status,
        description="Serves `gps-dagster apply-now NAME --queue` requests: a pass for that schedule (409 when busy).",
    )
    def apply_now(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        requests, log = apply_now_tick(context.resources.gps.get_runtime(), context.instance)
        for line in log:
            context.log.info(line)
        if not log:
            return dg.SkipReason("no apply-now request")
        return dg.SensorResult(run_requests=requests)

    return apply_now


def reservation_ids(runtime: Any) -> list[str]:
    """Ids of the reservations in the ledger (none until GPS reservations are created)."""
    from gps_dagster.store.reservations import ReservationRepository

    engine = getattr(runtime.store, "engine", None)
    if engine is None:
        return []
    from gps_dagster.engine.gps_checks import reservation_ids as ledger_ids

    return ledger_ids(ReservationRepository(engine))


def build_reservation_sensor(*, interval_s: int, default_status: dg.DefaultSensorStatus) -> dg.SensorDefinition:
    @dg.sensor(
        name=names.RESERVATION_SENSOR,
        minimum_interval_seconds=interval_s,
        required_resource_keys={"gps"},
        default_status=default_status,
        description="Keeps one gpu_reservations partition per reservation in the ledger.",
    )
    def reservation_partitions(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        wanted = set(reservation_ids(context.resources.gps.get_runtime()))
        have = set(context.instance.get_dynamic_partitions(names.RESERVATION_PARTITIONS))
        add, drop = sorted(wanted - have), sorted(have - wanted)
        if not add and not drop:
            return dg.SkipReason(f"{len(have)} reservation partition(s), up to date")
        reqs: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
        if add:
            reqs.append(dg.AddDynamicPartitionsRequest(names.RESERVATION_PARTITIONS, add))
        if drop:
            reqs.append(dg.DeleteDynamicPartitionsRequest(names.RESERVATION_PARTITIONS, drop))
        return dg.SensorResult(dynamic_partitions_requests=reqs)

    return reservation_partitions
