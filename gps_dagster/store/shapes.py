"""What both stores share, free of SQL: write records, outcomes, and the rules on rows.

The SQL ``Store`` (``store/*.py``) and the in-memory ``MemoryStore`` (``store/memory/``)
implement the same Protocols (``engine/store_ports.py``) and must decide alike. The records
they take and return, and the few rules they apply to a row before writing it (the fence's
re-checks, R-PASS-14's "never backwards", when a plan is closed, the conditional write of a
version), live here once: each store imports them, neither re-states them. This module
imports no database library (an import-linter contract keeps ``store.memory`` free of it).
"""

# Decisions embodied here (docs/decisions.md):
# * “The engine's store in memory: the same semantics, translated method by method”
# * “The store writes steps in groups and opens plans in one form”
# * “Step states, plan states and the gate are enums on the rows; plans open from frozen records”

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol

from gps_dagster.domain import step_rules
from gps_dagster.domain.phases import Phase
from gps_dagster.domain.planner import Order, StepKind
from gps_dagster.domain.spec import TransitionOrder
from gps_dagster.domain.step_state import (
    BROKEN,
    FINISHED,
    IN_FLIGHT,
    REACHED_CORE,
    UNSUBMITTED,
    Gate,
    PlanState,
    StepState,
)
from gps_dagster.store.errors import ScheduleExists, ScheduleNotFound, VersionMismatch
from gps_dagster.store.records import TargetStatusRow

GATES = tuple(Gate)
GATE_KEY = "execution"
CURSOR_KEY = "cursor"
MUST_NOT_EXIST = 0
"""``expected_version`` of a create: the schedule must not exist yet."""
SYSTEM_ACTOR = "system"
"""Writes made by the product itself or by code that names no actor (tests, simulate)."""

IN_FLIGHT_STATES = IN_FLIGHT
"""Step states that may still move (``step_state.IN_FLIGHT``)."""
ACQUIRE_STEPS = (StepKind.START, StepKind.SCALE_UP)
RELEASE_STEPS = (StepKind.STOP, StepKind.SCALE_DOWN)
BATCH = 2000
"""Plans deleted per retention transaction."""

STATUS_FIELDS = {"last_action_id": "last_action", "schedule_name": "schedule"}
"""Status column -> ``TargetStatusRow`` field, where the names differ."""
ACTION_FIELDS = {"schedule_name": "schedule"}
TRANSITION_FIELDS = {"schedule_name": "schedule"}


@dataclass(frozen=True, slots=True)
class StepWrite:
    """One step's move and what it does to its target, applied by ``write_each``.

    A write with ``dependents`` is a group, written all or nothing (R-PASS-16): the dependents
    (the steps cancelled with it) are considered only when this step moves, each then on its own
    CAS; when this step lost, nothing of the group is written."""

    action_id: str
    expect: tuple[str, ...]
    """The step moves only from one of these states (a CAS on the action state)."""
    changes: Mapping[str, Any]
    """Action columns to write."""
    status: Mapping[str, Any] | None = None
    """Target status changes, written when the target is still on this step's transition."""
    status_seen: TargetStatusRow | None = None
    """CAS the status on this read instead of the current row; a lost CAS skips the status only."""
    events: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    """Events of the target, written with the status (or alone when there is no status write)."""
    dependents: tuple[StepWrite, ...] = ()
    """Steps written with this one, only if this one moves (their own ``dependents``: unused)."""


@dataclass(frozen=True, slots=True)
class NewPlan:
    """A transition plan to open: its ``transitions`` row."""

    id: str
    schedule: str
    schedule_version: int
    boundary_at: datetime
    order: TransitionOrder
    trigger: str
    state: PlanState
    """``open``; ``done`` when nothing is to move; ``refused`` when preflight refused it."""
    targets: tuple[str, ...]
    created_at: datetime
    lag_seconds: float | None
    """The boundary lag (R-PASS-5); None: not counted."""

    def columns(self) -> dict[str, Any]:
        """The row's column values, as both stores insert them."""
        return {
            "id": self.id,
            "schedule_name": self.schedule,
            "schedule_version": self.schedule_version,
            "boundary_at": self.boundary_at,
            "order": self.order,
            "trigger": self.trigger,
            "state": self.state,
            "targets": list(self.targets),
            "created_at": self.created_at,
            "lag_seconds": self.lag_seconds,
        }


@dataclass(frozen=True, slots=True)
class NewStep:
    """A step of a plan to open: its ``actions`` row, with no operation yet."""

    id: str
    idempotency_key: str
    transition_id: str
    schedule: str
    schedule_version: int
    deploy_id: str
    interval_start: datetime
    step: StepKind
    order: Order
    seq: int
    replicas: int | None
    delta_replicas: int | None
    etag_used: str | None
    detail: Mapping[str, Any]
    created_at: datetime
    state: StepState = StepState.PENDING

    def columns(self) -> dict[str, Any]:
        """The row's column values, as both stores insert them."""
        return {
            "id": self.id,
            "idempotency_key": self.idempotency_key,
            "transition_id": self.transition_id,
            "schedule_name": self.schedule,
            "schedule_version": self.schedule_version,
            "deploy_id": self.deploy_id,
            "interval_start": self.interval_start,
            "step": self.step,
            "order": self.order,
            "seq": self.seq,
            "replicas": self.replicas,
            "delta_replicas": self.delta_replicas,
            "etag_used": self.etag_used,
            "state": self.state,
            "operation_ids": [],
            "detail": dict(self.detail),
            "created_at": self.created_at,
            "updated_at": self.created_at,
        }


