"""Target status, transitions and actions: the writes that make the engine safe.

Three engines may run the same pass at once (SPEC R-PASS-2). What keeps them
correct is here, not in the lock:

* ``cas_status`` writes a target's status only if ``status_version`` and
  ``target_generation`` are still what the writer read (R-PASS-11);
* ``open_transition`` inserts a plan whose id and step idempotency keys are
  deterministic, so a second engine opening the same plan conflicts and backs
  off;
* ``fence`` is the transaction before each submit (R-PASS-7): schedule row
  read ``FOR SHARE``, version / enabled / gate / claim re-checked, status
  CAS'd, the action moved to ``submitting`` — all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from gps_dagster.store import tables as t
from gps_dagster.store.records import ActionRow, TargetStatusRow, TransitionRow

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


class CasConflict(Exception):
    """Raised inside a transaction to roll it back when a CAS lost."""


@dataclass(frozen=True, slots=True)
class FenceResult:
    ok: bool
    reason: str | None = None
    status: TargetStatusRow | None = None


class StatusMixin:
    engine: Engine

    # -- status ---------------------------------------------------------------

    def get_status(self, schedule: str, deploy_id: str) -> TargetStatusRow | None:
        with self.engine.connect() as conn:
            return _get_status(conn, schedule, deploy_id)

    def list_status(self, schedule: str | None = None) -> list[TargetStatusRow]:
        query = sa.select(t.target_status).order_by(t.target_status.c.schedule_name, t.target_status.c.deploy_id)
        if schedule is not None:
            query = query.where(t.target_status.c.schedule_name == schedule)
        with self.engine.connect() as conn:
            return [_status(r) for r in conn.execute(query).all()]

    def statuses_for(self, schedules: Sequence[str]) -> dict[tuple[str, str], TargetStatusRow]:
        """Every status row of these schedules in one read (the pass prefetch)."""
        query = sa.select(t.target_status).where(t.target_status.c.schedule_name.in_(list(schedules)))
        with self.engine.connect() as conn:
            return {(r.schedule_name, r.deploy_id): _status(r) for r in conn.execute(query).all()}

    def ensure_statuses(self, targets: Sequence[tuple[str, str, int]], *, now: datetime) -> None:
        """Create missing status rows (schedule, deploy, schedule version) in ``pending``, at once."""
        rows = [
            {"schedule_name": s, "deploy_id": d, "phase": "pending", "status_version": 0, "target_generation": 0,
             "schedule_version": v, "phase_since": now, "updated_at": now}
            for s, d, v in targets
        ]
        if not rows:
            return
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        with self.engine.begin() as conn:
            conn.execute(insert(t.target_status).values(rows).on_conflict_do_nothing())

    def ensure_status(self, schedule: str, deploy_id: str, *, schedule_version: int, now: datetime) -> TargetStatusRow:
        """The target's status row, created in phase ``pending`` when missing."""
        with self.engine.begin() as conn:
            row = _get_status(conn, schedule, deploy_id)
            if row is not None:
                return row
            try:
                with conn.begin_nested():
                    conn.execute(
                        t.target_status.insert().values(
                            schedule_name=schedule, deploy_id=deploy_id, phase="pending", status_version=0,
                            target_generation=0, schedule_version=schedule_version, phase_since=now, updated_at=now,
                        )
                    )
            except IntegrityError:
                pass
            got = _get_status(conn, schedule, deploy_id)
            assert got is not None
            return got

    def cas_status(
        self, seen: TargetStatusRow, *, now: datetime, events: Iterable[Mapping[str, Any]] = (), **changes: Any
    ) -> TargetStatusRow | None:
        """Write ``changes`` if nobody wrote since ``seen``; None when the CAS lost."""
        with self.engine.begin() as conn:
            try:
                return _cas(conn, seen, now, changes, events)
            except CasConflict:
                return None

    # -- transitions and actions --------------------------------------------

    def open_transition(
        self,
        transition: Mapping[str, Any],
        steps: Sequence[Mapping[str, Any]],
        updates: list[tuple[TargetStatusRow, dict[str, Any]]],
        *,
        now: datetime,
    ) -> bool:
        """Insert a plan and its steps and move its targets' status, atomically.

        False when another engine opened the same plan first or a status CAS
        lost: the caller re-reads and moves on.
        """
        try:
            with self.engine.begin() as conn:
                conn.execute(t.transitions.insert().values(**transition))
                if steps:
                    conn.execute(t.actions.insert(), [dict(s) for s in steps])
                for seen, changes in updates:
                    _cas(conn, seen, now, changes, changes.pop("_events", ()))
        except (IntegrityError, CasConflict):
            return False
        return True

    def get_transition(self, transition_id: str) -> TransitionRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.transitions).where(t.transitions.c.id == transition_id)).first()
        return _transition(row) if row is not None else None

    def list_transitions(self, schedule: str | None = None, *, states: Iterable[str] | None = None) -> list[TransitionRow]:
        query = sa.select(t.transitions).order_by(t.transitions.c.created_at, t.transitions.c.id)
        if schedule is not None:
            query = query.where(t.transitions.c.schedule_name == schedule)
        if states is not None:
            query = query.where(t.transitions.c.state.in_(list(states)))
        with self.engine.connect() as conn:
            return [_transition(r) for r in conn.execute(query).all()]

    def set_transition_state(self, transition_id: str, state: str, *, lag_seconds: float | None = None) -> None:
        values: dict[str, Any] = {"state": state}
        if lag_seconds is not None:
            values["lag_seconds"] = lag_seconds
        with self.engine.begin() as conn:
            conn.execute(t.transitions.update().where(t.transitions.c.id == transition_id).values(**values))

    def get_action(self, action_id: str) -> ActionRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.actions).where(t.actions.c.id == action_id)).first()
        return _action(row) if row is not None else None

    def list_actions(
        self,
        *,
        transition_id: str | None = None,
        schedule: str | None = None,
        deploy_id: str | None = None,
        states: Iterable[str] | None = None,
        schedules: Sequence[str] | None = None,
    ) -> list[ActionRow]:
        query = sa.select(t.actions).order_by(t.actions.c.created_at, t.actions.c.seq)
        if schedules is not None:
            query = query.where(t.actions.c.schedule_name.in_(list(schedules)))
        if transition_id is not None:
            query = query.where(t.actions.c.transition_id == transition_id)
        if schedule is not None:
            query = query.where(t.actions.c.schedule_name == schedule)
        if deploy_id is not None:
            query = query.where(t.actions.c.deploy_id == deploy_id)
        if states is not None:
            query = query.where(t.actions.c.state.in_(list(states)))
        with self.engine.connect() as conn:
            return [_action(r) for r in conn.execute(query).all()]

    def update_action(self, action_id: str, *, expect: Iterable[str], now: datetime, **changes: Any) -> bool:
        """CAS on the action state: only moves an action that is still in ``expect``."""
        with self.engine.begin() as conn:
            return bool(
                conn.execute(
                    t.actions.update()
                    .where(t.actions.c.id == action_id, t.actions.c.state.in_(list(expect)))
                    .values(updated_at=now, **changes)
                ).rowcount
            )

    def fence_check(self, action: ActionRow) -> str | None:
        """The fence's re-checks alone (version, enabled, gate, claim), for a resubmission."""
        with self.engine.begin() as conn:
            return _fence_checks(conn, action)

    def fence(
        self,
        action: ActionRow,
        seen: TargetStatusRow,
        *,
        now: datetime,
        status_changes: dict[str, Any],
        expect_states: Iterable[str] = ("pending", "capacity_wait"),
    ) -> FenceResult:
        """The fence transaction before a submit (R-PASS-7)."""
        try:
            with self.engine.begin() as conn:
                reason = _fence_checks(conn, action)
                if reason is not None:
                    return FenceResult(False, reason)
                moved = conn.execute(
                    t.actions.update()
                    .where(t.actions.c.id == action.id, t.actions.c.state.in_(list(expect_states)))
                    .values(state="submitting", submitted_at=now, updated_at=now)
                ).rowcount
                if not moved:
                    raise CasConflict
                status = _cas(conn, seen, now, {**status_changes, "last_action_id": action.id}, ())
        except CasConflict:
            return FenceResult(False, "lost_race")
        return FenceResult(True, None, status)


