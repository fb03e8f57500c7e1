"""Two processes loading a pool on a fresh PostgreSQL database at once do not race.

``metadata.create_all`` checks, then creates: without a lock, the second creator dies on a
duplicate type. The test holds the schema lock itself and shows a creator waits for it, then
finishes once it is released — the check and the create are one serialised step.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from gps_dagster.backends.sim import schema
from gps_dagster.store.db import create_db_engine


@pytest.mark.postgres
def test_creating_the_sim_tables_waits_for_the_schema_lock(pg_url: str) -> None:
    engine = create_db_engine(pg_url)
    holder = engine.connect()
    holder.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": schema.SCHEMA_LOCK})
    done = threading.Event()
    errors: list[BaseException] = []

    def create() -> None:
        try:
            schema.ensure_schema(create_db_engine(pg_url))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=create, daemon=True)
    worker.start()
    assert not done.wait(1.0), "the tables were created without taking the schema lock"
    assert not sa.inspect(engine).has_table("sim_pool", schema="gps")
    holder.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": schema.SCHEMA_LOCK})
    holder.close()
    assert done.wait(30) and errors == []
    assert sa.inspect(engine).has_table("sim_pool", schema="gps")
    engine.dispose()
