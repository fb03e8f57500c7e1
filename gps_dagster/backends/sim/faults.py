"""Declarative, deterministic fault injection, persisted with the pool.

Faults come from the pool file (``sim.faults``) or are injected at runtime;
either way they are rows, so a fault injected by a test process hits the call
made by a Dagster run in another process. One-shot faults (``fail_next``,
``lose_response``, ``crash``) are consumed in their own committed transaction
*before* the call runs, so a crash that rolls the call back does not bring the
fault back to life.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from gps_dagster.backends.sim import schema as t
from gps_dagster.domain.pool import ONE_SHOT_EFFECTS, FaultSpec


class SimulatedCrash(BaseException):
    """The process "crashed" at a named point. Not a ``GpsError``: nothing should catch it.

    Derives from ``BaseException`` so that ``except Exception`` in a caller does
    not swallow it either, like a real crash would not be.
    """

    def __init__(self, point: str, op: str) -> None:
        self.point, self.op = point, op
        super().__init__(f"simulated crash at {point} of {op}")


def insert(conn: Connection, pool: str, fault: FaultSpec) -> None:
    """Persist a fault; state-forcing effects (failed, deleting, never_ready) act at once."""
    d, gr = t.deploys, t.groups
    if fault.effect in ("failed", "deleting"):
        conn.execute(
            d.update()
            .where(d.c.pool == pool, d.c.id == fault.deploy)
            .values(forced_state=fault.effect.upper())
        )
    if fault.effect == "never_ready":
        conn.execute(
            gr.update()
            .where(gr.c.pool == pool, gr.c.deploy == fault.deploy, gr.c.state == "starting")
            .values(ready_at=None)
        )
    conn.execute(
        t.faults.insert().values(
            pool=pool,
            spec=fault.model_dump_json(),
            effect=fault.effect,
            op=fault.op,
            deploy=fault.deploy,
            remaining=fault.times if fault.effect in ONE_SHOT_EFFECTS else None,
        )
    )


def listed(conn: Connection, pool: str) -> list[FaultSpec]:
    f = t.faults
    rows = conn.execute(sa.select(f.c.spec, f.c.remaining).where(f.c.pool == pool).order_by(f.c.id))
    out = []
    for spec, remaining in rows:
        data = json.loads(spec)
        if remaining is not None:
            data["times"] = remaining
        out.append(FaultSpec.model_validate(data))
    return out


def clear(conn: Connection, pool: str, restart_at: float) -> None:
    """Remove every fault; forced states end and never-ready groups get a fresh start delay."""
    d, gr = t.deploys, t.groups
    conn.execute(t.faults.delete().where(t.faults.c.pool == pool))
    conn.execute(d.update().where(d.c.pool == pool).values(forced_state=None))
    conn.execute(
        gr.update()
        .where(gr.c.pool == pool, gr.c.state == "starting", gr.c.ready_at.is_(None))
        .values(ready_at=restart_at)
    )


def take(conn: Connection, pool: str, op: str, deploy: str | None) -> list[FaultSpec]:
    """Consume one hit of every one-shot fault matching this call.

    The decrement is conditional in the database (``remaining > 0``), never a
    write of a value read earlier: two processes that both read ``remaining = 1``
    serialise on the row, and the second one's update matches nothing, so a
    ``times: 1`` fault fires once across every process sharing the pool.
    """
    f = t.faults
    rows = conn.execute(
        sa.select(f.c.id, f.c.spec)
        .where(f.c.pool == pool, f.c.op == op, f.c.remaining.is_not(None))
        .order_by(f.c.id)
    ).all()
    hits: list[FaultSpec] = []
    for fid, spec in rows:
        fault = FaultSpec.model_validate_json(spec)
        if fault.deploy is not None and fault.deploy != deploy:
            continue
        taken = conn.execute(
            f.update().where(f.c.id == fid, f.c.remaining > 0).values(remaining=f.c.remaining - 1)
        ).rowcount
        if not taken:
            continue  # another caller consumed the last hit since our read
        conn.execute(f.delete().where(f.c.id == fid, f.c.remaining <= 0))
        hits.append(fault)
    return hits


def persistent(conn: Connection, pool: str) -> list[tuple[str, str | None]]:
    """(effect, deploy) of every persistent fault of the pool."""
    f = t.faults
    return [
        (str(e), d)
        for e, d in conn.execute(
            sa.select(f.c.effect, f.c.deploy).where(f.c.pool == pool, f.c.remaining.is_(None))
        )
    ]


def deploys_with(active: list[tuple[str, str | None]], effect: str) -> set[str]:
    return {d for e, d in active if e == effect and d is not None}


def applies(active: list[tuple[str, str | None]], effect: str, deploy: str) -> bool:
    return any(e == effect and d in (None, deploy) for e, d in active)
