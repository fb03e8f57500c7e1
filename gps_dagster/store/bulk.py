"""Many step writes, fences and plan openings, each batch in ONE transaction (decision "A batch of
schedules shares its round trips.").

At a boundary where a thousand schedules flip together, one transaction per
step (and a dozen statements in each) is what made a storm take two minutes.
Here a batch locks its rows once (steps in id order, then statuses in key
order: the order every writer of ``status.py`` uses, so no
lock-order deadlock) and checks each item's CAS in Python against the locked
rows — the same conditions the single-item writers put in their ``WHERE`` —
then writes the winners with a few set-based statements. Items stay
independent: one that lost its race is reported and changes nothing; the
others are written. An item is a group where it must be (decision "The store
writes steps in groups and opens plans in one form."): a step with the
dependents cancelled with it, a plan with the older steps it supersedes.
"""
# Decisions embodied here (docs/decisions.md):
# * “One step executor: a step is a batch of one”
# * “A batch of schedules shares its round trips”
# * “The sim's storm path costs statements, not an algorithm: cut them”
# * “The store writes steps in groups and opens plans in one form”

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from gps_dagster.domain.step_state import PlanState, StepState
from gps_dagster.store import metric_totals
from gps_dagster.store import tables as t
from gps_dagster.store.plans import supersede
from gps_dagster.store.records import TargetStatusRow
from gps_dagster.store.shapes import (
    FINISHED,
    STATUS_FIELDS,
    UNSUBMITTED,
    Draft,
    Fenced,
    StepWrite,
    event_values,
    fence_checks,
    forward_ok,
    same_row,
    status_move,
    transition_state,
)
from gps_dagster.store.status import _status

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

CHUNK = 500
StatusKey = tuple[str, str]
_FIELDS = STATUS_FIELDS


__all__ = ["BulkMixin", "Draft", "Fenced", "same_row", "status_move"]


class BulkMixin:
    """The store's batch writers, each ONE transaction."""

    engine: Engine

    def write_each(self, writes: Sequence[StepWrite], *, now: datetime) -> dict[str, str]:
        """Independent step writes (``apply_writes``); the steps that moved -> transition id."""
        with self.engine.begin() as conn:
            return apply_writes(conn, writes, now)

    def fence_many(
        self, items: Sequence[tuple[Any, TargetStatusRow, Mapping[str, Any]]], *, now: datetime
    ) -> dict[str, Fenced]:
        """The fence of many steps (``fence_many``)."""
        with self.engine.begin() as conn:
            return fence_many(conn, items, now)

    def open_many(self, drafts: Sequence[Draft], *, now: datetime) -> set[str]:
        """Open plans (``open_many``); the ids opened (none when a key was taken meanwhile)."""
        try:
            with self.engine.begin() as conn:
                return open_many(conn, drafts, now)
        except IntegrityError:  # another engine opened the same plan first: nothing written
            return set()


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def update_rows(
    conn: Connection, table: sa.Table, keys: tuple[str, ...], rows: Sequence[Mapping[str, Any]]
) -> None:
    """Per-row UPDATEs matched on ``keys``: one statement per column set and chunk on PostgreSQL."""
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(sorted(k for k in row if k not in keys)), []).append(row)
    for cols, items in groups.items():
        if conn.dialect.name != "postgresql" or len(items) == 1:
            for row in items:  # SQLite runs in process: a statement per row costs microseconds
                where = [table.c[k] == row[k] for k in keys]
                conn.execute(table.update().where(*where).values(**{c: row[c] for c in cols}))
            continue
        for part in chunks(items):
            conn.execute(_unnest_update(table, keys, cols), _arrays(table, (*keys, *cols), part))


