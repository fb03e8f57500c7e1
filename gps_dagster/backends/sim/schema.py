"""Tables of the simulated pool, in their own MetaData (not the product schema).

The pool's state lives in the product's database so that separate processes
(Dagster runs, the daemon, the CLI) see one pool. Every row carries the pool
name, so several pools share the tables. Instants are stored as float epoch
seconds (UTC): identical on SQLite and PostgreSQL, and cheap to compare.

GPU life cycle: ``free`` → ``held`` (by a deploy group or a foreign workload)
→ ``terminating`` (pod in its grace period) → ``unpublished`` (released but
not yet seen by the capacity publisher) → ``free``. ``until`` is when the
current state ends. Replica groups: ``pending`` → ``starting`` → ``ready``.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

pools = sa.Table(
    "sim_pool",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("revision", sa.BigInteger, nullable=False, default=0),
    sa.Column("clock_at", sa.Float, nullable=False),
    sa.Column("next_event_at", sa.Float, nullable=True),
    sa.Column("op_seq", sa.BigInteger, nullable=False, default=0),
    sa.Column("settings", sa.Text, nullable=False),
    sa.Column("spec", sa.Text, nullable=False),
)

nodes = sa.Table(
    "sim_node",
    metadata,
    sa.Column("pool", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("ordinal", sa.Integer, nullable=False),
    sa.Column("flavor", sa.String(100), nullable=False),
    sa.Column("region", sa.String(100), nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
)

gpus = sa.Table(
    "sim_gpu",
    metadata,
    sa.Column("pool", sa.String(200), primary_key=True),
    sa.Column("uuid", sa.String(100), primary_key=True),
    sa.Column("node", sa.String(200), nullable=False),
    sa.Column("idx", sa.Integer, nullable=False),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("holder", sa.String(200), nullable=True),
    sa.Column("holder_type", sa.String(20), nullable=True),
    sa.Column("grp", sa.Integer, nullable=True),
    sa.Column("until", sa.Float, nullable=True),
    sa.Index("ix_sim_gpu_state_node", "pool", "state", "node"),
    sa.Index("ix_sim_gpu_until", "pool", "until"),
    sa.Index("ix_sim_gpu_holder", "pool", "holder", "state"),
)

deploys = sa.Table(
    "sim_deploy",
    metadata,
    sa.Column("pool", sa.String(200), primary_key=True),
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("ordinal", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("project", sa.String(200), nullable=True),
    sa.Column("endpoint", sa.String(200), nullable=True),
    sa.Column("flavor", sa.String(100), nullable=True),
    sa.Column("hpa", sa.Boolean, nullable=False),
    sa.Column("node_selector", sa.Text, nullable=False, default="[]"),
    sa.Column("aliases", sa.Text, nullable=False),
    sa.Column("gpus_per_replica", sa.Integer, nullable=False),
    sa.Column("nodes_per_replica", sa.Integer, nullable=False),
    sa.Column("desired", sa.Integer, nullable=False),
    sa.Column("role_min", sa.Integer, nullable=False),
    sa.Column("role_max", sa.Integer, nullable=False),
    sa.Column("running", sa.Boolean, nullable=False),
    sa.Column("forced_state", sa.String(20), nullable=True),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("applied_generation", sa.BigInteger, nullable=False),
    sa.Column("next_grp", sa.Integer, nullable=False),
    sa.Index("ix_sim_deploy_endpoint", "pool", "endpoint"),
)

groups = sa.Table(
    "sim_group",
    metadata,
    sa.Column("pool", sa.String(200), primary_key=True),
    sa.Column("deploy", sa.String(200), primary_key=True),
    sa.Column("grp", sa.Integer, primary_key=True),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("ready_at", sa.Float, nullable=True),
    sa.Index("ix_sim_group_state", "pool", "state"),
    sa.Index("ix_sim_group_ready", "pool", "ready_at"),
)

projects = sa.Table(
    "sim_project",
    metadata,
    sa.Column("pool", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("gpu_quota", sa.Integer, nullable=True),
    sa.Column("billing", sa.String(20), nullable=False),
)

foreign = sa.Table(
    "sim_foreign",
    metadata,
    sa.Column("pool", sa.String(200), primary_key=True),
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("flavor", sa.String(100), nullable=True),
)

operations = sa.Table(
    "sim_operation",
    metadata,
    sa.Column("pool", sa.String(200), primary_key=True),
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("key", sa.String(400), nullable=False),
    sa.Column("deploy", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("replicas", sa.Integer, nullable=True),
    sa.Column("persist_only", sa.Boolean, nullable=False),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("etag_after", sa.String(100), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.UniqueConstraint("pool", "key", name="uq_sim_operation_key"),
    sa.Index("ix_sim_operation_deploy", "pool", "deploy", "seq"),
)

faults = sa.Table(
    "sim_fault",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("pool", sa.String(200), nullable=False),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("effect", sa.String(40), nullable=False),
    sa.Column("op", sa.String(40), nullable=True),
    sa.Column("deploy", sa.String(200), nullable=True),
    sa.Column("remaining", sa.Integer, nullable=True),
    sa.Index("ix_sim_fault_pool", "pool"),
)

usage = sa.Table(
    "sim_usage",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("pool", sa.String(200), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("ix_sim_usage_pool", "pool", "id"),
)

bindings = sa.Table(
    "sim_binding",
    metadata,
    sa.Column("pool", sa.String(200), primary_key=True),
    sa.Column("deploy", sa.String(200), primary_key=True),
    sa.Column("spec", sa.Text, nullable=False, comment="JSON of the deploy's reservation binding"),
)
"""Reservation bindings of deploys (R-GPS-2), from the pool file; fixed after load."""

shares = sa.Table(
    "sim_share",
    metadata,
    sa.Column("pool", sa.String(200), primary_key=True),
    sa.Column("reservation", sa.String(63), primary_key=True),
    sa.Column("occupant", sa.String(200), primary_key=True),
    sa.Column("kind", sa.String(10), nullable=False, comment="member | holder"),
    sa.Column("gpu_uuid", sa.String(100), nullable=False, comment="the GPU the fractional pod got"),
    sa.Column("memory_mib", sa.Integer, nullable=False),
)
"""Fractional pods on a time-sliced reservation's GPU: members and the holder (R-GPS-6).

The GPU row itself is ``held`` by the reservation id (``holder_type='shared'``)
while any share sits on it, so the pool counts the shared GPU once.
"""


SCHEMA_LOCK = 0x6750_5353  # "gPSS": the advisory lock that serialises creating these tables


def ensure_schema(engine: sa.engine.Engine) -> None:
    """Create the simulator's tables once, even when several processes start together.

    ``create_all`` checks then creates: two processes loading a pool on a fresh PostgreSQL
    database at once (the Dagster daemon, the webserver and a run worker of a new install)
    both see no table and one dies on a duplicate type. A transaction-scoped advisory lock
    makes the check and the create one step; SQLite's ``BEGIN IMMEDIATE`` already does.
    """
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": SCHEMA_LOCK})
        metadata.create_all(conn)
