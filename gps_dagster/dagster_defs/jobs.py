"""The transition jobs: static jobs, the plan in their run config (SPEC R-DAG-2, R-DAG-9).

The head op fans the first phase out (DynamicOut); a fan-in op waits for every op of that
phase, so an acquire never starts before every release succeeded, and a failed release skips
everything downstream. Every acquiring step goes through ``admit``, whose bounded capacity
watch (``engine/run_verdicts.py``) takes ``fits`` → ``acquire`` or ``wait`` →
``capacity_wait``: the acquire op is then *skipped*, never green, and the sensor's
``gps_acquire`` run joins the plan run's run group. The in-process executor is on purpose
(the multiprocess one costs ~14 s per 7-step run on a 2-core machine, measured).
"""

# Decisions embodied here (docs/decisions.md):
# * “Waiting belongs to sensors, never to ops”
# * “A deferred acquire is a skipped step, not a green one”
# * “One run group per swap, through Dagster's own tags”
# * “Under the sensor floor by watching, briefly”
# * “A run re-checks its plan before it acts”
# * “The ops' and ticks' remaining rules are the engine's; one factory per kind of op”

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster import OpExecutionContext

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.deploys import report_deploy
from gps_dagster.dagster_defs.plans import ACQUIRE_FIRST, PLAN_OP, RELEASE_FIRST, STEP_CONFIG
from gps_dagster.dagster_defs.resources import capacity_poll_s, sleep
from gps_dagster.domain.step_state import StepState
from gps_dagster.engine import run_verdicts
from gps_dagster.engine.reports import StepOutcome

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime

PLAN_CONFIG = {
    "transition_id": dg.Field(str, description="Engine transition id."),
    "schedule": dg.Field(str, description="Deploy schedule name."),
    "release_steps": dg.Field([STEP_CONFIG], default_value=[], description="Steps that free GPUs."),
    "acquire_steps": dg.Field([STEP_CONFIG], default_value=[], description="Steps that take GPUs."),
    "order": dg.Field(
        str,
        default_value=RELEASE_FIRST,
        description="release_first | acquire_first | acquire_only.",
    ),
}


def _fan_out(
    steps: list[dict[str, str]], schedule: str | None = None, output_name: str = "result"
) -> Iterator[dg.DynamicOutput[Any]]:
    """One dynamic output per step, keyed by its deploy (readable) and step (unique)."""
    for step in steps:
        key = names.step_mapping_key(step["step_id"], step["deploy_id"])
        value = dict(step) if schedule is None else dict(step, schedule=schedule)
        yield dg.DynamicOutput(value, mapping_key=key, output_name=output_name)


def fan_phases(
    first: list[dict[str, str]], then: list[dict[str, str]], schedule: str
) -> Iterator[dg.DynamicOutput[Any] | dg.Output[Any]]:
    """A head op's two outputs: the ``first`` phase fanned out, ``then`` passed on."""
    yield from _fan_out(first, schedule, "first")
    yield dg.Output([dict(s, schedule=schedule) for s in then], output_name="then")


def outcome_metadata(outcome: Any) -> dict[str, str]:
    return {
        "deploy_id": str(outcome.deploy_id),
        "state": str(outcome.state),
        "phase": str(outcome.phase or ""),
        "reason": str(outcome.reason or ""),
        "fix": str(outcome.fix or ""),
    }


def _report(context: OpExecutionContext, step: dict[str, str]) -> dict[str, Any]:
    """The deploy's status after the op, on its asset (observation + phase check)."""
    runtime = context.resources.gps.get_runtime()
    row = report_deploy(context.instance, runtime, step["schedule"], step["deploy_id"])
    if row is None:
        return {}
    return {"phase": str(row.phase), "status_reason": row.reason or "", "status_fix": row.fix or ""}


def _stands_not(context: OpExecutionContext, standing: Any, what: str) -> None:
    """End the op failed with why its plan (or step) no longer stands (R-NEXT-3): never a
    green op for a plan a later boundary, an edit or a delete replaced."""
    meta = {
        "reason": standing.reason,
        "fix": standing.fix,
        "superseded_by": standing.superseded_by or "",
    }
    raise dg.Failure(
        description=f"{what} NOT run: {standing.message}", metadata=meta, allow_retries=False
    )