def _unnest_update(table: sa.Table, keys: tuple[str, ...], cols: tuple[str, ...]) -> sa.Update:
    """``UPDATE table SET c = v.c FROM unnest(:p_k, :p_c, ...) AS v(k, c, ...) WHERE key = v.key``.

    The rows travel as one array parameter per column, so the statement text depends only on
    the table and the column set: compiled once and cached (a ``VALUES`` list of literals was
    compiled again for every chunk, ~50 ms each).
    """
    names = (*keys, *cols)
    arrays = [
        sa.cast(sa.bindparam(f"p_{n}", type_=ARRAY(table.c[n].type)), ARRAY(table.c[n].type))
        for n in names
    ]
    v = sa.func.unnest(*arrays).table_valued(*names).render_derived(name="v")
    return (
        table.update()
        .where(*(table.c[k] == v.c[k] for k in keys))
        .values(**{c: v.c[c] for c in cols})
    )


def _arrays(
    table: sa.Table, names: tuple[str, ...], rows: Sequence[Mapping[str, Any]]
) -> dict[str, list[Any]]:
    """One list per column (each item bound through the column's own type: JSON, UTC times)."""
    return {f"p_{n}": [r[n] for r in rows] for n in names}


def lock_statuses(conn: Connection, keys: Iterable[StatusKey]) -> dict[StatusKey, TargetStatusRow]:
    """The status rows of ``keys``, locked until the transaction ends (in key order)."""
    ts = t.target_status
    wanted = sorted(set(keys))
    out: dict[StatusKey, TargetStatusRow] = {}
    for part in chunks(wanted):
        cond = sa.tuple_(ts.c.schedule_name, ts.c.deploy_id).in_(list(part))
        query = sa.select(ts).where(cond).order_by(ts.c.schedule_name, ts.c.deploy_id)
        for row in conn.execute(query.with_for_update()):
            out[(row.schedule_name, row.deploy_id)] = _status(row)
    return out


def insert_events(conn: Connection, events: Sequence[Mapping[str, Any]]) -> None:
    for part in chunks(events):
        conn.execute(t.events.insert(), [dict(e) for e in part])


def apply_writes(conn: Connection, writes: Sequence[StepWrite], now: datetime) -> dict[str, str]:
    """Apply independent step writes (each with its ``dependents``, a group written all or
    nothing); returns the moved steps (id -> transition id).

    A step moves only from one of its ``expect`` states; its status changes only while the
    target is still on the step's transition, nobody wrote since ``status_seen`` and time
    moves forward (R-PASS-14), else the events are kept alone; a dependent is written only
    when its group's step moved; every transition whose steps all finished is closed.
    """
    a = t.actions
    ids = sorted({x.action_id for w in writes for x in (w, *w.dependents)})
    rows: dict[str, Any] = {}
    for part in chunks(ids):
        query = sa.select(
            a.c.id,
            a.c.state,
            a.c.schedule_name,
            a.c.deploy_id,
            a.c.transition_id,
            a.c.step,
            a.c.reason,
        )
        query = query.where(a.c.id.in_(list(part))).order_by(a.c.id).with_for_update()
        rows.update({r.id: SimpleNamespace(**r._mapping) for r in conn.execute(query)})
    moved: list[tuple[StepWrite, Any]] = []
    for head in writes:
        for i, w in enumerate((head, *head.dependents)):
            row = rows.get(w.action_id)
            if row is None or row.state not in w.expect:
                if i == 0:  # the group's step lost: nothing of the group is written
                    break
                continue
            moved.append((w, row))
            rows[w.action_id] = SimpleNamespace(
                **{**vars(row), "state": w.changes.get("state", row.state)}
            )
    if not moved:
        return {}
    update_rows(
        conn, a, ("id",), [{"id": w.action_id, "updated_at": now, **w.changes} for w, _ in moved]
    )
    current = lock_statuses(
        conn, [(r.schedule_name, r.deploy_id) for w, r in moved if w.status is not None]
    )
    status_rows: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for w, r in moved:
        key = (r.schedule_name, r.deploy_id)
        cur = current.get(key)
        seen = w.status_seen or cur
        if (
            w.status is not None
            and seen is not None
            and seen.transition_id == r.transition_id
            and same_row(cur, seen)
            and forward_ok(cur, w.status)  # type: ignore[arg-type]
        ):
            values, current[key], evs = status_move(seen, now, w.status, w.events)
            status_rows.append(values)
            events += evs
            continue
        events += [
            event_values(
                None,
                now,
                ev["kind"],
                ev.get("phase"),
                ev.get("reason"),
                ev.get("detail"),
                schedule=r.schedule_name,
                deploy_id=r.deploy_id,
            )
            for ev in w.events
        ]
    update_rows(conn, t.target_status, ("schedule_name", "deploy_id"), status_rows)
    insert_events(conn, events)
    finished = [
        (r.step, w.changes["state"], w.changes.get("reason", r.reason))
        for w, r in moved
        if w.changes.get("state") in FINISHED
    ]
    metric_totals.count_finished(conn, finished)
    close(conn, {str(r.transition_id) for w, r in moved if w.changes.get("state") in FINISHED})
    metric_totals.flush(conn)
    return {w.action_id: str(r.transition_id) for w, r in moved}


