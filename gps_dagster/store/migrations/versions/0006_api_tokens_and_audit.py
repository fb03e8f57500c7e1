"""api tokens and audit log

The schedule API's tables (store/api_tables.py): hashed bearer tokens and the
append-only audit log of every write.

Revision ID: 0006
Revises: 0002
Create Date: 2026-12-02 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gps_dagster.store.schema

revision = "0006"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("scope", sa.String(length=80), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column(
            "created_at", gps_dagster.store.schema.UtcDateTime(timezone=True), nullable=False
        ),
        sa.Column("created_by", sa.String(length=120), nullable=False),
        sa.Column("revoked_at", gps_dagster.store.schema.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", gps_dagster.store.schema.UtcDateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=160), nullable=False),
        sa.Column("action", sa.String(length=60), nullable=False),
        sa.Column("object_kind", sa.String(length=40), nullable=False),
        sa.Column("object_name", sa.String(length=200), nullable=False),
        sa.Column("scope", sa.String(length=80), nullable=True),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_log_at"), ["at"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_log_object_name"), ["object_name"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_log_object_name"))
        batch_op.drop_index(batch_op.f("ix_audit_log_at"))
    op.drop_table("audit_log")
    op.drop_table("api_tokens")
