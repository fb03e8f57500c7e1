"""Claims pinned to the object behind the deploy id (R-K8S-8, migration 0009), on SQLite and
PostgreSQL. The engine's use of the pin is tested on the control plane
(``tests/k8s/test_deploy_identity.py``); here: the migration, the write-once pin, the re-claim."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from gps_dagster.domain.schedules import load_schedule
from gps_dagster.store import Store, migrate
from gps_dagster.store import tables as t
from gps_dagster.store.audit import page
from gps_dagster.store.db import create_db_engine
from tests.engine.harness import SEED_MONDAY, A, B, seed_schedule

NOW = SEED_MONDAY
OLD = "Deployment team/md-qwen32b uid=0001"
NEW = "Deployment team/md-qwen32b uid=0002"


def test_migration_0009_keeps_the_claims_of_an_older_database_unpinned(db_url: str) -> None:
    engine = create_db_engine(db_url)
    assert migrate.upgrade(engine, "0008") == "0008"
    spec = load_schedule(seed_schedule())
    with engine.begin() as conn:  # claims written at 0008 (the tables as they were then)
        conn.execute(
            t.schedules.insert().values(
                name=spec.name,
                version=1,
                scope="admin",
                enabled=True,
                document=spec.to_document(),
                created_at=NOW,
                updated_at=NOW,
            )
        )
        for deploy in (A, B):
            conn.execute(
                t.target_claims.insert().values(
                    deploy_id=deploy, schedule_name=spec.name, claimed_at=NOW
                )
            )
    assert migrate.upgrade(engine) == migrate.head_revision()  # through 0009 (and later ones)
    store = Store(engine)
    assert store.pins_for([A, B]) == {A: None, B: None}
    assert store.pin(spec.name, B, OLD, now=NOW) == OLD
    engine.dispose()


def test_a_pin_is_written_once_and_another_object_seen_later_does_not_replace_it(
    db_url: str,
) -> None:
    store = Store.open(db_url)
    name = store.apply_schedule(load_schedule(seed_schedule()), now=NOW).name
    assert store.pin(name, B, OLD, now=NOW) == OLD
    assert store.pin(name, B, NEW, now=NOW + timedelta(seconds=30)) == OLD  # the first stays
    assert store.pins_for([A, B, "md-unknown"]) == {A: None, B: OLD}
    assert store.pin("another-schedule", A, NEW, now=NOW) is None  # not its claim: nothing
    with store.engine.connect() as conn:
        pinned_at = conn.execute(
            sa.select(t.target_claims.c.pinned_at).where(t.target_claims.c.deploy_id == B)
        ).scalar_one()
    assert pinned_at == NOW
    store.engine.dispose()


def test_a_reclaim_forgets_the_pin_with_an_event_and_an_audit_row(db_url: str) -> None:
    store = Store.open(db_url)
    name = store.apply_schedule(load_schedule(seed_schedule()), now=NOW).name
    store.pin(name, B, OLD, now=NOW)
    later = NOW + timedelta(minutes=5)
    assert store.reclaim(name, B, now=later, actor="sre@example") == OLD
    assert store.pins_for([B]) == {B: None}
    assert store.pin(name, B, NEW, now=later) == NEW  # the next pass pins what it then sees
    (event,) = [e for e in store.list_events(name, limit=100) if e.kind == "target_reclaimed"]
    assert (event.deploy_id, event.detail) == (B, {"forgotten": OLD})
    rows = [r for r in page(store.engine, limit=100) if r.action == "target_reclaimed"]
    assert [(r.actor, r.object_name, r.detail) for r in rows] == [
        ("sre@example", name, {"deploy_id": B, "forgotten": OLD})
    ]
    assert store.due_at(name) == later
    with pytest.raises(KeyError, match="does not claim"):
        store.reclaim(name, "md-unknown", now=later)
    store.engine.dispose()


def test_a_dropped_target_loses_its_pin_with_its_claim(db_url: str) -> None:
    store = Store.open(db_url)
    doc = seed_schedule()
    name = store.apply_schedule(load_schedule(doc), now=NOW).name
    store.pin(name, B, OLD, now=NOW)
    doc["targets"] = [x for x in doc["targets"] if x["model_deploy_id"] == A]
    doc["windows"] = [
        {**w, "states": [s for s in w["states"] if s["model_deploy_id"] == A]}
        for w in doc["windows"]
    ]
    store.apply_schedule(load_schedule(doc), now=NOW)
    assert store.pins_for([A, B]) == {A: None}
    store.engine.dispose()
