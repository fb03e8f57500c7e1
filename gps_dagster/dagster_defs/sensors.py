"""The sensors' ticks, each over one engine call: run requests with deterministic run keys,
asset events, a Dagster cursor, and a skip reason that says why nothing launched. Waiting
never happens in a sensor."""
# Decisions embodied here (docs/decisions.md):
# * “Waiting belongs to sensors, never to ops”
# * “A plan run that ran while the gate was off”
# * “A resume run only when a step can move”
# * “A deferred step of a batch is the capacity sensor's”
# * “Dagster finds due work by the index, and its cursor no longer decides what is due”
# * “A stopped `gps_reconcile` is reported by `gps_boundaries`”
# * “The Dagster layer asks the engine by intent”

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import dagster as dg

from gps_dagster.dagster_defs import health, names
from gps_dagster.dagster_defs.assets import reservation_events
from gps_dagster.dagster_defs.batches import (
    BATCH_THRESHOLD,
    batch_id,
    batch_request,
    batched,
)
from gps_dagster.dagster_defs.deploys import deploy_keys, status_events
from gps_dagster.dagster_defs.plans import (
    acquire_request,
    claim_launches,
    group_tags,
    plan_requests,
    resume_request,
    sensor_origin,
    transition_runs,
)
from gps_dagster.engine import ticks
from gps_dagster.engine.intents import ApplyNowRequest, RunsSeen
from gps_dagster.engine.reports import PassReport
from gps_dagster.engine.tick_cursors import (
    ReconcileCursor,
    dump_boundary_cursor,
    dump_seen,
    parse_boundary_cursor,
    parse_seen,
)

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime

ACQUIRE_BATCH = "acquire_batch"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def open_plan_requests(
    runtime: Runtime, instance: dg.DagsterInstance, skip: set[str]
) -> list[dg.RunRequest]:
    """Requests for the open plans with steps still ``pending``, as the engine decides them
    (``Intents.plans_to_launch``): a plan run under its own run key (the daemon drops it once
    that run exists), or a resume run in the plan run's group."""
    runs: dict[str, list[dg.DagsterRun]] = {}

    def seen(tid: str) -> RunsSeen:
        runs[tid] = transition_runs(runtime, instance, tid)
        return RunsSeen(len(runs[tid]), any(r.status in IN_FLIGHT for r in runs[tid]))

    out: list[dg.RunRequest] = []
    for launch in runtime.intents.plans_to_launch(seen, skip=skip):
        requests = plan_requests([launch.plan])
        if launch.resume:
            tid, group = launch.plan.transition_id, group_tags(runs[launch.plan.transition_id])
            requests = [resume_request(r, len(runs[tid]), group) for r in requests]
        out.extend(requests)
    return out


def reconcile_tick(
    runtime: Runtime, cursor: ReconcileCursor, instance: dg.DagsterInstance
) -> tuple[list[dg.RunRequest], ReconcileCursor, list[Any]]:
    """One engine pass over the next page of schedules (the engine keeps the durable
    cursor, R-PASS-3); launch the plans it opened and any open plan left pending."""
    report = runtime.engine.reconcile(trigger="sensor")
    new = ReconcileCursor(after=cursor.after, seen=dict(cursor.seen), automation=cursor.automation)
    requests: list[dg.RunRequest] = []
    if not report.busy:
        new.after = report.cursor or ""
        requests = plan_requests(report.plans)
    opened = {p.transition_id for p in report.plans}
    requests += open_plan_requests(runtime, instance, opened)
    origin = sensor_origin(names.RECONCILE_SENSOR)
    requests, _ = claim_launches(runtime, requests, origin=origin, instance=instance)
    rows = runtime.intents.changed_statuses(new.seen)  # updates new.seen
    return requests, new, status_events(rows, deploy_keys(runtime)) if rows else []


