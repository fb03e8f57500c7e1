"""due index, metric totals, in-flight indexes

The engine at scale (R-NEXT-4, store/scale_tables.py): ``schedule_due`` (when
each schedule next needs a pass, and which replica claimed it),
``metric_totals`` (counters kept as running totals, seeded here from the rows
already written so no counter moves at the upgrade), a partial index on the
steps still in flight, and the indexes retention uses.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-03 09:00:00.000000
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

import gps_dagster.store.schema

revision = "0008"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = gps_dagster.store.schema.UtcDateTime(timezone=True)
FINISHED = ("converged", "failed", "superseded", "cancelled")
LAG_BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def upgrade() -> None:
    due = op.create_table(
        "schedule_due",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("spec_sha", sa.String(length=64), nullable=True),
        sa.Column("due_at", TS, nullable=True),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.String(length=120), nullable=True),
        sa.Column("claimed_until", TS, nullable=True),
        sa.ForeignKeyConstraint(
            ["name"],
            ["schedules.name"],
            name=op.f("fk_schedule_due_name_schedules"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_schedule_due")),
    )
    op.create_index(op.f("ix_schedule_due_due_at"), "schedule_due", ["due_at"], unique=False)
    totals = op.create_table(
        "metric_totals",
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("labels", sa.String(length=400), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("metric", "labels", name=op.f("pk_metric_totals")),
    )
    in_flight = sa.text("state IN ('pending', 'capacity_wait', 'submitting', 'accepted')")
    op.create_index(
        "ix_actions_in_flight",
        "actions",
        ["schedule_name", "state"],
        postgresql_where=in_flight,
        sqlite_where=in_flight,
    )
    op.create_index("ix_actions_finished_at", "actions", ["finished_at"])
    is_open = sa.text("state = 'open'")
    op.create_index(
        "ix_transitions_open",
        "transitions",
        ["schedule_name"],
        postgresql_where=is_open,
        sqlite_where=is_open,
    )
    op.create_index("ix_transitions_created_at", "transitions", ["created_at"])
    _seed(due, totals)


def spec_sha(document: object) -> str:
    """As ``store.due.spec_sha`` (kept here: a migration must not change with the code)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _seed(due: sa.Table, totals: sa.Table) -> None:
    """Every existing schedule is due now; the counters start where the rows stand."""
    conn = op.get_bind()
    meta = sa.MetaData()  # Table (not text) so that the engine's schema mapping applies
    docs = sa.Table(
        "schedules", meta, sa.Column("name"), sa.Column("version"), sa.Column("document", sa.JSON)
    )
    acts = sa.Table("actions", meta, sa.Column("step"), sa.Column("state"), sa.Column("reason"))
    trs = sa.Table("transitions", meta, sa.Column("lag_seconds", sa.Float))
    schedules = conn.execute(sa.select(docs.c.name, docs.c.version, docs.c.document)).all()
    if schedules:
        op.bulk_insert(
            due,
            [
                {"name": n, "version": v, "spec_sha": spec_sha(doc), "due_at": EPOCH, "revision": 0}
                for n, v, doc in schedules
            ],
        )
    rows: list[dict[str, object]] = []
    finished = conn.execute(
        sa.select(acts.c.step, acts.c.state, acts.c.reason, sa.func.count())
        .where(acts.c.state.in_(FINISHED))
        .group_by(acts.c.step, acts.c.state, acts.c.reason)
    ).all()
    for step, state, reason, n in finished:
        labels = json.dumps([step, state, reason or ""])
        rows.append({"metric": "actions", "labels": labels, "value": float(n)})
    lags = [
        float(x)
        for (x,) in conn.execute(
            sa.select(trs.c.lag_seconds).where(trs.c.lag_seconds.is_not(None))
        ).all()
    ]
    if lags:
        buckets: Counter[str] = Counter()
        for lag in lags:
            for b in LAG_BUCKETS:
                if lag <= b:
                    buckets[json.dumps([str(b)])] += 1
        rows += [
            {"metric": "lag_bucket", "labels": k, "value": float(v)} for k, v in buckets.items()
        ]
        rows.append({"metric": "lag_sum", "labels": "[]", "value": sum(lags)})
        rows.append({"metric": "lag_count", "labels": "[]", "value": float(len(lags))})
    if rows:
        op.bulk_insert(totals, rows)


def downgrade() -> None:
    op.drop_index("ix_transitions_created_at", table_name="transitions")
    op.drop_index("ix_transitions_open", table_name="transitions")
    op.drop_index("ix_actions_finished_at", table_name="actions")
    op.drop_index("ix_actions_in_flight", table_name="actions")
    op.drop_table("metric_totals")
    op.drop_index(op.f("ix_schedule_due_due_at"), table_name="schedule_due")
    op.drop_table("schedule_due")
