"""Events, the audit log, the pins, retention, learned durations and a scrape's figures.

``repository.py`` (events, audit), ``pins.py``, ``retention.py``, ``timings.py`` and
``readings.py`` translated. Event and audit ids are the last one's plus one, as SQLite's
``INTEGER PRIMARY KEY`` gives them; retention deletes only finished history nobody names.
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”
# * “A claim is pinned to the object, at first sight”
# * “Retention: 30 days, hourly, `db prune`”
# * “Ready-by: the lead is learned from finished steps, one lead per boundary”

from __future__ import annotations

import bisect
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from gps_dagster.domain.planner import Order
from gps_dagster.domain.step_state import PlanState, StepState
from gps_dagster.store.memory.base import MemoryBase, locked, utc
from gps_dagster.store.records import ActionRow, EventRow
from gps_dagster.store.shapes import (
    ACQUIRE_STEPS,
    BATCH,
    FINISHED,
    RELEASE_STEPS,
    SYSTEM_ACTOR,
    AuditRow,
    MetricReadings,
    Pruned,
    Totals,
)


class HistoryMixin(MemoryBase):
    # -- events and audit -----------------------------------------------------------

    def add_event(
        self, at: datetime, schedule: str | None, deploy_id: str | None, kind: str, **kw: Any
    ) -> None:
        with self._tx():
            self._event(at, schedule, deploy_id, kind, **kw)

    @locked
    def list_events(
        self, schedule: str | None = None, *, after_id: int = 0, limit: int = 100
    ) -> list[EventRow]:
        start = bisect.bisect_right(self.events, after_id, key=lambda e: e.id)
        out: list[EventRow] = []
        for row in self.events[start:]:
            if len(out) >= limit:
                break
            if schedule is None or row.schedule == schedule:
                out.append(self._event_out(row))
        return out

    def add_audit(
        self,
        *,
        at: datetime,
        actor: str,
        action: str,
        kind: str,
        name: str,
        scope: str | None = None,
        version: int | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Record a write that is not one store transaction (an apply-now pass)."""
        with self._tx():
            self._audit(
                at=at,
                actor=actor,
                action=action,
                kind=kind,
                name=name,
                scope=scope,
                version=version,
                detail=detail,
            )

    @locked
    def list_audit(
        self, *, after_id: int = 0, limit: int = 100, name: str | None = None
    ) -> list[AuditRow]:
        rows = [
            r
            for r in self.audit_rows
            if r.id > after_id and (name is None or r.object_name == name)
        ]
        return rows[:limit]

    # -- pins (R-K8S-8) ------------------------------------------------------------------

    @locked
    def pins_for(self, deploy_ids: Sequence[str]) -> dict[str, str | None]:
        """The pinned instance of each claimed deploy id (None: claimed, not pinned yet)."""
        return {
            d: c.instance for d in sorted(set(deploy_ids)) if (c := self.claims.get(d)) is not None
        }

    def pin(self, schedule: str, deploy_id: str, instance: str, *, now: datetime) -> str | None:
        """Pin ``schedule``'s claim of ``deploy_id`` to ``instance`` if it is not pinned yet."""
        with self._tx():
            claim = self.claims.get(deploy_id)
            if claim is None or claim.schedule_name != schedule:
                return None
            if claim.instance is None:
                claim = replace(claim, instance=instance, pinned_at=utc(now))
                self._put(self.claims, deploy_id, claim)
            return claim.instance

    def reclaim(
        self, schedule: str, deploy_id: str, *, now: datetime, actor: str = SYSTEM_ACTOR
    ) -> str | None:
        """Forget the pin of ``schedule``'s claim of ``deploy_id``; the schedule is due at once."""
        with self._tx():
            claim = self.claims.get(deploy_id)
            if claim is None or claim.schedule_name != schedule:
                raise KeyError(f"schedule {schedule!r} does not claim deploy {deploy_id!r}")
            self._put(self.claims, deploy_id, replace(claim, instance=None, pinned_at=None))
            detail = {"forgotten": claim.instance}
            self._event(now, schedule, deploy_id, "target_reclaimed", detail=detail)
            self._audit(
                at=now,
                actor=actor,
                action="target_reclaimed",
                kind="schedule",
                name=schedule,
                detail={"deploy_id": deploy_id, **detail},
            )
            due = self.due.get(schedule)
            if due is not None:
                self._put(
                    self.due, schedule, replace(due, due_at=utc(now), revision=due.revision + 1)
                )
        return claim.instance

    # -- retention --------------------------------------------------------------------------

    def prune(self, *, before: datetime, batch: int = BATCH) -> Pruned:
        """Delete the finished history created before ``before`` (``retention.prune``)."""
        with self._tx():
            named = {s.transition_id for rows in self.status.values() for s in rows.values()}
            last = {
                s.last_action
                for rows in self.status.values()
                for s in rows.values()
                if s.last_action
            }
            plans = steps = 0
            for tr in sorted(self.transitions.values(), key=lambda r: r.created_at):
                ids = list(self.by_transition.get(tr.id, {}))
                if (
                    tr.state == PlanState.OPEN
                    or tr.created_at >= before
                    or tr.id in named
                    or any(self.actions[a].state not in FINISHED or a in last for a in ids)
                ):
                    continue
                for action_id in ids:
                    self._set_action(action_id, None)
                self._set_transition(tr.id, None)
                plans, steps = plans + 1, steps + len(ids)
            kept = [e for e in self.events if e.at >= before]
            events = len(self.events) - len(kept)
            if events:
                old = self.events
                self.events = kept
                self._log(lambda: setattr(self, "events", old))
        return Pruned(transitions=plans, actions=steps, events=events)

    # -- learned durations (ready-by) ----------------------------------------------------------

    def _converged(self, deploy_id: str, steps: tuple[str, ...], limit: int) -> list[ActionRow]:
        rows = [
            r
            for a in self.converged.get(deploy_id, {})
            for r in (self.actions[a],)
            if r.step in steps
            and r.state == StepState.CONVERGED
            and r.accepted_at is not None
            and r.finished_at is not None
        ]
        rows.sort(key=lambda r: r.finished_at or r.created_at, reverse=True)
        return rows[:limit]

    @locked
    def start_durations(self, deploy_ids: Sequence[str], limit: int) -> dict[str, list[float]]:
        """The last ``limit`` start -> READY durations (seconds) of each deploy, newest first."""
        return {
            d: [
                (r.finished_at - r.accepted_at).total_seconds()  # type: ignore[operator]
                for r in self._converged(d, ACQUIRE_STEPS, limit)
            ]
            for d in deploy_ids
        }

    @locked
    def stop_durations(self, deploy_ids: Sequence[str], limit: int) -> dict[str, list[float]]:
        """The last ``limit`` stop -> GPUs-usable durations (seconds) of each deploy, newest
        first."""
        out: dict[str, list[float]] = {}
        for deploy_id in deploy_ids:
            figures = []
            for r in self._converged(deploy_id, RELEASE_STEPS, limit):
                assert r.accepted_at is not None and r.finished_at is not None
                follows = [
                    s.submitted_at
                    for a in self.by_transition.get(r.transition_id, {})
                    for s in (self.actions[a],)
                    if s.order == Order.ACQUIRE and s.submitted_at is not None
                ]
                usable = min(follows, default=None)
                end = usable if usable is not None and usable > r.accepted_at else r.finished_at
                figures.append((end - r.accepted_at).total_seconds())
            out[deploy_id] = figures
        return out

    # -- a scrape's figures ------------------------------------------------------------------------

    @locked
    def metric_readings(self, *, serving: bool = True) -> MetricReadings:
        totals: Totals = {}
        for (metric, labels), value in self.totals.items():
            totals.setdefault(metric, {})[tuple(json.loads(labels))] = float(value)
        rows = (
            []
            if not serving
            else [
                (
                    s.schedule,
                    s.deploy_id,
                    s.phase,
                    (s.detail or {}).get("observed_state") == "READY",
                )
                for name in sorted(self.status)
                for _, s in sorted(self.status[name].items())
            ]
        )
        counts = Counter((self.actions[a].step, self.actions[a].state) for a in self.in_flight)
        return MetricReadings(
            totals=totals,
            serving=tuple(rows),
            in_flight=tuple((step, state, n) for (step, state), n in sorted(counts.items())),
        )
