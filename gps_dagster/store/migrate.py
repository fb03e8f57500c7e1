"""Apply the Alembic migrations of the product's tables (``gps-dagster db upgrade``).

Called automatically by ``Store.open`` so that a fresh database works on first
use. Several processes may open the store at once (the Dagster daemon, runs,
the CLI): on PostgreSQL a session advisory lock serialises them; on SQLite
``BEGIN IMMEDIATE`` (see ``store/db.py``) does the same.
"""

# Decisions embodied here (docs/decisions.md):
# * “Product tables in their own schema”

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from gps_dagster.store.db import is_postgres

_MIGRATIONS = Path(__file__).with_name("migrations")
_MIGRATION_LOCK = 0x6750_5344  # "gPSD": an advisory lock id owned by migrations


def _config(connection: Connection) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return ScriptDirectory.from_config(cfg).get_current_head()


def version_schema(connection: Connection) -> str | None:
    """The schema Alembic's version table lives in (the mapped product schema).

    Alembic looks its version table up through the inspector, which ignores
    ``schema_translate_map``; naming the schema explicitly keeps both in step.
    """
    mapping = connection.get_execution_options().get("schema_translate_map") or {}
    return mapping.get(None)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        opts = {"version_table_schema": version_schema(conn)}
        return MigrationContext.configure(conn, opts=opts).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Upgrade the product tables to ``revision``; return the revision now applied."""
    if current_revision(engine) == head_revision() and revision == "head":
        return head_revision()
    with engine.connect() as conn:
        if is_postgres(engine):
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATION_LOCK})
            conn.commit()
        try:
            command.upgrade(_config(conn), revision)
            conn.commit()
        finally:
            if is_postgres(engine):
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATION_LOCK})
                conn.commit()
    return current_revision(engine)


def autogenerate(engine: Engine, message: str) -> None:  # pragma: no cover - developer tool
    """Write a new revision from the difference between the tables and the database."""
    with engine.connect() as conn:
        command.revision(_config(conn), message=message, autogenerate=True)
