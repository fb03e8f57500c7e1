"""target claims pinned to the object they claimed

A claim names a deploy id, and on Kubernetes the id is a label any object may carry: a
Deployment deleted and re-created by GitOps (or by hand) under the same name is another object
(another ``metadata.uid``). ``target_claims.instance`` pins the claim to the object the engine
first saw (``DeployView.instance``: kind, namespace/name, uid); ``pinned_at`` says when. A
different object behind the id is ``ineligible{deploy_replaced}`` until an operator re-claims it
(``gps-dagster schedules reclaim``). Existing claims start unpinned: the next pass pins them.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 04:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gps_dagster.store.schema
from gps_dagster.store.migrate import version_schema

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TS = gps_dagster.store.schema.UtcDateTime(timezone=True)


def _schema() -> str | None:
    """ALTER TABLE names its table as written, past the store's ``schema_translate_map``: name
    the mapped schema (PostgreSQL ``gps``; None on SQLite) as the version table does."""
    return version_schema(op.get_bind())


def upgrade() -> None:
    with op.batch_alter_table("target_claims", schema=_schema()) as batch:
        batch.add_column(sa.Column("instance", sa.String(length=400), nullable=True))
        batch.add_column(sa.Column("pinned_at", TS, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("target_claims", schema=_schema()) as batch:
        batch.drop_column("pinned_at")
        batch.drop_column("instance")
