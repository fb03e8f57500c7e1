"""Target status and the fence: the writes that make the engine safe.

Three engines may run the same pass at once (SPEC R-PASS-2). What keeps them
correct is here, not in the lock:

* ``cas_status`` writes a target's status only if ``status_version`` and
  ``target_generation`` are still what the writer read (R-PASS-11), and never
  moves time backwards: for one schedule version the interval start only
  grows, and the schedule version never decreases (R-PASS-14) — a replica
  whose clock is behind, or a stale read, cannot undo a newer plan;
* ``fence`` is the transaction before each submit (R-PASS-7): schedule row
  read ``FOR SHARE``, version / enabled / gate / claim re-checked, status
  CAS'd, the action moved to ``submitting`` — all or nothing.

Plans and steps (opened and moved atomically) are in ``store/plans.py``.
"""
# Decisions embodied here (docs/decisions.md):
# * “A stored interval ahead of the clock: reported with its fix, cleared by one command or a new
#   version”

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import Order, StepKind
from gps_dagster.domain.spec import TransitionOrder
from gps_dagster.domain.step_state import PlanState, StepState
from gps_dagster.store import tables as t
from gps_dagster.store.records import ActionRow, TargetStatusRow, TransitionRow
from gps_dagster.store.shapes import forward_ok

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


class CasConflict(Exception):
    """Raised inside a transaction to roll it back when a CAS lost."""


__all__ = ["CasConflict", "StatusMixin", "forward_ok"]


class StatusMixin:
    engine: Engine

    # -- status ---------------------------------------------------------------

    def clear_clock_skew(self, schedule: str, *, now: datetime, bound_s: float) -> list[str]:
        """``gps-dagster schedules clear-skew``: see ``clear_future_intervals``; the schedule
        is due at once (its due mark, in the same transaction)."""
        from gps_dagster.store.scale_tables import schedule_due as d

        with self.engine.begin() as conn:
            cleared = clear_future_intervals(conn, schedule, now=now, bound_s=bound_s)
            if cleared:
                conn.execute(
                    d.update()
                    .where(d.c.name == schedule)
                    .values(due_at=now, revision=d.c.revision + 1)
                )
        return cleared

    def get_status(self, schedule: str, deploy_id: str) -> TargetStatusRow | None:
        with self.engine.connect() as conn:
            return _get_status(conn, schedule, deploy_id)

    def list_status(self, schedule: str | None = None) -> list[TargetStatusRow]:
        query = sa.select(t.target_status).order_by(
            t.target_status.c.schedule_name, t.target_status.c.deploy_id
        )
        if schedule is not None:
            query = query.where(t.target_status.c.schedule_name == schedule)
        with self.engine.connect() as conn:
            return [_status(r) for r in conn.execute(query).all()]

    def statuses_for(self, schedules: Sequence[str]) -> dict[tuple[str, str], TargetStatusRow]:
        """Every status row of these schedules in one read (the pass prefetch)."""
        query = sa.select(t.target_status).where(
            t.target_status.c.schedule_name.in_(list(schedules))
        )
        with self.engine.connect() as conn:
            return {(r.schedule_name, r.deploy_id): _status(r) for r in conn.execute(query).all()}

    def ensure_statuses(self, targets: Sequence[tuple[str, str, int]], *, now: datetime) -> None:
        """Create missing status rows (schedule, deploy, schedule version) in ``pending``, at
        once."""
        rows = [
            {
                "schedule_name": s,
                "deploy_id": d,
                "phase": Phase.PENDING,
                "status_version": 0,
                "target_generation": 0,
                "schedule_version": v,
                "phase_since": now,
                "updated_at": now,
            }
            for s, d, v in targets
        ]
        if not rows:
            return
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        with self.engine.begin() as conn:
            conn.execute(insert(t.target_status).values(rows).on_conflict_do_nothing())

    def ensure_status(
        self, schedule: str, deploy_id: str, *, schedule_version: int, now: datetime
    ) -> TargetStatusRow:
        """The target's status row, created in phase ``pending`` when missing."""
        with self.engine.begin() as conn:
            row = _get_status(conn, schedule, deploy_id)
            if row is not None:
                return row
            try:
                with conn.begin_nested():
                    conn.execute(
                        t.target_status.insert().values(
                            schedule_name=schedule,
                            deploy_id=deploy_id,
                            phase=Phase.PENDING,
                            status_version=0,
                            target_generation=0,
                            schedule_version=schedule_version,
                            phase_since=now,
                            updated_at=now,
                        )
                    )
            except IntegrityError:
                pass
            got = _get_status(conn, schedule, deploy_id)
            assert got is not None
            return got

    def cas_status(
        self,
        seen: TargetStatusRow,
        *,
        now: datetime,
        events: Iterable[Mapping[str, Any]] = (),
        **changes: Any,
    ) -> TargetStatusRow | None:
        """Write ``changes`` if nobody wrote since ``seen``; None when the CAS lost."""
        with self.engine.begin() as conn:
            try:
                return _cas(conn, seen, now, changes, events)
            except CasConflict:
                return None


