"""The due index: which schedules need a pass now, found by index (decision "Due work is found by
index").

Every schedule has one ``schedule_due`` row. ``apply_schedule`` makes it due
at once (a new version must be planned), a gate change makes every schedule
due, and each pass writes, for the schedules it visited, the next instant one
of them needs a pass again: its next intent boundary, sooner while steps are
in flight, never for a disabled schedule with nothing left to watch.

Replicas share the due work by claims: a pass claims a batch of due rows (``FOR UPDATE SKIP LOCKED``
on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` serialises the claim), stamping ``claimed_by`` /
``claimed_until``; another replica skips them, and takes them over once the claim expires (a crashed
replica). A live replica renews its claims on a heartbeat (``renew_claims``,
``engine/heartbeat.py``), so the lease can be short (15 s) and a crashed replica's share of a storm
is taken over in seconds (R-NEXT-4). The claim only saves work: correctness still rests on the
fence, the status CAS and the idempotency keys.
"""

# Decisions embodied here (docs/decisions.md):
# * “Due work is found by index”
# * “Replicas share due work by claims, not by the pass lock”
# * “Watch events wake the engine loop for the deploys its steps wait on”

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from gps_dagster.domain.step_state import StepState
from gps_dagster.store.scale_tables import IN_FLIGHT_STATES
from gps_dagster.store.scale_tables import schedule_due as d
from gps_dagster.store.shapes import DueClaim, NextDue, spec_sha
from gps_dagster.store.tables import actions

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


__all__ = ["DueClaim", "DueMixin", "NextDue", "mark_all_due", "mark_due", "spec_sha"]


def mark_due(conn: Connection, name: str, version: int, document: object, now: datetime) -> None:
    """Inside an apply's transaction: the schedule is due now, at its new version."""
    values = {"version": version, "spec_sha": spec_sha(document), "due_at": now}
    done = conn.execute(
        d.update()
        .where(d.c.name == name)
        .values(**values, revision=d.c.revision + 1, claimed_by=None, claimed_until=None)
    ).rowcount
    if not done:
        conn.execute(d.insert().values(name=name, **values, revision=1))


def mark_all_due(conn: Connection, now: datetime) -> None:
    """Every schedule is due now (the execution gate changed: what it allows changed)."""
    conn.execute(d.update().values(due_at=now, revision=d.c.revision + 1))


def _free(now: datetime) -> sa.ColumnElement[bool]:
    return sa.or_(d.c.claimed_until.is_(None), d.c.claimed_until <= now)


