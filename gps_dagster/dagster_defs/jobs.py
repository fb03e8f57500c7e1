"""The transition job: one static job, the plan in its run config.

``plan`` fans the release steps out (DynamicOut), ``all_released`` fans them
in and fans the acquire steps out, ``done`` fans those in. An acquire op
depends on every release op through the fan-in, so it never starts before all
of them succeeded; a release whose outcome is ``failed`` raises, Dagster skips
everything downstream and no GPU is acquired on top of a failed release.

No op waits: ``execute_step`` submits and returns. An acquire that does not
fit yet ends its op in ``capacity_wait`` (a success: nothing went wrong); the
capacity-wait sensor launches an acquire-only run once the preview fits. The
in-process executor is used on purpose (the multiprocess one costs ~14 s per
7-step run on a 2-core machine, FACTS.md).
"""


from collections.abc import Iterator
from typing import Any

import dagster as dg
from dagster import OpExecutionContext

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.plans import ACQUIRE_FIRST, PLAN_OP, RELEASE_FIRST

_STEP = {"step_id": str, "deploy_id": str, "step": str}
PLAN_CONFIG = {
    "transition_id": dg.Field(str, description="Engine transition id."),
    "schedule": dg.Field(str, description="Deploy schedule name."),
    "release_steps": dg.Field([_STEP], default_value=[], description="Steps that free GPUs."),
    "acquire_steps": dg.Field([_STEP], default_value=[], description="Steps that take GPUs."),
    "order": dg.Field(str, default_value=RELEASE_FIRST, description="release_first | acquire_first."),
}


def _fan_out(steps: list[dict[str, str]], output_name: str | None = None) -> Iterator[dg.DynamicOutput[Any]]:
    for step in steps:
        key = names.step_mapping_key(step["step_id"], step["deploy_id"])
        if output_name is None:
            yield dg.DynamicOutput(dict(step), mapping_key=key)
        else:
            yield dg.DynamicOutput(dict(step), mapping_key=key, output_name=output_name)


def outcome_metadata(outcome: Any) -> dict[str, str]:
    return {
        "deploy_id": str(outcome.deploy_id),
        "state": str(outcome.state),
        "phase": str(outcome.phase),
        "reason": str(outcome.reason or ""),
        "fix": str(outcome.fix or ""),
    }


def _execute(context: OpExecutionContext, step: dict[str, str], order: str) -> dict[str, str]:
    engine = context.resources.gps.get_runtime().engine
    outcome = engine.execute_step(step["step_id"])
    meta = outcome_metadata(outcome)
    context.log_event(
        dg.AssetObservation(asset_key=names.TARGET_STATUS_ASSET, metadata=dict(meta, step=step["step"]))
    )
    context.add_output_metadata(meta)
    if outcome.state in ("failed", "cancelled"):
        raise dg.Failure(
            description=f"{order} {step['step']} of {step['deploy_id']} failed: {meta['reason']}",
            metadata=meta,
            allow_retries=False,
        )
    if outcome.state == "capacity_wait":
        context.log.info(
            f"{step['deploy_id']}: capacity not published yet; {names.CAPACITY_WAIT_SENSOR} "
            "launches the acquire when the preview fits"
        )
    return dict(step, state=meta["state"], phase=meta["phase"])


@dg.op(
    name=PLAN_OP,
    config_schema=PLAN_CONFIG,
    out={"first": dg.DynamicOut(dict), "then": dg.Out(list)},
    description="Read the transition plan from the run config and fan the first phase out.",
)
def plan_op(context: OpExecutionContext) -> Iterator[dg.DynamicOutput[Any] | dg.Output[Any]]:
    cfg = context.op_config
    release, acquire = cfg["release_steps"], cfg["acquire_steps"]
    first, then = (acquire, release) if cfg["order"] == ACQUIRE_FIRST else (release, acquire)
    context.log.info(
        f"transition {cfg['transition_id']} of {cfg['schedule']} ({cfg['order']}): "
        f"{len(release)} release, {len(acquire)} acquire step(s)"
    )
    yield from _fan_out(first, "first")
    yield dg.Output(list(then), output_name="then")


@dg.op(name="release", required_resource_keys={"gps"}, description="Stop / scale down one target.")
def release_op(context: OpExecutionContext, step: dict[str, Any]) -> dict[str, Any]:
    return _execute(context, step, "release")


@dg.op(name="acquire", required_resource_keys={"gps"}, description="Start / scale up one target.")
def acquire_op(context: OpExecutionContext, step: dict[str, Any]) -> dict[str, Any]:
    return _execute(context, step, "acquire")


def _fan_in(name: str, what: str, then: str) -> dg.OpDefinition:
    @dg.op(
        name=name,
        out=dg.DynamicOut(dict),
        description=f"Fan-in: every {what} op succeeded; fan the {then} steps out.",
    )
    def fan_in(context: OpExecutionContext, done: list[Any], then_steps: list[Any]) -> Iterator[dg.DynamicOutput[Any]]:
        context.log.info(f"{len(done)} {what} step(s) done; {then} {len(then_steps)}")
        yield from _fan_out(then_steps)

    return fan_in


all_released_op = _fan_in("all_released", "release", "acquire")
all_acquired_op = _fan_in("all_acquired", "acquire", "release")


@dg.op(name="done", description="Fan-in of the second phase: the run's summary.")
def done_op(context: OpExecutionContext, finished: list[Any]) -> dict[str, Any]:
    waiting = [s["deploy_id"] for s in finished if s.get("state") == "capacity_wait"]
    context.log.info(f"{len(finished)} step(s) in the second phase; in capacity_wait: {waiting or 'none'}")
    return {"steps": len(finished), "capacity_wait": waiting}


def build_transition_job(order: str = RELEASE_FIRST) -> dg.JobDefinition:
    """The release-first job (``gps_transition``) or its acquire-first mirror (R-PASS-12)."""
    release_first = order == RELEASE_FIRST
    first, then = (release_op, acquire_op) if release_first else (acquire_op, release_op)
    fan_in = all_released_op if release_first else all_acquired_op

    @dg.job(
        name=names.TRANSITION_JOB if release_first else names.TRANSITION_JOB_ACQUIRE_FIRST,
        executor_def=dg.in_process_executor,
        description=f"One transition plan ({order}): {first.name} ops, fan-in, then {then.name} ops.",
        tags={"gps/kind": "transition"},
    )
    def transition() -> None:
        first_steps, then_steps = plan_op()
        done = first_steps.map(first).collect()
        done_op(fan_in(done, then_steps).map(then).collect())

    return transition
