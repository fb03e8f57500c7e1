"""Tables of the GPS reservation ledger (R-GPS-1, R-GPS-8, R-GPS-9), on the shared ``metadata``.

* ``reservation`` — one row per reservation; ``generation`` is the fence of
  re-pin (compare-and-set), ``gpu_uuids`` a JSON list in ledger order.
* ``reservation_gpu`` — one row per reserved GPU UUID (lower-cased) while the
  reservation is not RELEASED: the primary key makes "one GPU, one
  reservation" a database guarantee rather than a read-then-write check.
* ``reservation_audit`` — who did what when, old → new (create, re-pin, state).
* ``reservation_state_history`` — every state change with its time: billing
  reads reservation-hours from it.
* ``reservation_member`` — admitted VRAM shares of time-sliced members
  (``in_flight`` until the member runs): the durable input of admission, so
  concurrent admissions serialise on the reservation row.

Times are stored in UTC and always read back timezone-aware, on SQLite too
(``schema.UtcDateTime``, the type every product table uses). Created by
migration 0002.
"""

from __future__ import annotations

import sqlalchemy as sa

from gps_dagster.store.schema import UtcDateTime, metadata

reservation = sa.Table(
    "reservation",
    metadata,
    sa.Column("id", sa.String(63), primary_key=True),
    sa.Column("node", sa.String(253), nullable=False),
    sa.Column("gpu_uuids", sa.Text, nullable=False, comment="JSON list of GPU UUIDs"),
    sa.Column("namespace", sa.String(63), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("gpu_memory_mib", sa.Integer, nullable=False),
    sa.Column("headroom", sa.String(32), nullable=False, comment="Decimal as text: exact budget"),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.CheckConstraint("generation >= 1", name="generation_positive"),
)

reservation_gpu = sa.Table(
    "reservation_gpu",
    metadata,
    sa.Column("gpu_uuid", sa.String(64), primary_key=True, comment="lower-cased"),
    sa.Column(
        "reservation_id", sa.String(63), sa.ForeignKey("reservation.id"), nullable=False, index=True
    ),
)

reservation_audit = sa.Table(
    "reservation_audit",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "reservation_id", sa.String(63), sa.ForeignKey("reservation.id"), nullable=False, index=True
    ),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("actor", sa.String(255), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("old_generation", sa.Integer, nullable=True),
    sa.Column("new_generation", sa.Integer, nullable=False),
    sa.Column("old_value", sa.Text, nullable=True, comment="JSON"),
    sa.Column("new_value", sa.Text, nullable=False, comment="JSON"),
)

reservation_state_history = sa.Table(
    "reservation_state_history",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "reservation_id", sa.String(63), sa.ForeignKey("reservation.id"), nullable=False, index=True
    ),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
)

reservation_member = sa.Table(
    "reservation_member",
    metadata,
    sa.Column("reservation_id", sa.String(63), sa.ForeignKey("reservation.id"), primary_key=True),
    sa.Column("deploy_id", sa.String(255), primary_key=True),
    sa.Column("memory_mib", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False, comment="in_flight | running"),
    sa.Column(
        "generation", sa.Integer, nullable=False, comment="reservation generation admitted at"
    ),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

TABLES = (
    reservation,
    reservation_gpu,
    reservation_audit,
    reservation_state_history,
    reservation_member,
)
"""Every ledger table, in creation order."""
