"""Transitions and their steps: opening a plan and moving its steps, each in ONE transaction.

Atomicity is the point of this module (SPEC R-PASS-16). A crash between two
writes used to leave a step ``failed`` beside a target still ``releasing``,
a dependent ``pending`` forever and a transition ``open`` forever. Here:

* ``open_transition`` inserts a plan, moves its targets' status, supersedes
  the older plans' steps that never reached the core and closes those plans —
  all or nothing (a plan that loses its race supersedes nothing);
* ``write_steps`` moves a step (and, for a failure, its cancelled dependents),
  their targets' status and events, and closes the transition when every step
  has finished — all or nothing.
"""
# Decisions embodied here (docs/decisions.md):
# * “Transition states”

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from gps_dagster.store import metric_totals
from gps_dagster.store import tables as t
from gps_dagster.store.records import ActionRow, TargetStatusRow, TransitionRow
from gps_dagster.store.shapes import FINISHED, UNSUBMITTED, StepWrite, transition_state
from gps_dagster.store.status import CasConflict, _action, _cas, _get_status, _transition

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

__all__ = ["FINISHED", "UNSUBMITTED", "PlansMixin", "StepWrite", "transition_state"]


class PlansMixin:
    engine: Engine

    def open_transition(
        self,
        transition: Mapping[str, Any],
        steps: Sequence[Mapping[str, Any]],
        updates: list[tuple[TargetStatusRow, dict[str, Any]]],
        *,
        now: datetime,
        supersede: Sequence[str] = (),
    ) -> bool:
        """Insert a plan and its steps, move its targets' status, supersede older plans, atomically.

        ``supersede``: deploys of this plan whose older unsubmitted steps are dropped (and
        whose older plans close when nothing of theirs is left). False when another engine
        opened the same plan first or a status CAS lost: nothing was written.
        """
        try:
            with self.engine.begin() as conn:
                conn.execute(t.transitions.insert().values(**transition))
                metric_totals.count_lags(conn, [transition.get("lag_seconds")])
                if steps:
                    conn.execute(t.actions.insert(), [dict(s) for s in steps])
                if supersede:  # steps before statuses, as in write_steps: no lock-order deadlock
                    schedule, tid = str(transition["schedule_name"]), str(transition["id"])
                    _supersede(conn, schedule, supersede, tid, now)
                for seen, changes in updates:
                    _cas(conn, seen, now, changes, changes.pop("_events", ()))
                metric_totals.flush(conn)
        except (IntegrityError, CasConflict):
            return False
        return True

    def write_steps(self, writes: Sequence[StepWrite], *, now: datetime) -> bool:
        """Apply ``writes`` in one transaction; False (nothing written) when the first lost its CAS.

        The first write is the step being decided; the others (dependents cancelled with
        it) are applied each when its own CAS holds. Every transition touched is closed
        when all its steps have finished.
        """
        try:
            with self.engine.begin() as conn:
                _lock_actions(conn, [w.action_id for w in writes])
                touched: set[str] = set()
                for index, w in enumerate(writes):
                    moved = _write_step(conn, w, now)
                    if moved is None and index == 0:
                        raise CasConflict
                    if moved is not None:
                        touched.add(moved)
                for transition_id in sorted(touched):
                    _close(conn, transition_id)
                metric_totals.flush(conn)
        except CasConflict:
            return False
        return True

    def open_plans(self, schedules: Sequence[str]) -> list[tuple[TransitionRow, list[ActionRow]]]:
        """The open plans of these schedules with all their steps (two indexed reads)."""
        tr, a = t.transitions, t.actions
        plans: dict[str, TransitionRow] = {}
        steps: dict[str, list[ActionRow]] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(schedules), 1000):
                chunk = list(schedules[i : i + 1000])
                query = sa.select(tr).where(tr.c.schedule_name.in_(chunk), tr.c.state == "open")
                plans.update({r.id: _transition(r) for r in conn.execute(query)})
            ids = sorted(plans)
            for i in range(0, len(ids), 1000):
                query = sa.select(a).where(a.c.transition_id.in_(ids[i : i + 1000]))
                for r in conn.execute(query.order_by(a.c.created_at, a.c.seq)):
                    steps.setdefault(r.transition_id, []).append(_action(r))
        ordered = sorted(plans.values(), key=lambda x: (x.created_at, x.id))
        return [(p, steps.get(p.id, [])) for p in ordered]

    def get_transition(self, transition_id: str) -> TransitionRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(t.transitions).where(t.transitions.c.id == transition_id)
            ).first()
        return _transition(row) if row is not None else None

    def list_transitions(
        self, schedule: str | None = None, *, states: Iterable[str] | None = None
    ) -> list[TransitionRow]:
        query = sa.select(t.transitions).order_by(t.transitions.c.created_at, t.transitions.c.id)
        if schedule is not None:
            query = query.where(t.transitions.c.schedule_name == schedule)
        if states is not None:
            query = query.where(t.transitions.c.state.in_(list(states)))
        with self.engine.connect() as conn:
            return [_transition(r) for r in conn.execute(query).all()]

    def close_transition(self, transition_id: str) -> None:
        """Close the plan if every step finished (idempotent)."""
        with self.engine.begin() as conn:
            _close(conn, transition_id)

    def get_action(self, action_id: str) -> ActionRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.actions).where(t.actions.c.id == action_id)).first()
        return _action(row) if row is not None else None

    def actions_by_id(self, ids: Sequence[str]) -> dict[str, ActionRow]:
        """These steps' rows in one read (chunked); unknown ids are absent."""
        out: dict[str, ActionRow] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(ids), 1000):
                query = sa.select(t.actions).where(t.actions.c.id.in_(list(ids[i : i + 1000])))
                out.update({r.id: _action(r) for r in conn.execute(query)})
        return out

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

    def update_action(
        self, action_id: str, *, expect: Iterable[str], now: datetime, **changes: Any
    ) -> bool:
        """CAS on the action state: only moves an action that is still in ``expect``."""
        with self.engine.begin() as conn:
            return bool(
                conn.execute(
                    t.actions.update()
                    .where(t.actions.c.id == action_id, t.actions.c.state.in_(list(expect)))
                    .values(updated_at=now, **changes)
                ).rowcount
            )


