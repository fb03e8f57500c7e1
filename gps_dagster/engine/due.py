"""When a schedule needs its next pass (the due index's rule: decision "Due work is found by
index").

After a visit a schedule is due again:

* soon (``follow_up_s``) while a step of it may still move and the gate
  enforces — accepted steps are observed, capacity waits re-previewed; with
  the gate not enforcing, after ``pass_interval_s``;
* after ``pass_interval_s`` when its visit failed or a target was unreadable;
* otherwise at its next intent boundary — kept as stored when the visit found
  it not due yet (the spec is unchanged: the revision guards that) — and never
  for a disabled schedule with nothing in flight (applying it marks it due).

The steady sweep still visits every schedule in turn (drift, eligibility,
repaired causes); the due index is what makes boundaries and in-flight work
independent of the cursor.
"""

# Decisions embodied here (docs/decisions.md):
# * “Due work is found by index”

from __future__ import annotations

from datetime import datetime, timedelta

from gps_dagster.domain.evaluator import next_boundary
from gps_dagster.domain.step_state import Gate
from gps_dagster.engine.config import EngineConfig
from gps_dagster.store.due import DueClaim
from gps_dagster.store.records import ScheduleRecord


def next_due(
    record: ScheduleRecord,
    claim: DueClaim,
    at: datetime,
    gate: str,
    config: EngineConfig,
    *,
    failed: bool,
    in_flight: bool,
    early: datetime | None = None,
) -> datetime | None:
    """The next instant ``record`` (visited at ``at``) needs a pass; None: never.

    ``early``: the next ready-by early start (R-NEXT-1), due before its boundary.
    """
    soon: datetime | None = None
    if failed:
        soon = at + timedelta(seconds=config.pass_interval_s)
    elif in_flight:
        wait = config.follow_up_s if gate == Gate.ENFORCE else config.pass_interval_s
        soon = at + timedelta(seconds=wait)
    if not record.enabled:
        return soon
    planned = claim.due_at if claim.due_at is not None and claim.due_at > at else None
    if planned is None:
        planned = next_boundary(record.spec, at)
    if early is not None and early > at and (planned is None or early < planned):
        planned = early
    if soon is None:
        return planned
    return soon if planned is None else min(soon, planned)
