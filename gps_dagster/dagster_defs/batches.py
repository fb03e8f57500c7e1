"""A storm in one run: the plans a tick opens together share a ``gps_transition_batch`` run.

When everyone's 08:00 comes at once, one run per plan would queue a thousand run processes
behind ``max_concurrent_runs``. Above ``BATCH_THRESHOLD`` release-first plans in one tick, one
run executes them in ops of ``STEPS_PER_OP`` steps. Ops never raise for a step: a failed
release ends its own plan, and ``batch_done`` fails the run at the end, naming the failures.
Each plan is still claimed on its own, the batch in the claim's origin.
"""

# Decisions embodied here (docs/decisions.md):
# * “A deferred step of a batch is the capacity sensor's”
# * “The ops' and ticks' remaining rules are the engine's; one factory per kind of op”

from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster import OpExecutionContext

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.plans import PLAN_OP, RELEASE_FIRST, STEP_CONFIG, claim_launches
from gps_dagster.domain.step_state import StepState
from gps_dagster.engine.run_verdicts import batch_failure

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime

BATCH_THRESHOLD = 8
STEPS_PER_OP = 50
BATCH_JOB = "gps_transition_batch"
_PLAN = {
    "transition_id": str,
    "schedule": str,
    "release_steps": [STEP_CONFIG],
    "acquire_steps": [STEP_CONFIG],
}


def batch_id(requests: Sequence[dg.RunRequest]) -> str:
    tids = sorted(r.tags[names.TAG_TRANSITION] for r in requests)
    return f"batch-{names.short_hash(','.join(tids), 12)}"


def should_batch(requests: Sequence[dg.RunRequest]) -> bool:
    plans = [r for r in requests if r.job_name == names.TRANSITION_JOB]
    return len(plans) > BATCH_THRESHOLD


def batch_request(
    requests: Sequence[dg.RunRequest], bid: str, trigger: str, phase: str = "batch"
) -> dg.RunRequest:
    """One run for these plan requests (release-first plans, or acquire-only runs)."""
    plans = [dict(r.run_config["ops"][PLAN_OP]["config"]) for r in requests]
    for p in plans:
        p.pop("order", None)
    intervals = sorted({r.tags.get(names.TAG_INTERVAL, "") for r in requests})
    schedules = sorted({r.tags.get(names.TAG_SCHEDULE, "") for r in requests})
    one = {names.TAG_SCHEDULE: schedules[0]} if len(schedules) == 1 else {}
    return dg.RunRequest(
        run_key=names.batch_run_key(bid),
        job_name=BATCH_JOB,
        run_config={"ops": {"batch_plan": {"config": {"plans": plans}}}},
        tags={
            names.TAG_BATCH: bid,
            names.TAG_PLANS: str(len(plans)),
            names.TAG_TRIGGER: trigger,
            names.TAG_PHASE: phase,
            names.TAG_INTERVAL: intervals[0] if len(intervals) == 1 else "",
            **one,
        },
    )


def _fan_batches(steps: list[Any], output_name: str = "result") -> Iterator[Any]:
    """``steps`` in batches of ``STEPS_PER_OP``, at least one (maybe empty): a fan-out of
    nothing would skip everything after it."""
    chunks = [steps[i : i + STEPS_PER_OP] for i in range(0, len(steps), STEPS_PER_OP)] or [[]]
    for i, chunk in enumerate(chunks):
        yield dg.DynamicOutput(chunk, mapping_key=f"b{i:04d}", output_name=output_name)


@dg.op(
    name="batch_plan",
    config_schema={"plans": dg.Field([_PLAN], description="The plans of one tick.")},
    out={"releases": dg.DynamicOut(list), "acquires": dg.Out(list)},
    description="Fan the release steps of every plan out in batches; pass the acquires on.",
)
def batch_plan_op(context: OpExecutionContext) -> Iterator[Any]:
    plans = context.op_config["plans"]
    releases = [s for p in plans for s in p["release_steps"]]
    acquires = [s for p in plans for s in p["acquire_steps"]]
    context.log.info(
        f"{len(plans)} plan(s): {len(releases)} release, {len(acquires)} acquire step(s)"
    )
    yield from _fan_batches(releases, "releases")
    yield dg.Output(acquires, output_name="acquires")


