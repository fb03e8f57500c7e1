"""Schedules with their claims and due marks, the gate, the cursor, the pass lock, the clock.

``store/repository.py`` and ``store/locks.py`` (its SQLite lease) translated: an apply claims
every target in its transaction, so a ``target_owned`` refusal leaves nothing behind
(R-MODEL-6); an unchanged document keeps its version; a name deleted and created again
continues its version sequence past its plans and steps (R-MODEL-8); a delete with steps in
flight is refused unless forced; the gate fails closed.
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from types import TracebackType

from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.step_state import Gate, PlanState, StepState
from gps_dagster.store.errors import InvalidGate, ScheduleInFlight, ScheduleNotFound, TargetOwned
from gps_dagster.store.memory.base import (
    ClaimRow,
    DueRow,
    MemoryBase,
    SchedRow,
    column,
    locked,
    utc,
)
from gps_dagster.store.records import Deleted, ScheduleRecord
from gps_dagster.store.shapes import (
    CURSOR_KEY,
    GATE_KEY,
    GATES,
    REACHED_CORE,
    SYSTEM_ACTOR,
    UNSUBMITTED,
    check_expected,
    finished_deltas,
    spec_sha,
)

DELETED_FIX = "the schedule was deleted; the deploy is left as it is"


class MemoryLease:
    """The pass lock as the SQLite lease row: taken when free, expired or already this holder's."""

    def __init__(
        self, store: SchedulesMixin, name: str, *, holder: str, now: datetime, ttl_s: float
    ) -> None:
        self.store, self.name, self.holder, self.now, self.ttl_s = store, name, holder, now, ttl_s
        self.acquired = False

    def __enter__(self) -> MemoryLease:
        self.acquired = self.store._take_lease(self.name, self.holder, self.now, self.ttl_s)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def release(self) -> None:
        if not self.acquired:
            return
        self.acquired = False
        self.store._drop_lease(self.name, self.holder)


