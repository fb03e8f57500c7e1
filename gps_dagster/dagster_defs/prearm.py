"""Pre-armed runs: the swap starts at the boundary, not after a run process has booted.

A run requested at the boundary starts its first op only once a run worker started (3.3 s on
a quiet machine, 8–22 s under load, a Job pod on Kubernetes: measured). ``gps_prearm``
launches a ``gps_prearmed`` run ``lead`` seconds ahead of each near release-first boundary
(``engine/prearm.py``); its ``arm`` op waits for the instant on the injected clock, then opens
the plan, claims its launch and submits its releases (``Intents.arm``) before any Dagster event
write, and the run goes on as a plan run. A run no longer needed ends *skipped* with the reason
in its ``gps/prearm`` tag; a missed boundary is served by the boundary schedules and sensor.
"""
# Decisions embodied here (docs/decisions.md):
# * “Pre-armed runs”
# * “A pre-armed run submits its releases from the `arm` op, at the boundary”
# * “A pre-armed run's releases are not re-checked after its own pass”
# * “The measured pre-arm lead keeps ahead of the run starts”

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster import OpExecutionContext

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.jobs import fan_phases, phases_job
from gps_dagster.dagster_defs.plans import claim_launches, plan_requests, step_config
from gps_dagster.dagster_defs.resources import pauser, sleep
from gps_dagster.engine import prearm
from gps_dagster.engine.intents import Armed
from gps_dagster.engine.reports import PlanRef, StepOutcome

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime

ARM_OP = "arm"
TRIGGER = "prearmed"


def prearm_lead_s(
    gps: Any, instance: dg.DagsterInstance | None = None, now: datetime | None = None
) -> float:
    """The lead: the resource's setting, else measured on ``instance`` at ``now``."""
    measure = (lambda: measured_lead(instance, now)) if instance is not None else None
    return prearm.lead_s(getattr(gps, "prearm_lead_s", 0.0), measure)


def measured_lead(instance: dg.DagsterInstance, now: datetime | None = None) -> float:
    """The lead measured on the last runs of ``instance`` (``engine.prearm.measured_lead``).
    Dagster's ``RunRecord``: "start_time and end_time fields will be populated once the run has
    started and ended, respectively, but will be None beforehand"."""
    records = instance.get_run_records(limit=prearm.MEASURED_RUNS)
    runs = [(r.create_timestamp.timestamp(), r.start_time, r.end_time) for r in records]
    return prearm.measured_lead(runs, now)


prearm_run_key = prearm.run_key


def prearm_request(near: Any) -> dg.RunRequest:
    at = near.at.astimezone(UTC).isoformat()
    return dg.RunRequest(
        run_key=prearm_run_key(near.schedule, near.at),
        job_name=names.PREARM_JOB,
        run_config={"ops": {ARM_OP: {"config": {"schedule": near.schedule, "boundary_at": at}}}},
        tags={
            names.TAG_SCHEDULE: near.schedule,
            names.TAG_BOUNDARY: at,
            names.TAG_TRIGGER: TRIGGER,
            names.TAG_PHASE: "prearmed",
            names.TAG_PREARM: f"waiting for the boundary {at}",
        },
    )


def prearm_tick(
    runtime: "Runtime", gps: Any, instance: dg.DagsterInstance | None = None
) -> tuple[list[dg.RunRequest], str | None]:
    """The pre-armed runs to launch now, or why none (the daemon drops a repeated run key)."""
    now = runtime.clock.now()
    lead = prearm_lead_s(gps, instance, now)
    near = runtime.engine.boundaries_within(now, lead)
    if not near:
        return [], prearm.no_boundary_near(lead, now)
    return [prearm_request(b) for b in near], None


def prearm_sensor_tick(context: dg.SensorEvaluationContext, runtime: "Runtime") -> dg.SensorResult:
    """``gps_prearm``: the pre-armed runs to launch now, or why none."""
    requests, skip = prearm_tick(runtime, context.resources.gps, context.instance)
    return dg.SensorResult(run_requests=requests, skip_reason=skip)


