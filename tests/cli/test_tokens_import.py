"""``gps-dagster tokens import``: the Helm chart's admin token registered by its hook Job.

The token comes from an environment variable (never the command line), only its hash is
stored, a second import is a no-op (the post-upgrade hook runs it at every upgrade), a revoked
token stays revoked, and a malformed token or a different one with a taken id is refused with
its reason and fix, storing nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from gps_dagster.store import Store
from gps_dagster.store.api_tables import api_tokens
from gps_dagster.store.tokens import TokenRepository
from tests.cli.cli_support import run

TOKEN = "gpsd_0123456789ab_" + "s3cr3t-Token_value" * 3
"""A fixed token (test ids must be equal on every xdist worker)."""
OTHER_SECRET = "gpsd_0123456789ab_" + "another-secret-value" * 2  # same id, other secret
NOW = datetime(
    2026, 10, 21, 10, tzinfo=UTC
)  # the imported token has no expiry: any instant verifies it
IMPORT = ("tokens", "import", "--name", "helm-admin", "--scope", "admin", "--from-env", "TOK")


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    monkeypatch.setenv("GPS_DB_URL", url)
    return url


def _rows(url: str) -> list[sa.Row]:  # type: ignore[type-arg]
    store = Store.open(url)
    with store.engine.connect() as conn:
        rows = list(conn.execute(sa.select(api_tokens)).all())
    store.engine.dispose()
    return rows


def test_import_stores_the_hash_once_and_the_token_then_authenticates(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOK", TOKEN)
    first = run(*IMPORT)
    assert first.exit_code == 0, first.output
    assert "imported: token" in first.output and TOKEN not in first.output
    again = run(*IMPORT)
    assert again.exit_code == 0 and "already registered" in again.output
    [row] = _rows(db)
    assert TOKEN.split("_", 2)[2] not in str(tuple(row))  # the secret itself is not stored
    store = Store.open(db)
    record = TokenRepository(store.engine).verify(TOKEN, now=NOW)
    assert record is not None and (record.name, record.scope) == ("helm-admin", "admin")
    store.engine.dispose()


def test_a_revoked_imported_token_stays_revoked_on_the_next_upgrade(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOK", TOKEN)
    assert run(*IMPORT).exit_code == 0
    assert run("tokens", "revoke", "helm-admin").exit_code == 0
    again = run(*IMPORT)
    assert again.exit_code == 0 and "(revoked)" in again.output
    store = Store.open(db)
    assert TokenRepository(store.engine).verify(TOKEN, now=NOW) is None
    store.engine.dispose()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "token_missing"),
        ("not-a-token", "invalid_token"),
        (OTHER_SECRET, "token_id_taken"),
    ],
    ids=["missing", "malformed", "id-taken"],
)
def test_bad_tokens_are_refused_with_a_reason_and_store_nothing_new(
    db: str, monkeypatch: pytest.MonkeyPatch, value: str, reason: str
) -> None:
    if reason == "token_id_taken":
        monkeypatch.setenv("TOK", TOKEN)
        assert run(*IMPORT).exit_code == 0
    before = len(_rows(db))
    monkeypatch.setenv("TOK", value)
    result = run(*IMPORT)
    assert result.exit_code == 1
    assert reason in result.output and "fix:" in result.output
    assert "Traceback" not in result.output
    assert len(_rows(db)) == before
