"""The pass lock (R-PASS-2): it only saves work, correctness never depends on it.

On PostgreSQL it is ``pg_try_advisory_lock`` held on a dedicated connection
for the duration of the pass (so apply-now, in another process, sees it
busy). On SQLite it is a lease row with an expiry, taken with a conditional
insert/update inside a ``BEGIN IMMEDIATE`` transaction. A crashed holder's
lease simply expires; a crashed PostgreSQL holder's session ends and the
server drops the lock.

Letting go never raises and never leaks: if ``pg_advisory_unlock`` fails, the
connection is invalidated (closed, not returned to the pool) so the session —
and the lock with it — ends; a SQLite lease that cannot be deleted expires.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from gps_dagster.store import tables as t
from gps_dagster.store.db import is_postgres

log = logging.getLogger(__name__)


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_try_advisory_lock``."""
    digest = hashlib.sha256(f"gps_dagster:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PassLock:
    """Use as a context manager; ``acquired`` says whether this holder got it."""

    def __init__(
        self, engine: Engine, name: str, *, holder: str, now: datetime, ttl_s: float
    ) -> None:
        self.engine, self.name, self.holder, self.now, self.ttl_s = engine, name, holder, now, ttl_s
        self.acquired = False
        self._conn: Connection | None = None

    def __enter__(self) -> PassLock:
        if is_postgres(self.engine):
            conn = self.engine.connect()
            try:
                got = conn.execute(
                    sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": advisory_key(self.name)}
                ).scalar()
                conn.commit()
            except BaseException:
                conn.close()
                raise
            self.acquired = bool(got)
            if self.acquired:
                self._conn = conn
            else:
                conn.close()
        else:
            self.acquired = self._take_lease()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def release(self) -> None:
        if not self.acquired:
            return
        self.acquired = False
        if self._conn is not None:
            self._unlock(self._conn)
            self._conn = None
            return
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    t.leases.delete().where(
                        t.leases.c.name == self.name, t.leases.c.holder == self.holder
                    )
                )
        except Exception:  # the lease expires on its own after ttl_s
            log.warning(
                "could not delete the lease %s of %s; it expires in %.0f s",
                self.name,
                self.holder,
                self.ttl_s,
                exc_info=True,
            )

    def _unlock(self, conn: Connection) -> None:
        """Unlock, or else make sure the session holding the lock ends (never back to the pool)."""
        try:
            conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": advisory_key(self.name)})
            conn.commit()
        except Exception:
            log.warning(
                "pg_advisory_unlock of %s failed; closing its session instead",
                self.name,
                exc_info=True,
            )
            conn.invalidate()
        finally:
            conn.close()

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
                    conn.execute(
                        t.leases.insert().values(
                            name=self.name, holder=self.holder, expires_at=expires
                        )
                    )
            except IntegrityError:
                return False
            return True
