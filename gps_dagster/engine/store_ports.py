"""What the engine asks of the store, as narrow Protocols (the store implements them structurally).

The engine never names the concrete ``Store`` nor speaks SQL (an import-linter contract):
each module is typed by the narrowest of these, and ``Store`` satisfies every one of them
without inheriting from any (mypy checks it wherever the composition root hands a ``Store``
to the engine). The records they return are the store's frozen rows
(``store/records.py``) and write records (``StepWrite``, ``Draft``), in ``store/shapes.py``
with the outcomes: no SQL on the way. Two stores implement them: the SQL ``Store`` and the
in-memory ``MemoryStore`` (``store/memory/``, for ``simulate`` and millisecond tests).

* ``ScheduleStore`` — the schedules, the gate, the cursor, the pass lock;
* ``PlanStore`` — transition plans and their steps;
* ``StatusStore`` — per-target status and the fence (R-PASS-14);
* ``DueIndex`` — the due index and its claims (R-PASS-13);
* ``EventLog`` — events and the audit log;
* ``PinStore`` — the deploy-identity pins;
* ``HistoryStore`` — metrics readings, retention, learned durations, the reservation ledger.

``StepStore``, ``PlannerStore``, ``DryRunStore`` and ``EngineStore`` are the unions their users
need.
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine is typed by store Protocols, never by the concrete store”

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from gps_dagster.domain.gps.reservations import Reservation
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.step_state import Gate
from gps_dagster.store.records import (
    ActionRow,
    Deleted,
    ScheduleRecord,
    TargetStatusRow,
    TransitionRow,
)
from gps_dagster.store.shapes import (
    Draft,
    DueClaim,
    Fenced,
    MetricReadings,
    NextDue,
    PassLease,
    Pruned,
    StepWrite,
)


class ScheduleStore(Protocol):
    def get_schedule(self, name: str) -> ScheduleRecord: ...
    def list_schedules(self) -> list[ScheduleRecord]: ...
    def page_schedules(
        self, after: str | None, limit: int, *, scope: str | None = ...
    ) -> list[ScheduleRecord]: ...
    def schedules_named(self, names: Sequence[str]) -> list[ScheduleRecord]: ...
    def schedule_state(self, name: str) -> tuple[int, bool] | None: ...
    def schedule_states(self, names: Sequence[str]) -> dict[str, tuple[int, bool]]: ...
    def apply_schedule(
        self, spec: Schedule, *, now: datetime, actor: str = ..., expected_version: int | None = ...
    ) -> ScheduleRecord: ...
    def delete_schedule(
        self,
        name: str,
        *,
        now: datetime,
        actor: str = ...,
        expected_version: int | None = ...,
        force: bool = ...,
    ) -> Deleted: ...
    def get_gate(self) -> Gate: ...
    def get_cursor(self) -> str | None: ...
    def set_cursor(self, value: str | None, *, now: datetime) -> None: ...
    def lock(self, name: str, *, holder: str, now: datetime, ttl_s: float = ...) -> PassLease: ...
    def database_now(self) -> datetime: ...


class PlanStore(Protocol):
    def open_many(self, drafts: Sequence[Draft], *, now: datetime) -> set[str]: ...
    def open_plans(
        self, schedules: Sequence[str]
    ) -> list[tuple[TransitionRow, list[ActionRow]]]: ...
    def get_transition(self, transition_id: str) -> TransitionRow | None: ...
    def list_transitions(
        self, schedule: str | None = ..., *, states: Iterable[str] | None = ...
    ) -> list[TransitionRow]: ...
    def list_actions(
        self,
        *,
        transition_id: str | None = ...,
        schedule: str | None = ...,
        deploy_id: str | None = ...,
        states: Iterable[str] | None = ...,
        schedules: Sequence[str] | None = ...,
    ) -> list[ActionRow]: ...
    def get_action(self, action_id: str) -> ActionRow | None: ...
    def actions_by_id(self, ids: Sequence[str]) -> dict[str, ActionRow]: ...
    def write_each(self, writes: Sequence[StepWrite], *, now: datetime) -> dict[str, str]: ...
    def update_action(
        self, action_id: str, *, expect: Iterable[str], now: datetime, **changes: Any
    ) -> bool: ...


class StatusStore(Protocol):
    def ensure_status(
        self, schedule: str, deploy_id: str, *, schedule_version: int, now: datetime
    ) -> TargetStatusRow: ...
    def ensure_statuses(
        self, targets: Sequence[tuple[str, str, int]], *, now: datetime
    ) -> None: ...
    def get_status(self, schedule: str, deploy_id: str) -> TargetStatusRow | None: ...
    def list_status(self, schedule: str | None = ...) -> list[TargetStatusRow]: ...
    def statuses_for(self, schedules: Sequence[str]) -> dict[tuple[str, str], TargetStatusRow]: ...
    def cas_status(
        self,
        seen: TargetStatusRow,
        *,
        now: datetime,
        events: Iterable[Mapping[str, Any]] = ...,
        **changes: Any,
    ) -> TargetStatusRow | None: ...
    def fence_many(
        self, items: Sequence[tuple[Any, TargetStatusRow, Mapping[str, Any]]], *, now: datetime
    ) -> dict[str, Fenced]: ...


class DueIndex(Protocol):
    def claim_due(
        self, *, holder: str, now: datetime, limit: int, lease_s: float
    ) -> list[DueClaim]: ...
    def claimed_elsewhere_in_flight(
        self, *, holder: str, now: datetime, limit: int
    ) -> list[str]: ...
    def due_names(self, now: datetime, limit: int) -> list[str]: ...
    def due_rows(self, names: Sequence[str]) -> dict[str, DueClaim]: ...
    def finish_due(self, visited: Iterable[NextDue], *, holder: str) -> None: ...
    def next_due(self, now: datetime) -> datetime | None: ...
    def upcoming_due(self, now: datetime, limit: int) -> list[tuple[datetime, str]]: ...
    def renew_claims(self, *, holder: str, now: datetime, lease_s: float) -> int: ...
    def schedules_in_flight(self, names: Sequence[str]) -> set[str]: ...
    def hasten(self, deploy_ids: Sequence[str], *, now: datetime) -> list[str]: ...


class EventLog(Protocol):
    def add_event(
        self, at: datetime, schedule: str | None, deploy_id: str | None, kind: str, **kw: Any
    ) -> None: ...
    def add_audit(
        self,
        *,
        at: datetime,
        actor: str,
        action: str,
        kind: str,
        name: str,
        scope: str | None = ...,
        version: int | None = ...,
        detail: dict[str, Any] | None = ...,
    ) -> None: ...


class PinStore(Protocol):
    def pin(self, schedule: str, deploy_id: str, instance: str, *, now: datetime) -> str | None: ...
    def pins_for(self, deploy_ids: Sequence[str]) -> dict[str, str | None]: ...


class ReservationLedger(Protocol):
    def get(self, reservation_id: str) -> Reservation: ...
    def list(self, *, include_released: bool = ...) -> Sequence[Reservation]: ...


class MetricsSource(Protocol):
    """What a metrics scrape reads: the store's figures, in one connection."""

    def metric_readings(self, *, serving: bool = ...) -> MetricReadings: ...


