"""The store's guarantees the engine relies on, on SQLite and on PostgreSQL (R-MODEL-6/8,
R-PASS-2/11)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from gps_dagster.domain.schedules import load_schedule
from gps_dagster.domain.spec import Schedule
from gps_dagster.store import Store
from gps_dagster.store.db import is_postgres
from gps_dagster.store.errors import InvalidGate, ScheduleNotFound, TargetOwned
from gps_dagster.store.migrate import current_revision, head_revision
from tests.engine.harness import SEED_MONDAY, A, B, seed_schedule

NOW = SEED_MONDAY


def schedule(doc: dict[str, Any] | None = None) -> Schedule:
    return load_schedule(doc or seed_schedule())


def other(*targets: str, name: str = "batch-nightly") -> Schedule:
    return schedule(
        {
            "name": name,
            "timezone": "UTC",
            "targets": [{"model_deploy_id": t, "default_state": "running"} for t in targets],
        }
    )


def test_reapplying_an_unchanged_schedule_keeps_its_version(db_url: str) -> None:
    store = Store.open(db_url)
    first = store.apply_schedule(schedule(), now=NOW)
    again = store.apply_schedule(schedule(), now=NOW + timedelta(minutes=1))
    assert (again.version, again.updated_at) == (1, first.updated_at)
    assert store.get_schedule(first.name).version == 1
    applied = [e for e in store.list_events() if e.kind == "schedule_applied"]
    assert len(applied) == 1  # nothing was written the second time


def test_every_update_bumps_the_version(db_url: str) -> None:
    store = Store.open(db_url)
    assert store.apply_schedule(schedule(), now=NOW).version == 1
    doc = seed_schedule()
    doc["mode"] = "observe"
    rec = store.apply_schedule(schedule(doc), now=NOW + timedelta(minutes=1))
    assert rec.version == 2
    got = store.get_schedule(doc["name"])
    assert (got.version, got.spec.mode.value, got.created_at, got.updated_at) == (
        2,
        "observe",
        NOW,
        NOW + timedelta(minutes=1),
    )


def test_delete_releases_the_claims(db_url: str) -> None:
    store = Store.open(db_url)
    spec = store.apply_schedule(schedule(), now=NOW).spec
    store.ensure_status(spec.name, A, schedule_version=1, now=NOW)
    store.delete_schedule(spec.name, now=NOW)
    assert store.owner_of(A) is None and store.owner_of(B) is None
    assert store.list_status(spec.name) == []
    assert store.apply_schedule(other(A, B), now=NOW).version == 1  # free to claim again
    assert store.owner_of(B) == "batch-nightly"
    with pytest.raises(ScheduleNotFound):
        store.delete_schedule(spec.name, now=NOW)


def test_update_dropping_a_target_releases_its_claim(db_url: str) -> None:
    store = Store.open(db_url)
    store.apply_schedule(other(A, B), now=NOW)
    store.apply_schedule(other(A), now=NOW)
    assert store.owner_of(B) is None and store.owner_of(A) == "batch-nightly"


def test_target_owned_persists_nothing(db_url: str) -> None:
    store = Store.open(db_url)
    store.apply_schedule(schedule(), now=NOW)
    events = len(store.list_events(limit=1000))
    with pytest.raises(TargetOwned) as err:
        store.apply_schedule(other("md-new", B), now=NOW)
    assert (err.value.http_status, err.value.owner, err.value.deploy_id) == (
        409,
        "gpu-pool-h100-shared",
        B,
    )
    assert [r.name for r in store.list_schedules()] == ["gpu-pool-h100-shared"]
    assert store.owner_of("md-new") is None and store.owner_of(B) == "gpu-pool-h100-shared"
    assert len(store.list_events(limit=1000)) == events
    # an update of an existing schedule that grabs an owned target leaves its old version intact
    store.apply_schedule(other("md-new"), now=NOW)
    with pytest.raises(TargetOwned):
        store.apply_schedule(other("md-new", A), now=NOW)
    assert store.get_schedule("batch-nightly").version == 1
    assert store.get_schedule("batch-nightly").spec.target_ids == ("md-new",)


def test_status_cas_loses_on_a_stale_status_version(db_url: str) -> None:
    store = Store.open(db_url)
    store.apply_schedule(schedule(), now=NOW)
    seen = store.ensure_status("gpu-pool-h100-shared", A, schedule_version=1, now=NOW)
    won = store.cas_status(seen, now=NOW, phase="releasing")
    assert won is not None and won.status_version == seen.status_version + 1
    assert store.cas_status(seen, now=NOW, phase="converged") is None  # a writer that read before
    stale_generation = store.cas_status(won, now=NOW, target_generation=won.target_generation + 1)
    assert stale_generation is not None
    forged = replace(
        stale_generation, target_generation=won.target_generation
    )  # right version, old generation
    assert store.cas_status(forged, now=NOW, phase="converged") is None
    final = store.get_status("gpu-pool-h100-shared", A)
    assert final is not None and (final.phase, final.status_version) == (
        "releasing",
        seen.status_version + 2,
    )
    changes = [e for e in store.list_events(limit=1000) if e.kind == "phase_changed"]
    assert [(e.phase, (e.detail or {})["from"]) for e in changes] == [("releasing", "pending")]


def test_pass_lock_is_exclusive_and_a_lease_expires(db_url: str) -> None:
    store = Store.open(db_url)
    with store.lock("pass", holder="e1", now=NOW, ttl_s=120) as first:
        assert first.acquired
        with store.lock("pass", holder="e2", now=NOW + timedelta(seconds=60), ttl_s=120) as second:
            assert not second.acquired
        if not is_postgres(store.engine):  # the SQLite lease of a crashed holder expires
            with store.lock(
                "pass", holder="e2", now=NOW + timedelta(seconds=120), ttl_s=120
            ) as late:
                assert late.acquired
    with store.lock("pass", holder="e3", now=NOW + timedelta(seconds=1), ttl_s=120) as again:
        assert again.acquired


def test_gate_fails_closed_and_rejects_unknown_values(db_url: str) -> None:
    store = Store.open(db_url)
    assert store.get_gate() == "off"
    store.set_gate("observe", now=NOW)
    assert store.get_gate() == "observe"
    with pytest.raises(InvalidGate):
        store.set_gate("on", now=NOW)
    assert store.get_gate() == "observe"


def test_migrations_are_idempotent(db_url: str) -> None:
    first = Store.open(db_url)
    first.apply_schedule(schedule(), now=NOW)
    second = Store.open(db_url)
    assert current_revision(second.engine) == head_revision()
    assert [r.version for r in second.list_schedules()] == [1]
    first.engine.dispose()
    second.engine.dispose()
