"""Server-side sessions of the timeline page (R-API).

The page's cookie used to be the bearer token itself: no expiry, still valid after sign-out,
and a stolen cookie was the token. A session is now a random secret of its own (only its
SHA-256 is stored, like a token's), bound to the token that signed in, with an expiry, and
revoked at sign-out. It authenticates only while its token does (revoked or expired tokens
end their sessions at once).
"""

# Decisions embodied here (docs/decisions.md):
# * “The page's cookie is a server-side session”

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gps_dagster.store.api_tables import ui_sessions

DEFAULT_TTL = timedelta(hours=12)
"""A working day: the page asks to sign in again after it."""
_SECRET = 43
"""Length of ``secrets.token_urlsafe(32)``."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Session:
    token_id: str
    expires_at: datetime


class SessionRepository:
    """Open, resolve and revoke page sessions."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def open(
        self, token_id: str, *, now: datetime, ttl: timedelta = DEFAULT_TTL
    ) -> tuple[str, Session]:
        """A new session of ``token_id``: (the cookie's secret, shown once; the session)."""
        secret = secrets.token_urlsafe(32)
        expires = now + ttl
        with self._engine.begin() as conn:
            conn.execute(
                sa.delete(ui_sessions).where(ui_sessions.c.expires_at <= now)
            )  # bounded table
            conn.execute(
                ui_sessions.insert().values(
                    id=_digest(secret), token_id=token_id, created_at=now, expires_at=expires
                )
            )
        return secret, Session(token_id, expires)

    def resolve(self, secret: str, *, now: datetime) -> Session | None:
        """The live session of a cookie value, or None (unknown, revoked or expired)."""
        if not secret or len(secret) > 2 * _SECRET:
            return None
        with self._engine.connect() as conn:
            row = conn.execute(
                sa.select(ui_sessions).where(ui_sessions.c.id == _digest(secret))
            ).first()
        if row is None or row.revoked_at is not None or now >= row.expires_at:
            return None
        return Session(row.token_id, row.expires_at)

    def revoke(self, secret: str, *, now: datetime) -> bool:
        """End the session of a cookie value (sign-out); False when there was none."""
        with self._engine.begin() as conn:
            done = conn.execute(
                ui_sessions.update()
                .where(ui_sessions.c.id == _digest(secret), ui_sessions.c.revoked_at.is_(None))
                .values(revoked_at=now)
            ).rowcount
        return bool(done)