@dataclass(frozen=True, slots=True)
class StatusMove:
    """A target's status move when its plan opens: a CAS on ``seen`` (R-PASS-11)."""

    seen: TargetStatusRow
    changes: Mapping[str, Any]
    """Status columns to write."""
    events: tuple[Mapping[str, Any], ...] = ()
    """Events of the target, written with the move (``StepWrite.events``)."""


@dataclass(frozen=True, slots=True)
class Draft:
    """A plan ready to open: its transition row, its step rows, its targets' status moves."""

    transition: NewPlan
    steps: Sequence[NewStep]
    updates: Sequence[StatusMove]
    supersede: Sequence[str] = ()
    """Deploys whose older plans' unsubmitted steps this plan drops, if it opens (those plans
    close when nothing of theirs is left)."""


@dataclass(frozen=True, slots=True)
class Fenced:
    """A fence's outcome: ``status`` is the row as the fence left it (for the submit's CAS)."""

    ok: bool
    reason: str | None = None
    status: TargetStatusRow | None = None


@dataclass(frozen=True, slots=True)
class DueClaim:
    """A schedule this replica visits now; ``revision`` guards the write of its next due."""

    name: str
    version: int
    revision: int
    due_at: datetime | None = None
    """When it was due as claimed (None: never); a visit keeps a future one as it is."""
    claimed_by: str | None = None
    claimed_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class NextDue:
    """What a visit found: when ``name`` needs its next pass (None: never, until marked)."""

    name: str
    revision: int
    due_at: datetime | None


@dataclass(frozen=True, slots=True)
class Pruned:
    transitions: int = 0
    actions: int = 0
    events: int = 0
    requests: int = 0

    def __add__(self, other: Pruned) -> Pruned:
        return Pruned(
            self.transitions + other.transitions,
            self.actions + other.actions,
            self.events + other.events,
            self.requests + other.requests,
        )


Totals = dict[str, dict[tuple[str, ...], float]]


@dataclass(frozen=True, slots=True)
class MetricReadings:
    """One scrape's figures, read in one connection."""

    totals: Totals
    """The running totals (``metric_totals``), by metric then label values."""
    serving: tuple[tuple[str, str, str, bool], ...]
    """(schedule, target, phase, last observed READY) of every target, in order."""
    in_flight: tuple[tuple[str, str, int], ...]
    """(step, state, count) of the steps not finished yet, in order."""


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    at: datetime
    actor: str
    action: str
    object_kind: str
    object_name: str
    scope: str | None
    version: int | None
    detail: dict[str, Any] | None
    token_id: str | None = None


class PassLease(Protocol):
    """The pass lock a store hands out: a context manager; ``acquired`` says if it is held."""

    acquired: bool

    def __enter__(self) -> PassLease: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def release(self) -> None: ...


def transition_state(states: Iterable[str]) -> PlanState | None:
    """The closed state of a plan whose steps are all finished (None: still open)."""
    states = list(states)
    if not states or any(s not in FINISHED for s in states):
        return None
    if any(s in BROKEN for s in states):
        return PlanState.FAILED
    return PlanState.SUPERSEDED if StepState.SUPERSEDED in states else PlanState.DONE


def spec_sha(document: object) -> str:
    """SHA-256 of a schedule document (canonical JSON): the key of the parsed-spec cache."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def fence_checks(action: Any, sched: Any, gate: str | None, owner: str | None) -> str | None:
    """The fence's re-checks (``step_rules.fence_refusal``) on the rows one fence read."""
    return step_rules.fence_refusal(
        schedule=action.schedule,
        version=action.schedule_version,
        stored_version=sched.version if sched is not None else None,
        enabled=bool(sched.enabled) if sched is not None else False,
        gate=gate,
        owner=owner,
    )


def forward_ok(current: TargetStatusRow, changes: Mapping[str, Any]) -> bool:
    """R-PASS-14 (``step_rules.forward_ok``) for ``changes`` over the row as stored: the row a
    CAS matches (``_cas``) or a batch locked (``bulk``)."""
    return step_rules.forward_ok(
        stored_version=current.schedule_version,
        stored_start=current.interval_start,
        version=changes.get("schedule_version"),
        start=changes.get("interval_start"),
    )


def same_row(current: TargetStatusRow | None, seen: TargetStatusRow) -> bool:
    return (
        current is not None
        and current.status_version == seen.status_version
        and current.target_generation == seen.target_generation
    )