def _batch_op(what: str, description: str) -> dg.OpDefinition:
    @dg.op(name=f"{what}_batch", required_resource_keys={"gps"}, description=description)
    def batch_op(context: OpExecutionContext, steps: list[Any]) -> list[Any]:
        engine = context.resources.gps.get_runtime().engine
        # together (shared reads, one fence, core sessions): one step at a time cost ~30 ms each
        outcomes = engine.execute_steps([step["step_id"] for step in steps]) if steps else []
        out = [
            {"deploy_id": step["deploy_id"], "state": o.state, "reason": o.reason or ""}
            for step, o in zip(steps, outcomes, strict=True)
        ]
        states = Counter(o["state"] for o in out)
        context.add_output_metadata(
            {"steps": len(out), **{f"{what}_{k}": v for k, v in states.items()}}
        )
        return out

    return batch_op


release_batch_op = _batch_op(
    "release", "Stop / scale down a batch of targets (a failure ends only its own plan)."
)
acquire_batch_op = _batch_op(
    "acquire",
    "Start / scale up a batch of targets whose capacity fits; the others wait "
    f"in capacity_wait for {names.CAPACITY_WAIT_SENSOR}.",
)


@dg.op(
    name="all_released_batches",
    out=dg.DynamicOut(list),
    description="Fan-in: every release batch ran; fan the acquire steps out in batches.",
)
def batch_fan_in_op(
    context: OpExecutionContext, done: list[Any], acquires: list[Any]
) -> Iterator[Any]:
    context.log.info(f"{sum(len(d) for d in done)} release step(s) ran; acquire {len(acquires)}")
    yield from _fan_batches(list(acquires))


@dg.op(name="batch_done", description="Summary; fails the run when any step failed.")
def batch_done_op(
    context: OpExecutionContext, done: list[Any], released: list[Any]
) -> dict[str, Any]:
    steps = [s for batch in [*released, *done] for s in batch]
    waiting = sum(1 for s in steps if s["state"] == StepState.CAPACITY_WAIT)
    context.log.info(f"{len(steps)} step(s); {waiting} wait for capacity")
    failure = batch_failure([(s["deploy_id"], s["state"], s["reason"]) for s in steps])
    if failure:
        raise dg.Failure(description=failure, allow_retries=False)
    return {"steps": len(steps), "capacity_wait": waiting}


def build_batch_job() -> dg.JobDefinition:
    @dg.job(
        name=BATCH_JOB,
        executor_def=dg.in_process_executor,
        tags={"gps/kind": "batch"},
        description="The release-first plans one tick opened together (a storm), with ops "
        f"per batch of {STEPS_PER_OP} steps: releases, fan-in, acquires.",
    )
    def batch() -> None:
        releases, acquires = batch_plan_op()
        done = releases.map(release_batch_op).collect()
        acquired = batch_fan_in_op(done, acquires).map(acquire_batch_op).collect()
        batch_done_op(acquired, done)

    return batch


def batched(
    runtime: "Runtime",
    requests: list[dg.RunRequest],
    *,
    origin: str,
    trigger: str,
    instance: dg.DagsterInstance | None,
    always: bool = False,
) -> tuple[list[dg.RunRequest], list[str]]:
    """Claim ``requests`` (see ``claim_launches``); above the threshold (or ``always``), the
    release-first plan requests won become one batch run (acquire-first ones keep their own)."""
    if not always and not should_batch(requests):
        return claim_launches(runtime, requests, origin=origin, instance=instance)
    merge = [
        r
        for r in requests
        if r.job_name == names.TRANSITION_JOB
        and r.run_config["ops"][PLAN_OP]["config"].get("order", RELEASE_FIRST) == RELEASE_FIRST
    ]
    rest = [r for r in requests if r not in merge]
    bid = batch_id(merge)
    won, skipped = claim_launches(runtime, merge, origin=f"{origin}#{bid}", instance=instance)
    others, more = claim_launches(runtime, rest, origin=origin, instance=instance)
    out = [batch_request(won, bid, trigger)] if won else []
    return out + others, skipped + more
