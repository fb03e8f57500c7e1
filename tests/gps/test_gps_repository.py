"""The reservation ledger on SQLite and on a real PostgreSQL (``db_url`` runs both)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from gps_fixtures import EXAMPLE, GPU42_UUID, T0, uuid_n
from sqlalchemy.engine import Engine

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.gps.admission import Admitted, Ineligible, Overcommitted
from gps_dagster.domain.gps.billing import usage
from gps_dagster.domain.gps.errors import (
    InvalidTransition,
    ReservationExists,
    ReservationNotFound,
    StaleGeneration,
)
from gps_dagster.domain.gps.reservations import (
    ReservationSpec,
    ReservationState,
    load_reservation_spec,
    parse_reservation_spec,
)
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.reservations import GpuAlreadyReserved, ReservationRepository, ensure_tables

H = timedelta(hours=1)
GPU42 = parse_reservation_spec(EXAMPLE.read_text())


def _exclusive(rid: str, uuids: list[str]) -> ReservationSpec:
    return load_reservation_spec(
        {
            "id": rid,
            "node": "hla-worker-001",
            "gpu_uuids": uuids,
            "namespace": "cmp-a",
            "mode": "exclusive",
            "gpu_memory_mib": 81559,
        }
    )


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = create_db_engine(db_url)
    ensure_tables(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def repo(engine: Engine) -> ReservationRepository:
    return ReservationRepository(engine)


def test_create_then_get_and_list_round_trip(repo: ReservationRepository) -> None:
    created = repo.create(GPU42, at=T0, actor="alice")
    got = repo.get("rsv-gpu42-shared")
    assert got == created
    assert got.created_at == T0 and got.created_at.tzinfo is not None
    assert got.budget_mib == 136582 and got.generation == 1 and got.state is ReservationState.ACTIVE
    assert [r.id for r in repo.list()] == ["rsv-gpu42-shared"]
    assert repo.history(got.id) == [(T0, ReservationState.ACTIVE)]
    (entry,) = repo.audit(got.id)
    assert (entry.actor, entry.action, entry.old_generation, entry.new_generation) == (
        "alice",
        "create",
        None,
        1,
    )
    assert entry.new_value["gpu_uuids"] == [GPU42_UUID] and entry.new_value["headroom"] == "0.95"


def test_duplicate_id_and_missing_id(repo: ReservationRepository) -> None:
    repo.create(GPU42, at=T0, actor="alice")
    with pytest.raises(ReservationExists):
        repo.create(GPU42, at=T0, actor="alice")
    with pytest.raises(ReservationNotFound):
        repo.get("nope")
    with pytest.raises(ReservationNotFound):
        repo.history("nope")


def test_a_gpu_belongs_to_one_reservation_until_released(repo: ReservationRepository) -> None:
    repo.create(_exclusive("r1", [uuid_n(1), uuid_n(2)]), at=T0, actor="a")
    with pytest.raises(GpuAlreadyReserved) as exc:
        repo.create(
            _exclusive("r2", [uuid_n(3), uuid_n(2).upper().replace("GPU-", "GPU-")]),
            at=T0,
            actor="a",
        )
    assert exc.value.uuids == (uuid_n(2).lower(),)
    assert [r.id for r in repo.list()] == ["r1"]  # nothing half-written
    repo.release("r1", at=T0 + H, actor="a")
    repo.create(_exclusive("r2", [uuid_n(3), uuid_n(2)]), at=T0 + H, actor="a")


def test_repin_is_fenced_by_generation_and_audited(repo: ReservationRepository) -> None:
    repo.create(GPU42, at=T0, actor="alice")
    moved = repo.repin(GPU42.id, [uuid_n(5)], expected_generation=1, at=T0 + H, actor="bob")
    assert moved.generation == 2 and moved.gpu_uuids == (uuid_n(5),)
    with pytest.raises(StaleGeneration) as exc:
        repo.repin(GPU42.id, [uuid_n(6)], expected_generation=1, at=T0 + 2 * H, actor="carol")
    assert (exc.value.expected, exc.value.actual, exc.value.reason) == (1, 2, "stale_generation")
    assert repo.get(GPU42.id).gpu_uuids == (uuid_n(5),)
    entries = repo.audit(GPU42.id)
    assert [(e.action, e.actor) for e in entries] == [("create", "alice"), ("repin", "bob")]
    assert entries[1].old_value == {"gpu_uuids": [GPU42_UUID]} and entries[1].new_value == {
        "gpu_uuids": [uuid_n(5)]
    }
    assert (entries[1].old_generation, entries[1].new_generation, entries[1].at) == (1, 2, T0 + H)


def test_retrying_an_applied_repin_is_success_not_an_error(repo: ReservationRepository) -> None:
    repo.create(GPU42, at=T0, actor="alice")
    first = repo.repin(GPU42.id, [uuid_n(5)], expected_generation=1, at=T0 + H, actor="bob")
    again = repo.repin(GPU42.id, [uuid_n(5)], expected_generation=1, at=T0 + H, actor="bob")
    assert again == first and len(repo.audit(GPU42.id)) == 2


def test_repin_frees_the_old_gpu_and_claims_the_new(repo: ReservationRepository) -> None:
    repo.create(GPU42, at=T0, actor="a")
    repo.create(_exclusive("r1", [uuid_n(1)]), at=T0, actor="a")
    with pytest.raises(GpuAlreadyReserved):
        repo.repin(GPU42.id, [uuid_n(1)], expected_generation=1, at=T0, actor="a")
    assert repo.get(GPU42.id).generation == 1  # the refused re-pin rolled back
    repo.repin(GPU42.id, [uuid_n(5)], expected_generation=1, at=T0, actor="a")
    repo.create(_exclusive("r3", [GPU42_UUID]), at=T0, actor="a")


def test_repin_validates_the_uuids_with_field_paths(repo: ReservationRepository) -> None:
    repo.create(GPU42, at=T0, actor="a")
    with pytest.raises(SpecInvalid) as exc:
        repo.repin(GPU42.id, ["GPU-1", uuid_n(2)], expected_generation=1, at=T0, actor="a")
    assert [(e.path, e.reason) for e in exc.value.errors] == [("gpus[0]", "invalid_gpu_uuid")]
    with pytest.raises(SpecInvalid) as exc:
        repo.repin(GPU42.id, [uuid_n(1), uuid_n(2)], expected_generation=1, at=T0, actor="a")
    assert exc.value.reasons == ("time_sliced_multi_gpu",)


def test_lifecycle_history_feeds_billing(repo: ReservationRepository) -> None:
    repo.create(GPU42, at=T0, actor="a")
    repo.set_state(GPU42.id, ReservationState.DEGRADED, at=T0 + 2 * H, actor="sre")
    repo.set_state(GPU42.id, ReservationState.DEGRADED, at=T0 + 2 * H, actor="sre")  # no-op
    repo.set_state(GPU42.id, ReservationState.ACTIVE, at=T0 + 3 * H, actor="sre")
    released = repo.release(GPU42.id, at=T0 + 5 * H, actor="a")
    assert released.state is ReservationState.RELEASED
    assert (
        repo.release(GPU42.id, at=T0 + 6 * H, actor="a").state is ReservationState.RELEASED
    )  # idempotent
    history = repo.history(GPU42.id)
    assert [s for _, s in history] == [
        ReservationState.ACTIVE,
        ReservationState.DEGRADED,
        ReservationState.ACTIVE,
        ReservationState.RELEASED,
    ]
    assert usage(repo.get(GPU42.id), history, start=T0, end=T0 + 24 * H).billed_seconds == 4 * 3600
    assert repo.list(include_released=False) == []


def test_released_is_final(repo: ReservationRepository) -> None:
    repo.create(GPU42, at=T0, actor="a")
    repo.release(GPU42.id, at=T0 + H, actor="a")
    with pytest.raises(InvalidTransition):
        repo.set_state(GPU42.id, ReservationState.ACTIVE, at=T0 + 2 * H, actor="a")
    with pytest.raises(InvalidTransition):
        repo.repin(GPU42.id, [uuid_n(1)], expected_generation=1, at=T0 + 2 * H, actor="a")


def test_locked_admission_counts_recorded_members(repo: ReservationRepository) -> None:
    repo.create(GPU42, at=T0, actor="a")
    assert isinstance(repo.admit(GPU42.id, "md-a", 80_000, at=T0), Admitted)
    repo.mark_running(GPU42.id, "md-a", at=T0 + H)
    assert isinstance(repo.admit(GPU42.id, "md-c", 40_000, at=T0 + H), Admitted)  # in flight now
    over = repo.admit(GPU42.id, "md-b", 16_583, at=T0 + H)
    assert isinstance(over, Overcommitted)
    assert (over.running_mib, over.in_flight_mib, over.over_by_mib) == (80_000, 40_000, 1)
    assert isinstance(repo.admit(GPU42.id, "md-b", 16_582, at=T0 + H), Admitted)
    assert repo.members(GPU42.id) == {
        "md-a": (80_000, "running"),
        "md-c": (40_000, "in_flight"),
        "md-b": (16_582, "in_flight"),
    }
    repo.remove_member(GPU42.id, "md-a")
    assert isinstance(repo.admit(GPU42.id, "md-x", 80_000, at=T0 + 2 * H), Admitted)


def test_admission_on_a_degraded_reservation_is_refused(repo: ReservationRepository) -> None:
    repo.create(GPU42, at=T0, actor="a")
    repo.set_state(GPU42.id, ReservationState.DEGRADED, at=T0, actor="a")
    assert isinstance(repo.admit(GPU42.id, "md-a", 1, at=T0), Ineligible)
    assert repo.members(GPU42.id) == {}


def test_concurrent_admissions_for_the_last_mib_exactly_one_wins(db_url: str) -> None:
    setup = create_db_engine(db_url)
    ensure_tables(setup)
    ReservationRepository(setup).create(GPU42, at=T0, actor="a")
    ReservationRepository(setup).admit(GPU42.id, "md-a", 136_582 - 1000, at=T0)
    contenders = 6
    barrier = threading.Barrier(contenders)
    results: list[object] = []
    lock = threading.Lock()

    def contend(i: int) -> None:
        engine = create_db_engine(db_url)  # one engine (and connection) per contender
        try:
            barrier.wait()
            got = ReservationRepository(engine).admit(GPU42.id, f"md-{i}", 1000, at=T0)
            with lock:
                results.append(got)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == contenders
    assert sum(isinstance(r, Admitted) for r in results) == 1
    assert sum(isinstance(r, Overcommitted) for r in results) == contenders - 1
    members = ReservationRepository(setup).members(GPU42.id)
    assert sum(mib for mib, _ in members.values()) == 136_582
    setup.dispose()
