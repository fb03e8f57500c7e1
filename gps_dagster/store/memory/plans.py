"""Transitions and their steps (``store/plans.py`` translated): the plans' reads, the
superseding of older plans' unsubmitted steps and the closing of a plan, the writers' parts
(``bulk.py`` here holds the writers, each one transaction: R-PASS-16).
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”
# * “Transition states”

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from gps_dagster.domain.step_state import PlanState, StepState
from gps_dagster.store.memory.base import locked
from gps_dagster.store.memory.status import StatusMixin
from gps_dagster.store.records import ActionRow, TransitionRow
from gps_dagster.store.shapes import (
    IN_FLIGHT_STATES,
    UNSUBMITTED,
    finished_deltas,
    transition_state,
)

_IN_FLIGHT = frozenset(IN_FLIGHT_STATES)


class PlansMixin(StatusMixin):
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
        self._add_totals(
            finished_deltas((r.step, StepState.SUPERSEDED, "superseded") for r in rows)
        )
        for r in rows:
            self._update_action(
                r.id,
                {
                    "state": StepState.SUPERSEDED,
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
        if closed is not None and row is not None and row.state == PlanState.OPEN:
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