class SchedulesMixin(MemoryBase):
    # -- the clock and the lock ---------------------------------------------------

    def database_now(self) -> datetime:
        """The store's clock: the injected one (the SQL store on SQLite reads the host's)."""
        now = utc(self._clock.now())
        assert now is not None
        return now

    def lock(self, name: str, *, holder: str, now: datetime, ttl_s: float = 120.0) -> MemoryLease:
        """The pass lock (R-PASS-2) as a lease with an expiry."""
        return MemoryLease(self, name, holder=holder, now=now, ttl_s=ttl_s)

    def _take_lease(self, name: str, holder: str, now: datetime, ttl_s: float) -> bool:
        with self._tx():
            current = self.leases.get(name)
            if current is not None and current[0] != holder and current[1] > now:
                return False
            self._put(self.leases, name, (holder, now + timedelta(seconds=ttl_s)))
            return True

    def _drop_lease(self, name: str, holder: str) -> None:
        with self._tx():
            current = self.leases.get(name)
            if current is not None and current[0] == holder:
                self._put(self.leases, name, None)

    # -- schedules ------------------------------------------------------------------

    def apply_schedule(
        self,
        spec: Schedule,
        *,
        now: datetime,
        actor: str = SYSTEM_ACTOR,
        expected_version: int | None = None,
    ) -> ScheduleRecord:
        """Create or update ``spec``; claims its targets; bumps the version (R-MODEL-8)."""
        doc = column(spec.to_document())
        with self._tx():
            row = self.schedules.get(spec.name)
            check_expected(spec.name, row.version if row is not None else None, expected_version)
            if row is not None and (row.document, row.scope, row.enabled) == (
                doc,
                spec.scope,
                spec.enabled,
            ):
                return ScheduleRecord(
                    spec.name, row.version, spec, spec.enabled, row.created_at, row.updated_at
                )
            at = utc(now)
            assert at is not None
            if row is None:
                version, created = self._first_version(spec.name), at
            else:
                version, created = row.version + 1, row.created_at
            parsed = Schedule.model_validate(doc)
            self._put(
                self.schedules,
                spec.name,
                SchedRow(spec.name, version, spec.scope, spec.enabled, doc, parsed, created, at),
            )
            self._claim(spec, at)
            self._mark_due(spec.name, version, doc, at)
            self._event(at, spec.name, None, "schedule_applied", detail={"version": version})
            self._audit(
                at=at,
                actor=actor,
                action="schedule_created" if version == 1 else "schedule_replaced",
                kind="schedule",
                name=spec.name,
                scope=spec.scope,
                version=version,
            )
        return ScheduleRecord(
            spec.name, version, spec, spec.enabled, created if row is not None else now, now
        )

    def _first_version(self, name: str) -> int:
        """1, or past every version the name's plans and steps still carry."""
        used = [self.transitions[t].schedule_version for t in self.tr_by_schedule.get(name, {})]
        used += [self.actions[a].schedule_version for a in self.by_schedule.get(name, {})]
        return 1 + max(used, default=0)

    def _claim(self, spec: Schedule, now: datetime) -> None:
        wanted = list(spec.target_ids)
        for deploy_id in [
            d for d, c in self.claims.items() if c.schedule_name == spec.name and d not in wanted
        ]:
            self._put(self.claims, deploy_id, None)
        for index, deploy_id in enumerate(wanted):
            claim = self.claims.get(deploy_id)
            if claim is not None and claim.schedule_name == spec.name:
                continue
            if claim is not None:
                raise TargetOwned(
                    deploy_id, claim.schedule_name, f"targets[{index}].model_deploy_id"
                )
            self._put(self.claims, deploy_id, ClaimRow(deploy_id, spec.name, now))
        for deploy_id in [d for d in self.status.get(spec.name, {}) if d not in wanted]:
            self._set_status(spec.name, deploy_id, None)

    def _mark_due(self, name: str, version: int, document: object, now: datetime) -> None:
        row = self.due.get(name)
        sha = spec_sha(document)
        if row is None:
            self._put(self.due, name, DueRow(name, version, sha, now, 1))
        else:
            self._put(self.due, name, DueRow(name, version, sha, now, row.revision + 1))

    def _mark_all_due(self, now: datetime) -> None:
        for name, row in list(self.due.items()):
            self._put(
                self.due,
                name,
                DueRow(
                    row.name,
                    row.version,
                    row.spec_sha,
                    now,
                    row.revision + 1,
                    row.claimed_by,
                    row.claimed_until,
                ),
            )

    @staticmethod
    def _record(row: SchedRow) -> ScheduleRecord:
        return ScheduleRecord(
            row.name, row.version, row.spec, row.enabled, row.created_at, row.updated_at
        )

    @locked
    def find_schedule(self, name: str) -> ScheduleRecord | None:
        row = self.schedules.get(name)
        return self._record(row) if row is not None else None

    def get_schedule(self, name: str) -> ScheduleRecord:
        record = self.find_schedule(name)
        if record is None:
            raise ScheduleNotFound(name)
        return record

    @locked
    def schedule_state(self, name: str) -> tuple[int, bool] | None:
        row = self.schedules.get(name)
        return None if row is None else (row.version, row.enabled)

    @locked
    def schedule_states(self, names: Sequence[str]) -> dict[str, tuple[int, bool]]:
        return {
            n: (r.version, r.enabled)
            for n in sorted(set(names))
            if (r := self.schedules.get(n)) is not None
        }

    @locked
    def list_schedules(self) -> list[ScheduleRecord]:
        return [self._record(self.schedules[n]) for n in sorted(self.schedules)]

    @locked
    def schedules_named(self, names: Sequence[str]) -> list[ScheduleRecord]:
        return [self._record(self.schedules[n]) for n in sorted(set(names)) if n in self.schedules]

    @locked
    def page_schedules(
        self, after: str | None, limit: int, *, scope: str | None = None
    ) -> list[ScheduleRecord]:
        names = sorted(
            n
            for n, r in self.schedules.items()
            if (not after or n > after) and (scope is None or r.scope == scope)
        )
        return [self._record(self.schedules[n]) for n in names[:limit]]

    @locked
    def owner_of(self, deploy_id: str) -> str | None:
        claim = self.claims.get(deploy_id)
        return claim.schedule_name if claim is not None else None

    def delete_schedule(
        self,
        name: str,
        *,
        now: datetime,
        actor: str = SYSTEM_ACTOR,
        expected_version: int | None = None,
        force: bool = False,
    ) -> Deleted:
        """Delete a schedule and release its claims; steps in flight refuse it unless ``force``."""
        with self._tx():
            row = self.schedules.get(name)
            if row is None:
                raise ScheduleNotFound(name)
            check_expected(name, row.version, expected_version)
            mine = [self.actions[a] for a in self.by_schedule.get(name, {})]
            flying = sorted((a for a in mine if a.state in REACHED_CORE), key=lambda a: a.seq)
            abandoned = [f"{a.deploy_id} {a.step} ({a.state})" for a in flying]
            if abandoned and not force:
                raise ScheduleInFlight(name, abandoned)
            states = (*UNSUBMITTED, *REACHED_CORE) if force else UNSUBMITTED
            ending = [a for a in mine if a.state in states]
            self._add_totals(
                finished_deltas((a.step, StepState.CANCELLED, "schedule_deleted") for a in ending)
            )
            for a in ending:
                self._update_action(
                    a.id,
                    {
                        "state": StepState.CANCELLED,
                        "reason": "schedule_deleted",
                        "finished_at": now,
                        "updated_at": now,
                        "fix": DELETED_FIX,
                    },
                )
            for tid in list(self.open_by_schedule.get(name, {})):
                self._set_transition(tid, replace(self.transitions[tid], state=PlanState.CANCELLED))
            self._put(self.due, name, None)
            self._put(self.schedules, name, None)
            for deploy_id in [d for d, c in self.claims.items() if c.schedule_name == name]:
                self._put(self.claims, deploy_id, None)
            for deploy_id in list(self.status.get(name, {})):
                self._set_status(name, deploy_id, None)
            self._event(
                now,
                name,
                None,
                "schedule_deleted",
                detail={"forced": force, "abandoned": abandoned},
            )
            self._audit(
                at=now,
                actor=actor,
                action="schedule_deleted",
                kind="schedule",
                name=name,
                scope=row.scope,
                version=row.version,
            )
        return Deleted(row.version, abandoned)

    # -- control: gate and cursor -------------------------------------------------------

    @locked
    def get_gate(self) -> Gate:
        """The execution gate (R-PASS-1); absent or unknown reads as ``off`` (fail closed)."""
        value = self.control.get(GATE_KEY)
        return Gate(value) if value in GATES else Gate.OFF

    def set_gate(self, value: str, *, now: datetime) -> None:
        """Set the gate, make every schedule due and record ``gate_changed``: all or nothing."""
        if value not in GATES:
            raise InvalidGate(value)
        with self._tx():
            self._put(self.control, GATE_KEY, value)
            self._mark_all_due(now)
            self._event(now, None, None, "gate_changed", detail={"gate": value})

    @locked
    def get_cursor(self) -> str | None:
        return self.control.get(CURSOR_KEY) or None

    def set_cursor(self, value: str | None, *, now: datetime) -> None:
        with self._tx():
            self._put(self.control, CURSOR_KEY, value or "")
