"""Tables of the schedule engine (R-MODEL, R-PASS): the product's durable state.

* ``schedules`` — the spec document and its ``version`` (R-MODEL-8).
* ``target_claims`` — one row per owned deploy; the primary key on
  ``deploy_id`` is the ownership rule of R-MODEL-6 (never a read-then-write);
  ``instance`` pins it to the object first seen behind the id (R-K8S-8).
* ``target_status`` — the phase machine per target, written by CAS on
  (``status_version``, ``target_generation``) (R-PASS-11).
* ``transitions`` / ``actions`` — transition plans and their steps; the
  idempotency key of a step is unique (R-PASS-7, R-PASS-10).
* ``events`` — an append-only log of phase changes and errors.
* ``control`` — the execution gate and the paging cursor (R-PASS-1, R-PASS-3).
* ``leases`` — the SQLite stand-in for the PostgreSQL advisory lock.
* ``apply_now_requests`` — operator requests served by the engine or a sensor.
"""

from __future__ import annotations

import sqlalchemy as sa

from gps_dagster.store.schema import UtcDateTime, metadata

UTC_TS = UtcDateTime()

schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("scope", sa.String(80), nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("document", sa.JSON, nullable=False),
    sa.Column("created_at", UTC_TS, nullable=False),
    sa.Column("updated_at", UTC_TS, nullable=False),
)

target_claims = sa.Table(
    "target_claims",
    metadata,
    sa.Column("deploy_id", sa.String(200), primary_key=True),
    sa.Column(
        "schedule_name",
        sa.String(128),
        sa.ForeignKey("schedules.name", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("claimed_at", UTC_TS, nullable=False),
    # the object the claim is pinned to (DeployView.instance), set at first sight (0009)
    sa.Column("instance", sa.String(400)),
    sa.Column("pinned_at", UTC_TS),
)

target_status = sa.Table(
    "target_status",
    metadata,
    sa.Column("schedule_name", sa.String(128), primary_key=True),
    sa.Column("deploy_id", sa.String(200), primary_key=True),
    sa.Column("phase", sa.String(40), nullable=False),
    sa.Column("reason", sa.String(80)),
    sa.Column("fix", sa.Text),
    sa.Column("detail", sa.JSON),
    sa.Column("status_version", sa.Integer, nullable=False),
    sa.Column("target_generation", sa.Integer, nullable=False),
    sa.Column("schedule_version", sa.Integer, nullable=False),
    sa.Column("interval_start", UTC_TS),
    sa.Column("interval_end", UTC_TS),
    sa.Column("intent", sa.JSON),
    sa.Column("transition_id", sa.String(80)),
    sa.Column("last_action_id", sa.String(200)),
    sa.Column("phase_since", UTC_TS, nullable=False),
    sa.Column("converged_at", UTC_TS),
    sa.Column("updated_at", UTC_TS, nullable=False),
    # who wrote interval_start, and that replica's clock minus the database's clock at the
    # write (R-PASS-14: a clock_skew event names the fast replica, not the one that noticed)
    sa.Column("interval_writer", sa.String(200)),
    sa.Column("interval_writer_offset_s", sa.Float),
)

transitions = sa.Table(
    "transitions",
    metadata,
    sa.Column("id", sa.String(80), primary_key=True),
    sa.Column("schedule_name", sa.String(128), nullable=False, index=True),
    sa.Column("schedule_version", sa.Integer, nullable=False),
    sa.Column("boundary_at", UTC_TS, nullable=False),
    sa.Column("order", sa.String(20), nullable=False),
    sa.Column("trigger", sa.String(40), nullable=False),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("targets", sa.JSON, nullable=False),
    sa.Column("created_at", UTC_TS, nullable=False),
    sa.Column("lag_seconds", sa.Float),
)

actions = sa.Table(
    "actions",
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("idempotency_key", sa.String(200), nullable=False, unique=True),
    sa.Column("transition_id", sa.String(80), nullable=False, index=True),
    sa.Column("schedule_name", sa.String(128), nullable=False),
    sa.Column("schedule_version", sa.Integer, nullable=False),
    sa.Column("deploy_id", sa.String(200), nullable=False, index=True),
    sa.Column("interval_start", UTC_TS, nullable=False),
    sa.Column("step", sa.String(40), nullable=False),
    sa.Column("order", sa.String(20), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("replicas", sa.Integer),
    sa.Column("delta_replicas", sa.Integer),
    sa.Column("etag_used", sa.String(120)),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("operation_ids", sa.JSON),
    sa.Column("reason", sa.String(80)),
    sa.Column("fix", sa.Text),
    sa.Column("detail", sa.JSON),
    sa.Column("created_at", UTC_TS, nullable=False),
    sa.Column("submitted_at", UTC_TS),
    sa.Column("accepted_at", UTC_TS),
    sa.Column("finished_at", UTC_TS),
    sa.Column("deadline_at", UTC_TS),
    sa.Column("updated_at", UTC_TS, nullable=False),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", UTC_TS, nullable=False, index=True),
    sa.Column("schedule_name", sa.String(128), index=True),
    sa.Column("deploy_id", sa.String(200)),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("phase", sa.String(40)),
    sa.Column("reason", sa.String(80)),
    sa.Column("detail", sa.JSON),
)

control = sa.Table(
    "control",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(400), nullable=False),
    sa.Column("updated_at", UTC_TS, nullable=False),
)

leases = sa.Table(
    "leases",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("holder", sa.String(120), nullable=False),
    sa.Column("expires_at", UTC_TS, nullable=False),
)

apply_now_requests = sa.Table(
    "apply_now_requests",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("schedule_name", sa.String(128), nullable=False, index=True),
    sa.Column("actor", sa.String(120), nullable=False),
    sa.Column("requested_at", UTC_TS, nullable=False),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("result", sa.Text),
    sa.Column("handled_at", UTC_TS),
)