def _fence_checks(conn: Connection, action: ActionRow) -> str | None:
    sched = conn.execute(
        sa.select(t.schedules.c.version, t.schedules.c.enabled)
        .where(t.schedules.c.name == action.schedule)
        .with_for_update(read=True)
    ).first()
    if sched is None:
        return "schedule_deleted"
    if sched.version != action.schedule_version:
        return "schedule_version_changed"
    if not sched.enabled:
        return "schedule_disabled"
    gate = conn.execute(sa.select(t.control.c.value).where(t.control.c.key == "execution")).scalar_one_or_none()
    if gate != "enforce":
        return "gate_not_enforce"
    owner = conn.execute(
        sa.select(t.target_claims.c.schedule_name).where(t.target_claims.c.deploy_id == action.deploy_id)
    ).scalar_one_or_none()
    if owner != action.schedule:
        return "claim_lost"
    return None


def _cas(
    conn: Connection, seen: TargetStatusRow, now: datetime, changes: Mapping[str, Any], events: Iterable[Mapping[str, Any]]
) -> TargetStatusRow:
    values = dict(changes)
    values.setdefault("target_generation", seen.target_generation)
    values["status_version"] = seen.status_version + 1
    values["updated_at"] = now
    new_phase = values.get("phase", seen.phase)
    if new_phase != seen.phase:
        values["phase_since"] = now
    done = conn.execute(
        t.target_status.update()
        .where(
            t.target_status.c.schedule_name == seen.schedule,
            t.target_status.c.deploy_id == seen.deploy_id,
            t.target_status.c.status_version == seen.status_version,
            t.target_status.c.target_generation == seen.target_generation,
        )
        .values(**values)
    ).rowcount
    if not done:
        raise CasConflict
    if new_phase != seen.phase or values.get("reason", seen.reason) != seen.reason:
        conn.execute(
            t.events.insert().values(
                at=now, schedule_name=seen.schedule, deploy_id=seen.deploy_id, kind="phase_changed",
                phase=new_phase, reason=values.get("reason", seen.reason),
                detail={"from": seen.phase, "fix": values.get("fix", seen.fix)},
            )
        )
    for ev in events:
        conn.execute(
            t.events.insert().values(
                at=now, schedule_name=seen.schedule, deploy_id=seen.deploy_id, kind=ev["kind"],
                phase=ev.get("phase", new_phase), reason=ev.get("reason"), detail=ev.get("detail"),
            )
        )
    got = _get_status(conn, seen.schedule, seen.deploy_id)
    assert got is not None
    return got


