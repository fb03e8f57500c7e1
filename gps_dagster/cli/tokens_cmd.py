"""``gps-dagster tokens …``: bearer tokens of the schedule API (create, list, revoke).

``create`` prints the token once, on stdout alone (so ``TOKEN=$(gps-dagster
tokens create …)`` works); only its hash is stored. Every create and revoke
is in the audit log, with the OS user as the actor.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

import click

from gps_dagster.cli import wiring
from gps_dagster.cli.inputs import cli_actor
from gps_dagster.cli.refusals import refuse
from gps_dagster.cli.wiring import store_options
from gps_dagster.domain.spec import parse_duration
from gps_dagster.runtime import Settings, build_clock
from gps_dagster.store.errors import StoreError
from gps_dagster.store.tokens import TokenRecord, TokenRepository


def _repo(settings: Settings) -> TokenRepository:
    return TokenRepository(wiring.store(settings).engine)


def _row(t: TokenRecord) -> dict[str, str | None]:
    return {
        "id": t.id,
        "name": t.name,
        "scope": t.scope,
        "created_at": t.created_at.isoformat(),
        "created_by": t.created_by,
        "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None,
        "expires_at": t.expires_at.isoformat() if t.expires_at else None,
    }


def _expiry(text: str | None, now: datetime) -> datetime | None:
    """``--expires``: a duration from now (``30d``, ``12h``) or an RFC 3339 instant with an
    offset."""
    if text is None:
        return None
    try:
        return now + parse_duration(text.strip())
    except (ValueError, TypeError):
        pass
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        at = None
    if at is None or at.utcoffset() is None:
        click.echo(
            f"error: --expires: invalid_expiry — {text[:60]!r} is neither a duration nor an "
            "instant — fix: give e.g. --expires 30d, --expires 12h or "
            "--expires 2027-01-01T00:00:00+00:00",
            err=True,
        )
        raise SystemExit(1)
    return at


@click.group("tokens")
def tokens_group() -> None:
    """Bearer tokens of `gps-dagster serve` (scope admin, cmp:<project> or cmp:<project>:read)."""


@tokens_group.command("create")
@click.option("--name", required=True, help="Who or what holds the token (shown in the audit log).")
@click.option(
    "--scope",
    required=True,
    help="admin, cmp:<project> for a tenant, or cmp:<project>:read (read and dry-run only).",
)
@click.option(
    "--expires",
    default=None,
    metavar="WHEN",
    help="Expiry: a duration from now (30d, 12h) or an RFC 3339 instant; default never.",
)
@store_options
def create(name: str, scope: str, expires: str | None, settings: Settings) -> None:
    """Create a token and print it once (it cannot be shown again)."""
    now = build_clock(settings).now()
    try:
        record, token = _repo(settings).create(
            name, scope, now=now, actor=cli_actor(), expires_at=_expiry(expires, now)
        )
    except StoreError as exc:
        refuse(exc)
    until = f", expires {record.expires_at.isoformat()}" if record.expires_at else ""
    click.echo(
        f"created token {record.id} '{record.name}' scope {record.scope}{until}; store it now, "
        "it is not shown again",
        err=True,
    )
    click.echo(token)


@tokens_group.command("import")
@click.option("--name", required=True, help="Who or what holds the token (shown in the audit log).")
@click.option("--scope", required=True, help="admin, or cmp:<project> for a tenant.")
@click.option(
    "--from-env",
    "from_env",
    required=True,
    metavar="VAR",
    help="Environment variable holding the token (never on the command line).",
)
@store_options
def import_(name: str, scope: str, from_env: str, settings: Settings) -> None:
    """Register an existing token (e.g. the Helm chart's Secret); its hash only is stored.

    Importing the same token again changes nothing: safe in an upgrade hook.
    """
    token = os.environ.get(from_env, "").strip()
    if not token:
        click.echo(
            f"error: token_missing — ${from_env} is empty or unset — fix: set it to the "
            "token (e.g. from the chart's api-token Secret)",
            err=True,
        )
        raise SystemExit(1)
    try:
        record, stored = _repo(settings).adopt(
            token, name, scope, now=build_clock(settings).now(), actor=cli_actor()
        )
    except StoreError as exc:
        refuse(exc)
    state = "revoked" if record.revoked_at else "live"
    verb = "imported" if stored else "already registered"
    click.echo(f"{verb}: token {record.id} '{record.name}' scope {record.scope} ({state})")


@tokens_group.command("list")
@store_options
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def list_(settings: Settings, fmt: str) -> None:
    """List tokens (never their secrets)."""
    rows = [_row(t) for t in _repo(settings).list()]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    from gps_dagster.cli import render

    click.echo(
        render.table(
            ["ID", "NAME", "SCOPE", "CREATED", "EXPIRES", "REVOKED"],
            [
                [
                    r["id"] or "",
                    r["name"] or "",
                    r["scope"] or "",
                    r["created_at"] or "",
                    r["expires_at"] or "never",
                    r["revoked_at"] or "",
                ]
                for r in rows
            ],
        )
    )


@tokens_group.command("revoke")
@click.argument("ref")
@store_options
def revoke(ref: str, settings: Settings) -> None:
    """Revoke the token with id (or unique name) REF; it stops working at once."""
    try:
        record = _repo(settings).revoke(ref, now=build_clock(settings).now(), actor=cli_actor())
    except StoreError as exc:
        refuse(exc)
    click.echo(f"revoked token {record.id} '{record.name}'")
