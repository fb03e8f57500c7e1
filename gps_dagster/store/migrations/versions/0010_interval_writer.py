"""target_status: who wrote the stored interval, and that writer's clock offset

With one replica's clock fast, the healthy replicas reported ``clock_skew`` naming
themselves. ``interval_writer`` (the engine holder that wrote ``interval_start``) and
``interval_writer_offset_s`` (its clock minus the database's clock at the write) let the
replica that finds itself behind name the fast one. Both are NULL for rows written before.

Revision ID: 0010
Revises: 0008
Create Date: 2026-12-02 04:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gps_dagster.store.migrate import version_schema

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def _schema() -> str | None:
    """The mapped product schema (``gps`` on PostgreSQL): ``ALTER TABLE`` is not translated."""
    return version_schema(op.get_bind())


def upgrade() -> None:
    schema = _schema()
    op.add_column(
        "target_status", sa.Column("interval_writer", sa.String(length=200)), schema=schema
    )
    op.add_column("target_status", sa.Column("interval_writer_offset_s", sa.Float()), schema=schema)


def downgrade() -> None:
    with op.batch_alter_table("target_status", schema=_schema()) as batch:
        batch.drop_column("interval_writer_offset_s")
        batch.drop_column("interval_writer")
