"""Bearer tokens of the schedule API: created once, stored hashed, compared in constant time.

A token reads ``gpsd_<id>_<secret>``. The id is public (it names the token in
``tokens list`` and the audit log); only the SHA-256 of the secret is stored.
A plain hash is enough because the secret is 256 random bits: nothing to
brute-force, unlike a password. Verification always hashes and compares, even
for an unknown id, so the time taken says nothing about which ids exist.
"""

# Decisions embodied here (docs/decisions.md):
# * “Tokens”
# * “A token name names one live token”
# * “Identifier patterns end with `\Z`, not `$`”
# * “Token names 1-64 printable; the token id in its own audit column”
# * “A read-only tenant scope and token expiry”

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gps_dagster.store import audit
from gps_dagster.store.api_tables import api_tokens
from gps_dagster.store.errors import StoreError

PREFIX = "gpsd"
SCOPE = re.compile(r"^(admin|cmp:[a-z0-9][a-z0-9-]{0,62}(:read)?)\Z")
"""The scopes a token may carry: the schedule scopes of R-MODEL-9, and ``cmp:<project>:read``
(R-API: a tenant's read-only token: GET, dry-run, timeline, admission check)."""
_TOKEN = re.compile(rf"^{PREFIX}_([0-9a-f]{{12}})_([A-Za-z0-9_-]{{20,100}})$")
_DUMMY = hashlib.sha256(b"no such token").hexdigest()


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: str
    name: str
    scope: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None
    expires_at: datetime | None = None
    """After this instant the token no longer authenticates (None: until revoked)."""

    @property
    def project(self) -> str | None:
        """The CMP project of a tenant token, None for an admin token."""
        return self.scope.split(":")[1] if self.scope.startswith("cmp:") else None

    @property
    def read_only(self) -> bool:
        """A ``cmp:<project>:read`` token: it may read and dry-run, never write."""
        return self.scope.endswith(":read")

    @property
    def actor(self) -> str:
        """How the audit log names the holder: ``token:<name>(<id>)``."""
        return f"token:{self.name}({self.id})"


class InvalidScope(StoreError):
    http_status = 400
    reason = "invalid_scope"

    def __init__(self, scope: str) -> None:
        super().__init__(
            f"'{scope}' is not a token scope",
            fix="use 'admin', 'cmp:<project>' or 'cmp:<project>:read'",
        )


MAX_NAME = 64
"""Longest token name: the audit actor ``token:<name>(<id>)`` always keeps the id (R-API)."""


class InvalidTokenName(StoreError):
    http_status = 400
    reason = "invalid_token_name"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"token name {name[:80]!r}{'…' if len(name) > 80 else ''} is not 1-{MAX_NAME} "
            "printable characters",
            fix=f"name the token with 1 to {MAX_NAME} printable characters, no leading or trailing "
            "space, e.g. --name vision-ci",
        )


def check_name(name: str) -> None:
    """1-64 printable characters, no surrounding whitespace (what ``tokens list`` can show)."""
    if not 1 <= len(name) <= MAX_NAME or not name.isprintable() or name.strip() != name:
        raise InvalidTokenName(name)


class InvalidExpiry(StoreError):
    http_status = 400
    reason = "invalid_expiry"

    def __init__(self, at: datetime) -> None:
        super().__init__(
            f"the expiry {at.isoformat()} is not in the future",
            fix="give --expires a duration (e.g. 30d, 12h) or a later RFC 3339 instant",
        )


class InvalidToken(StoreError):
    http_status = 400
    reason = "invalid_token"

    def __init__(self) -> None:
        super().__init__(
            "the token is not of the form gpsd_<12 hex>_<20-100 of A-Z a-z 0-9 _ ->",
            fix="give a token made by `gps-dagster tokens create` or the Helm chart's Secret",
        )


class TokenIdTaken(StoreError):
    http_status = 409
    reason = "token_id_taken"

    def __init__(self, token_id: str) -> None:
        super().__init__(
            f"a different token already has id {token_id}",
            fix="generate a new token (delete the Secret and upgrade, or `tokens create`)",
        )


class TokenNotFound(StoreError):
    http_status = 404
    reason = "token_not_found"

    def __init__(self, ref: str) -> None:
        super().__init__(f"no token with id or name '{ref}'", fix="see `gps-dagster tokens list`")


class TokenNameTaken(StoreError):
    http_status = 409
    reason = "token_name_taken"

    def __init__(self, name: str, token_id: str) -> None:
        super().__init__(
            f"a live token is already named '{name}' (id {token_id})",
            fix=(
                f"choose another name, or revoke {token_id} first (`gps-dagster tokens revoke "
                f"{token_id}`)"
            ),
        )