def reconcile_sensor_tick(
    context: dg.SensorEvaluationContext,
    runtime: Runtime,
    schedule_keys: Mapping[str, dg.AssetKey],
) -> dg.SensorResult:
    """``gps_reconcile``: pages over the schedules from a durable cursor, opens transitions and
    launches them; reports the automation warning on the schedule assets."""
    requests, cursor, events = reconcile_tick(
        runtime, ReconcileCursor.parse(context.cursor), context.instance
    )
    warning, checks = health.automation(context, runtime, cursor.automation, schedule_keys)
    cursor.automation = warning
    if warning:
        context.log.warning(warning)
    changed = sum(1 for e in events if isinstance(e, dg.AssetMaterialization))
    skip = None if requests else ticks.with_warning(ticks.reconcile_skip(changed), warning)
    return dg.SensorResult(
        run_requests=requests,
        cursor=cursor.dump(),
        asset_events=[*events, *checks],
        skip_reason=skip,
    )


def serve_due(
    runtime: Runtime,
    now: datetime,
    *,
    origin: str,
    trigger: str,
    instance: dg.DagsterInstance | None,
    always_batch: bool = False,
    release_first_only: bool = False,
) -> tuple[list[dg.RunRequest], list[str]]:
    """Serve every schedule due at ``now`` (``Intents.serve_due``) and launch the plans it
    opened: their requests (claimed, batched) and what the tick did, a line per schedule."""
    work = runtime.intents.serve_due(now, trigger, release_first_only=release_first_only)
    if not work.due:
        return [], work.lines
    claimed, skipped = batched(
        runtime,
        plan_requests(work.plans),
        origin=origin,
        trigger=trigger,
        instance=instance,
        always=always_batch,
    )
    return claimed, work.lines + [f"skipped {s}" for s in skipped[: ticks.STORM_LINES]]


def boundary_tick_explained(
    runtime: Runtime,
    last: datetime | None,
    instance: dg.DagsterInstance | None = None,
) -> tuple[list[dg.RunRequest], list[str], datetime]:
    """The boundary sensor's tick; ``last`` (the cursor: its previous tick) is informational —
    what is due comes from the index, so a boundary missed while the sensor was down is served."""
    now = runtime.clock.now()
    origin = sensor_origin(names.BOUNDARY_SENSOR)
    requests, lines = serve_due(runtime, now, origin=origin, trigger="boundary", instance=instance)
    return requests, lines, now


def boundary_sensor_tick(
    context: dg.SensorEvaluationContext,
    runtime: Runtime,
    schedule_keys: Mapping[str, dg.AssetKey],
) -> dg.SensorResult:
    """``gps_boundaries``: every schedule the due index says needs a pass now, one claimed,
    batched pass; a skipped tick says it in its skip reason."""
    last, reported = parse_boundary_cursor(context.cursor)
    requests, lines, now = boundary_tick_explained(runtime, last, context.instance)
    for line in lines if requests else ():  # a skipped tick says it in its skip reason
        context.log.info(line)
    warning, checks = health.automation(context, runtime, reported, schedule_keys, stand_in=True)
    skip = None if requests else ticks.with_warning(ticks.boundary_skip(lines), warning)
    cursor = dump_boundary_cursor(now, warning)
    return dg.SensorResult(
        run_requests=requests, cursor=cursor, skip_reason=skip, asset_events=checks
    )


