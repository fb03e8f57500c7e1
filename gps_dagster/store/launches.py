"""Launch claims: one origin per plan run key, across every sensor and schedule.

Dagster drops a repeated run key only when the *same* sensor or schedule requested it before
(Dagster's ``run_key`` dedup is per origin: decision "One origin launches a plan."). A plan's
``<transition>:plan`` key is requested by whichever origin opened it (a boundary schedule, the
boundary or apply-now sensor) and by the reconcile sensor, which re-requests open plans whose run it
cannot see yet. The claim makes the launch idempotent across origins: the first origin to insert the
row owns the launch (and may repeat its request: the daemon drops the repeats); every other origin
skips it. The primary key on ``run_key`` is the whole rule, never a read-then-write.

A claim whose run never appeared (the owner's tick was lost after it claimed)
is taken over by compare-and-set on the holder, so exactly one origin wins
the takeover too.
"""

# Decisions embodied here (docs/decisions.md):
# * “One origin launches a plan”

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from gps_dagster.store.schema import UtcDateTime, metadata

launches = sa.Table(
    "launches",
    metadata,
    sa.Column("run_key", sa.String(200), primary_key=True),
    sa.Column("transition_id", sa.String(80), nullable=False, index=True),
    sa.Column("origin", sa.String(200), nullable=False),
    sa.Column("claimed_at", UtcDateTime(), nullable=False),
)


@dataclass(frozen=True, slots=True)
class Claim:
    """Who owns the launch of ``run_key`` since when; ``won`` when that is the asker."""

    run_key: str
    origin: str
    claimed_at: datetime
    won: bool


class LaunchClaims:
    """The ``launches`` table over one SQLAlchemy engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def claim(self, run_key: str, *, transition_id: str, origin: str, now: datetime) -> Claim:
        """Claim the launch of ``run_key`` for ``origin``; the existing holder wins otherwise."""
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    launches.insert().values(
                        run_key=run_key, transition_id=transition_id, origin=origin, claimed_at=now
                    )
                )
            return Claim(run_key, origin, now, won=True)
        except IntegrityError:
            pass
        held = self.get(run_key)
        assert held is not None, "claims are never deleted"
        return Claim(run_key, held.origin, held.claimed_at, won=held.origin == origin)

    def get(self, run_key: str) -> Claim | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(launches.c.origin, launches.c.claimed_at).where(
                    launches.c.run_key == run_key
                )
            ).first()
        return None if row is None else Claim(run_key, row.origin, row.claimed_at, won=False)

    def take_over(self, held: Claim, *, origin: str, now: datetime) -> bool:
        """Move a claim from its holder to ``origin`` if nobody moved it since ``held`` was read."""
        with self.engine.begin() as conn:
            moved = conn.execute(
                launches.update()
                .where(
                    launches.c.run_key == held.run_key,
                    launches.c.origin == held.origin,
                    launches.c.claimed_at == held.claimed_at,
                )
                .values(origin=origin, claimed_at=now)
            ).rowcount
        return bool(moved)
