"""Target status and the fence (``store/status.py`` translated): the writes that keep the engine
safe.

``cas_status`` writes a status only if ``status_version`` and ``target_generation`` are still
what the writer read (R-PASS-11) and never moves time backwards (R-PASS-14); ``fence`` is the
transaction before a submit (R-PASS-7): version / enabled / gate / claim re-checked, the step
moved to ``submitting`` and the status CAS'd — all or nothing.
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”
# * “A stored interval ahead of the clock: reported with its fix, cleared by one command or a new
#   version”

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from gps_dagster.domain.phases import Phase
from gps_dagster.store.memory.base import Conflict, DueRow, MemoryBase, locked, utc
from gps_dagster.store.records import TargetStatusRow
from gps_dagster.store.shapes import forward_ok


class StatusMixin(MemoryBase):
    @locked
    def get_status(self, schedule: str, deploy_id: str) -> TargetStatusRow | None:
        row = self._get_status(schedule, deploy_id)
        return self._status_out(row) if row is not None else None

    @locked
    def list_status(self, schedule: str | None = None) -> list[TargetStatusRow]:
        names = [schedule] if schedule is not None else sorted(self.status)
        return [
            self._status_out(rows[d])
            for n in names
            for rows in (self.status.get(n, {}),)
            for d in sorted(rows)
        ]

    @locked
    def statuses_for(self, schedules: Sequence[str]) -> dict[tuple[str, str], TargetStatusRow]:
        return {
            (n, d): self._status_out(rows[d])
            for n in sorted(set(schedules))
            for rows in (self.status.get(n, {}),)
            for d in sorted(rows)
        }  # key order, as SQLite

    def ensure_statuses(self, targets: Sequence[tuple[str, str, int]], *, now: datetime) -> None:
        """Create missing status rows (schedule, deploy, schedule version) in ``pending``, at
        once."""
        with self._tx():
            for schedule, deploy_id, version in targets:
                if self._get_status(schedule, deploy_id) is None:
                    self._set_status(
                        schedule, deploy_id, _pending(schedule, deploy_id, version, now)
                    )

    def ensure_status(
        self, schedule: str, deploy_id: str, *, schedule_version: int, now: datetime
    ) -> TargetStatusRow:
        """The target's status row, created in phase ``pending`` when missing."""
        with self._tx():
            row = self._get_status(schedule, deploy_id)
            if row is None:
                row = _pending(schedule, deploy_id, schedule_version, now)
                self._set_status(schedule, deploy_id, row)
            return self._status_out(row)

    def cas_status(
        self,
        seen: TargetStatusRow,
        *,
        now: datetime,
        events: Iterable[Mapping[str, Any]] = (),
        **changes: Any,
    ) -> TargetStatusRow | None:
        """Write ``changes`` if nobody wrote since ``seen``; None when the CAS lost."""
        try:
            with self._tx():
                return self._cas(seen, now, changes, events)
        except Conflict:
            return None

    def _cas(
        self,
        seen: TargetStatusRow,
        now: datetime,
        changes: Mapping[str, Any],
        events: Iterable[Mapping[str, Any]],
    ) -> TargetStatusRow:
        """``status._cas``: the status CAS and its events inside the caller's transaction."""
        values = dict(changes)
        values.setdefault("target_generation", seen.target_generation)
        values["status_version"] = seen.status_version + 1
        values["updated_at"] = now
        new_phase = values.get("phase", seen.phase)
        if new_phase != seen.phase:
            values["phase_since"] = now
        if not forward_ok(seen, values):
            raise Conflict
        current = self._get_status(seen.schedule, seen.deploy_id)
        if (
            current is None
            or current.status_version != seen.status_version
            or current.target_generation != seen.target_generation
        ):
            raise Conflict
        self._update_status(seen.schedule, seen.deploy_id, values)
        reason = values.get("reason", seen.reason)
        if new_phase != seen.phase or reason != seen.reason:
            self._event(
                now,
                seen.schedule,
                seen.deploy_id,
                "phase_changed",
                phase=new_phase,
                reason=reason,
                detail={"from": seen.phase, "fix": values.get("fix", seen.fix)},
            )
        for ev in events:
            self._event(
                now,
                seen.schedule,
                seen.deploy_id,
                ev["kind"],
                phase=ev.get("phase", new_phase),
                reason=ev.get("reason"),
                detail=ev.get("detail"),
            )
        got = self._get_status(seen.schedule, seen.deploy_id)
        assert got is not None
        return self._status_out(got)

    def clear_clock_skew(self, schedule: str, *, now: datetime, bound_s: float) -> list[str]:
        """Forget the intervals more than ``bound_s`` ahead of ``now`` (``clear_future_intervals``);
        the schedule is due at once."""
        ahead = now + timedelta(seconds=bound_s)
        with self._tx():
            cleared = []
            for deploy_id, row in sorted(self.status.get(schedule, {}).items()):
                if row.interval_start is None or row.interval_start <= ahead:
                    continue
                self._update_status(
                    schedule,
                    deploy_id,
                    {
                        "interval_start": None,
                        "interval_end": None,
                        "interval_writer": None,
                        "interval_writer_offset_s": None,
                        "status_version": row.status_version + 1,
                        "updated_at": now,
                    },
                )
                self._event(
                    now,
                    schedule,
                    deploy_id,
                    "clock_skew_cleared",
                    reason="operator",
                    detail={
                        "stored_interval_start": row.interval_start.isoformat(),
                        "cleared_at": now.isoformat(),
                    },
                )
                cleared.append(deploy_id)
            due = self.due.get(schedule)
            if cleared and due is not None:
                self._put(
                    self.due,
                    schedule,
                    DueRow(
                        due.name,
                        due.version,
                        due.spec_sha,
                        utc(now),
                        due.revision + 1,
                        due.claimed_by,
                        due.claimed_until,
                    ),
                )
        return cleared


def _pending(schedule: str, deploy_id: str, version: int, now: datetime) -> TargetStatusRow:
    at = utc(now)
    assert at is not None
    return TargetStatusRow(
        schedule,
        deploy_id,
        Phase.PENDING,
        None,
        None,
        None,
        0,
        0,
        version,
        None,
        None,
        None,
        None,
        None,
        at,
        None,
        at,
    )