class DueMixin:
    engine: Engine

    def claim_due(
        self, *, holder: str, now: datetime, limit: int, lease_s: float
    ) -> list[DueClaim]:
        """Claim up to ``limit`` schedules due at ``now`` that no live claim holds."""
        pick = (
            sa.select(d.c.name)
            .where(d.c.due_at <= now, _free(now))
            .order_by(d.c.due_at, d.c.name)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return self._claim_rows(pick, holder=holder, now=now, lease_s=lease_s)

    def claim_schedules(
        self, names: Sequence[str], *, holder: str, now: datetime, lease_s: float
    ) -> list[DueClaim]:
        """Claim these schedules (a sweep page) unless another replica holds them now."""
        if not names:
            return []
        pick = (
            sa.select(d.c.name)
            .where(d.c.name.in_(list(names)), sa.or_(_free(now), d.c.claimed_by == holder))
            .with_for_update(skip_locked=True)
        )
        return self._claim_rows(pick, holder=holder, now=now, lease_s=lease_s)

    def _claim_rows(
        self, pick: sa.Select[tuple[str]], *, holder: str, now: datetime, lease_s: float
    ) -> list[DueClaim]:
        until = now + timedelta(seconds=lease_s)
        with self.engine.begin() as conn:
            names = list(conn.execute(pick).scalars())
            if not names:
                return []
            rows = conn.execute(
                d.update()
                .where(d.c.name.in_(names))
                .values(claimed_by=holder, claimed_until=until)
                .returning(d.c.name, d.c.version, d.c.revision, d.c.due_at)
            ).all()
        claims = (DueClaim(r.name, r.version, r.revision, r.due_at, holder, until) for r in rows)
        return sorted(claims, key=lambda c: c.name)

    def renew_claims(self, *, holder: str, now: datetime, lease_s: float) -> int:
        """The heartbeat: every claim ``holder`` still holds lasts ``lease_s`` from ``now``.

        A claim another replica took over (its lease had run out) is not this holder's any
        more and is left alone. Returns the claims renewed.
        """
        until = now + timedelta(seconds=lease_s)
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    d.update()
                    .where(d.c.claimed_by == holder, d.c.claimed_until.is_not(None))
                    .values(claimed_until=until)
                ).rowcount
            )

    def claimed_elsewhere_in_flight(self, *, holder: str, now: datetime, limit: int) -> list[str]:
        """Schedules another replica claims now that have a step accepted by the core.

        Observing an accepted step is a read and a CAS write that any replica may do: a claim
        held elsewhere (a replica busy with a storm, or one that died) must not hold it back.
        """
        a = actions
        with self.engine.connect() as conn:
            return list(
                conn.execute(
                    sa.select(d.c.name)
                    .where(
                        d.c.claimed_by.is_not(None),
                        d.c.claimed_by != holder,
                        d.c.claimed_until > now,
                        sa.exists().where(
                            a.c.schedule_name == d.c.name,
                            a.c.state.in_(IN_FLIGHT_STATES),
                            a.c.state == StepState.ACCEPTED,
                        ),
                    )
                    .order_by(d.c.name)
                    .limit(limit)
                ).scalars()
            )

    def hasten(self, deploy_ids: Sequence[str], *, now: datetime) -> list[str]:
        """The schedules with a step in flight on one of ``deploy_ids`` are due ``now`` (a watch
        saw those deploys change); one due later (or never) moves up, its revision bumped so a
        visit in progress does not write its older next due over it. Returns them."""
        if not deploy_ids:
            return []
        a = actions
        waiting = (
            sa.select(a.c.schedule_name)
            .where(a.c.deploy_id.in_(sorted(set(deploy_ids))), a.c.state.in_(IN_FLIGHT_STATES))
            .distinct()
        )
        with self.engine.begin() as conn:
            rows = conn.execute(
                d.update()
                .where(
                    d.c.name.in_(waiting),
                    sa.or_(d.c.due_at.is_(None), d.c.due_at > now),
                )
                .values(due_at=now, revision=d.c.revision + 1)
                .returning(d.c.name)
            ).scalars()
            return sorted(rows)

    def due_rows(self, names: Sequence[str]) -> dict[str, DueClaim]:
        """These schedules' due rows as they stand (a visit under the pass lock, no claim)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    d.c.name,
                    d.c.version,
                    d.c.revision,
                    d.c.due_at,
                    d.c.claimed_by,
                    d.c.claimed_until,
                ).where(d.c.name.in_(list(names)))
            ).all()
        return {
            r.name: DueClaim(r.name, r.version, r.revision, r.due_at, r.claimed_by, r.claimed_until)
            for r in rows
        }

    def schedules_in_flight(self, names: Sequence[str]) -> set[str]:
        """Which of these schedules have a step that may still move (the partial index)."""
        a = actions
        out: set[str] = set()
        with self.engine.connect() as conn:
            for i in range(0, len(names), 1000):
                chunk = list(names[i : i + 1000])
                out.update(
                    conn.execute(
                        sa.select(a.c.schedule_name)
                        .where(a.c.schedule_name.in_(chunk), a.c.state.in_(IN_FLIGHT_STATES))
                        .distinct()
                    ).scalars()
                )
        return out

    def finish_due(self, visited: Iterable[NextDue], *, holder: str) -> None:
        """Write each visited schedule's next due (unless marked since) and drop the claims."""
        items = sorted(visited, key=lambda v: v.name)
        if not items:
            return
        with self.engine.begin() as conn:
            for chunk in _chunks(items, 500):
                _finish(conn, chunk, holder)

    def next_due(self, now: datetime) -> datetime | None:
        """The earliest instant any schedule needs a pass (index scan; claims count as busy)."""
        with self.engine.connect() as conn:
            first = conn.execute(
                sa.select(d.c.due_at)
                .where(d.c.due_at.is_not(None), _free(now))
                .order_by(d.c.due_at)
                .limit(1)
            ).scalar_one_or_none()
            claimed = conn.execute(
                sa.select(sa.func.min(d.c.claimed_until)).where(
                    d.c.claimed_until > now, d.c.due_at.is_not(None)
                )
            ).scalar_one_or_none()
        found = [x for x in (first, claimed) if x is not None]
        return min(found) if found else None

    def due_names(self, now: datetime, limit: int) -> list[str]:
        """Names of the schedules due at ``now`` that no live claim holds, earliest first."""
        with self.engine.connect() as conn:
            return list(
                conn.execute(
                    sa.select(d.c.name)
                    .where(d.c.due_at <= now, _free(now))
                    .order_by(d.c.due_at, d.c.name)
                    .limit(limit)
                ).scalars()
            )

    def upcoming_due(self, now: datetime, limit: int) -> list[tuple[datetime, str]]:
        """(due_at, name) of the next ``limit`` schedules due after ``now``, soonest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(d.c.due_at, d.c.name)
                .where(d.c.due_at > now)
                .order_by(d.c.due_at, d.c.name)
                .limit(limit)
            ).all()
        return [(r.due_at, r.name) for r in rows]

    def due_at(self, name: str) -> datetime | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(d.c.due_at).where(d.c.name == name)).scalar_one_or_none()


def _finish(conn: Connection, items: Sequence[NextDue], holder: str) -> None:
    """The next due where the revision still matches (one statement on PostgreSQL); claims
    dropped."""
    if conn.dialect.name != "postgresql":
        for v in items:  # SQLite: in-process, a statement per row costs microseconds
            conn.execute(
                d.update()
                .where(d.c.name == v.name, d.c.revision == v.revision)
                .values(due_at=v.due_at)
            )
        conn.execute(
            d.update()
            .where(d.c.name.in_([v.name for v in items]), d.c.claimed_by == holder)
            .values(claimed_by=None, claimed_until=None)
        )
        return
    rows = sa.values(
        sa.column("n", sa.String),
        sa.column("r", sa.Integer),
        sa.column("at", d.c.due_at.type),
        name="v",
    ).data([(v.name, v.revision, v.due_at) for v in items])
    mine = d.c.claimed_by == holder
    stmt = (
        d.update()
        .where(d.c.name == rows.c.n)
        .values(
            due_at=sa.case(
                (d.c.revision == rows.c.r, sa.cast(rows.c.at, sa.DateTime(timezone=True))),
                else_=d.c.due_at,
            ),
            claimed_by=sa.case((mine, sa.null()), else_=d.c.claimed_by),
            claimed_until=sa.case((mine, sa.null()), else_=d.c.claimed_until),
        )
    )
    conn.execution_options(compiled_cache=None).execute(stmt)  # its data is in the statement


def _chunks(items: Sequence[NextDue], size: int) -> Iterable[Sequence[NextDue]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
