"""schedule names per scope

Schedule names were one global namespace, so a tenant's create answered
``schedule_exists`` for a name another project (or the platform team) used, and could squat a
name another scope would want. A tenant schedule's identity is now ``<project>/<name>``
(``domain/spec.py::Schedule._qualify``); this revision renames every existing ``cmp:<project>``
schedule to that form, in every table that names it, without losing a row:

* ``schedules``: a row under the new name is inserted from the old one (the document's
  ``name`` rewritten), the rows that point at it move, then the old row is deleted (the
  foreign keys of ``target_claims`` and ``schedule_due`` have no ON UPDATE CASCADE);
* ``target_claims``, ``schedule_due``, ``target_status``, ``transitions``, ``actions``,
  ``events``, ``apply_now_requests``: their schedule column follows.

Ids and idempotency keys already written keep the old name (they are opaque, still unique);
a plan open at the upgrade is then replaced at the next pass as after an edit. The audit log
is append-only and keeps the names it recorded. A qualified name longer than the key width
(128) is shortened with a hash of the old name, never dropped.

It also adds ``audit_log.actor_token_id`` (R-API): the id of the API token of a
write in its own column, filled from the actors already written (``token:<name>(<id>)``); and
``api_tokens.expires_at`` (item 15: NULL for every existing token, which stays valid until
revoked); and the table ``ui_sessions`` (item 9: the page's server-side sessions).

Revision ID: 0011
Revises: 0008
Create Date: 2026-12-04 04:00:00.000000
"""

# Decisions embodied here (docs/decisions.md):
# * “Schedule names are per scope: a tenant schedule is `<project>/<name>`”

from __future__ import annotations

import hashlib
import re
from typing import Any

import sqlalchemy as sa
from alembic import op

import gps_dagster.store.schema

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

TS = gps_dagster.store.schema.UtcDateTime(timezone=True)
WIDTH = 128
TOKEN_ACTOR = re.compile(r"^token:.*\(([0-9a-f]{12})\)\Z", re.DOTALL)
FOLLOWERS = (
    ("target_claims", "schedule_name"),
    ("schedule_due", "name"),
    ("target_status", "schedule_name"),
    ("transitions", "schedule_name"),
    ("actions", "schedule_name"),
    ("events", "schedule_name"),
    ("apply_now_requests", "schedule_name"),
)
SCHEDULE_COLUMNS = ("name", "version", "scope", "enabled", "document", "created_at", "updated_at")


def qualified(project: str, name: str) -> str:
    """``<project>/<name>``, shortened to the key width with a hash when longer (kept here: a
    migration must not change with the code)."""
    full = f"{project}/{name}"
    if len(full) <= WIDTH:
        return full
    tag = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{project}/{name[: WIDTH - len(project) - 10].rstrip('._-')}-{tag}"


def _schedules(meta: sa.MetaData) -> sa.Table:
    # Table (not text) so that the engine's schema mapping (PostgreSQL schema gps) applies
    return sa.Table(
        "schedules",
        meta,
        *(sa.Column(c) for c in SCHEDULE_COLUMNS[:4]),
        sa.Column("document", sa.JSON),
        *(sa.Column(c) for c in SCHEDULE_COLUMNS[5:]),
    )


def _rename(conn: Any, meta: sa.MetaData, old: str, new: str, document: dict[str, Any]) -> None:
    sched = meta.tables["schedules"]
    cols = [sched.c[c] for c in SCHEDULE_COLUMNS]
    copied = [sa.literal(new, sa.String()).label("name"), *cols[1:]]
    conn.execute(
        sched.insert().from_select(SCHEDULE_COLUMNS, sa.select(*copied).where(sched.c.name == old))
    )
    conn.execute(
        sched.update().where(sched.c.name == new).values(document={**document, "name": new})
    )
    for table, column in FOLLOWERS:
        follower = (
            meta.tables[table] if table in meta.tables else sa.Table(table, meta, sa.Column(column))
        )
        conn.execute(follower.update().where(follower.c[column] == old).values({column: new}))
    conn.execute(sched.delete().where(sched.c.name == old))


def _schema(conn: Any) -> str | None:
    """The product schema the engine maps tables to (``gps`` on PostgreSQL, none on SQLite)."""
    mapping = conn.get_execution_options().get("schema_translate_map") or {}
    return mapping.get(None)


def _token_ids(conn: Any) -> None:
    log = sa.Table(
        "audit_log", sa.MetaData(), sa.Column("id"), sa.Column("actor"), sa.Column("actor_token_id")
    )
    for row_id, actor in conn.execute(
        sa.select(log.c.id, log.c.actor).where(log.c.actor.like("token:%"))
    ):
        match = TOKEN_ACTOR.match(actor)
        if match:
            conn.execute(
                log.update().where(log.c.id == row_id).values(actor_token_id=match.group(1))
            )


def upgrade() -> None:
    conn = op.get_bind()
    schema = _schema(conn)  # ALTER TABLE is not rewritten by the schema mapping: name it
    op.add_column(
        "audit_log", sa.Column("actor_token_id", sa.String(length=32), nullable=True), schema=schema
    )
    op.create_index(
        op.f("ix_audit_log_actor_token_id"), "audit_log", ["actor_token_id"], schema=schema
    )
    op.add_column("api_tokens", sa.Column("expires_at", TS, nullable=True), schema=schema)
    op.create_table(
        "ui_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("token_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ui_sessions")),
    )
    op.create_index(op.f("ix_ui_sessions_token_id"), "ui_sessions", ["token_id"])
    op.create_index(op.f("ix_ui_sessions_expires_at"), "ui_sessions", ["expires_at"])
    _token_ids(conn)
    meta = sa.MetaData()
    sched = _schedules(meta)
    rows = conn.execute(
        sa.select(sched.c.name, sched.c.scope, sched.c.document).where(sched.c.scope.like("cmp:%"))
    ).all()
    for name, scope, document in rows:
        if "/" not in name:
            _rename(conn, meta, name, qualified(scope[4:], name), dict(document))


def downgrade() -> None:
    """Back to one namespace: refused (nothing changed) when two scopes now share a name."""
    conn = op.get_bind()
    meta = sa.MetaData()
    sched = _schedules(meta)
    rows = conn.execute(
        sa.select(sched.c.name, sched.c.document).where(sched.c.name.like("%/%"))
    ).all()
    taken = set(conn.execute(sa.select(sched.c.name).where(sched.c.name.not_like("%/%"))).scalars())
    wanted = [(name, name.rpartition("/")[2], dict(doc)) for name, doc in rows]
    clash = sorted(
        {bare for _, bare, _ in wanted if bare in taken}
        | {bare for bare in (w[1] for w in wanted) if [w[1] for w in wanted].count(bare) > 1}
    )
    if clash:
        raise RuntimeError(
            f"cannot downgrade below 0011: schedule names {', '.join(clash)} exist in several "
            "scopes; rename or delete all but one of each first"
        )
    for name, bare, doc in wanted:
        _rename(conn, meta, name, bare, doc)
    schema = _schema(conn)
    op.drop_index(op.f("ix_audit_log_actor_token_id"), table_name="audit_log", schema=schema)
    op.drop_column("audit_log", "actor_token_id", schema=schema)
    op.drop_column("api_tokens", "expires_at", schema=schema)
    op.drop_index(op.f("ix_ui_sessions_expires_at"), table_name="ui_sessions")
    op.drop_index(op.f("ix_ui_sessions_token_id"), table_name="ui_sessions")
    op.drop_table("ui_sessions")
