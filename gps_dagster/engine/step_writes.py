"""The writes of a step, built once for the one step executor (R-PASS-7, R-PASS-16).

``StepRunner`` writes the accepted steps of a batch in one transaction (``Store.write_each``):
the same ``StepWrite`` for a batch of one, so a batched step ends exactly as a lone one would.
"""

# Decisions embodied here (docs/decisions.md):
# * “Capacity clock”

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import Order, StepKind
from gps_dagster.domain.step_state import StepState
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.planning import capacity_deadline
from gps_dagster.ports import Insufficient
from gps_dagster.store.plans import StepWrite
from gps_dagster.store.records import ActionRow, TargetStatusRow


def wait_deadline(a: ActionRow, config: EngineConfig) -> datetime:
    """When an acquire's capacity wait ends (R-PASS-9)."""
    return a.deadline_at or capacity_deadline(
        a.interval_start, a.created_at, a.planned.interval_end, config.capacity_wait_s
    )


def capacity_write(
    a: ActionRow, preview: Insufficient, deadline: datetime, status: TargetStatusRow
) -> StepWrite:
    """The move of a pending acquire into ``capacity_wait``, with its target."""
    detail = {
        **(a.detail or {}),
        "free_by_node": dict(preview.free_by_node),
        "preview_reason": preview.reason,
    }
    status_changes = {
        "phase": Phase.CAPACITY_WAIT.value,
        "reason": preview.reason,
        "fix": None,
        "detail": {"deadline": deadline.isoformat(), "free_by_node": dict(preview.free_by_node)},
    }
    return StepWrite(
        a.id,
        (StepState.PENDING,),
        {"state": StepState.CAPACITY_WAIT, "deadline_at": deadline, "detail": detail},
        status=status_changes,
        status_seen=status,
    )


def accepted_write(
    a: ActionRow,
    ops: list[Any],
    status: TargetStatusRow,
    config: EngineConfig,
    now: datetime,
    resubmit: bool,
) -> StepWrite:
    """The core accepted step ``a``: the step, its target and events move together.

    CAS on the status the submit was fenced with: if anyone wrote since (the step may already
    have converged), theirs is newer and stays (R-PASS-11: no regression).
    """
    timeout = config.stop_timeout_s if a.order == Order.RELEASE else config.readiness_timeout_s
    phase = Phase.RELEASING if a.order == Order.RELEASE else Phase.AWAITING_READY
    events: list[dict[str, Any]] = [
        {
            "kind": "action_accepted",
            "detail": {
                "step": a.step,
                "operations": [op.id for op in ops],
                "resubmitted": resubmit,
            },
        }
    ]
    if a.step == StepKind.SCALE_DOWN.value:
        events.append({"kind": "capacity_reduced", "detail": {"replicas": a.replicas}})
    return StepWrite(
        a.id,
        (StepState.SUBMITTING,),
        {
            "state": StepState.ACCEPTED,
            "accepted_at": now,
            "operation_ids": [op.id for op in ops],
            "deadline_at": now + timedelta(seconds=timeout),
        },
        status={"phase": phase.value, "last_action_id": a.id},
        status_seen=status,
        events=tuple(events),
    )


def etag_write(a: ActionRow, etag: str) -> StepWrite:
    """A submit refused on a stale ETag: the step goes back to ``pending`` on the new one."""
    changes = {"state": StepState.PENDING, "etag_used": etag}
    event = {"kind": "etag_conflict", "detail": {"action": a.id}}
    return StepWrite(a.id, (StepState.SUBMITTING,), changes, events=(event,))