def close(conn: Connection, transition_ids: Iterable[str]) -> None:
    """Close every listed plan whose steps have all finished (one read, one write per state)."""
    ids = sorted(set(transition_ids))
    if not ids:
        return
    a, tr = t.actions, t.transitions
    states: dict[str, list[str]] = {}
    for part in chunks(ids):
        rows = conn.execute(
            sa.select(a.c.transition_id, a.c.state).where(a.c.transition_id.in_(list(part)))
        )
        for tid, state in rows:
            states.setdefault(tid, []).append(state)
    by_state: dict[PlanState, list[str]] = {}
    for tid, seen in states.items():
        closed = transition_state(seen)
        if closed is not None:
            by_state.setdefault(closed, []).append(tid)
    for closed, tids in sorted(by_state.items()):
        for part in chunks(tids):
            conn.execute(
                tr.update()
                .where(tr.c.id.in_(list(part)), tr.c.state == PlanState.OPEN)
                .values(state=closed)
            )


def fence_many(
    conn: Connection,
    items: Sequence[tuple[Any, TargetStatusRow, Mapping[str, Any]]],
    now: datetime,
) -> dict[str, Fenced]:
    """The fence (R-PASS-7) of one step or many: the store has no other.

    ``items``: (step, status it was planned on, status changes). Schedule rows are read
    ``FOR SHARE`` and version / enabled / gate / claim re-checked; the steps still
    ``pending`` / ``capacity_wait`` and whose status nobody wrote since move to ``submitting``.
    A step read ``submitting`` (a resubmission) is only re-checked: it passes with ``seen``.
    """
    s, a = t.schedules, t.actions
    names = sorted({x.schedule for x, _, _ in items})
    scheds: dict[str, Any] = {}
    for part in chunks(names):
        query = sa.select(s.c.name, s.c.version, s.c.enabled).where(s.c.name.in_(list(part)))
        scheds.update(
            {r.name: r for r in conn.execute(query.order_by(s.c.name).with_for_update(read=True))}
        )
    gate = conn.execute(
        sa.select(t.control.c.value).where(t.control.c.key == "execution")
    ).scalar_one_or_none()
    owners: dict[str, str] = {}
    deploys = sorted({x.deploy_id for x, _, _ in items})
    for part in chunks(deploys):
        tc = t.target_claims
        rows = conn.execute(
            sa.select(tc.c.deploy_id, tc.c.schedule_name).where(tc.c.deploy_id.in_(list(part)))
        )
        owners.update({str(d): str(s) for d, s in rows})
    out: dict[str, Fenced] = {}
    passing = []
    for x, seen, changes in items:
        reason = fence_checks(x, scheds.get(x.schedule), gate, owners.get(x.deploy_id))
        if reason is not None:
            out[x.id] = Fenced(False, reason)
        elif x.state == StepState.SUBMITTING:  # a resubmission (R-PASS-10): re-checked, not moved
            out[x.id] = Fenced(True, None, seen)
        else:
            passing.append((x, seen, changes))
    states: dict[str, str] = {}
    for part in chunks(sorted(x.id for x, _, _ in passing)):
        query = sa.select(a.c.id, a.c.state).where(a.c.id.in_(list(part))).order_by(a.c.id)
        states.update(dict(conn.execute(query.with_for_update()).all()))  # type: ignore[arg-type]
    current = lock_statuses(conn, [(x.schedule, x.deploy_id) for x, _, _ in passing])
    status_rows: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    won: list[str] = []
    for x, seen, changes in passing:
        key = (x.schedule, x.deploy_id)
        if states.get(x.id) not in UNSUBMITTED or not same_row(current.get(key), seen):
            out[x.id] = Fenced(False, "lost_race")
            continue
        values, current[key], evs = status_move(seen, now, {**changes, "last_action_id": x.id})
        status_rows.append(values)
        events += evs
        won.append(x.id)
        out[x.id] = Fenced(True, None, current[key])
    for part in chunks(won):
        conn.execute(
            a.update()
            .where(a.c.id.in_(list(part)))
            .values(state=StepState.SUBMITTING, submitted_at=now, updated_at=now)
        )
    update_rows(conn, t.target_status, ("schedule_name", "deploy_id"), status_rows)
    insert_events(conn, events)
    return out


