"""The schedule store: CRUD with ownership claims, gate, cursor, events, apply-now.

Every write is one transaction. ``apply_schedule`` validates nothing itself
(callers pass a ``Schedule`` that ``domain.schedules.load_schedule`` accepted)
but claims every target in the same transaction as the spec write, so a
``target_owned`` refusal leaves nothing behind (R-MODEL-6, R-MODEL-7). The
HTTP API of R-API will be a thin layer over these methods.

Database errors are translated at this edge: a connection-level error is
``StoreUnavailable`` (see ``store/db.py``), a create race is
``ScheduleConflict`` and a claim race ``TargetOwned`` (409s, never a raw
``IntegrityError``).
"""

# Decisions embodied here (docs/decisions.md):
# * “The gate is off until someone turns it on”
# * “Deleting a schedule with steps in flight is refused”
# * “Two creates of one schedule at once: the second gets 409 `schedule_conflict`”
# * “Transition states”
# * “An unchanged schedule keeps its version”
# * “A name deleted and created again continues its version sequence”
# * “Schedule names are per scope: a tenant schedule is `<project>/<name>`”

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.step_state import Gate, PlanState, StepState
from gps_dagster.store import audit, bulk, due, metric_totals, migrate, specs
from gps_dagster.store import tables as t
from gps_dagster.store.db import create_db_engine, database_now, default_url
from gps_dagster.store.errors import (
    AmbiguousScheduleName,
    InvalidGate,
    ScheduleConflict,
    ScheduleExists,
    ScheduleInFlight,
    ScheduleNotFound,
    TargetOwned,
)
from gps_dagster.store.journal import JournalMixin
from gps_dagster.store.locks import PassLock
from gps_dagster.store.pins import PinsMixin
from gps_dagster.store.plans import UNSUBMITTED, PlansMixin
from gps_dagster.store.readings import ReadingsMixin
from gps_dagster.store.records import (
    Deleted,
    ScheduleRecord,
    TargetStatusRow,
)
from gps_dagster.store.scale_tables import schedule_due
from gps_dagster.store.shapes import (
    CURSOR_KEY,
    GATE_KEY,
    GATES,
    MUST_NOT_EXIST,
    REACHED_CORE,
    check_expected,
)
from gps_dagster.store.status import StatusMixin

IN_FLIGHT = REACHED_CORE


