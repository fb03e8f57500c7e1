"""launch claims

The ``launches`` table (store/launches.py): one row per plan run key, owned by
the first Dagster origin (sensor or schedule) that claimed its launch.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import gps_dagster.store.schema

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "launches",
        sa.Column("run_key", sa.String(length=200), nullable=False),
        sa.Column("transition_id", sa.String(length=80), nullable=False),
        sa.Column("origin", sa.String(length=200), nullable=False),
        sa.Column(
            "claimed_at", gps_dagster.store.schema.UtcDateTime(timezone=True), nullable=False
        ),
        sa.PrimaryKeyConstraint("run_key", name=op.f("pk_launches")),
    )
    with op.batch_alter_table("launches", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_launches_transition_id"), ["transition_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("launches", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_launches_transition_id"))
    op.drop_table("launches")