class HistoryStore(MetricsSource, Protocol):
    def prune(self, *, before: datetime, batch: int = ...) -> Pruned: ...
    def start_durations(self, deploy_ids: Sequence[str], limit: int) -> dict[str, list[float]]: ...
    def stop_durations(self, deploy_ids: Sequence[str], limit: int) -> dict[str, list[float]]: ...
    def ledger(self) -> ReservationLedger: ...


class StepStore(PlanStore, StatusStore, ScheduleStore, Protocol):
    """What running a step needs: its plan, its target's status and fence, its schedule."""


class PlannerStore(
    PlanStore, StatusStore, PinStore, EventLog, HistoryStore, ScheduleStore, Protocol
):
    """What opening a plan needs: statuses, plans, pins, events, learned durations, the database's
    clock."""


class DryRunStore(PinStore, HistoryStore, Protocol):
    """What a dry run reads: the pins and the learned durations (it writes nothing)."""


class EngineStore(StepStore, DueIndex, EventLog, PinStore, HistoryStore, Protocol):
    """Everything the engine asks of the store."""


__all__ = [
    "DryRunStore",
    "DueIndex",
    "EngineStore",
    "EventLog",
    "HistoryStore",
    "MetricsSource",
    "PinStore",
    "PlanStore",
    "PlannerStore",
    "ReservationLedger",
    "ScheduleStore",
    "StatusStore",
    "StepStore",
]
