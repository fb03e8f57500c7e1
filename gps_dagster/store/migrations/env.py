"""Alembic environment: runs on the connection the store hands over.

``gps_dagster.store.migrate.upgrade(engine)`` passes its connection in
``config.attributes['connection']`` so that the PostgreSQL schema mapping
(``schema_translate_map``) of the store engine applies to the migrations and
to Alembic's own version table.
"""

from __future__ import annotations

from alembic import context

import gps_dagster.store.api_tables
import gps_dagster.store.launches
import gps_dagster.store.reservation_tables
import gps_dagster.store.scale_tables
import gps_dagster.store.tables  # noqa: F401  (declares tables on metadata)
from gps_dagster.store.migrate import version_schema
from gps_dagster.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only via the store
    raise RuntimeError("run migrations through gps_dagster.store.migrate.upgrade(engine)")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
    version_table_schema=version_schema(connection),
)
with context.begin_transaction():
    context.run_migrations()