def _get_status(conn: Connection, schedule: str, deploy_id: str) -> TargetStatusRow | None:
    row = conn.execute(
        sa.select(t.target_status).where(
            t.target_status.c.schedule_name == schedule, t.target_status.c.deploy_id == deploy_id
        )
    ).first()
    return _status(row) if row is not None else None


def _status(r: Any) -> TargetStatusRow:
    return TargetStatusRow(
        r.schedule_name, r.deploy_id, r.phase, r.reason, r.fix, r.detail, r.status_version, r.target_generation,
        r.schedule_version, r.interval_start, r.interval_end, r.intent, r.transition_id, r.last_action_id,
        r.phase_since, r.converged_at, r.updated_at,
    )


def _action(r: Any) -> ActionRow:
    return ActionRow(
        r.id, r.idempotency_key, r.transition_id, r.schedule_name, r.schedule_version, r.deploy_id, r.interval_start,
        r.step, r.order, r.seq, r.replicas, r.delta_replicas, r.etag_used, r.state, r.operation_ids, r.reason, r.fix,
        r.detail, r.created_at, r.submitted_at, r.accepted_at, r.finished_at, r.deadline_at, r.updated_at,
    )


def _transition(r: Any) -> TransitionRow:
    return TransitionRow(
        r.id, r.schedule_name, r.schedule_version, r.boundary_at, r.order, r.trigger, r.state, list(r.targets),
        r.created_at, r.lag_seconds,
    )
