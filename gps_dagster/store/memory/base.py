"""The tables of the in-memory store, its transactions and the writes every mixin goes through.

Each table is a dict keyed like the SQL table's primary key, holding the store's frozen rows
(``store/records.py``). A write method runs in ``_tx``: every change is made through ``_put``
(or the row writers built on it), which logs how to undo it, so an exception raised inside
the block (``Conflict`` for a lost CAS, a store error) rolls the whole method back exactly as
the SQL store's transaction does; the running totals of a transaction are added at its commit.
One ``RLock`` guards every method: the engine's heartbeat renews claims from its own thread.

Values come in as the SQL store's columns do (``schedule_name``, ``last_action_id``) and are
stored as the SQL store returns them: datetimes aware and in UTC (a naive one is refused, as
``UtcDateTime`` refuses it), JSON columns copied through JSON (tuples come back as lists).
Rows handed out carry copies of their JSON values: a caller never holds the store's own.

Indexes keep a pass cheap whatever the history: steps by transition, schedule and deploy,
the steps in flight, the open plans by schedule.
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from functools import wraps
from typing import Any, TypeVar, cast

from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import Order, StepKind
from gps_dagster.domain.spec import Schedule, TransitionOrder
from gps_dagster.domain.step_state import PlanState, StepState
from gps_dagster.ports import Clock
from gps_dagster.store.records import ActionRow, EventRow, TargetStatusRow, TransitionRow
from gps_dagster.store.shapes import (
    ACQUIRE_STEPS,
    ACTION_FIELDS,
    IN_FLIGHT_STATES,
    RELEASE_STEPS,
    STATUS_FIELDS,
    TRANSITION_FIELDS,
    AuditRow,
    TotalKey,
    token_id_of,
)

F = TypeVar("F", bound=Callable[..., Any])
Enums = Mapping[str, Callable[[str], StrEnum]]
STATUS_ENUMS: Enums = {"phase": Phase}
"""Record field -> the enum its column text is read as (``store/status.py`` converts alike)."""
ACTION_ENUMS: Enums = {"step": StepKind, "order": Order, "state": StepState}
TRANSITION_ENUMS: Enums = {"order": TransitionOrder, "state": PlanState}
_ABSENT = object()
_IN_FLIGHT = frozenset(IN_FLIGHT_STATES)
_TIMED = frozenset((*ACQUIRE_STEPS, *RELEASE_STEPS))


class Conflict(Exception):
    """Raised inside ``_tx`` to roll the transaction back (a lost CAS, a taken key)."""


class DuplicateKey(Exception):
    """A row whose primary or unique key is taken (the SQL store's ``IntegrityError``)."""


@dataclass(frozen=True, slots=True)
class SchedRow:
    name: str
    version: int
    scope: str
    enabled: bool
    document: dict[str, Any]
    spec: Schedule
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ClaimRow:
    deploy_id: str
    schedule_name: str
    claimed_at: datetime
    instance: str | None = None
    pinned_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DueRow:
    name: str
    version: int
    spec_sha: str | None
    due_at: datetime | None
    revision: int
    claimed_by: str | None = None
    claimed_until: datetime | None = None


def utc(value: datetime | None) -> datetime | None:
    """A datetime as the SQL store returns it: aware, in UTC (naive ones refused)."""
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime refused: {value!r}")
    return value.astimezone(UTC)


def column(value: Any) -> Any:
    """A value as a column stores it: UTC datetimes, JSON values through JSON."""
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, dict | list | tuple):
        return json.loads(json.dumps(value))
    return value


def copied(value: Any) -> Any:
    """A fresh copy of a stored JSON value (dicts, lists, scalars)."""
    if isinstance(value, dict):
        return {k: copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copied(v) for v in value]
    return value


def fields(
    values: Mapping[str, Any], names: Mapping[str, str], enums: Enums | None = None
) -> dict[str, Any]:
    """Column values -> record fields (normalised; enumerated columns as their enum)."""
    out = {names.get(k, k): column(v) for k, v in values.items()}
    for name, enum in (enums or {}).items():
        if name in out:
            out[name] = enum(out[name])
    return out


def locked(method: F) -> F:
    """Run ``method`` under the store's lock (reads, and writes that open ``_tx`` themselves)."""

    @wraps(method)
    def run(self: MemoryBase, *args: Any, **kwargs: Any) -> Any:
        with self._mutex:
            return method(self, *args, **kwargs)

    return cast(F, run)


