"""``MemoryStore`` against the SQL ``Store``, call by call, and what only the memory store has.

``script`` drives a store through the writes whose outcome the engine's safety rests on (the
fence and its re-checks, CAS, supersede, all-or-nothing step writes, the due index's claims,
the pass lock's lease, events, retention) and records every answer; both stores must give the
same record, and a few of its entries are asserted outright so that the comparison cannot
pass on two stores that both do nothing. The memory-only cases cover what the SQL tests
reach through SQLAlchemy (rollback of a failed transaction, copies of JSON values).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.gps.reservations import ReservationSpec, SharingMode
from gps_dagster.domain.planner import Order, StepKind
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule, TransitionOrder
from gps_dagster.domain.step_state import PlanState
from gps_dagster.store import Store
from gps_dagster.store.errors import (
    GpuAlreadyReserved,
    ScheduleInFlight,
    TargetOwned,
    VersionMismatch,
)
from gps_dagster.store.memory import MemoryReservationBook, MemoryStore
from gps_dagster.store.shapes import Draft, NewPlan, NewStep, NextDue, StatusMove, StepWrite
from tests.engine.harness import A, B, seed_schedule

T0 = datetime(2026, 10, 19, 11, 0, tzinfo=UTC)


def spec(**changes: Any) -> Schedule:
    doc = seed_schedule()
    doc.update(changes)
    return load_schedule(doc)


def plan(
    name: str, tid: str, version: int, *, deploys: tuple[str, ...], at: datetime
) -> tuple[NewPlan, list[NewStep]]:
    transition = NewPlan(
        id=tid,
        schedule=name,
        schedule_version=version,
        boundary_at=at,
        order=TransitionOrder.RELEASE_FIRST,
        trigger="boundary",
        state=PlanState.OPEN,
        targets=deploys,
        created_at=at,
        lag_seconds=1.5,
    )
    steps = [
        NewStep(
            id=f"{tid}-{d}",
            idempotency_key=f"key-{tid}-{d}",
            transition_id=tid,
            schedule=name,
            schedule_version=version,
            deploy_id=d,
            interval_start=at,
            step=StepKind.STOP,
            order=Order.RELEASE,
            seq=i,
            replicas=None,
            delta_replicas=None,
            etag_used=None,
            detail={"n": (1, 2)},
            created_at=at,
        )
        for i, d in enumerate(deploys)
    ]
    return transition, steps


def script(store: Any) -> list[Any]:
    """The same calls on either store; every answer recorded (rows as dicts)."""
    out: list[Any] = []
    rec = out.append
    name = store.apply_schedule(spec(), now=T0).name
    rec(("version-again", store.apply_schedule(spec(), now=T0 + timedelta(seconds=1)).version))
    with pytest.raises(VersionMismatch):
        store.apply_schedule(spec(mode="observe"), now=T0, expected_version=7)
    store.set_gate("enforce", now=T0)
    seen_a = store.ensure_status(name, A, schedule_version=1, now=T0)
    seen_b = store.ensure_status(name, B, schedule_version=1, now=T0)
    tr, steps = plan(name, "t1", 1, deploys=(A, B), at=T0)
    moves = [
        StatusMove(seen_a, {"phase": "releasing", "transition_id": "t1", "interval_start": T0}),
        StatusMove(seen_b, {"phase": "releasing", "transition_id": "t1", "interval_start": T0}),
    ]
    rec(("open", "t1" in store.open_many([Draft(tr, steps, moves)], now=T0)))
    again = store.open_many([Draft(tr, steps, [])], now=T0)  # a taken id: nothing written
    rec(("open-again", "t1" in again))
    rec(("stale-cas", store.cas_status(seen_a, now=T0, phase="failed")))  # seen_a is stale now
    a_now = store.get_status(name, A)
    back = store.cas_status(a_now, now=T0, interval_start=T0 - timedelta(hours=1))
    rec(("backwards", back))  # R-PASS-14: the interval start never moves back
    step_a, step_b = store.get_action("t1-" + A), store.get_action("t1-" + B)
    a_row = store.get_status(name, A)
    fenced = store.fence_many([(step_a, a_row, {"phase": "releasing"})], now=T0)[step_a.id]
    rec(("fence", fenced.ok, fenced.reason, asdict(fenced.status) if fenced.status else None))
    rec(
        (
            "fence-again",
            store.fence_many([(step_a, store.get_status(name, A), {})], now=T0)[step_a.id].reason,
        )
    )
    rec(
        (
            "write-first-lost",
            store.write_each(  # the group's step lost: its dependent is not written either
                [
                    StepWrite(
                        step_b.id,
                        ("accepted",),
                        {"state": "failed"},
                        dependents=(StepWrite(step_a.id, ("submitting",), {"state": "cancelled"}),),
                    )
                ],
                now=T0,
            ),
        )
    )
    rec(
        (
            "write-each",
            store.write_each(
                [
                    StepWrite(step_a.id, ("submitting",), {"state": "accepted", "accepted_at": T0}),
                    StepWrite(step_b.id, ("accepted",), {"state": "converged"}),
                ],
                now=T0,
            ),
        )
    )
    store.apply_schedule(spec(enabled=False), now=T0 + timedelta(minutes=1))
    b_row = store.get_status(name, B)
    rec(
        (
            "fence-many",
            {
                k: (v.ok, v.reason)
                for k, v in store.fence_many([(step_b, b_row, {})], now=T0).items()
            },
        )
    )
    with pytest.raises(ScheduleInFlight):
        store.delete_schedule(name, now=T0)
    rec(
        (
            "claims",
            [
                asdict(c)
                for c in store.claim_due(
                    holder="e1", now=T0 + timedelta(minutes=2), limit=10, lease_s=15
                )
            ],
        )
    )
    rec(
        (
            "claims-other",
            store.claim_due(holder="e2", now=T0 + timedelta(minutes=2), limit=10, lease_s=15),
        )
    )
    rec(
        (
            "claims-expired",
            [
                c.claimed_by
                for c in store.claim_due(
                    holder="e2", now=T0 + timedelta(minutes=3), limit=10, lease_s=15
                )
            ],
        )
    )
    rec(("renew", store.renew_claims(holder="e1", now=T0, lease_s=15)))
    row = store.due_rows([name])[name]
    store.set_gate("enforce", now=T0 + timedelta(minutes=4))  # a mark while e2 visits
    store.finish_due([NextDue(name, row.revision, T0 + timedelta(hours=9))], holder="e2")
    rec(("due-after-mark", [asdict(r) for r in store.due_rows([name]).values()]))
    rec(("hasten", store.hasten([A], now=T0 + timedelta(minutes=5))))
    with store.lock("pass", holder="e1", now=T0, ttl_s=120) as first:
        with store.lock("pass", holder="e2", now=T0 + timedelta(seconds=60), ttl_s=120) as second:
            rec(("lock", first.acquired, second.acquired))
        with store.lock("pass", holder="e2", now=T0 + timedelta(seconds=120), ttl_s=120) as late:
            rec(("lock-expired", late.acquired))
    rec(("deleted", asdict(store.delete_schedule(name, now=T0 + timedelta(minutes=6), force=True))))
    rec(("transitions", [asdict(t) for t in store.list_transitions()]))
    rec(("actions", [asdict(a) for a in store.list_actions()]))
    rec(
        (
            "events",
            [
                (e.id, e.at, e.schedule, e.deploy_id, e.kind, e.phase, e.reason, e.detail)
                for e in store.list_events(limit=1000)
            ],
        )
    )
    rec(("readings", store.metric_readings()))
    rec(("pruned", store.prune(before=T0 + timedelta(days=1))))
    rec(("left", [asdict(t) for t in store.list_transitions()], len(store.list_events(limit=1000))))
    return out


def test_the_memory_store_answers_every_call_as_the_sql_store_does(sqlite_url: str) -> None:
    sql = script(Store.open(sqlite_url))
    memory = script(MemoryStore(VirtualClock(T0)))
    got = dict((r[0], r[1:]) for r in memory)
    assert got["open"] == (True,) and got["open-again"] == (False,)
    assert got["stale-cas"] == (None,) and got["backwards"] == (None,)
    assert got["fence"][:2] == (True, None) and got["fence-again"] == ("lost_race",)
    assert got["write-first-lost"] == ({},)
    assert got["fence-many"] == ({"t1-" + B: (False, "schedule_version_changed")},)
    assert got["claims-other"] == ([],) and got["claims-expired"] == (["e2"],)
    assert got["lock"] == (True, False) and got["lock-expired"] == (True,)
    for mine, theirs in zip(memory, sql, strict=True):
        assert mine == theirs, mine[0]


def test_a_failed_transaction_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore(VirtualClock(T0))
    store.apply_schedule(spec(), now=T0)
    store.set_gate("observe", now=T0)
    before = (store.get_gate(), store.due_rows(["seed-weekday"]), store.list_events())

    def refuse(*args: Any, **kw: Any) -> None:
        raise RuntimeError("event write failed")

    monkeypatch.setattr(store, "_event", refuse)
    with pytest.raises(RuntimeError):
        store.set_gate("enforce", now=T0 + timedelta(seconds=1))
    monkeypatch.undo()
    assert (store.get_gate(), store.due_rows(["seed-weekday"]), store.list_events()) == before
    other = load_schedule(
        {
            "name": "other",
            "timezone": "UTC",
            "targets": [
                {"model_deploy_id": "free-one", "default_state": "running"},
                {"model_deploy_id": A, "default_state": "running"},
            ],
        }
    )
    with pytest.raises(TargetOwned):
        store.apply_schedule(other, now=T0)
    assert store.owner_of("free-one") is None and store.find_schedule("other") is None


def test_rows_handed_out_are_copies_and_naive_datetimes_are_refused() -> None:
    store = MemoryStore(VirtualClock(T0))
    name = store.apply_schedule(spec(), now=T0).name
    seen = store.ensure_status(name, A, schedule_version=1, now=T0)
    row = store.cas_status(seen, now=T0, detail={"observed_state": "READY", "uuids": ("g0",)})
    assert row is not None and row.detail == {
        "observed_state": "READY",
        "uuids": ["g0"],
    }  # through JSON
    row.detail["observed_state"] = "mutated by a caller"
    assert store.get_status(name, A).detail["observed_state"] == "READY"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="naive"):
        store.cas_status(store.get_status(name, A), now=datetime(2026, 10, 19, 11, 0))  # type: ignore[arg-type]
    assert store.database_now() == T0  # the injected clock


def test_the_memory_ledger_is_one_book_for_the_store_and_a_pool() -> None:
    book = MemoryReservationBook()
    store = MemoryStore(VirtualClock(T0), ledger=book)
    rsv = ReservationSpec(
        id="rsv-a",
        node="hgx-01",
        gpu_uuids=("GPU-00000000-0000-0000-0000-000000000001",),
        namespace="cmp-a",
        mode=SharingMode.TIME_SLICED,
        gpu_memory_mib=143771,
    )
    book.create(rsv, at=T0, actor="test")
    assert store.ledger() is book and store.ledger().get("rsv-a").node == "hgx-01"
    assert list(book.held_on(None)) == ["rsv-a"]
    with pytest.raises(GpuAlreadyReserved):
        book.create(rsv.model_copy(update={"id": "rsv-b"}), at=T0, actor="test")
    with book.locked("rsv-a") as locked:
        assert locked.id == "rsv-a"
    book.release("rsv-a", at=T0, actor="test")
    assert book.held_on(None) == {} and book.list(include_released=False) == []
    book.create(
        rsv.model_copy(update={"id": "rsv-b"}), at=T0, actor="test"
    )  # its GPU is free again