def _step_op(order: str, description: str) -> dg.OpDefinition:
    @dg.op(name=order, required_resource_keys={"gps"}, description=description)
    def step_op(context: OpExecutionContext, step: dict[str, Any]) -> dict[str, Any]:
        engine = context.resources.gps.get_runtime().engine
        outcome = engine.execute_step(step["step_id"])
        meta = {**outcome_metadata(outcome), **_report(context, step)}
        context.add_output_metadata(meta)
        failure = run_verdicts.step_failure(order, step["step"], step["deploy_id"], outcome)
        if failure is not None:
            raise dg.Failure(description=failure, metadata=meta, allow_retries=False)
        if outcome.state == StepState.SUPERSEDED:
            _stands_not(context, engine.step_standing(step["step_id"]), f"{order} {step['step']}")
        warning = run_verdicts.left_line(order, step["deploy_id"], outcome)
        if warning:
            context.log.warning(warning)
        return dict(step, state=meta["state"], phase=meta["phase"])

    return step_op


release_op = _step_op("release", "Stop / scale down one target.")
acquire_op = _step_op("acquire", "Start / scale up one target.")


@dg.op(
    name=PLAN_OP,
    config_schema=PLAN_CONFIG,
    required_resource_keys={"gps"},
    out={"first": dg.DynamicOut(dict), "then": dg.Out(list)},
    description="Check the plan still stands (a re-execution re-checks it), then fan the "
    "first phase of the plan in the run config out.",
)
def plan_op(context: OpExecutionContext) -> Iterator[dg.DynamicOutput[Any] | dg.Output[Any]]:
    cfg = context.op_config
    standing = context.resources.gps.get_runtime().engine.plan_standing(cfg["transition_id"])
    if not standing.live:  # a re-execution, a run that waited in a queue
        _stands_not(context, standing, f"plan {cfg['transition_id']}")
    release, acquire = cfg["release_steps"], cfg["acquire_steps"]
    first, then = (release, acquire) if cfg["order"] == RELEASE_FIRST else (acquire, release)
    context.log.info(
        f"transition {cfg['transition_id']} of {cfg['schedule']} ({cfg['order']}): "
        f"{len(release)} release, {len(acquire)} acquire step(s)"
    )
    yield from fan_phases(first, then, cfg["schedule"])


@dg.op(
    name="admit",
    required_resource_keys={"gps"},
    out={"fits": dg.Out(dict, is_required=False), "wait": dg.Out(dict, is_required=False)},
    description="Preview the capacity of one acquiring step (watching it a few seconds): "
    "fits → acquire; else → capacity_wait (the acquire op is skipped).",
)
def admit_op(context: OpExecutionContext, step: dict[str, Any]) -> Iterator[dg.Output[Any]]:
    gps = context.resources.gps
    runtime = gps.get_runtime()
    seen = run_verdicts.admit(
        step["deploy_id"],
        lambda: _preview(runtime, step["step_id"]),
        runtime.clock,
        capacity_poll_s(gps),
        lambda seconds: sleep(gps, seconds),
    )
    if seen.line:
        context.log.info(seen.line)
    if seen.verdict == "fits":
        yield dg.Output(step, "fits", metadata={"preview": seen.preview.state})
    elif seen.verdict == "wait":
        meta = {"preview": "capacity_wait", "reason": seen.preview.reason or ""}
        yield dg.Output(step, "wait", metadata=meta)
    # pending: both outputs absent, acquire and capacity_wait are skipped


def _preview(runtime: "Runtime", step_id: str) -> StepOutcome:
    """The engine's own preview of the step (``Intents.preview_step``; tests replace it)."""
    return runtime.intents.preview_step(step_id)


