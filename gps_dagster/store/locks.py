"""The pass lock (R-PASS-2): it only saves work, correctness never depends on it.

On PostgreSQL it is ``pg_try_advisory_lock`` held on a dedicated connection
for the duration of the pass (so apply-now, in another process, sees it
busy). On SQLite it is a lease row with an expiry, taken with a conditional
insert/update inside a ``BEGIN IMMEDIATE`` transaction. A crashed holder's
lease simply expires; a crashed PostgreSQL holder's session ends and the
server drops the lock.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from gps_dagster.store import tables as t
from gps_dagster.store.db import is_postgres


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_try_advisory_lock``."""
    digest = hashlib.sha256(f"gps_dagster:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PassLock:
    """Use as a context manager; ``acquired`` says whether this holder got it."""

    def __init__(self, engine: Engine, name: str, *, holder: str, now: datetime, ttl_s: float) -> None:
        self.engine, self.name, self.holder, self.now, self.ttl_s = engine, name, holder, now, ttl_s
        self.acquired = False
        self._conn: Connection | None = None

    def __enter__(self) -> PassLock:
        if is_postgres(self.engine):
            self._conn = self.engine.connect()
            got = self._conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": advisory_key(self.name)}).scalar()
            self._conn.commit()
            self.acquired = bool(got)
            if not self.acquired:
                self._conn.close()
                self._conn = None
        else:
            self.acquired = self._take_lease()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def release(self) -> None:
        if not self.acquired:
            return
        self.acquired = False
        if self._conn is not None:
            try:
                self._conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": advisory_key(self.name)})
                self._conn.commit()
            finally:
                self._conn.close()
                self._conn = None
        else:
            with self.engine.begin() as conn:
                conn.execute(t.leases.delete().where(t.leases.c.name == self.name, t.leases.c.holder == self.holder))

    def _take_lease(self) -> bool:
        expires = self.now + timedelta(seconds=self.ttl_s)
        with self.engine.begin() as conn:
            taken = conn.execute(
                t.leases.update()
                .where(
                    t.leases.c.name == self.name,
                    sa.or_(t.leases.c.holder == self.holder, t.leases.c.expires_at <= self.now),
                )
                .values(holder=self.holder, expires_at=expires)
            ).rowcount
            if taken:
                return True
            try:
                with conn.begin_nested():
                    conn.execute(t.leases.insert().values(name=self.name, holder=self.holder, expires_at=expires))
            except IntegrityError:
                return False
            return True
