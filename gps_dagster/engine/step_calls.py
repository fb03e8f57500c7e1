"""The core side of a step: its mutation(s), the release-time re-checks, the core's sessions.

``engine/steps.py`` reads, asks ``domain/step_rules.py`` and writes; what it asks of the core is
here, on the step rows and the deploys already read (SPEC R-PASS-6, R-PASS-8, R-SCALE-5):

* ``submission`` / ``call_core`` — a step as one ``Core.submit_many`` mutation, or its own
  calls (an endpoint's members, a persist-then-start);
* ``alias_verdict`` — the alias guard in the way of a stop (R-PASS-8);
* ``recheck_verdict`` — the plan's acquiring steps preflighted again right before a release;
* ``counts_fits`` / ``core_session`` / ``plain_acquire`` — whether previews inside one core
  session count each other's fits, that session, and the acquires it counts;
* ``Snapshot`` — what one read gave the executor (plans, statuses, versions, deploys).
"""
# Decisions embodied here (docs/decisions.md):
# * “Preflight is re-checked right before a release”
# * “The batch lane submits with one `Core.submit_many` call”
# * “Acquires previewed together only where previews count each other”
# * “One step executor: a step is a batch of one”

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gps_dagster.domain import step_rules
from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import Order, PlannedStep, StepKind, Wanted
from gps_dagster.domain.spec import DesiredState
from gps_dagster.engine import endpoints
from gps_dagster.engine.endings import first_order
from gps_dagster.engine.outcomes import Verdict, verdict
from gps_dagster.engine.preflight import ReservationCheck, preflight
from gps_dagster.ports import (
    AliasGuardUnavailable,
    BatchingCore,
    CoreError,
    DeployView,
    NotFound,
    OperationKind,
    StepCore,
    Submission,
    Transient,
)
from gps_dagster.store.records import ActionRow, TargetStatusRow, TransitionRow

MOVABLE = step_rules.UNFENCED
"""The states of a step that may still be fenced (the plan's unsubmitted steps)."""
Plan = tuple[TransitionRow | None, Sequence[ActionRow]]


@dataclass
class Snapshot:
    """What one read gave: open plans by id, statuses, schedule (version, enabled), deploys."""

    plans: dict[str, Plan]
    statuses: Mapping[tuple[str, str], TargetStatusRow]
    versions: Mapping[str, tuple[int, bool]]
    reads: Mapping[str, DeployView]
    recheck_reads: bool = True
    """Whether a release's re-check may use ``reads`` (read by this call, right before it); a
    pass's reads date from its start: the re-check then reads the plan's deploys again."""


def plain_acquire(a: ActionRow, reads: Mapping[str, DeployView]) -> bool:
    """An acquire whose preview counts its core session (read, not bound, not an endpoint)."""
    deploy = reads.get(a.deploy_id)
    return not (deploy is None or deploy.reservation is not None or a.planned.endpoint)


def counts_fits(core: object) -> bool:
    """Whether previews inside one core session count earlier fits as taken (then a batch
    of acquires may be previewed together and submitted together)."""
    return isinstance(core, BatchingCore) and core.previews_count_fits()


@contextlib.contextmanager
def core_session(core: object) -> Iterator[None]:
    """The core's batch session when it has one (``BatchingCore``), else nothing."""
    if isinstance(core, BatchingCore):
        with core.batch():
            yield
    else:
        yield


def planned_step(a: ActionRow, deploy: DeployView) -> tuple[PlannedStep, Wanted, DeployView]:
    """A stored step back in the planner's terms (for a preflight re-check)."""
    kind = StepKind(a.step)
    plan = a.planned
    step = PlannedStep(a.deploy_id, kind, a.replicas, a.delta_replicas or 0, plan.persist_replicas)
    state = DesiredState.STOPPED if kind is StepKind.STOP else DesiredState.RUNNING
    return step, Wanted(a.deploy_id, state, a.replicas, plan.allow_downtime), deploy


Refusals = tuple[set[str], Mapping[str, Verdict]]


def plan_refusals(
    core: StepCore,
    plan: tuple[TransitionRow | None, Sequence[ActionRow]],
    reads: Mapping[str, DeployView],
    reservation_check: ReservationCheck | None,
) -> Refusals:
    """The plan's unsubmitted acquires, and preflight's refusals of its unsubmitted steps now
    (R-PASS-6): a deploy not in ``reads`` is read on its own; one gone is refused.

    A plan may run long after it opened (a queued Dagster run, a gate that was off): a quota or
    billing refusal that appeared since — or an acquiring deploy deleted since — must still stop
    the release."""
    tr, steps = plan
    actions = [x for x in steps if x.state in MOVABLE]
    acquiring = {x.deploy_id for x in actions if x.order == Order.ACQUIRE}
    if not acquiring:
        return acquiring, {}
    planned: dict[str, tuple[PlannedStep, Wanted, DeployView]] = {}
    gone: dict[str, Verdict] = {}
    for x in actions:
        try:
            view = reads.get(x.deploy_id) or endpoints.read_target(core, x.deploy_id)[0]
        except NotFound as exc:
            extra = f"{x.deploy_id} is gone: {exc}"
            gone[x.deploy_id] = verdict(Phase.INELIGIBLE, "target_failed", extra=extra)
            continue
        planned[x.deploy_id] = planned_step(x, view)
    release_first = first_order(tr.order if tr is not None else None) == Order.RELEASE
    refused = preflight(core, planned, reservation_check, release_first=release_first)
    return acquiring, {**gone, **refused}