@dg.op(
    name=ARM_OP,
    config_schema={
        "schedule": dg.Field(str, description="Deploy schedule name."),
        "boundary_at": dg.Field(str, description="The boundary instant (RFC 3339)."),
    },
    required_resource_keys={"gps"},
    out={"first": dg.DynamicOut(dict, is_required=False), "then": dg.Out(list, is_required=False)},
    description="Wait for the boundary on the runtime's clock, open the plan at it (the pass of "
    "that schedule) and fan its release steps out; end skipped with the reason when no plan "
    "of this run is needed.",
)
def arm_op(context: OpExecutionContext) -> Iterator[dg.DynamicOutput[Any] | dg.Output[Any]]:
    gps = context.resources.gps
    runtime = gps.get_runtime()
    schedule, boundary = context.op_config["schedule"], context.op_config["boundary_at"]
    at = datetime.fromisoformat(boundary)
    late = prearm.wait_until(runtime.clock, at, lambda seconds: sleep(gps, seconds))
    armed = _at_boundary(context, runtime, gps, schedule, boundary)  # no Dagster write before
    spent = float((runtime.clock.now() - at).total_seconds())
    context.log.info(
        f"boundary {boundary} of {schedule} reached {late:.3f} s after it; pass, claim and "
        f"release submits done {spent:.3f} s after it"
    )
    if isinstance(armed, str):  # no output: every op after arm is skipped
        context.log.info(f"pre-armed run not needed: {armed}")
        tags = {names.TAG_PREARM: f"skipped: {armed}"[:250]}
        context.instance.add_run_tags(context.run_id, tags)
        return
    done, request = armed
    yield from _serve(context, done.plan, request, done.sent)


def _at_boundary(
    context: OpExecutionContext, runtime: "Runtime", gps: Any, schedule: str, boundary: str
) -> tuple[Armed, dg.RunRequest] | str:
    """What the run does at the boundary instant, and nothing more (``Intents.arm``): every
    Dagster event write comes after, since under load each costs tens of milliseconds to
    seconds (the release op's own start measured 1.5–3.7 s). The release ops that follow
    advance the already submitted steps (idempotent) and judge them."""
    claimed: list[dg.RunRequest] = []

    def claim(plan: PlanRef) -> str | None:
        origin = f"prearm:{context.run_id}"
        won, taken = claim_launches(
            runtime, plan_requests([plan]), origin=origin, instance=context.instance
        )
        claimed.extend(won)
        return None if won else "; ".join(taken)

    armed = runtime.intents.arm(schedule, boundary, trigger=TRIGGER, pause=pauser(gps), claim=claim)
    return armed if isinstance(armed, str) else (armed, claimed[0])


def _serve(
    context: OpExecutionContext, plan: PlanRef, request: dg.RunRequest, sent: Sequence[StepOutcome]
) -> Iterator[dg.DynamicOutput[Any] | dg.Output[Any]]:
    tags = {**request.tags, names.TAG_PREARM: f"serving {plan.transition_id}"}
    context.instance.add_run_tags(context.run_id, tags)  # the plan's tags: its run group, UI
    states = ", ".join(f"{o.deploy_id} {o.state}" for o in sent) or "none"
    context.log.info(
        f"transition {plan.transition_id} of {plan.schedule} opened at the boundary: "
        f"{len(plan.release_steps)} release, {len(plan.acquire_steps)} acquire step(s); "
        f"releases submitted at the boundary: {states}"
    )
    release = [step_config(s) for s in plan.release_steps]
    yield from fan_phases(release, [step_config(s) for s in plan.acquire_steps], plan.schedule)


def build_prearmed_job() -> dg.JobDefinition:
    """``gps_prearmed``: ``arm``, then the same ops as ``gps_transition``."""
    return phases_job(
        names.PREARM_JOB,
        "A release-first swap launched ahead of its boundary: waits for it, opens the plan at "
        "it, then releases and acquires in the same run.",
        arm_op,
        "release",
    )