def open_many(conn: Connection, drafts: Sequence[Draft], now: datetime) -> set[str]:
    """Open the plans whose status CASes all hold; returns their transition ids.

    Each plan, atomically: its transition and steps inserted, its targets' status moved and,
    for its ``supersede`` deploys, the older plans' unsubmitted steps dropped (those plans
    closed when nothing of theirs is left). A plan that loses its race supersedes nothing.
    """
    tr = t.transitions
    tids = [d.transition.id for d in drafts]
    existing: set[str] = set()
    for part in chunks(tids):
        existing.update(conn.execute(sa.select(tr.c.id).where(tr.c.id.in_(list(part)))).scalars())
    for d in sorted(drafts, key=lambda d: d.transition.id):
        if d.supersede:  # steps before statuses, as every writer: no lock-order deadlock
            _lock_unsubmitted(conn, d.transition.schedule, d.supersede)
    current = lock_statuses(conn, [_key(u.seen) for d in drafts for u in d.updates])
    winners: list[Draft] = []
    for d in drafts:
        if d.transition.id in existing:
            continue
        cur = [current.get(_key(u.seen)) for u in d.updates]
        if all(
            same_row(c, u.seen) and forward_ok(c, u.changes)  # type: ignore[arg-type]
            for c, u in zip(cur, d.updates, strict=True)
        ):
            winners.append(d)
            existing.add(d.transition.id)
    if not winners:
        return set()
    for part in chunks(winners):
        conn.execute(tr.insert(), [d.transition.columns() for d in part])
    steps = [s.columns() for d in winners for s in d.steps]
    for part in chunks(steps):
        conn.execute(t.actions.insert(), list(part))
    for d in winners:
        if d.supersede:
            supersede(conn, d.transition.schedule, d.supersede, d.transition.id, now)
    status_rows: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for d in winners:
        for u in d.updates:
            values, _row, evs = status_move(u.seen, now, u.changes, u.events)
            status_rows.append(values)
            events += evs
    update_rows(conn, t.target_status, ("schedule_name", "deploy_id"), status_rows)
    insert_events(conn, events)
    metric_totals.count_lags(conn, [d.transition.lag_seconds for d in winners])
    metric_totals.flush(conn)
    return {d.transition.id for d in winners}


def _key(seen: TargetStatusRow) -> StatusKey:
    return seen.schedule, seen.deploy_id


def _lock_unsubmitted(conn: Connection, schedule: str, deploy_ids: Sequence[str]) -> None:
    """Lock the unsubmitted steps of these deploys (in id order) that a plan may supersede."""
    a = t.actions
    conn.execute(
        sa.select(a.c.id)
        .where(
            a.c.schedule_name == schedule,
            a.c.deploy_id.in_(list(deploy_ids)),
            a.c.state.in_(UNSUBMITTED),
        )
        .order_by(a.c.id)
        .with_for_update()
    )