def recheck_verdict(release: ActionRow, refusals: Refusals) -> Verdict | None:
    """The verdict that stops ``release`` now: an acquiring step of its plan refused."""
    acquiring, refused = refusals
    culprit = step_rules.recheck_culprit(release.deploy_id, acquiring, refused)
    if culprit is None:
        return None
    v = refused[culprit]
    text = step_rules.recheck_text(release.deploy_id, culprit, v.reason, v.fix)
    return Verdict(v.phase, v.reason, text, v.detail)


def alias_verdict(core: StepCore, a: ActionRow) -> Verdict | None:
    """The alias guard in the way of stop ``a`` (R-PASS-8); a ``Transient`` read raises."""
    if a.step != StepKind.STOP.value:
        return None
    plan = a.planned
    allow = plan.allow_downtime
    try:
        ids = [m.id for m in core.list_members(a.deploy_id)] if plan.endpoint else [a.deploy_id]
    except Transient:
        raise
    except CoreError as exc:
        extra = f"endpoint members unreadable: {exc}"
        return verdict(Phase.ALIAS_BLOCKED, "alias_guard_read_error", extra=extra)
    for deploy_id in ids:
        try:
            info = core.alias_guard(deploy_id)
        except AliasGuardUnavailable as exc:
            reason, extra = f"alias_guard_{exc.reason}", f"alias guard {exc.reason}"
            return verdict(Phase.ALIAS_BLOCKED, reason, extra=extra)
        except CoreError as exc:
            return verdict(Phase.ALIAS_BLOCKED, "alias_guard_read_error", extra=str(exc))
        if info.has_alias and not allow:
            reason, text, detail = step_rules.alias_refusal(deploy_id, info.aliases)
            return verdict(Phase.ALIAS_BLOCKED, reason, extra=text, detail=detail)
    return None


def submission(a: ActionRow) -> Submission | None:
    """Step ``a`` as one port mutation, or None when it is more than one call (an endpoint's
    members, a persist-then-start: ``call_core`` makes those)."""
    plan = a.planned
    if plan.endpoint:
        return None
    etag, key = a.etag_used or "", a.idempotency_key
    if a.step == StepKind.STOP.value:
        allow = plan.allow_downtime
        return Submission(OperationKind.STOP, a.deploy_id, etag, key, allow_aliased_downtime=allow)
    if a.step in (StepKind.SCALE_DOWN.value, StepKind.SCALE_UP.value):
        if a.replicas is None:
            return None  # its own call reports it
        kind = OperationKind.SET_REPLICA_INTENT
        return Submission(kind, a.deploy_id, etag, key, replicas=a.replicas)
    if plan.persist_replicas and a.replicas is not None:
        return None
    return Submission(OperationKind.START, a.deploy_id, etag, key)


def call_core(core: StepCore, a: ActionRow) -> list[Any]:
    """The core call(s) of step ``a`` with its idempotency key (raises what the core raises)."""
    etag = a.etag_used or ""
    key = a.idempotency_key
    plan = a.planned
    allow = plan.allow_downtime
    if plan.endpoint:
        if a.step == StepKind.STOP.value:
            return endpoints.stop_members(core, a.deploy_id, key, allow_aliased_downtime=allow)
        return endpoints.start_members(core, a.deploy_id, key)
    if a.step == StepKind.STOP.value:
        return [
            core.stop(a.deploy_id, etag=etag, allow_aliased_downtime=allow, idempotency_key=key)
        ]
    if a.step in (StepKind.SCALE_DOWN.value, StepKind.SCALE_UP.value):
        assert a.replicas is not None
        return [core.set_replica_intent(a.deploy_id, a.replicas, etag=etag, idempotency_key=key)]
    ops = []
    if plan.persist_replicas and a.replicas is not None:
        ops.append(
            core.set_replica_intent(
                a.deploy_id, a.replicas, etag=etag, idempotency_key=f"{key}/persist"
            )
        )
        etag = core.get_deploy(a.deploy_id).etag  # R-SCALE-5: a fresh ETag, then Start
    ops.append(core.start(a.deploy_id, etag=etag, idempotency_key=key))
    return ops
