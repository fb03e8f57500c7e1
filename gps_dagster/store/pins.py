"""Claims pinned to the object behind the deploy id (R-K8S-8, migration 0009).

A claim is keyed by deploy id, and on Kubernetes that id is a label: a Deployment deleted and
re-created under the same name (a GitOps sync, a ``kubectl replace --force``, an operator) or an
impostor carrying the label is *another object*. The engine pins each claim to the first object
it sees (``DeployView.instance``) and refuses to act on another one (``deploy_replaced``) until an
operator re-claims the target. The pin is written once, by compare-and-set on a NULL column, so
two replicas seeing two objects at first sight cannot both win.
"""

# Decisions embodied here (docs/decisions.md):
# * “A claim is pinned to the object, at first sight”

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gps_dagster.store import audit
from gps_dagster.store import tables as t
from gps_dagster.store.scale_tables import schedule_due

c = t.target_claims.c


class PinsMixin:
    engine: Engine

    def pins_for(self, deploy_ids: Sequence[str]) -> dict[str, str | None]:
        """The pinned instance of each claimed deploy id (None: claimed, not pinned yet)."""
        if not deploy_ids:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(c.deploy_id, c.instance).where(c.deploy_id.in_(list(deploy_ids)))
            ).all()
        return {r.deploy_id: r.instance for r in rows}

    def pin(self, schedule: str, deploy_id: str, instance: str, *, now: datetime) -> str | None:
        """Pin ``schedule``'s claim of ``deploy_id`` to ``instance`` if it is not pinned yet.

        Returns the pin now stored: ``instance`` when this call (or an earlier one) pinned it,
        another value when another object was pinned first, None when the claim is gone.
        """
        with self.engine.begin() as conn:
            conn.execute(
                t.target_claims.update()
                .where(c.deploy_id == deploy_id, c.schedule_name == schedule, c.instance.is_(None))
                .values(instance=instance, pinned_at=now)
            )
            pinned: str | None = conn.execute(
                sa.select(c.instance).where(c.deploy_id == deploy_id, c.schedule_name == schedule)
            ).scalar_one_or_none()
        return pinned

    def reclaim(
        self, schedule: str, deploy_id: str, *, now: datetime, actor: str = audit.SYSTEM_ACTOR
    ) -> str | None:
        """Forget the pin of ``schedule``'s claim of ``deploy_id``: the next pass pins the object
        it then sees and acts on it. Returns the forgotten pin; raises ``KeyError`` when the
        schedule does not claim the deploy. The event, the audit row and the due mark are one
        transaction with the change."""
        with self.engine.begin() as conn:
            row = conn.execute(
                sa.select(c.instance)
                .where(c.deploy_id == deploy_id, c.schedule_name == schedule)
                .with_for_update()
            ).first()
            if row is None:
                raise KeyError(f"schedule {schedule!r} does not claim deploy {deploy_id!r}")
            conn.execute(
                t.target_claims.update()
                .where(c.deploy_id == deploy_id, c.schedule_name == schedule)
                .values(instance=None, pinned_at=None)
            )
            detail = {"forgotten": row.instance}
            conn.execute(
                t.events.insert().values(
                    at=now,
                    schedule_name=schedule,
                    deploy_id=deploy_id,
                    kind="target_reclaimed",
                    detail=detail,
                )
            )
            audit.record(
                conn,
                at=now,
                actor=actor,
                action="target_reclaimed",
                kind="schedule",
                name=schedule,
                detail={"deploy_id": deploy_id, **detail},
            )
            d = schedule_due.c
            conn.execute(
                schedule_due.update()
                .where(d.name == schedule)
                .values(due_at=now, revision=d.revision + 1)
            )
        forgotten: str | None = row.instance
        return forgotten
