"""Database engines for the product's own tables.

One URL names the database (``GPS_DB_URL``; default: a SQLite file under
``var/``). On PostgreSQL every product table lives in its own schema (``gps``
by default) so it can share a database with the Dagster instance; the tables
are declared without a schema and mapped with ``schema_translate_map``. On
SQLite the file is opened in WAL mode with a busy timeout, and write
transactions start with ``BEGIN IMMEDIATE`` so that two processes serialise
instead of failing on lock upgrade.
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

DEFAULT_SCHEMA = "gps"


def default_url(root: Path | None = None) -> str:
    """``GPS_DB_URL`` if set, else ``sqlite:///<root>/var/gps.sqlite``."""
    url = os.environ.get("GPS_DB_URL")
    if url:
        return url
    base = root or Path.cwd()
    (base / "var").mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(base / 'var' / 'gps.sqlite').resolve()}"


def normalise_url(url: str) -> str:
    """Use psycopg2 for PostgreSQL (the driver dagster-postgres needs too)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg2://" + url.split("://", 1)[1]
    return url


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


def create_db_engine(url: str, *, schema: str | None = DEFAULT_SCHEMA, echo: bool = False) -> Engine:
    """Create an engine for ``url``; on PostgreSQL ensure and map the product schema."""
    url = normalise_url(url)
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, echo=echo, connect_args={"timeout": 30})
        _sqlite_pragmas(engine)
        return engine
    engine = sa.create_engine(url, echo=echo, pool_pre_ping=True)
    if schema:
        with engine.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
        engine = engine.execution_options(schema_translate_map={None: schema})
    return engine


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA synchronous=NORMAL")  # WAL: durable across app crashes, cheap commits
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN IMMEDIATE")