def _write_step(conn: Connection, w: StepWrite, now: datetime) -> str | None:
    """One step write inside the caller's transaction; its transition id, or None if it lost."""
    a = t.actions
    row = conn.execute(sa.select(a).where(a.c.id == w.action_id).with_for_update()).first()
    if row is None or row.state not in w.expect:
        return None
    conn.execute(a.update().where(a.c.id == w.action_id).values(updated_at=now, **w.changes))
    state = w.changes.get("state")
    if state in FINISHED and row.state not in FINISHED:
        metric_totals.count_finished(conn, [(row.step, state, w.changes.get("reason", row.reason))])
    if w.status is not None:
        seen = w.status_seen or _locked_status(conn, row.schedule_name, row.deploy_id)
        if seen is not None and seen.transition_id == row.transition_id:
            try:
                _cas(conn, seen, now, dict(w.status), w.events)
                return str(row.transition_id)
            except CasConflict:  # someone wrote since ``status_seen``: theirs is newer and stays
                pass
    for ev in w.events:
        conn.execute(
            t.events.insert().values(
                at=now,
                schedule_name=row.schedule_name,
                deploy_id=row.deploy_id,
                kind=ev["kind"],
                phase=ev.get("phase"),
                reason=ev.get("reason"),
                detail=ev.get("detail"),
            )
        )
    return str(row.transition_id)


def _lock_actions(conn: Connection, ids: Sequence[str]) -> None:
    """Lock the steps first, in id order (PostgreSQL): every writer takes steps before statuses."""
    a = t.actions
    conn.execute(
        sa.select(a.c.id).where(a.c.id.in_(sorted(set(ids)))).order_by(a.c.id).with_for_update()
    )


def _locked_status(conn: Connection, schedule: str, deploy_id: str) -> TargetStatusRow | None:
    """The status row, locked until the transaction ends (PostgreSQL; SQLite serialises writers)."""
    ts = t.target_status
    locked = conn.execute(
        sa.select(ts.c.status_version)
        .where(ts.c.schedule_name == schedule, ts.c.deploy_id == deploy_id)
        .with_for_update()
    ).first()
    return None if locked is None else _get_status(conn, schedule, deploy_id)


def _supersede(
    conn: Connection, schedule: str, deploy_ids: Sequence[str], keep: str, now: datetime
) -> None:
    """Drop older unsubmitted steps of these deploys and close the plans left with nothing to do."""
    a = t.actions
    where = (
        a.c.schedule_name == schedule,
        a.c.deploy_id.in_(list(deploy_ids)),
        a.c.state.in_(UNSUBMITTED),
        a.c.transition_id != keep,
    )
    rows = conn.execute(
        sa.select(a.c.id, a.c.transition_id, a.c.step)
        .where(*where)
        .order_by(a.c.id)
        .with_for_update()
    ).all()
    older = {r.transition_id for r in rows}
    if not older:
        return
    metric_totals.count_finished(conn, [(r.step, "superseded", "superseded") for r in rows])
    conn.execute(
        a.update()
        .where(*where)
        .values(state="superseded", reason="superseded", finished_at=now, updated_at=now)
    )
    for transition_id in sorted(older):
        _close(conn, transition_id)


def _close(conn: Connection, transition_id: str) -> None:
    states = conn.execute(
        sa.select(t.actions.c.state).where(t.actions.c.transition_id == transition_id)
    ).scalars()
    closed = transition_state(states)
    if closed is not None:
        tr = t.transitions
        conn.execute(
            tr.update().where(tr.c.id == transition_id, tr.c.state == "open").values(state=closed)
        )