def capacity_tick(runtime: Runtime, instance: dg.DagsterInstance) -> list[dg.RunRequest]:
    """``gps_acquire`` runs for capacity-waiting steps that now fit (``Intents.capacity_ready``),
    one per transition, each in the run group of its transition's earlier runs."""
    ready = runtime.intents.capacity_ready()
    batch_tags = {names.TAG_PHASE: ACQUIRE_BATCH}
    if instance.get_runs_count(dg.RunsFilter(tags=batch_tags, statuses=IN_FLIGHT)):
        return []  # a storm's acquire batch is on its way: it takes every step that fits
    requests: list[dg.RunRequest] = []
    for transition_id, steps in ready.items():
        tags = {names.TAG_TRANSITION: transition_id, names.TAG_PHASE: "acquire"}
        if instance.get_runs_count(dg.RunsFilter(tags=tags, statuses=IN_FLIGHT)):
            continue  # its acquire run is queued or running already
        attempt = instance.get_runs_count(dg.RunsFilter(tags=tags))
        plan = runtime.engine.pending_steps(transition_id)
        group = group_tags(transition_runs(runtime, instance, transition_id))
        requests.append(acquire_request(plan, steps, attempt, group))
    if len(requests) > BATCH_THRESHOLD:  # a storm: one run, not one per transition
        attempt = instance.get_runs_count(dg.RunsFilter(tags=batch_tags))
        bid = f"{batch_id(requests)}-{attempt}"
        return [batch_request(requests, bid, "capacity_wait", phase=ACQUIRE_BATCH)]
    return requests


def capacity_sensor_tick(context: dg.SensorEvaluationContext, runtime: Runtime) -> dg.SensorResult:
    requests = capacity_tick(runtime, context.instance)
    skip = None if requests else runtime.intents.capacity_skip()
    return dg.SensorResult(run_requests=requests, skip_reason=skip)


def apply_now_tick(
    runtime: Runtime, instance: dg.DagsterInstance | None = None
) -> tuple[list[dg.RunRequest], list[str]]:
    """Serve pending apply-now requests (``Intents.serve_apply_now``: a pass for each
    schedule, an answer stored for each): the runs they launch and a line per request."""
    requests: list[dg.RunRequest] = []
    log: list[str] = []

    def launch(request: ApplyNowRequest, report: PassReport) -> list[list[str]]:
        origin = sensor_origin(names.APPLY_NOW_SENSOR)
        plans, skipped = claim_launches(
            runtime, plan_requests(report.plans), origin=origin, instance=instance
        )
        tag = {names.TAG_APPLY_NOW: str(request.id)}
        requests.extend(r.with_replaced_attrs(tags={**r.tags, **tag}) for r in plans)
        log.extend(f"apply-now #{request.id} {request.schedule}: skipped {x}" for x in skipped)
        return [r.tags[names.TAG_TARGETS].split(",") for r in plans]

    log.extend(runtime.intents.serve_apply_now(launch))
    return requests, log


def apply_now_sensor_tick(
    context: dg.SensorEvaluationContext, runtime: Runtime
) -> dg.SensorResult | dg.SkipReason:
    requests, log = apply_now_tick(runtime, context.instance)
    for line in log:
        context.log.info(line)
    if not requests:
        return dg.SkipReason(ticks.apply_now_skip(log))
    return dg.SensorResult(run_requests=requests)


def reservation_sensor_tick(
    context: dg.SensorEvaluationContext, runtime: Runtime
) -> dg.SensorResult:
    """``gps_reservation_partitions``: one partition per reservation in the ledger; members
    and verdicts recorded when they change (never a run)."""
    wanted = set(runtime.intents.reservation_ids())
    have = set(context.instance.get_dynamic_partitions(names.RESERVATION_PARTITIONS))
    add, drop = sorted(wanted - have), sorted(have - wanted)
    reqs: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    if add:
        reqs.append(dg.AddDynamicPartitionsRequest(names.RESERVATION_PARTITIONS, add))
    if drop:
        reqs.append(dg.DeleteDynamicPartitionsRequest(names.RESERVATION_PARTITIONS, drop))
    seen = parse_seen(context.cursor)
    # events name partitions: only those that exist (a new one is added by this tick)
    events = reservation_events(runtime, sorted(wanted & have), seen) if have else []
    observed = {
        str(e.partition) for e in events if isinstance(e, dg.AssetObservation) and e.partition
    }
    skip = ticks.reservation_tick(add, drop, sorted(observed), len(have))
    return dg.SensorResult(
        dynamic_partitions_requests=reqs,
        asset_events=events,
        cursor=dump_seen(seen),
        skip_reason=skip,
    )