def _cas(
    conn: Connection,
    seen: TargetStatusRow,
    now: datetime,
    changes: Mapping[str, Any],
    events: Iterable[Mapping[str, Any]],
) -> TargetStatusRow:
    values = dict(changes)
    values.setdefault("target_generation", seen.target_generation)
    values["status_version"] = seen.status_version + 1
    values["updated_at"] = now
    new_phase = values.get("phase", seen.phase)
    if new_phase != seen.phase:
        values["phase_since"] = now
    if not forward_ok(seen, values):  # the row as stored IS ``seen`` when the CAS below
        raise CasConflict  # matches: every writer bumps status_version
    ts = t.target_status
    done = conn.execute(
        ts.update()
        .where(
            ts.c.schedule_name == seen.schedule,
            ts.c.deploy_id == seen.deploy_id,
            ts.c.status_version == seen.status_version,
            ts.c.target_generation == seen.target_generation,
        )
        .values(**values)
    ).rowcount
    if not done:
        raise CasConflict
    if new_phase != seen.phase or values.get("reason", seen.reason) != seen.reason:
        conn.execute(
            t.events.insert().values(
                at=now,
                schedule_name=seen.schedule,
                deploy_id=seen.deploy_id,
                kind="phase_changed",
                phase=new_phase,
                reason=values.get("reason", seen.reason),
                detail={"from": seen.phase, "fix": values.get("fix", seen.fix)},
            )
        )
    for ev in events:
        conn.execute(
            t.events.insert().values(
                at=now,
                schedule_name=seen.schedule,
                deploy_id=seen.deploy_id,
                kind=ev["kind"],
                phase=ev.get("phase", new_phase),
                reason=ev.get("reason"),
                detail=ev.get("detail"),
            )
        )
    got = _get_status(conn, seen.schedule, seen.deploy_id)
    assert got is not None
    return got


def clear_future_intervals(
    conn: Connection, schedule: str, *, now: datetime, bound_s: float
) -> list[str]:
    """Forget the stored interval of ``schedule``'s targets whose start is more than ``bound_s``
    ahead of ``now`` (written by a clock ahead: R-NEXT-4), so the next pass plans the present's
    intent. Returns the targets cleared; each gets a ``clock_skew_cleared`` event."""
    ts = t.target_status
    ahead = now + timedelta(seconds=bound_s)
    rows = conn.execute(
        sa.select(ts.c.deploy_id, ts.c.interval_start)
        .where(ts.c.schedule_name == schedule, ts.c.interval_start > ahead)
        .with_for_update()
    ).all()
    for r in rows:
        conn.execute(
            ts.update()
            .where(ts.c.schedule_name == schedule, ts.c.deploy_id == r.deploy_id)
            .values(
                interval_start=None,
                interval_end=None,
                interval_writer=None,
                interval_writer_offset_s=None,
                status_version=ts.c.status_version + 1,
                updated_at=now,
            )
        )
        conn.execute(
            t.events.insert().values(
                at=now,
                schedule_name=schedule,
                deploy_id=r.deploy_id,
                kind="clock_skew_cleared",
                reason="operator",
                detail={
                    "stored_interval_start": r.interval_start.isoformat(),
                    "cleared_at": now.isoformat(),
                },
            )
        )
    return sorted(r.deploy_id for r in rows)


def _get_status(conn: Connection, schedule: str, deploy_id: str) -> TargetStatusRow | None:
    row = conn.execute(
        sa.select(t.target_status).where(
            t.target_status.c.schedule_name == schedule, t.target_status.c.deploy_id == deploy_id
        )
    ).first()
    return _status(row) if row is not None else None


def _status(r: Any) -> TargetStatusRow:
    return TargetStatusRow(
        r.schedule_name,
        r.deploy_id,
        Phase(r.phase),
        r.reason,
        r.fix,
        r.detail,
        r.status_version,
        r.target_generation,
        r.schedule_version,
        r.interval_start,
        r.interval_end,
        r.intent,
        r.transition_id,
        r.last_action_id,
        r.phase_since,
        r.converged_at,
        r.updated_at,
        r.interval_writer,
        r.interval_writer_offset_s,
    )


def _action(r: Any) -> ActionRow:
    return ActionRow(
        r.id,
        r.idempotency_key,
        r.transition_id,
        r.schedule_name,
        r.schedule_version,
        r.deploy_id,
        r.interval_start,
        StepKind(r.step),
        Order(r.order),
        r.seq,
        r.replicas,
        r.delta_replicas,
        r.etag_used,
        StepState(r.state),
        r.operation_ids,
        r.reason,
        r.fix,
        r.detail,
        r.created_at,
        r.submitted_at,
        r.accepted_at,
        r.finished_at,
        r.deadline_at,
        r.updated_at,
    )


def _transition(r: Any) -> TransitionRow:
    return TransitionRow(
        r.id,
        r.schedule_name,
        r.schedule_version,
        r.boundary_at,
        TransitionOrder(r.order),
        r.trigger,
        PlanState(r.state),
        list(r.targets),
        r.created_at,
        r.lag_seconds,
    )
