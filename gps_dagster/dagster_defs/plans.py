"""Transition plans (engine ``PlanRef``/``StepRef``) as run requests of the static jobs: the
plan in the run config, tags operators filter on, deterministic run keys. The daemon drops a
repeated key only *from the same origin*, so every plan request goes through
``claim_launches``: a durable claim names the one origin allowed to request that plan's run.
"""

# Decisions embodied here (docs/decisions.md):
# * “A plan run that ran while the gate was off”
# * “One origin launches a plan”
# * “One run group per swap, through Dagster's own tags”

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg

from gps_dagster.dagster_defs import names
from gps_dagster.engine import ticks
from gps_dagster.engine.reports import PlanRef, StepRef

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime

PLAN_OP = "plan"
RELEASE_FIRST = "release_first"
ACQUIRE_FIRST = "acquire_first"
ACQUIRE_ONLY = "acquire_only"
"""The order of a ``gps_acquire`` run: only the deferred acquiring steps."""
STEP_CONFIG = {"step_id": str, "deploy_id": str, "step": str}


def step_config(step: StepRef) -> dict[str, str]:
    return {"step_id": str(step.step_id), "deploy_id": str(step.deploy_id), "step": str(step.step)}


def _request(
    plan: PlanRef,
    steps: tuple[Sequence[StepRef], Sequence[StepRef]],
    *,
    run_key: str,
    job: str,
    order: str,
    targets: Sequence[str],
    trigger: str,
    phase: str,
) -> dg.RunRequest:
    """A run of ``plan``'s (release, acquire) ``steps``: the plan in the run config, the tags
    operators filter on, and the one-line swap for the Runs list."""
    release, acquire = steps
    config = {
        "order": order,
        "transition_id": plan.transition_id,
        "schedule": plan.schedule,
        "release_steps": [step_config(s) for s in release],
        "acquire_steps": [step_config(s) for s in acquire],
    }
    at = plan.interval_start
    tags = {
        names.TAG_SCHEDULE: plan.schedule,
        names.TAG_TARGETS: ",".join(targets),
        names.TAG_INTERVAL: at.isoformat() if at is not None else "",
        names.TAG_TRIGGER: trigger,
        names.TAG_TRANSITION: plan.transition_id,
        names.TAG_PHASE: phase,
        names.TAG_VERSION: str(plan.schedule_version),
        names.TAG_SWAP: ticks.swap_line(release, acquire, reverse=order == ACQUIRE_FIRST),
    }
    run_config = {"ops": {PLAN_OP: {"config": config}}}
    return dg.RunRequest(run_key=run_key, job_name=job, run_config=run_config, tags=tags)


def job_for(order: str) -> str:
    return names.TRANSITION_JOB_ACQUIRE_FIRST if order == ACQUIRE_FIRST else names.TRANSITION_JOB


def plan_request(plan: PlanRef) -> dg.RunRequest:
    """The run of a freshly opened transition: release ops, then acquire ops."""
    return _request(
        plan,
        (plan.release_steps, plan.acquire_steps),
        run_key=names.plan_run_key(plan.transition_id),
        job=job_for(plan.order),
        order=plan.order,
        targets=plan.targets,
        trigger=plan.trigger,
        phase="plan",
    )


def group_tags(runs: Sequence[Any]) -> dict[str, str]:
    """Dagster's run-group tags for a run that continues ``runs`` (newest first): its parent
    is the newest, its root the group's root (the plan run). Empty when there is no run."""
    if not runs:
        return {}
    parent = runs[0]
    root = parent.tags.get(names.ROOT_RUN_TAG) or parent.run_id
    return {names.PARENT_RUN_TAG: parent.run_id, names.ROOT_RUN_TAG: root}


def acquire_request(
    plan: PlanRef, steps: Sequence[StepRef], attempt: int, group: dict[str, str] | None = None
) -> dg.RunRequest:
    """The ``gps_acquire`` run of steps whose capacity now fits (capacity-wait sensor), in the
    run group of the transition's earlier runs (``group``, see ``group_tags``)."""
    request = _request(
        plan,
        ((), steps),
        run_key=names.acquire_run_key(plan.transition_id, attempt),
        job=names.ACQUIRE_JOB,
        order=ACQUIRE_ONLY,
        targets=[s.deploy_id for s in steps],
        trigger="capacity_wait",
        phase="acquire",
    )
    return request.with_replaced_attrs(tags={**request.tags, **(group or {})})


def plan_requests(plans: Iterable[PlanRef]) -> list[dg.RunRequest]:
    """Run requests for the plans that have steps (a plan without steps only records
    that the engine processed a new interval already satisfied)."""
    return [plan_request(p) for p in plans if p.release_steps or p.acquire_steps]


def resume_request(
    request: dg.RunRequest, attempt: int, group: dict[str, str] | None = None
) -> dg.RunRequest:
    """The same plan again under a new key: its steps were left pending by an earlier run
    (shown in that run's group)."""
    tid = request.tags[names.TAG_TRANSITION]
    tags = dict(
        request.tags, **{names.TAG_PHASE: "resume", names.TAG_TRIGGER: "resume"}, **(group or {})
    )
    return request.with_replaced_attrs(run_key=names.resume_run_key(tid, attempt), tags=tags)


def transition_runs(
    runtime: Runtime, instance: dg.DagsterInstance, transition_id: str
) -> list[dg.DagsterRun]:
    """The runs of one transition, newest first: its own, else the batch run it was in."""
    own = list(instance.get_runs(dg.RunsFilter(tags={names.TAG_TRANSITION: transition_id})))
    if own:
        return own
    batch = runtime.intents.launch_batch(names.plan_run_key(transition_id))
    if batch is None:
        return []
    return list(instance.get_runs(dg.RunsFilter(tags={names.TAG_BATCH: batch})))


def sensor_origin(name: str) -> str:
    return f"sensor:{name}"


def schedule_origin(name: str) -> str:
    return f"schedule:{name}"


def claim_launches(
    runtime: Runtime,
    requests: Iterable[dg.RunRequest],
    *,
    origin: str,
    instance: dg.DagsterInstance | None = None,
) -> tuple[list[dg.RunRequest], list[str]]:
    """The requests ``origin`` may emit, and a line per plan request it must skip.

    Plan requests (``<transition>:plan``) are claimed (``Intents.claim_launches``): the first
    origin owns the launch and may repeat the request (the daemon drops its repeats); another
    origin skips it, unless the claim is old and ``instance`` has no run of that transition (the
    owner's tick was lost). Other keys (resume, acquire) have a single origin and pass through.
    """
    requests = list(requests)
    plans = [
        (r.run_key or "", r.tags.get(names.TAG_TRANSITION, ""))
        for r in requests
        if r.run_key == names.plan_run_key(r.tags.get(names.TAG_TRANSITION, ""))
    ]

    def runs_of(tid: str, batch: str | None) -> bool:
        assert instance is not None
        if instance.get_runs_count(dg.RunsFilter(tags={names.TAG_TRANSITION: tid})):
            return True  # its run exists: the owner launched it
        tags = {names.TAG_BATCH: batch} if batch else None
        return bool(tags and instance.get_runs_count(dg.RunsFilter(tags=tags)))

    won, skipped = runtime.intents.claim_launches(
        plans, origin=origin, runs_of=runs_of if instance is not None else None
    )
    claimed = {key for key, _ in plans}
    return [r for r in requests if r.run_key not in claimed or r.run_key in won], skipped
