"""The due index and its claims (``store/due.py`` translated).

Every schedule has one due row: when it next needs a pass and which replica claims it until
when. A claim skips rows another live claim holds and takes over expired ones; a visit writes
its next due only if nothing marked the row since it claimed it (``revision``).
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”
# * “Due work is found by index”
# * “Replicas share due work by claims, not by the pass lock”

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from gps_dagster.domain.step_state import StepState
from gps_dagster.store.memory.base import DueRow, MemoryBase, locked, utc
from gps_dagster.store.shapes import DueClaim, NextDue


def _free(row: DueRow, now: datetime) -> bool:
    return row.claimed_until is None or row.claimed_until <= now


def _claim(row: DueRow) -> DueClaim:
    return DueClaim(
        row.name, row.version, row.revision, row.due_at, row.claimed_by, row.claimed_until
    )


class DueMixin(MemoryBase):
    def _due_now(self, now: datetime) -> list[DueRow]:
        """Rows due at ``now`` that no live claim holds, earliest first (then by name)."""
        rows = [
            r
            for r in self.due.values()
            if r.due_at is not None and r.due_at <= now and _free(r, now)
        ]
        return sorted(rows, key=lambda r: (r.due_at, r.name))

    def claim_due(
        self, *, holder: str, now: datetime, limit: int, lease_s: float
    ) -> list[DueClaim]:
        """Claim up to ``limit`` schedules due at ``now`` that no live claim holds."""
        with self._tx():
            return self._claim_rows(
                [r.name for r in self._due_now(now)[:limit]], holder, now, lease_s
            )

    def claim_schedules(
        self, names: Sequence[str], *, holder: str, now: datetime, lease_s: float
    ) -> list[DueClaim]:
        """Claim these schedules (a sweep page) unless another replica holds them now."""
        with self._tx():
            picked = [
                n
                for n in dict.fromkeys(names)
                if (r := self.due.get(n)) is not None and (_free(r, now) or r.claimed_by == holder)
            ]
            return self._claim_rows(picked, holder, now, lease_s)

    def _claim_rows(
        self, names: Sequence[str], holder: str, now: datetime, lease_s: float
    ) -> list[DueClaim]:
        until = utc(now + timedelta(seconds=lease_s))
        out = []
        for name in names:
            row = replace(self.due[name], claimed_by=holder, claimed_until=until)
            self._put(self.due, name, row)
            out.append(DueClaim(row.name, row.version, row.revision, row.due_at, holder, until))
        return sorted(out, key=lambda c: c.name)

    def renew_claims(self, *, holder: str, now: datetime, lease_s: float) -> int:
        """The heartbeat: every claim ``holder`` still holds lasts ``lease_s`` from ``now``."""
        until = utc(now + timedelta(seconds=lease_s))
        with self._tx():
            mine = [
                r
                for r in self.due.values()
                if r.claimed_by == holder and r.claimed_until is not None
            ]
            for row in mine:
                self._put(self.due, row.name, replace(row, claimed_until=until))
            return len(mine)

    @locked
    def claimed_elsewhere_in_flight(self, *, holder: str, now: datetime, limit: int) -> list[str]:
        """Schedules another replica claims now that have a step accepted by the core."""
        accepted = {
            self.actions[a].schedule
            for a in self.in_flight
            if self.actions[a].state == StepState.ACCEPTED
        }
        names = sorted(
            r.name
            for r in self.due.values()
            if r.claimed_by is not None
            and r.claimed_by != holder
            and r.claimed_until is not None
            and r.claimed_until > now
            and r.name in accepted
        )
        return names[:limit]

    def hasten(self, deploy_ids: Sequence[str], *, now: datetime) -> list[str]:
        """Schedules with a step in flight on one of ``deploy_ids`` are due ``now`` (earlier
        only)."""
        if not deploy_ids:
            return []
        wanted = set(deploy_ids)
        at = utc(now)
        with self._tx():
            waiting = {
                self.actions[a].schedule
                for a in self.in_flight
                if self.actions[a].deploy_id in wanted
            }
            moved = []
            for name in sorted(waiting):
                row = self.due.get(name)
                if row is not None and (row.due_at is None or row.due_at > now):
                    self._put(self.due, name, replace(row, due_at=at, revision=row.revision + 1))
                    moved.append(name)
            return moved

    @locked
    def due_rows(self, names: Sequence[str]) -> dict[str, DueClaim]:
        """These schedules' due rows as they stand (a visit under the pass lock, no claim)."""
        return {n: _claim(r) for n in sorted(set(names)) if (r := self.due.get(n)) is not None}

    @locked
    def schedules_in_flight(self, names: Sequence[str]) -> set[str]:
        """Which of these schedules have a step that may still move."""
        wanted = set(names)
        return {s for a in self.in_flight if (s := self.actions[a].schedule) in wanted}

    def finish_due(self, visited: Iterable[NextDue], *, holder: str) -> None:
        """Write each visited schedule's next due (unless marked since) and drop the claims."""
        items = sorted(visited, key=lambda v: v.name)
        if not items:
            return
        with self._tx():
            for v in items:
                row = self.due.get(v.name)
                if row is not None and row.revision == v.revision:
                    self._put(self.due, v.name, replace(row, due_at=utc(v.due_at)))
            for v in items:
                row = self.due.get(v.name)
                if row is not None and row.claimed_by == holder:
                    self._put(self.due, v.name, replace(row, claimed_by=None, claimed_until=None))

    @locked
    def next_due(self, now: datetime) -> datetime | None:
        """The earliest instant any schedule needs a pass (claims count as busy until they end)."""
        dated = [r for r in self.due.values() if r.due_at is not None]
        first = min(
            (r.due_at for r in dated if _free(r, now) and r.due_at is not None), default=None
        )
        claimed = min(
            (
                r.claimed_until
                for r in dated
                if r.claimed_until is not None and r.claimed_until > now
            ),
            default=None,
        )
        found = [x for x in (first, claimed) if x is not None]
        return min(found) if found else None

    @locked
    def due_names(self, now: datetime, limit: int) -> list[str]:
        """Names of the schedules due at ``now`` that no live claim holds, earliest first."""
        return [r.name for r in self._due_now(now)[:limit]]

    @locked
    def upcoming_due(self, now: datetime, limit: int) -> list[tuple[datetime, str]]:
        """(due_at, name) of the next ``limit`` schedules due after ``now``, soonest first."""
        rows = sorted(
            (r.due_at, r.name) for r in self.due.values() if r.due_at is not None and r.due_at > now
        )
        return rows[:limit]

    @locked
    def due_at(self, name: str) -> datetime | None:
        row = self.due.get(name)
        return row.due_at if row is not None else None
