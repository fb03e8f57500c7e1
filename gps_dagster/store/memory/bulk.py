"""Many step writes, fences and plan openings, each batch one transaction (``store/bulk.py``
translated).

Items stay independent: one that lost its race is reported and changes nothing, the others are
written. The conditions are the SQL store's, checked on the rows as they stood when the batch
read them (the rows it locked there), not re-read after each item.
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”
# * “A batch of schedules shares its round trips”

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from gps_dagster.domain.step_state import UNSUBMITTED, PlanState, StepState
from gps_dagster.store.memory.base import DuplicateKey
from gps_dagster.store.memory.plans import PlansMixin
from gps_dagster.store.records import ActionRow, TargetStatusRow
from gps_dagster.store.shapes import (
    FINISHED,
    GATE_KEY,
    Draft,
    Fenced,
    StepWrite,
    event_values,
    fence_checks,
    finished_deltas,
    forward_ok,
    lag_deltas,
    same_row,
    status_move,
    transition_state,
)

StatusKey = tuple[str, str]


class BulkMixin(PlansMixin):
    def write_each(self, writes: Sequence[StepWrite], *, now: datetime) -> dict[str, str]:
        """Independent step writes, each with its dependents (``bulk.apply_writes``); the steps
        that moved -> transition id."""
        with self._tx():
            return self._apply_writes(writes, now)

    def _apply_writes(self, writes: Sequence[StepWrite], now: datetime) -> dict[str, str]:
        ids = {x.action_id for w in writes for x in (w, *w.dependents)}
        states = {i: self.actions[i].state for i in ids if i in self.actions}
        moved: list[tuple[StepWrite, ActionRow]] = []
        for head in writes:
            for i, w in enumerate((head, *head.dependents)):
                state = states.get(w.action_id)
                if state is None or state not in w.expect:
                    if i == 0:  # the group's step lost: nothing of the group is written
                        break
                    continue
                moved.append((w, self.actions[w.action_id]))
                states[w.action_id] = w.changes.get("state", state)
        if not moved:
            return {}
        for w, _ in moved:
            self._update_action(w.action_id, {"updated_at": now, **w.changes})
        current = self._read_statuses(
            [(r.schedule, r.deploy_id) for w, r in moved if w.status is not None]
        )
        status_rows: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        for w, r in moved:
            key = (r.schedule, r.deploy_id)
            cur = current.get(key)
            seen = w.status_seen or cur
            if (
                w.status is not None
                and seen is not None
                and seen.transition_id == r.transition_id
                and same_row(cur, seen)
                and cur is not None
                and forward_ok(cur, w.status)
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
                    schedule=r.schedule,
                    deploy_id=r.deploy_id,
                )
                for ev in w.events
            ]
        self._write_statuses(status_rows)
        for ev in events:
            self._event_row(ev)
        finished = [
            (r.step, w.changes["state"], w.changes.get("reason", r.reason))
            for w, r in moved
            if w.changes.get("state") in FINISHED
        ]
        self._add_totals(finished_deltas(finished))
        self._close_many({r.transition_id for w, r in moved if w.changes.get("state") in FINISHED})
        return {w.action_id: r.transition_id for w, r in moved}

    def _read_statuses(self, keys: Iterable[StatusKey]) -> dict[StatusKey, TargetStatusRow]:
        return {k: row for k in sorted(set(keys)) if (row := self._get_status(*k)) is not None}

    def _write_statuses(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for values in rows:
            schedule, deploy_id = values["schedule_name"], values["deploy_id"]
            self._update_status(
                schedule,
                deploy_id,
                {k: v for k, v in values.items() if k not in ("schedule_name", "deploy_id")},
            )

    def _close_many(self, transition_ids: Iterable[str]) -> None:
        """``bulk.close``: close every listed plan whose steps have all finished."""
        for tid in sorted(set(transition_ids)):
            steps = self.by_transition.get(tid, {})
            closed = transition_state(self.actions[a].state for a in steps) if steps else None
            row = self.transitions.get(tid)
            if closed is not None and row is not None and row.state == PlanState.OPEN:
                self._set_transition(tid, replace(row, state=closed))

    def fence_many(
        self, items: Sequence[tuple[Any, TargetStatusRow, Mapping[str, Any]]], *, now: datetime
    ) -> dict[str, Fenced]:
        """The fence of many steps (``bulk.fence_many``)."""
        with self._tx():
            return self._fence_many(items, now)

    def _fence_many(
        self, items: Sequence[tuple[Any, TargetStatusRow, Mapping[str, Any]]], now: datetime
    ) -> dict[str, Fenced]:
        gate = self.control.get(GATE_KEY)
        out: dict[str, Fenced] = {}
        passing = []
        for x, seen, changes in items:
            claim = self.claims.get(x.deploy_id)
            reason = fence_checks(
                x, self.schedules.get(x.schedule), gate, claim.schedule_name if claim else None
            )
            if reason is not None:
                out[x.id] = Fenced(False, reason)
            elif x.state == StepState.SUBMITTING:  # a resubmission: re-checked, not moved
                out[x.id] = Fenced(True, None, seen)
            else:
                passing.append((x, seen, changes))
        states = {x.id: self.actions[x.id].state for x, _, _ in passing if x.id in self.actions}
        current = self._read_statuses([(x.schedule, x.deploy_id) for x, _, _ in passing])
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
        for action_id in won:
            self._update_action(
                action_id, {"state": StepState.SUBMITTING, "submitted_at": now, "updated_at": now}
            )
        self._write_statuses(status_rows)
        for ev in events:
            self._event_row(ev)
        return out

    def open_many(self, drafts: Sequence[Draft], *, now: datetime) -> set[str]:
        """Open plans (``bulk.open_many``); the ids opened (none when a key was taken)."""
        try:
            with self._tx():
                return self._open_many(drafts, now)
        except DuplicateKey:  # the SQL store's IntegrityError: nothing written
            return set()

    def _open_many(self, drafts: Sequence[Draft], now: datetime) -> set[str]:
        existing = {d.transition.id for d in drafts if d.transition.id in self.transitions}
        current = self._read_statuses([_key(u.seen) for d in drafts for u in d.updates])
        winners: list[Draft] = []
        for d in drafts:
            if d.transition.id in existing:
                continue
            cur = [current.get(_key(u.seen)) for u in d.updates]
            if all(
                c is not None and same_row(c, u.seen) and forward_ok(c, u.changes)
                for c, u in zip(cur, d.updates, strict=True)
            ):
                winners.append(d)
                existing.add(d.transition.id)
        if not winners:
            return set()
        for d in winners:
            self._insert_transition(d.transition.columns())
        for d in winners:
            for step in d.steps:  # a taken key fails the batch, as the SQL insert does
                self._insert_action(step.columns())
        for d in winners:
            if d.supersede:
                self._supersede(d.transition.schedule, d.supersede, d.transition.id, now)
        status_rows: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        for d in winners:
            for u in d.updates:
                values, _row, evs = status_move(u.seen, now, u.changes, u.events)
                status_rows.append(values)
                events += evs
        self._write_statuses(status_rows)
        for ev in events:
            self._event_row(ev)
        self._add_totals(lag_deltas([d.transition.lag_seconds for d in winners]))
        return {d.transition.id for d in winners}


def _key(seen: TargetStatusRow) -> StatusKey:
    return seen.schedule, seen.deploy_id


__all__ = ["BulkMixin", "DuplicateKey"]
