"""The ledger's tables come from Alembic migration 0002, like every product table."""

from __future__ import annotations

import sqlalchemy as sa

from gps_dagster.store import Store, migrate
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.reservation_tables import TABLES
from gps_dagster.store.schema import metadata


def _tables(url: str) -> set[str]:
    engine = create_db_engine(url)
    try:
        with engine.connect() as conn:
            schema = migrate.version_schema(conn)
        return set(sa.inspect(engine).get_table_names(schema=schema))
    finally:
        engine.dispose()


def test_store_open_creates_the_ledger_at_head_0002(db_url: str) -> None:
    store = Store.open(db_url)
    assert migrate.head_revision() not in (None, "0001")  # 0002 and the revisions after it
    assert migrate.current_revision(store.engine) == migrate.head_revision()
    assert {t.name for t in TABLES} <= _tables(db_url)
    store.engine.dispose()


def test_a_database_whose_ledger_predates_the_migration_is_adopted(sqlite_url: str) -> None:
    engine = create_db_engine(sqlite_url)
    migrate.upgrade(engine, "0001")
    metadata.create_all(engine, tables=list(TABLES))  # what the reservations CLI used to do
    assert migrate.upgrade(engine) == migrate.head_revision()
    engine.dispose()