def check_expected(name: str, current: int | None, expected: int | None) -> None:
    """Refuse a conditional write whose expected version is not the stored one."""
    if expected is None:
        return
    if expected == MUST_NOT_EXIST:
        if current is not None:
            raise ScheduleExists(name)
        return
    if current is None:
        raise ScheduleNotFound(name)
    if current != expected:
        raise VersionMismatch(name, expected=expected, actual=current)


_TOKEN_ACTOR = re.compile(r"^token:.*\(([0-9a-f]{12})\)\Z", re.DOTALL)
"""``TokenRecord.actor``: the token id goes in its own column too (R-API)."""


def token_id_of(actor: str) -> str | None:
    """The id of the API token an actor names (``token:<name>(<id>)``), else None."""
    match = _TOKEN_ACTOR.match(actor)
    return match.group(1) if match else None


def status_move(
    seen: TargetStatusRow,
    now: datetime,
    changes: Mapping[str, Any],
    events: Iterable[Mapping[str, Any]] = (),
) -> tuple[dict[str, Any], TargetStatusRow, list[dict[str, Any]]]:
    """What ``status._cas`` writes for ``changes`` on ``seen``: the row values, the new row,
    events."""
    values = dict(changes)
    values.setdefault("target_generation", seen.target_generation)
    values["status_version"] = seen.status_version + 1
    values["updated_at"] = now
    phase = values.get("phase", seen.phase)
    if phase != seen.phase:
        values["phase_since"] = now
    out: list[dict[str, Any]] = []
    reason = values.get("reason", seen.reason)
    if phase != seen.phase or reason != seen.reason:
        out.append(
            event_values(
                seen,
                now,
                "phase_changed",
                phase,
                reason,
                {"from": seen.phase, "fix": values.get("fix", seen.fix)},
            )
        )
    for ev in events:
        out.append(
            event_values(
                seen, now, ev["kind"], ev.get("phase", phase), ev.get("reason"), ev.get("detail")
            )
        )
    fields = {STATUS_FIELDS.get(k, k): v for k, v in values.items()}
    if "phase" in fields:
        fields["phase"] = Phase(fields["phase"])
    row = {"schedule_name": seen.schedule, "deploy_id": seen.deploy_id, **values}
    return row, replace(seen, **fields), out


def event_values(
    seen: TargetStatusRow | None,
    now: datetime,
    kind: str,
    phase: str | None,
    reason: str | None,
    detail: Any,
    *,
    schedule: str | None = None,
    deploy_id: str | None = None,
) -> dict[str, Any]:
    return {
        "at": now,
        "schedule_name": seen.schedule if seen is not None else schedule,
        "deploy_id": seen.deploy_id if seen is not None else deploy_id,
        "kind": kind,
        "phase": phase,
        "reason": reason,
        "detail": detail,
    }


# -- running totals (``metric_totals``): the keys a write adds to --------------------------

LAG_BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)
ACTIONS = "actions"
LAG_BUCKET, LAG_SUM, LAG_COUNT = "lag_bucket", "lag_sum", "lag_count"
TotalKey = tuple[str, str]


def finished_deltas(finished: Iterable[tuple[str, str, str | None]]) -> dict[TotalKey, float]:
    """The totals that steps reaching a terminal state, as (step, state, reason), add to."""
    deltas: dict[TotalKey, float] = {}
    for step, state, reason in finished:
        key = (ACTIONS, json.dumps([step, state, reason or ""]))
        deltas[key] = deltas.get(key, 0.0) + 1
    return deltas


def lag_deltas(lags: Iterable[float | None]) -> dict[TotalKey, float]:
    """The totals that transitions opened with these boundary lags add to (None: not counted)."""
    deltas: dict[TotalKey, float] = {}
    for lag in lags:
        if lag is None:
            continue
        keys = [(LAG_BUCKET, json.dumps([str(b)])) for b in LAG_BUCKETS if lag <= b]
        for key in [*keys, (LAG_COUNT, "[]")]:
            deltas[key] = deltas.get(key, 0.0) + 1
        deltas[(LAG_SUM, "[]")] = deltas.get((LAG_SUM, "[]"), 0.0) + lag
    return deltas


__all__ = [
    "ACQUIRE_STEPS",
    "BATCH",
    "FINISHED",
    "GATES",
    "IN_FLIGHT_STATES",
    "MUST_NOT_EXIST",
    "REACHED_CORE",
    "RELEASE_STEPS",
    "SYSTEM_ACTOR",
    "UNSUBMITTED",
    "AuditRow",
    "Draft",
    "DueClaim",
    "Fenced",
    "MetricReadings",
    "NewPlan",
    "NewStep",
    "NextDue",
    "PassLease",
    "Pruned",
    "StatusMove",
    "StepWrite",
    "check_expected",
    "event_values",
    "fence_checks",
    "finished_deltas",
    "forward_ok",
    "lag_deltas",
    "same_row",
    "spec_sha",
    "status_move",
    "token_id_of",
    "transition_state",
]
