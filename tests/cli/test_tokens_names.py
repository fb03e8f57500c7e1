"""Issue 21 item 7: a token name names one live token, so ``tokens revoke NAME`` revokes it.

``tokens create`` refuses the name of a live token (409-style ``token_name_taken``, exit 1,
with the id to revoke); a revoked namesake does not block the name; rows made before names
were unique make ``revoke NAME`` answer with their ids instead of "no such token".
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

NOW = datetime(2026, 10, 21, 3, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    monkeypatch.setenv("GPS_DB_URL", url)
    return url


def _live(url: str, name: str) -> list[str]:
    store = Store.open(url)
    with store.engine.connect() as conn:
        ids = [
            r.id
            for r in conn.execute(
                sa.select(api_tokens).where(
                    api_tokens.c.name == name, api_tokens.c.revoked_at.is_(None)
                )
            )
        ]
    store.engine.dispose()
    return ids


def test_a_duplicate_name_is_refused_and_revoke_by_name_then_works(db: str) -> None:
    assert run("tokens", "create", "--name", "ci", "--scope", "admin").exit_code == 0
    again = run("tokens", "create", "--name", "ci", "--scope", "cmp:vision")
    assert (
        again.exit_code == 1
        and "token_name_taken" in again.output
        and "Traceback" not in again.output
    )
    (first,) = _live(db, "ci")
    assert first in again.output  # the fix names the id to revoke
    revoked = run("tokens", "revoke", "ci")
    assert revoked.exit_code == 0, revoked.output
    assert _live(db, "ci") == []
    assert (
        run("tokens", "create", "--name", "ci", "--scope", "admin").exit_code == 0
    )  # a revoked namesake


def test_old_duplicate_rows_make_revoke_answer_with_the_ids(db: str) -> None:
    store = Store.open(db)
    repo = TokenRepository(store.engine)
    one = repo.create("dup", "admin", now=NOW, actor="t")[0]
    with store.engine.begin() as conn:  # a second live row as older versions allowed
        conn.execute(
            api_tokens.insert().values(
                id="0123456789ab",
                name="dup",
                scope="admin",
                secret_sha256="0" * 64,
                created_at=NOW,
                created_by="t",
            )
        )
    store.engine.dispose()
    answer = run("tokens", "revoke", "dup")
    assert answer.exit_code == 1 and "ambiguous_token" in answer.output
    assert one.id in answer.output and "0123456789ab" in answer.output
    assert sorted(_live(db, "dup")) == sorted([one.id, "0123456789ab"])  # nothing revoked
    assert run("tokens", "revoke", one.id).exit_code == 0
    assert _live(db, "dup") == ["0123456789ab"]