class Store(
    PlansMixin, StatusMixin, due.DueMixin, bulk.BulkMixin, PinsMixin, ReadingsMixin, JournalMixin
):
    """The product's durable state over one SQLAlchemy engine (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, url: str | None = None, *, upgrade: bool = True) -> Store:
        """Open ``url`` (default: ``GPS_DB_URL`` or ``var/gps.sqlite``), migrating it on first
        use."""
        engine = create_db_engine(url or default_url())
        if upgrade:
            migrate.upgrade(engine)
        return cls(engine)

    def database_now(self) -> datetime:
        """The database's clock (``store/db.py::database_now``)."""
        return database_now(self.engine)

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    def lock(self, name: str, *, holder: str, now: datetime, ttl_s: float = 120.0) -> PassLock:
        """The pass lock (R-PASS-2): advisory on PostgreSQL, a lease row on SQLite."""
        return PassLock(self.engine, name, holder=holder, now=now, ttl_s=ttl_s)

    # -- schedules ---------------------------------------------------------

    def apply_schedule(
        self,
        spec: Schedule,
        *,
        now: datetime,
        actor: str = audit.SYSTEM_ACTOR,
        expected_version: int | None = None,
    ) -> ScheduleRecord:
        """Create or update ``spec``; claims its targets; bumps the version (R-MODEL-8).

        ``expected_version`` makes the write conditional: ``MUST_NOT_EXIST`` (0) for a
        create, the version the caller read for a replace (HTTP ``If-Match``), None for
        an unconditional upsert (the CLI). The audit row is part of the transaction.
        """
        doc = spec.to_document()
        with self.begin() as conn:
            row = conn.execute(
                sa.select(
                    t.schedules.c.version,
                    t.schedules.c.created_at,
                    t.schedules.c.updated_at,
                    t.schedules.c.document,
                    t.schedules.c.scope,
                    t.schedules.c.enabled,
                )
                .where(t.schedules.c.name == spec.name)
                .with_for_update()
            ).first()
            check_expected(spec.name, row.version if row is not None else None, expected_version)
            if row is not None and (row.document, row.scope, row.enabled) == (
                doc,
                spec.scope,
                spec.enabled,
            ):  # the same document again: nothing changed, so the version stays (R-MODEL-8)
                return ScheduleRecord(
                    spec.name, row.version, spec, spec.enabled, row.created_at, row.updated_at
                )
            if row is None:
                version, created = _first_version(conn, spec.name), now
                try:
                    with conn.begin_nested():
                        conn.execute(
                            t.schedules.insert().values(
                                name=spec.name,
                                version=version,
                                scope=spec.scope,
                                enabled=spec.enabled,
                                document=doc,
                                created_at=now,
                                updated_at=now,
                            )
                        )
                except IntegrityError:  # a concurrent create committed first (PostgreSQL)
                    lost = (
                        ScheduleExists if expected_version == MUST_NOT_EXIST else ScheduleConflict
                    )
                    raise lost(spec.name) from None
            else:
                version, created = row.version + 1, row.created_at
                conn.execute(
                    t.schedules.update()
                    .where(t.schedules.c.name == spec.name)
                    .values(
                        version=version,
                        scope=spec.scope,
                        enabled=spec.enabled,
                        document=doc,
                        updated_at=now,
                    )
                )
            self._claim(conn, spec, now)
            due.mark_due(conn, spec.name, version, doc, now)  # a new version is planned at once
            self._event(conn, now, spec.name, None, "schedule_applied", detail={"version": version})
            audit.record(
                conn,
                at=now,
                actor=actor,
                action="schedule_created" if version == 1 else "schedule_replaced",
                kind="schedule",
                name=spec.name,
                scope=spec.scope,
                version=version,
            )
        return ScheduleRecord(spec.name, version, spec, spec.enabled, created, now)

    def _claim(self, conn: Connection, spec: Schedule, now: datetime) -> None:
        wanted = list(spec.target_ids)
        conn.execute(
            t.target_claims.delete().where(
                t.target_claims.c.schedule_name == spec.name,
                t.target_claims.c.deploy_id.not_in(wanted),
            )
        )
        held = set(
            conn.execute(
                sa.select(t.target_claims.c.deploy_id).where(
                    t.target_claims.c.schedule_name == spec.name
                )
            ).scalars()
        )
        for index, deploy_id in enumerate(wanted):
            if deploy_id in held:
                continue
            try:
                with conn.begin_nested():
                    conn.execute(
                        t.target_claims.insert().values(
                            deploy_id=deploy_id, schedule_name=spec.name, claimed_at=now
                        )
                    )
            except IntegrityError:
                owner = conn.execute(
                    sa.select(t.target_claims.c.schedule_name).where(
                        t.target_claims.c.deploy_id == deploy_id
                    )
                ).scalar_one_or_none()
                raise TargetOwned(
                    deploy_id, owner or "<unknown>", f"targets[{index}].model_deploy_id"
                ) from None
        conn.execute(
            t.target_status.delete().where(
                t.target_status.c.schedule_name == spec.name,
                t.target_status.c.deploy_id.not_in(wanted),
            )
        )

    def find_schedule(self, name: str) -> ScheduleRecord | None:
        with self.engine.connect() as conn:
            found = specs.load(conn, t.schedules.c.name == name)
        return found[0] if found else None

    def resolve_name(self, name: str) -> str:
        """The stored name an operator's ``name`` means (the CLI, the page's address).

        Names are unique per scope (R-API): a tenant schedule is stored as
        ``<project>/<name>``. A name stored as given is itself; a bare name that only
        one project's schedule carries means that one; several are ambiguous (409 with
        the candidates); none is returned as given (its lookup then answers 404).
        """
        s = t.schedules.c
        with self.engine.connect() as conn:
            if (
                conn.execute(sa.select(s.name).where(s.name == name)).first() is not None
                or "/" in name
            ):
                return name
            like = "%/" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            found = list(
                conn.execute(
                    sa.select(s.name)
                    .where(s.name.like(like, escape="\\"))
                    .order_by(s.name)
                    .limit(10)
                ).scalars()
            )
        if len(found) > 1:
            raise AmbiguousScheduleName(name, found)
        return found[0] if found else name

    def get_schedule(self, name: str) -> ScheduleRecord:
        record = self.find_schedule(name)
        if record is None:
            raise ScheduleNotFound(name)
        return record

    def schedule_state(self, name: str) -> tuple[int, bool] | None:
        """(version, enabled) of a schedule without parsing its document; None when absent."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(t.schedules.c.version, t.schedules.c.enabled).where(
                    t.schedules.c.name == name
                )
            ).first()
        return None if row is None else (int(row.version), bool(row.enabled))

    def schedule_states(self, names: Sequence[str]) -> dict[str, tuple[int, bool]]:
        """(version, enabled) of these schedules, without their documents."""
        s = t.schedules
        out: dict[str, tuple[int, bool]] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(names), 1000):
                chunk = list(names[i : i + 1000])
                rows = conn.execute(
                    sa.select(s.c.name, s.c.version, s.c.enabled).where(s.c.name.in_(chunk))
                )
                out.update({r.name: (int(r.version), bool(r.enabled)) for r in rows})
        return out

    def list_schedules(self) -> list[ScheduleRecord]:
        with self.engine.connect() as conn:
            return specs.load(conn)

    def schedules_named(self, names: Sequence[str]) -> list[ScheduleRecord]:
        """These schedules (those that still exist), in name order."""
        out: list[ScheduleRecord] = []
        with self.engine.connect() as conn:
            for i in range(0, len(names), 1000):
                out += specs.load(conn, t.schedules.c.name.in_(list(names[i : i + 1000])))
        return sorted(out, key=lambda r: r.name)

    def page_schedules(
        self, after: str | None, limit: int, *, scope: str | None = None
    ) -> list[ScheduleRecord]:
        """Schedules named after ``after`` in name order: the durable-cursor page (R-PASS-3).

        ``scope`` keeps only the schedules of one scope (an API surface's page).
        """
        where = []
        if after:
            where.append(t.schedules.c.name > after)
        if scope is not None:
            where.append(t.schedules.c.scope == scope)
        with self.engine.connect() as conn:
            return specs.load(conn, *where, limit=limit)

    def delete_schedule(
        self,
        name: str,
        *,
        now: datetime,
        actor: str = audit.SYSTEM_ACTOR,
        expected_version: int | None = None,
        force: bool = False,
    ) -> Deleted:
        """Delete a schedule and release its claims; deploys are left as they are.

        ``expected_version`` makes it conditional (If-Match). Steps that never reached the core
        are cancelled with it. Steps in flight (``submitting``/``accepted``) refuse the delete
        (``ScheduleInFlight``): nobody would observe them any more. ``force`` deletes anyway and
        ends them ``cancelled`` (``schedule_deleted``); the core still completes them.
        """
        a = t.actions
        with self.begin() as conn:
            row = conn.execute(
                sa.select(t.schedules.c.version, t.schedules.c.scope)
                .where(t.schedules.c.name == name)
                .with_for_update()
            ).first()
            if row is None:
                raise ScheduleNotFound(name)
            check_expected(name, row.version, expected_version)
            flying = conn.execute(
                sa.select(a.c.id, a.c.deploy_id, a.c.step, a.c.state)
                .where(a.c.schedule_name == name, a.c.state.in_(IN_FLIGHT))
                .order_by(a.c.seq)
            ).all()
            abandoned = [f"{r.deploy_id} {r.step} ({r.state})" for r in flying]
            if abandoned and not force:
                raise ScheduleInFlight(name, abandoned)
            states = (*UNSUBMITTED, *IN_FLIGHT) if force else UNSUBMITTED
            ending = conn.execute(
                sa.select(a.c.step).where(a.c.schedule_name == name, a.c.state.in_(states))
            ).scalars()
            metric_totals.count_finished(
                conn, [(step, StepState.CANCELLED, "schedule_deleted") for step in ending]
            )
            conn.execute(
                a.update()
                .where(a.c.schedule_name == name, a.c.state.in_(states))
                .values(
                    state=StepState.CANCELLED,
                    reason="schedule_deleted",
                    finished_at=now,
                    updated_at=now,
                    fix="the schedule was deleted; the deploy is left as it is",
                )
            )
            conn.execute(
                t.transitions.update()
                .where(
                    t.transitions.c.schedule_name == name, t.transitions.c.state == PlanState.OPEN
                )
                .values(state=PlanState.CANCELLED)
            )
            conn.execute(  # an apply-now asked of the deleted schedule is not one of a new one
                t.apply_now_requests.update()
                .where(
                    t.apply_now_requests.c.schedule_name == name,
                    t.apply_now_requests.c.state == "pending",
                )
                .values(state="failed", result="the schedule was deleted", handled_at=now)
            )
            conn.execute(schedule_due.delete().where(schedule_due.c.name == name))
            conn.execute(t.schedules.delete().where(t.schedules.c.name == name))
            conn.execute(t.target_claims.delete().where(t.target_claims.c.schedule_name == name))
            conn.execute(t.target_status.delete().where(t.target_status.c.schedule_name == name))
            self._event(
                conn,
                now,
                name,
                None,
                "schedule_deleted",
                detail={"forced": force, "abandoned": abandoned},
            )
            metric_totals.flush(conn)
            audit.record(
                conn,
                at=now,
                actor=actor,
                action="schedule_deleted",
                kind="schedule",
                name=name,
                scope=row.scope,
                version=row.version,
            )
        return Deleted(int(row.version), abandoned)

    def owner_of(self, deploy_id: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(t.target_claims.c.schedule_name).where(
                    t.target_claims.c.deploy_id == deploy_id
                )
            ).scalar_one_or_none()

    # -- control: gate and cursor -------------------------------------------

    def get_gate(self) -> Gate:
        """The execution gate (R-PASS-1); absent or unknown reads as ``off`` (fail closed)."""
        value = self._get_control(GATE_KEY)
        return Gate(value) if value in GATES else Gate.OFF

    def set_gate(self, value: str, *, now: datetime) -> None:
        """Set the gate and record ``gate_changed`` in one transaction: both or neither."""
        if value not in GATES:
            raise InvalidGate(value)
        with self.begin() as conn:
            self._upsert_control(conn, GATE_KEY, value, now)
            due.mark_all_due(conn, now)  # what the gate allows changed: every schedule looks again
            self._event(conn, now, None, None, "gate_changed", detail={"gate": value})

    def get_cursor(self) -> str | None:
        return self._get_control(CURSOR_KEY) or None

    def set_cursor(self, value: str | None, *, now: datetime) -> None:
        self._set_control(CURSOR_KEY, value or "", now)

    def _get_control(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(t.control.c.value).where(t.control.c.key == key)
            ).scalar_one_or_none()

    def _set_control(self, key: str, value: str, now: datetime) -> None:
        with self.begin() as conn:
            self._upsert_control(conn, key, value, now)

    @staticmethod
    def _upsert_control(conn: Connection, key: str, value: str, now: datetime) -> None:
        done = conn.execute(
            t.control.update().where(t.control.c.key == key).values(value=value, updated_at=now)
        ).rowcount
        if not done:
            try:
                with conn.begin_nested():
                    conn.execute(t.control.insert().values(key=key, value=value, updated_at=now))
            except IntegrityError:
                conn.execute(
                    t.control.update()
                    .where(t.control.c.key == key)
                    .values(value=value, updated_at=now)
                )

    # -- apply-now requests ------------------------------------------------------

    def request_apply_now(self, name: str, *, now: datetime, actor: str = "cli") -> int:
        self.get_schedule(name)
        with self.begin() as conn:
            result = conn.execute(
                t.apply_now_requests.insert().values(
                    schedule_name=name, actor=actor, requested_at=now, state="pending"
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            return int(key[0])


def _first_version(conn: Connection, name: str) -> int:
    """The version a schedule is created at: 1, or past every version its name's plans and steps
    still carry (a name deleted and created again, R-MODEL-8). The ids of plans and the
    idempotency keys of steps derive from (name, version, ...): restarting at 1 would give the
    new schedule the deleted one's ids, and its plans would be taken for plans already opened."""
    used = [
        conn.execute(
            sa.select(sa.func.max(table.c.schedule_version)).where(table.c.schedule_name == name)
        ).scalar_one_or_none()
        for table in (t.transitions, t.actions)
    ]
    return 1 + max((int(v) for v in used if v is not None), default=0)


__all__ = ["GATES", "MUST_NOT_EXIST", "Store", "TargetStatusRow"]
