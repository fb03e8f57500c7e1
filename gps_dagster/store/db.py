"""Database engines for the product's own tables.

One URL names the database (``GPS_DB_URL``; default: a SQLite file under
``var/``). On PostgreSQL every product table lives in its own schema (``gps``
by default) so it can share a database with the Dagster instance; the tables
are declared without a schema and mapped with ``schema_translate_map``. On
SQLite the file is opened in WAL mode with a busy timeout, and write
transactions start with ``BEGIN IMMEDIATE`` so that two processes serialise
instead of failing on lock upgrade.

Database errors are translated here, at the edge (INTERFACES.md): any
connection-level error of the driver (``OperationalError``,
``InterfaceError``, a disconnect) leaves the store as ``StoreUnavailable``, a
temporary error the engine loop survives, never as a raw driver traceback.
"""

# Decisions embodied here (docs/decisions.md):
# * “Product tables in their own schema”
# * “SQLite settings”
# * “A database outage stops the pass, not the engine”
# * “`clock_skew` names the clock that is off against the database's”

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import Engine, ExceptionContext

from gps_dagster.store.errors import StoreUnavailable

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


def database_now(engine: Engine) -> datetime:
    """The database's own clock (PostgreSQL ``clock_timestamp()``; SQLite: the host's clock,
    through SQLite itself): the reference every replica's clock is measured against (R-PASS-14
    #5). Replicas may run on hosts whose clocks disagree; they all share this one."""
    with engine.connect() as conn:
        if is_postgres(engine):
            value: datetime = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
            return value.astimezone(UTC)
        text = conn.execute(sa.text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")).scalar_one()
        return datetime.fromisoformat(text).replace(tzinfo=UTC)


def create_db_engine(
    url: str, *, schema: str | None = DEFAULT_SCHEMA, echo: bool = False
) -> Engine:
    """Create an engine for ``url``; on PostgreSQL ensure and map the product schema."""
    url = normalise_url(url)
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, echo=echo, connect_args={"timeout": 30})
        _sqlite_pragmas(engine)
        _translate_errors(engine)
        return engine
    engine = sa.create_engine(url, echo=echo, pool_pre_ping=True)
    _translate_errors(engine)
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


CONNECTION_ERRORS = (exc.OperationalError, exc.InterfaceError)
SQLITE_OUTAGES = (
    "database is locked",
    "database table is locked",
    "unable to open database",
    "disk i/o error",
    "database or disk is full",
)
"""SQLite reports schema mistakes (``no such table``) as OperationalError too: only these are
outages."""


def _translate_errors(engine: Engine) -> None:
    """Connection-level driver errors become ``StoreUnavailable`` (chained to the original)."""

    @event.listens_for(engine, "handle_error")
    def _on_error(ctx: ExceptionContext) -> BaseException | None:
        if ctx.is_pre_ping or not isinstance(ctx.original_exception, Exception):
            return (
                None  # the pool reconnects on its own; a KeyboardInterrupt / crash stays what it is
            )
        if ctx.is_disconnect or _is_outage(ctx):
            first_line = str(ctx.original_exception).strip().splitlines() or [""]
            return StoreUnavailable(f"{type(ctx.original_exception).__name__}: {first_line[0]}")
        return None


def _is_outage(ctx: ExceptionContext) -> bool:
    if not isinstance(ctx.sqlalchemy_exception, CONNECTION_ERRORS):
        return False
    if ctx.dialect.name != "sqlite":
        return True
    message = str(ctx.original_exception).lower()
    return any(m in message for m in SQLITE_OUTAGES)