class AmbiguousToken(StoreError):
    http_status = 409
    reason = "ambiguous_token"

    def __init__(self, ref: str, ids: list[str]) -> None:
        super().__init__(
            f"{len(ids)} tokens are named '{ref}': {', '.join(ids)}",
            fix=f"revoke by id, e.g. `gps-dagster tokens revoke {ids[0]}`",
        )


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenRepository:
    """Create, list, revoke and verify API tokens."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def create(
        self,
        name: str,
        scope: str,
        *,
        now: datetime,
        actor: str,
        expires_at: datetime | None = None,
    ) -> tuple[TokenRecord, str]:
        """A new token; returns its record and the plaintext, which is never readable again."""
        check_name(name)
        if not SCOPE.match(scope):
            raise InvalidScope(scope)
        if expires_at is not None and expires_at <= now:
            raise InvalidExpiry(expires_at)
        token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        with self._engine.begin() as conn:
            live = conn.execute(
                sa.select(api_tokens.c.id).where(
                    api_tokens.c.name == name, api_tokens.c.revoked_at.is_(None)
                )
            ).first()
            # `tokens revoke NAME` must name one token
            # (decision "A token name names one live token")
            if live is not None:
                raise TokenNameTaken(name, live.id)
            conn.execute(
                api_tokens.insert().values(
                    id=token_id,
                    name=name,
                    scope=scope,
                    secret_sha256=_digest(secret),
                    created_at=now,
                    created_by=actor,
                    expires_at=expires_at,
                )
            )
            detail = {"name": name, "expires_at": expires_at.isoformat() if expires_at else None}
            audit.record(
                conn,
                at=now,
                actor=actor,
                action="token_created",
                kind="token",
                name=token_id,
                scope=scope,
                detail=detail,
            )
        record = TokenRecord(token_id, name, scope, now, actor, None, expires_at)
        return record, f"{PREFIX}_{token_id}_{secret}"

    def adopt(
        self, token: str, name: str, scope: str, *, now: datetime, actor: str
    ) -> tuple[TokenRecord, bool]:
        """Register a token made elsewhere (the Helm chart's Secret): (record, newly stored).

        Only the hash is stored, as for ``create``. Importing the same token again changes
        nothing (a revoked one stays revoked); a different token with the same id is refused.
        """
        match = _TOKEN.match(token)
        if not match:
            raise InvalidToken()
        check_name(name)
        if not SCOPE.match(scope):
            raise InvalidScope(scope)
        token_id, digest = match.group(1), _digest(match.group(2))
        with self._engine.begin() as conn:
            row = conn.execute(sa.select(api_tokens).where(api_tokens.c.id == token_id)).first()
            if row is not None:
                if not hmac.compare_digest(row.secret_sha256, digest):
                    raise TokenIdTaken(token_id)
                return _record(row), False
            conn.execute(
                api_tokens.insert().values(
                    id=token_id,
                    name=name,
                    scope=scope,
                    secret_sha256=digest,
                    created_at=now,
                    created_by=actor,
                )
            )
            audit.record(
                conn,
                at=now,
                actor=actor,
                action="token_imported",
                kind="token",
                name=token_id,
                scope=scope,
                detail={"name": name},
            )
        return TokenRecord(token_id, name, scope, now, actor, None), True

    def list(self) -> list[TokenRecord]:
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.select(api_tokens).order_by(api_tokens.c.created_at, api_tokens.c.id)
            ).all()
        return [_record(r) for r in rows]

    def revoke(self, ref: str, *, now: datetime, actor: str) -> TokenRecord:
        """Revoke the token with id (or unique name) ``ref``; revoking twice is success."""
        with self._engine.begin() as conn:
            rows = conn.execute(
                sa.select(api_tokens).where(
                    sa.or_(api_tokens.c.id == ref, api_tokens.c.name == ref)
                )
            ).all()
            by_id = [r for r in rows if r.id == ref]
            if by_id:
                rows = by_id
            elif len(rows) > 1:  # names made before names were unique, or a revoked namesake
                live = [r for r in rows if r.revoked_at is None]
                if len(live) != 1:
                    raise AmbiguousToken(ref, sorted(r.id for r in (live or rows)))
                rows = live
            if len(rows) != 1:
                raise TokenNotFound(ref)
            row = rows[0]
            if row.revoked_at is None:
                conn.execute(
                    api_tokens.update().where(api_tokens.c.id == row.id).values(revoked_at=now)
                )
                audit.record(
                    conn,
                    at=now,
                    actor=actor,
                    action="token_revoked",
                    kind="token",
                    name=row.id,
                    scope=row.scope,
                    detail={"name": row.name},
                )
            revoked = row.revoked_at or now
        return TokenRecord(
            row.id, row.name, row.scope, row.created_at, row.created_by, revoked, row.expires_at
        )

    def live(self, token_id: str, *, now: datetime) -> TokenRecord | None:
        """The token with id ``token_id`` if it is neither revoked nor expired at ``now``."""
        with self._engine.connect() as conn:
            row = conn.execute(sa.select(api_tokens).where(api_tokens.c.id == token_id)).first()
        if (
            row is None
            or row.revoked_at is not None
            or (row.expires_at is not None and now >= row.expires_at)
        ):
            return None
        return _record(row)

    def verify(self, token: str, *, now: datetime) -> TokenRecord | None:
        """The live token ``token`` names, or None (unknown, malformed, wrong secret, revoked, or
        expired at ``now``). Time is a parameter: the caller passes its clock's instant."""
        match = _TOKEN.match(token)
        token_id, secret = (match.group(1), match.group(2)) if match else ("", token)
        row = None
        if match:
            with self._engine.connect() as conn:
                row = conn.execute(sa.select(api_tokens).where(api_tokens.c.id == token_id)).first()
        stored = row.secret_sha256 if row is not None else _DUMMY
        good = hmac.compare_digest(_digest(secret), stored)
        if row is None or not good or row.revoked_at is not None:
            return None
        if row.expires_at is not None and now >= row.expires_at:
            return None
        return _record(row)


def _record(row: sa.Row) -> TokenRecord:  # type: ignore[type-arg]
    return TokenRecord(
        row.id, row.name, row.scope, row.created_at, row.created_by, row.revoked_at, row.expires_at
    )
