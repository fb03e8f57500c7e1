"""Transitions and their steps (``store/plans.py`` translated), each write one transaction.

``open_transition`` inserts a plan, supersedes the older plans' unsubmitted steps and moves its
targets' status, all or nothing (a taken id or a lost CAS: False, nothing written);
``write_steps`` moves a step and its dependents and closes every transition whose steps all
finished, or writes nothing when the first step lost its CAS (R-PASS-16).
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”
# * “Transition states”

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from gps_dagster.store.memory.base import Conflict, DuplicateKey, locked
from gps_dagster.store.memory.status import StatusMixin
from gps_dagster.store.records import ActionRow, TargetStatusRow, TransitionRow
from gps_dagster.store.shapes import (
    FINISHED,
    IN_FLIGHT_STATES,
    UNSUBMITTED,
    StepWrite,
    finished_deltas,
    lag_deltas,
    transition_state,
)

_IN_FLIGHT = frozenset(IN_FLIGHT_STATES)


class PlansMixin(StatusMixin):
    def open_transition(
        self,
        transition: Mapping[str, Any],
        steps: Sequence[Mapping[str, Any]],
        updates: list[tuple[TargetStatusRow, dict[str, Any]]],
        *,
        now: datetime,
        supersede: Sequence[str] = (),
    ) -> bool:
        """Insert a plan and its steps, move its targets' status, supersede older plans,
        atomically."""
        try:
            with self._tx():
                self._insert_transition(transition)
                self._add_totals(lag_deltas([transition.get("lag_seconds")]))
                for step in steps:
                    self._insert_action(step)
                if supersede:
                    self._supersede(
                        str(transition["schedule_name"]), supersede, str(transition["id"]), now
                    )
                for seen, changes in updates:
                    self._cas(seen, now, changes, changes.pop("_events", ()))
        except (DuplicateKey, Conflict):
            return False
        return True

    def write_steps(self, writes: Sequence[StepWrite], *, now: datetime) -> bool:
        """Apply ``writes`` in one transaction; False (nothing written) when the first lost its
        CAS."""
        try:
            with self._tx():
                touched: set[str] = set()
                for index, w in enumerate(writes):
                    moved = self._write_step(w, now)
                    if moved is None and index == 0:
                        raise Conflict
                    if moved is not None:
                        touched.add(moved)
                for transition_id in sorted(touched):
                    self._close(transition_id)
        except Conflict:
            return False
        return True

    def _write_step(self, w: StepWrite, now: datetime) -> str | None:
        """``plans._write_step``: one step write; its transition id, or None if it lost."""
        row = self.actions.get(w.action_id)
        if row is None or row.state not in w.expect:
            return None
        self._update_action(w.action_id, {"updated_at": now, **w.changes})
        state = w.changes.get("state")
        if state in FINISHED and row.state not in FINISHED:
            self._add_totals(
                finished_deltas([(row.step, str(state), w.changes.get("reason", row.reason))])
            )
        if w.status is not None:
            seen = w.status_seen or self._get_status(row.schedule, row.deploy_id)
            if seen is not None and seen.transition_id == row.transition_id:
                try:
                    self._cas(seen, now, dict(w.status), w.events)
                    return row.transition_id
                except Conflict:  # someone wrote since ``status_seen``: theirs is newer and stays
                    pass
        for ev in w.events:
            self._event(
                now,
                row.schedule,
                row.deploy_id,
                ev["kind"],
                phase=ev.get("phase"),
                reason=ev.get("reason"),
                detail=ev.get("detail"),
            )
        return row.transition_id

    def _supersede(
        self, schedule: str, deploy_ids: Sequence[str], keep: str, now: datetime
    ) -> None:
        """Drop older unsubmitted steps of these deploys and close the plans left with nothing to
        do."""
        wanted = set(deploy_ids)
        candidates = [self.actions[a] for a in self.in_flight]
        rows = sorted(
            (
                r
                for r in candidates
                if r.schedule == schedule
                and r.deploy_id in wanted
                and r.state in UNSUBMITTED
                and r.transition_id != keep
            ),
            key=lambda r: r.id,
        )
        older = {r.transition_id for r in rows}
        if not older:
            return
        self._add_totals(finished_deltas((r.step, "superseded", "superseded") for r in rows))
        for r in rows:
            self._update_action(
                r.id,
                {
                    "state": "superseded",
                    "reason": "superseded",
                    "finished_at": now,
                    "updated_at": now,
                },
            )
        for transition_id in sorted(older):
            self._close(transition_id)

    def _close(self, transition_id: str) -> None:
        closed = transition_state(
            self.actions[a].state for a in self.by_transition.get(transition_id, {})
        )
        row = self.transitions.get(transition_id)
        if closed is not None and row is not None and row.state == "open":
            self._set_transition(transition_id, replace(row, state=closed))

    def close_transition(self, transition_id: str) -> None:
        """Close the plan if every step finished (idempotent)."""
        with self._tx():
            self._close(transition_id)

    # -- reads -------------------------------------------------------------------------

    @locked
    def open_plans(self, schedules: Sequence[str]) -> list[tuple[TransitionRow, list[ActionRow]]]:
        """The open plans of these schedules with all their steps."""
        plans = [
            self.transitions[t]
            for n in dict.fromkeys(schedules)
            for t in self.open_by_schedule.get(n, {})
        ]
        out = []
        for plan in sorted(plans, key=lambda p: (p.created_at, p.id)):
            ids = sorted(self.by_transition.get(plan.id, {}), key=self._action_order)
            out.append(
                (self._transition_out(plan), [self._action_out(self.actions[a]) for a in ids])
            )
        return out

    @locked
    def get_transition(self, transition_id: str) -> TransitionRow | None:
        row = self.transitions.get(transition_id)
        return self._transition_out(row) if row is not None else None

    @locked
    def list_transitions(
        self, schedule: str | None = None, *, states: Iterable[str] | None = None
    ) -> list[TransitionRow]:
        ids: Iterable[str] = (
            self.tr_by_schedule.get(schedule, {}) if schedule is not None else self.transitions
        )
        wanted = set(states) if states is not None else None
        rows = [self.transitions[t] for t in ids]
        if wanted is not None:
            rows = [r for r in rows if r.state in wanted]
        return [self._transition_out(r) for r in sorted(rows, key=lambda r: (r.created_at, r.id))]

    @locked
    def get_action(self, action_id: str) -> ActionRow | None:
        row = self.actions.get(action_id)
        return self._action_out(row) if row is not None else None

    @locked
    def actions_by_id(self, ids: Sequence[str]) -> dict[str, ActionRow]:
        return {i: self._action_out(self.actions[i]) for i in sorted(set(ids)) if i in self.actions}

    @locked
    def list_actions(
        self,
        *,
        transition_id: str | None = None,
        schedule: str | None = None,
        deploy_id: str | None = None,
        states: Iterable[str] | None = None,
        schedules: Sequence[str] | None = None,
    ) -> list[ActionRow]:
        wanted = set(states) if states is not None else None
        names = set(schedules) if schedules is not None else None
        ids = self._candidates(transition_id, schedule, deploy_id, wanted, names)
        rows = [
            r
            for a in ids
            for r in (self.actions[a],)
            if (names is None or r.schedule in names)
            and (transition_id is None or r.transition_id == transition_id)
            and (schedule is None or r.schedule == schedule)
            and (deploy_id is None or r.deploy_id == deploy_id)
            and (wanted is None or r.state in wanted)
        ]
        rows.sort(key=lambda r: self._action_order(r.id))
        return [self._action_out(r) for r in rows]

    def _candidates(
        self,
        transition_id: str | None,
        schedule: str | None,
        deploy_id: str | None,
        states: set[str] | None,
        names: set[str] | None,
    ) -> Iterable[str]:
        """The smallest index that holds every step the filters can match."""
        if transition_id is not None:
            return list(self.by_transition.get(transition_id, {}))
        if states is not None and states <= _IN_FLIGHT:
            return list(self.in_flight)
        if schedule is not None:
            return list(self.by_schedule.get(schedule, {}))
        if deploy_id is not None:
            return list(self.by_deploy.get(deploy_id, {}))
        if names is not None:
            return [a for n in names for a in self.by_schedule.get(n, {})]
        return list(self.actions)

    def update_action(
        self, action_id: str, *, expect: Iterable[str], now: datetime, **changes: Any
    ) -> bool:
        """CAS on the action state: only moves an action that is still in ``expect``."""
        with self._tx():
            row = self.actions.get(action_id)
            if row is None or row.state not in set(expect):
                return False
            self._update_action(action_id, {"updated_at": now, **changes})
            return True
