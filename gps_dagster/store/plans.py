"""Transitions and their steps: the plans' reads and the closing of a plan.

Atomicity is the point of the writers (SPEC R-PASS-16). A crash between two
writes used to leave a step ``failed`` beside a target still ``releasing``,
a dependent ``pending`` forever and a transition ``open`` forever. The writers
are the batch ones (``bulk.py``), each ONE transaction:

* ``open_many`` inserts plans, moves their targets' status, supersedes
  the older plans' steps that never reached the core (``supersede`` here) and
  closes those plans — all or nothing per plan (a plan that loses its race
  supersedes nothing);
* ``write_each`` moves steps (a step with its cancelled dependents all or
  nothing), their targets' status and events, and closes every transition
  whose steps have all finished (``close`` there, ``_close`` here).
"""
# Decisions embodied here (docs/decisions.md):
# * “Transition states”

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from gps_dagster.domain.step_state import PlanState, StepState
from gps_dagster.store import metric_totals
from gps_dagster.store import tables as t
from gps_dagster.store.records import ActionRow, TransitionRow
from gps_dagster.store.shapes import FINISHED, UNSUBMITTED, StepWrite, transition_state
from gps_dagster.store.status import _action, _transition

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

__all__ = ["FINISHED", "UNSUBMITTED", "PlansMixin", "StepWrite", "transition_state"]


class PlansMixin:
    engine: Engine

    def open_plans(self, schedules: Sequence[str]) -> list[tuple[TransitionRow, list[ActionRow]]]:
        """The open plans of these schedules with all their steps (two indexed reads)."""
        tr, a = t.transitions, t.actions
        plans: dict[str, TransitionRow] = {}
        steps: dict[str, list[ActionRow]] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(schedules), 1000):
                chunk = list(schedules[i : i + 1000])
                query = sa.select(tr).where(
                    tr.c.schedule_name.in_(chunk), tr.c.state == PlanState.OPEN
                )
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


def supersede(
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
    metric_totals.count_finished(conn, [(r.step, StepState.SUPERSEDED, "superseded") for r in rows])
    conn.execute(
        a.update()
        .where(*where)
        .values(state=StepState.SUPERSEDED, reason="superseded", finished_at=now, updated_at=now)
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
            tr.update()
            .where(tr.c.id == transition_id, tr.c.state == PlanState.OPEN)
            .values(state=closed)
        )
