"""Tables of the schedule API (R-API): bearer tokens and the audit log.

* ``api_tokens`` — one row per token: a public id, a scope (``admin`` or
  ``cmp:<project>``) and the SHA-256 of its secret. The secret itself is shown
  once at creation and never stored.
* ``ui_sessions`` — the timeline page's sessions: the SHA-256 of the cookie's secret, the
  token that signed in, an expiry, the sign-out (``store/sessions.py``).
* ``audit_log`` — append-only: who (actor), what (action on an object), when,
  and the schedule version the write produced. Written in the same transaction
  as the write it records, so there is no write without its audit row.
"""

from __future__ import annotations

import sqlalchemy as sa

from gps_dagster.store.schema import UtcDateTime, metadata

UTC_TS = UtcDateTime()

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(120), nullable=False),
    sa.Column("scope", sa.String(80), nullable=False),
    sa.Column("secret_sha256", sa.String(64), nullable=False),
    sa.Column("created_at", UTC_TS, nullable=False),
    sa.Column("created_by", sa.String(120), nullable=False),
    sa.Column("revoked_at", UTC_TS),
    sa.Column("expires_at", UTC_TS),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", UTC_TS, nullable=False, index=True),
    sa.Column("actor", sa.String(160), nullable=False),
    sa.Column("actor_token_id", sa.String(32), index=True),
    sa.Column("action", sa.String(60), nullable=False),
    sa.Column("object_kind", sa.String(40), nullable=False),
    sa.Column("object_name", sa.String(200), nullable=False, index=True),
    sa.Column("scope", sa.String(80)),
    sa.Column("version", sa.Integer),
    sa.Column("detail", sa.JSON),
)

ui_sessions = sa.Table(
    "ui_sessions",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("token_id", sa.String(32), nullable=False, index=True),
    sa.Column("created_at", UTC_TS, nullable=False),
    sa.Column("expires_at", UTC_TS, nullable=False, index=True),
    sa.Column("revoked_at", UTC_TS),
)