class MemoryBase:
    """The tables and their writers; the mixins add the ``EngineStore`` methods."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._mutex = threading.RLock()
        self._undo: list[Callable[[], None]] | None = None
        self._deltas: dict[TotalKey, float] = {}
        self.schedules: dict[str, SchedRow] = {}
        self.claims: dict[str, ClaimRow] = {}
        self.status: dict[str, dict[str, TargetStatusRow]] = {}
        self.transitions: dict[str, TransitionRow] = {}
        self.open_by_schedule: dict[str, dict[str, None]] = {}
        self.tr_by_schedule: dict[str, dict[str, None]] = {}
        self.actions: dict[str, ActionRow] = {}
        self.keys: dict[str, str] = {}
        self.ordinal: dict[str, int] = {}
        self.by_transition: dict[str, dict[str, None]] = {}
        self.by_schedule: dict[str, dict[str, None]] = {}
        self.by_deploy: dict[str, dict[str, None]] = {}
        self.in_flight: dict[str, None] = {}
        self.converged: dict[str, dict[str, None]] = {}
        """deploy -> its converged acquiring and releasing steps (the learned durations)."""
        self.events: list[EventRow] = []
        self.audit_rows: list[AuditRow] = []
        self.control: dict[str, str] = {}
        self.leases: dict[str, tuple[str, datetime]] = {}
        self.due: dict[str, DueRow] = {}
        self.totals: dict[TotalKey, float] = {}
        self._next_ordinal = 0

    # -- transactions ---------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[None]:
        """One transaction: all its writes or none (nested calls join the outer one)."""
        with self._mutex:
            if self._undo is not None:
                yield
                return
            self._undo, self._deltas = [], {}
            try:
                yield
            except BaseException:
                for undo in reversed(self._undo):
                    undo()
                raise
            else:
                for key, delta in sorted(self._deltas.items()):
                    if delta:
                        self.totals[key] = self.totals.get(key, 0.0) + delta
            finally:
                self._undo, self._deltas = None, {}

    def _log(self, undo: Callable[[], None]) -> None:
        assert self._undo is not None, "a write outside a transaction"
        self._undo.append(undo)

    def _add_totals(self, deltas: Mapping[TotalKey, float]) -> None:
        for key, delta in deltas.items():
            self._deltas[key] = self._deltas.get(key, 0.0) + delta

    def _put(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        """Set (or, with None, delete) one row, logging its undo."""
        old = table.get(key, _ABSENT)
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

        def undo() -> None:
            if old is _ABSENT:
                table.pop(key, None)
            else:
                table[key] = old

        self._log(undo)

    # -- rows with indexes ------------------------------------------------------

    def _set_status(self, schedule: str, deploy_id: str, row: TargetStatusRow | None) -> None:
        self._put(self.status.setdefault(schedule, {}), deploy_id, row)

    def _update_status(self, schedule: str, deploy_id: str, values: Mapping[str, Any]) -> None:
        """``UPDATE target_status SET values`` on the stored row (no-op when it is gone)."""
        current = self.status.get(schedule, {}).get(deploy_id)
        if current is not None:
            self._set_status(
                schedule, deploy_id, replace(current, **fields(values, STATUS_FIELDS, STATUS_ENUMS))
            )

    def _set_action(self, action_id: str, row: ActionRow | None) -> None:
        old = self.actions.get(action_id)
        self._index_action(action_id, old, row)
        self._log(lambda: self._index_action(action_id, row, old))

    def _update_action(self, action_id: str, values: Mapping[str, Any]) -> None:
        current = self.actions[action_id]
        self._set_action(action_id, replace(current, **fields(values, ACTION_FIELDS, ACTION_ENUMS)))

    def _index_action(self, action_id: str, old: ActionRow | None, new: ActionRow | None) -> None:
        if new is None:
            self.actions.pop(action_id, None)
        else:
            self.actions[action_id] = new
        if old is None and new is not None:
            self._next_ordinal += 1
            self.ordinal[action_id] = self._next_ordinal
            self.keys[new.idempotency_key] = action_id
            self.by_transition.setdefault(new.transition_id, {})[action_id] = None
            self.by_schedule.setdefault(new.schedule, {})[action_id] = None
            self.by_deploy.setdefault(new.deploy_id, {})[action_id] = None
        elif old is not None and new is None:
            self.ordinal.pop(action_id, None)
            self.keys.pop(old.idempotency_key, None)
            for index, key in (
                (self.by_transition, old.transition_id),
                (self.by_schedule, old.schedule),
                (self.by_deploy, old.deploy_id),
            ):
                index.get(key, {}).pop(action_id, None)
        if new is not None and new.state in _IN_FLIGHT:
            self.in_flight[action_id] = None
        else:
            self.in_flight.pop(action_id, None)
        row = new or old
        assert row is not None
        if new is not None and new.state == StepState.CONVERGED and new.step in _TIMED:
            self.converged.setdefault(row.deploy_id, {})[action_id] = None
        else:
            self.converged.get(row.deploy_id, {}).pop(action_id, None)

    def _insert_action(self, values: Mapping[str, Any]) -> None:
        row = action_row(values)
        if row.id in self.actions or row.idempotency_key in self.keys:
            raise DuplicateKey(row.id)
        self._set_action(row.id, row)

    def _set_transition(self, transition_id: str, row: TransitionRow | None) -> None:
        old = self.transitions.get(transition_id)
        self._index_transition(transition_id, old, row)
        self._log(lambda: self._index_transition(transition_id, row, old))

    def _index_transition(
        self, tid: str, old: TransitionRow | None, new: TransitionRow | None
    ) -> None:
        if new is None:
            self.transitions.pop(tid, None)
        else:
            self.transitions[tid] = new
        row = new or old
        assert row is not None
        if new is None:
            self.tr_by_schedule.get(row.schedule, {}).pop(tid, None)
        else:
            self.tr_by_schedule.setdefault(row.schedule, {})[tid] = None
        if new is not None and new.state == PlanState.OPEN:
            self.open_by_schedule.setdefault(row.schedule, {})[tid] = None
        else:
            self.open_by_schedule.get(row.schedule, {}).pop(tid, None)

    def _insert_transition(self, values: Mapping[str, Any]) -> None:
        row = transition_row(values)
        if row.id in self.transitions:
            raise DuplicateKey(row.id)
        self._set_transition(row.id, row)

    def _event(
        self,
        at: datetime,
        schedule: str | None,
        deploy_id: str | None,
        kind: str,
        *,
        phase: str | None = None,
        reason: str | None = None,
        detail: Any = None,
    ) -> None:
        """Append an event; its id is the last one's plus one (SQLite's ``INTEGER PRIMARY KEY``)."""
        next_id = self.events[-1].id + 1 if self.events else 1
        at_utc = utc(at)
        assert at_utc is not None
        self.events.append(
            EventRow(
                next_id,
                at_utc,
                schedule,
                deploy_id,
                kind,
                None if phase is None else str(phase),
                reason,
                column(detail),
            )
        )
        self._log(self._drop_last_event)

    def _event_row(self, values: Mapping[str, Any]) -> None:
        """An event given as the SQL store's row values (``schedule_name`` ...)."""
        self._event(
            values["at"],
            values.get("schedule_name"),
            values.get("deploy_id"),
            values["kind"],
            phase=values.get("phase"),
            reason=values.get("reason"),
            detail=values.get("detail"),
        )

    def _audit(
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
        """Append one audit row in the caller's transaction (``audit.record``)."""
        next_id = self.audit_rows[-1].id + 1 if self.audit_rows else 1
        when = utc(at)
        assert when is not None
        self.audit_rows.append(
            AuditRow(
                next_id,
                when,
                actor[:160],
                action,
                kind,
                name,
                scope,
                version,
                column(detail),
                token_id_of(actor),
            )
        )
        self._log(self._drop_last_audit)

    def _drop_last_event(self) -> None:
        self.events.pop()

    def _drop_last_audit(self) -> None:
        self.audit_rows.pop()

    # -- rows handed out ----------------------------------------------------------

    def _status_out(self, row: TargetStatusRow) -> TargetStatusRow:
        if row.detail is None and row.intent is None:
            return row
        return replace(row, detail=copied(row.detail), intent=copied(row.intent))

    def _get_status(self, schedule: str, deploy_id: str) -> TargetStatusRow | None:
        return self.status.get(schedule, {}).get(deploy_id)

    def _action_out(self, row: ActionRow) -> ActionRow:
        if row.detail is None and row.operation_ids is None:
            return row
        return replace(row, detail=copied(row.detail), operation_ids=copied(row.operation_ids))

    @staticmethod
    def _transition_out(row: TransitionRow) -> TransitionRow:
        return replace(row, targets=list(row.targets))

    @staticmethod
    def _event_out(row: EventRow) -> EventRow:
        return row if row.detail is None else replace(row, detail=copied(row.detail))

    def _action_order(self, action_id: str) -> tuple[datetime, int, int]:
        row = self.actions[action_id]
        return (row.created_at, row.seq, self.ordinal[action_id])


def action_row(v: Mapping[str, Any]) -> ActionRow:
    """An ``actions`` row from its column values (absent nullable columns are None)."""
    g = v.get
    return ActionRow(
        v["id"],
        v["idempotency_key"],
        v["transition_id"],
        v["schedule_name"],
        v["schedule_version"],
        v["deploy_id"],
        _at(v["interval_start"]),
        StepKind(v["step"]),
        Order(v["order"]),
        v["seq"],
        g("replicas"),
        g("delta_replicas"),
        g("etag_used"),
        StepState(v["state"]),
        column(g("operation_ids")),
        g("reason"),
        g("fix"),
        column(g("detail")),
        _at(v["created_at"]),
        utc(g("submitted_at")),
        utc(g("accepted_at")),
        utc(g("finished_at")),
        utc(g("deadline_at")),
        _at(v["updated_at"]),
    )


def transition_row(v: Mapping[str, Any]) -> TransitionRow:
    fields_ = fields(v, TRANSITION_FIELDS, TRANSITION_ENUMS)
    return TransitionRow(
        fields_["id"],
        fields_["schedule"],
        fields_["schedule_version"],
        fields_["boundary_at"],
        fields_["order"],
        fields_["trigger"],
        fields_["state"],
        list(fields_["targets"]),
        fields_["created_at"],
        fields_.get("lag_seconds"),
    )


def _at(value: datetime) -> datetime:
    out = utc(value)
    if out is None:
        raise ValueError("a NOT NULL datetime column was given None")
    return out
