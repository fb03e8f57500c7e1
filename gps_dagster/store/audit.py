"""The audit log of every write (who, what, when, version), readable by admins.

``record`` takes the caller's connection: the audit row commits or rolls back
with the write it describes, so the log never claims a write that did not
happen, nor misses one that did.
"""

# Decisions embodied here (docs/decisions.md):
# * “Audit”
# * “Token names 1-64 printable; the token id in its own audit column”

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from gps_dagster.store.api_tables import audit_log
from gps_dagster.store.shapes import SYSTEM_ACTOR, AuditRow, token_id_of

__all__ = ["SYSTEM_ACTOR", "AuditRow", "page", "record", "token_id_of"]


def record(
    conn: Connection,
    *,
    at: datetime,
    actor: str,
    action: str,
    kind: str,
    name: str,
    scope: str | None = None,
    version: int | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Append one audit row inside the caller's transaction."""
    conn.execute(
        audit_log.insert().values(
            at=at,
            actor=actor[:160],
            actor_token_id=token_id_of(actor),
            action=action,
            object_kind=kind,
            object_name=name,
            scope=scope,
            version=version,
            detail=detail,
        )
    )


def page(
    engine: Engine, *, after_id: int = 0, limit: int = 100, name: str | None = None
) -> list[AuditRow]:
    """Audit rows with ``id > after_id``, oldest first (a cursor page)."""
    query = (
        sa.select(audit_log).where(audit_log.c.id > after_id).order_by(audit_log.c.id).limit(limit)
    )
    if name is not None:
        query = query.where(audit_log.c.object_name == name)
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    return [
        AuditRow(
            r.id,
            r.at,
            r.actor,
            r.action,
            r.object_kind,
            r.object_name,
            r.scope,
            r.version,
            r.detail,
            r.actor_token_id,
        )
        for r in rows
    ]
