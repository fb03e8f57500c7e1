"""What the store records beside schedules and plans: the event log, the audit log, and the
answers to apply-now requests. A mixin of ``Store`` (``store/repository.py``); each write is one
transaction, and ``_event`` is the one insert every writer's transaction uses."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from gps_dagster.store import audit
from gps_dagster.store import tables as t
from gps_dagster.store.records import ApplyNowRequest, EventRow


class JournalMixin:
    """Events, audit rows and apply-now answers of ``Store``."""

    engine: Engine

    def add_event(
        self, at: datetime, schedule: str | None, deploy_id: str | None, kind: str, **kw: Any
    ) -> None:
        with self.engine.begin() as conn:
            self._event(conn, at, schedule, deploy_id, kind, **kw)

    @staticmethod
    def _event(
        conn: Connection,
        at: datetime,
        schedule: str | None,
        deploy_id: str | None,
        kind: str,
        *,
        phase: str | None = None,
        reason: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        conn.execute(
            t.events.insert().values(
                at=at,
                schedule_name=schedule,
                deploy_id=deploy_id,
                kind=kind,
                phase=phase,
                reason=reason,
                detail=detail,
            )
        )

    def list_events(
        self, schedule: str | None = None, *, after_id: int = 0, limit: int = 100
    ) -> list[EventRow]:
        query = (
            sa.select(t.events).where(t.events.c.id > after_id).order_by(t.events.c.id).limit(limit)
        )
        if schedule is not None:
            query = query.where(t.events.c.schedule_name == schedule)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            EventRow(r.id, r.at, r.schedule_name, r.deploy_id, r.kind, r.phase, r.reason, r.detail)
            for r in rows
        ]

    # -- audit log ---------------------------------------------------------------

    def add_audit(
        self,
        *,
        at: datetime,
        actor: str,
        action: str,
        kind: str,
        name: str,
        scope: str | None = None,
        version: int | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Record a write that is not one store transaction (an apply-now pass)."""
        with self.engine.begin() as conn:
            audit.record(
                conn,
                at=at,
                actor=actor,
                action=action,
                kind=kind,
                name=name,
                scope=scope,
                version=version,
                detail=detail,
            )

    def list_audit(
        self, *, after_id: int = 0, limit: int = 100, name: str | None = None
    ) -> list[audit.AuditRow]:
        return audit.page(self.engine, after_id=after_id, limit=limit, name=name)

    # -- apply-now answers ------------------------------------------------------

    def pending_apply_now(self) -> list[ApplyNowRequest]:
        query = sa.select(t.apply_now_requests).where(t.apply_now_requests.c.state == "pending")
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(t.apply_now_requests.c.id)).all()
        return [_request(r) for r in rows]

    def get_apply_now(self, request_id: int) -> ApplyNowRequest:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(t.apply_now_requests).where(t.apply_now_requests.c.id == request_id)
            ).one()
        return _request(row)

    def finish_apply_now(
        self, request_id: int, *, result: str, now: datetime, state: str = "done"
    ) -> bool:
        """Mark a pending request handled; False when another worker already did."""
        with self.engine.begin() as conn:
            return bool(
                conn.execute(
                    t.apply_now_requests.update()
                    .where(
                        t.apply_now_requests.c.id == request_id,
                        t.apply_now_requests.c.state == "pending",
                    )
                    .values(state=state, result=result, handled_at=now)
                ).rowcount
            )


def _request(row: Any) -> ApplyNowRequest:
    return ApplyNowRequest(
        row.id,
        row.schedule_name,
        row.actor,
        row.requested_at,
        row.state,
        row.result,
        row.handled_at,
    )
