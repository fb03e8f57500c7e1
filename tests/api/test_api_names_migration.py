"""Issue 21 items 1, 8, 15: revision 0011 moves a 0008 database's tenant schedules to
``<project>/<name>``.

A database written at 0008 (one global namespace) with rows in every table that names a
schedule is upgraded on SQLite and on PostgreSQL: the tenant schedule and everything that
points at it follow the new name, the admin schedule is untouched, no row is lost, and the
store then reads it as the engine would.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from gps_dagster.store import Store, migrate
from gps_dagster.store import tables as t
from gps_dagster.store.api_tables import api_tokens, audit_log
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.scale_tables import schedule_due

AT = datetime(2026, 10, 21, 3, 0, tzinfo=UTC)
LONG = "x" * 125
TENANT_DOC: dict[str, Any] = {
    "name": "gpu42-shared",
    "timezone": "Asia/Ho_Chi_Minh",
    "scope": "cmp:vision",
    "targets": [{"model_deploy_id": "md-vision-chat", "default_state": "stopped"}],
    "windows": [],
}
ADMIN_DOC: dict[str, Any] = {
    "name": "gpu-pool",
    "timezone": "Asia/Ho_Chi_Minh",
    "scope": "admin",
    "targets": [{"model_deploy_id": "md-llama70b", "default_state": "stopped"}],
    "windows": [],
}
FOLLOWERS = (
    (t.target_claims, "schedule_name"),
    (schedule_due, "name"),
    (t.target_status, "schedule_name"),
    (t.transitions, "schedule_name"),
    (t.actions, "schedule_name"),
    (t.events, "schedule_name"),
    (t.apply_now_requests, "schedule_name"),
)


def _schedule(conn: sa.Connection, doc: dict[str, Any], deploy: str) -> None:
    name = doc["name"]
    conn.execute(
        t.schedules.insert().values(
            name=name,
            version=3,
            scope=doc["scope"],
            enabled=True,
            document=doc,
            created_at=AT,
            updated_at=AT,
        )
    )
    conn.execute(
        t.target_claims.insert().values(deploy_id=deploy, schedule_name=name, claimed_at=AT)
    )
    conn.execute(
        schedule_due.insert().values(name=name, version=3, spec_sha="0" * 64, due_at=AT, revision=1)
    )
    conn.execute(
        t.target_status.insert().values(
            schedule_name=name,
            deploy_id=deploy,
            phase="converged",
            status_version=4,
            target_generation=1,
            schedule_version=3,
            phase_since=AT,
            updated_at=AT,
        )
    )
    tid = f"tr-{deploy}"
    conn.execute(
        t.transitions.insert().values(
            id=tid,
            schedule_name=name,
            schedule_version=3,
            boundary_at=AT,
            order="release_first",
            trigger="boundary",
            state="done",
            targets=[deploy],
            created_at=AT,
        )
    )
    conn.execute(
        t.actions.insert().values(
            id=f"act-{deploy}",
            idempotency_key=f"{name}/v3/{deploy}",
            transition_id=tid,
            schedule_name=name,
            schedule_version=3,
            deploy_id=deploy,
            interval_start=AT,
            step="start",
            order="release_first",
            seq=0,
            state="converged",
            created_at=AT,
            updated_at=AT,
        )
    )
    conn.execute(
        t.events.insert().values(at=AT, schedule_name=name, deploy_id=deploy, kind="phase_changed")
    )
    conn.execute(
        t.apply_now_requests.insert().values(
            schedule_name=name, actor="ops", requested_at=AT, state="done"
        )
    )


def _count(conn: sa.Connection, table: sa.Table, column: str, name: str) -> int:
    return int(
        conn.execute(
            sa.select(sa.func.count()).select_from(table).where(table.c[column] == name)
        ).scalar_one()
    )


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_an_0008_database_with_rows_upgrades_without_loss(
    db: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    engine = create_db_engine(url)
    assert migrate.upgrade(engine, "0008") == "0008"
    with engine.begin() as conn:
        _schedule(conn, TENANT_DOC, "md-vision-chat")
        _schedule(conn, ADMIN_DOC, "md-llama70b")
        _schedule(conn, {**TENANT_DOC, "name": LONG, "targets": []}, "md-vision-batch")
        conn.execute(
            api_tokens.insert().values(
                id="0123456789ab",
                name="ci",
                scope="cmp:vision",
                secret_sha256="0" * 64,
                created_at=AT,
                created_by="ops",
            )
        )
        for actor in ("token:ci(0123456789ab)", "ops"):
            conn.execute(
                audit_log.insert().values(
                    at=AT,
                    actor=actor,
                    action="schedule_created",
                    object_kind="schedule",
                    object_name="gpu42-shared",
                )
            )
    assert migrate.upgrade(engine) == migrate.head_revision()
    with engine.connect() as conn:
        names = set(conn.execute(sa.select(t.schedules.c.name)).scalars())
        long_name = next(n for n in names if n.startswith("vision/x"))
        assert names == {"vision/gpu42-shared", "gpu-pool", long_name}
        assert len(long_name) <= 128
        for table, column in FOLLOWERS:
            assert _count(conn, table, column, "vision/gpu42-shared") == 1, table.name
            assert _count(conn, table, column, "gpu42-shared") == 0, table.name
            assert _count(conn, table, column, "gpu-pool") == 1, table.name
            assert _count(conn, table, column, long_name) == 1, table.name
        key = conn.execute(
            sa.select(t.actions.c.idempotency_key).where(t.actions.c.deploy_id == "md-vision-chat")
        ).scalar_one()
        assert key == "gpu42-shared/v3/md-vision-chat"  # ids stay as written: opaque, still unique
        audit = conn.execute(sa.select(audit_log.c.actor, audit_log.c.actor_token_id)).all()
        assert sorted(audit, key=str) == [("ops", None), ("token:ci(0123456789ab)", "0123456789ab")]
        assert (
            conn.execute(sa.select(api_tokens.c.expires_at)).scalar_one() is None
        )  # valid until revoked
    store = Store(engine)
    record = store.get_schedule("vision/gpu42-shared")
    assert (record.version, record.spec.scope, record.spec.local_name) == (
        3,
        "cmp:vision",
        "gpu42-shared",
    )
    assert record.created_at == AT
    assert store.get_schedule("gpu-pool").spec.name == "gpu-pool"
    assert store.resolve_name("gpu42-shared") == "vision/gpu42-shared"

    migrate_down(engine)
    with engine.connect() as conn:
        shortened = long_name.rpartition("/")[2]  # the hash-shortened name stays shortened
        assert set(conn.execute(sa.select(t.schedules.c.name)).scalars()) == {
            "gpu42-shared",
            "gpu-pool",
            shortened,
        }
        assert _count(conn, t.actions, "schedule_name", "gpu42-shared") == 1
    engine.dispose()


def migrate_down(engine: sa.Engine) -> None:
    from alembic import command

    with engine.connect() as conn:
        command.downgrade(migrate._config(conn), "0008")
        conn.commit()