@dg.op(
    name="capacity_wait",
    required_resource_keys={"gps"},
    description=f"The capacity does not fit yet: the acquire is deferred to "
    f"{names.CAPACITY_WAIT_SENSOR}, which launches it (same run group) when it fits.",
)
def capacity_wait_op(context: OpExecutionContext, step: dict[str, Any]) -> dict[str, Any]:
    meta = _report(context, step)
    at = context.resources.gps.get_runtime().intents.step_deadline(step["step_id"])
    reason = meta.get("status_reason") or ""
    context.log.info(run_verdicts.deferred_line(step["deploy_id"], reason, at))
    deadline = at.isoformat() if at is not None else ""
    context.add_output_metadata(
        {**meta, "deferred_to": names.CAPACITY_WAIT_SENSOR, "deadline": deadline}
    )
    return dict(step, state="capacity_wait")


def _admission(step: Any) -> tuple[Any, Any]:
    fits, wait = admit_op(step)
    return acquire_op(fits), capacity_wait_op(wait)


def _fan_in(name: str, what: str, then: str) -> dg.OpDefinition:
    @dg.op(
        name=name,
        out=dg.DynamicOut(dict),
        description=f"Fan-in: every {what} op succeeded; fan the {then} steps out.",
    )
    def fan_in(
        context: OpExecutionContext, done: list[Any], then_steps: list[Any]
    ) -> Iterator[dg.DynamicOutput[Any]]:
        context.log.info(f"{len(done)} {what} step(s) done; {then} {len(then_steps)}")
        yield from _fan_out(then_steps)

    return fan_in


all_released_op = _fan_in("all_released", "release", "acquire")
all_acquired_op = _fan_in("all_acquired", "acquire", "release")


@dg.op(name="done", description="Fan-in of the last phase: the run's summary.")
def done_op(context: OpExecutionContext, finished: list[Any]) -> dict[str, Any]:
    states = {s["deploy_id"]: s.get("state", "") for s in finished}
    context.log.info(f"{len(finished)} step(s) in the last phase: {states}")
    return {"steps": len(finished), "states": states}


def phases_job(name: str, description: str, head: dg.OpDefinition, first: str) -> dg.JobDefinition:
    """A transition job: ``head`` (the plan, or a pre-armed run's ``arm``) fans the ``first``
    phase out and passes the other on; ``release`` first: release ops, fan-in, admit → acquire
    (or capacity_wait); ``acquire`` first: the mirror; ``acquire_only``: admit → acquire."""

    @dg.job(
        name=name,
        executor_def=dg.in_process_executor,
        description=description,
        tags={"gps/kind": "transition"},
    )
    def transition() -> None:
        first_steps, then_steps = head()
        if first == "release":
            released = first_steps.map(release_op).collect()
            acquired, _deferred = all_released_op(released, then_steps).map(_admission)
            done_op(acquired.collect())
        elif first == "acquire":
            acquired, _deferred = first_steps.map(_admission)
            done_op(all_acquired_op(acquired.collect(), then_steps).map(release_op).collect())
        else:
            acquired, _deferred = first_steps.map(_admission)
            done_op(acquired.collect())

    return transition


JOBS = {
    RELEASE_FIRST: (
        names.TRANSITION_JOB,
        "One transition plan (release_first): release ops, fan-in, then admit → acquire (or "
        "capacity_wait) per acquiring step.",
        "release",
    ),
    ACQUIRE_FIRST: (
        names.TRANSITION_JOB_ACQUIRE_FIRST,
        "One transition plan (acquire_first): admit → acquire per acquiring step, fan-in, "
        "then release ops.",
        "acquire",
    ),
    "acquire_only": (
        names.ACQUIRE_JOB,
        "The deferred acquiring steps of a transition, once their capacity fits "
        f"(launched by {names.CAPACITY_WAIT_SENSOR} in the plan run's run group).",
        "acquire_only",
    ),
}
"""The plan op's jobs by order: ``gps_transition``, its acquire-first mirror (R-PASS-12) and
``gps_acquire``, the capacity-wait sensor's acquire run."""


def build_transition_job(order: str = RELEASE_FIRST) -> dg.JobDefinition:
    name, description, first = JOBS[order]
    return phases_job(name, description, plan_op, first)


def build_acquire_job() -> dg.JobDefinition:
    return build_transition_job("acquire_only")
