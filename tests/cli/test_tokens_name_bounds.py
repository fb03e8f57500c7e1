"""Issue 21 item 8: token names are 1-64 printable characters, and the audit keeps the token id
in its own column.

Before, a 150-character name pushed the id out of the 160-character audit actor (the write could
no longer be traced to a token) and PostgreSQL's 120-character column would have refused the
create with a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from gps_dagster.store import Store
from gps_dagster.store.api_tables import api_tokens, audit_log
from tests.cli.cli_support import run


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    monkeypatch.setenv("GPS_DB_URL", url)
    return url


def _rows(url: str, table: sa.Table) -> list[sa.Row]:  # type: ignore[type-arg]
    store = Store.open(url)
    with store.engine.connect() as conn:
        rows = list(conn.execute(sa.select(table)))
    store.engine.dispose()
    return rows


@pytest.mark.parametrize("name", ["x" * 65, "x" * 150, "", " padded", "tab\there", "new\nline"])
def test_a_name_outside_1_to_64_printable_is_refused_with_the_fix(db: str, name: str) -> None:
    answer = run("tokens", "create", "--name", name, "--scope", "admin")
    assert answer.exit_code == 1, answer.output
    assert "invalid_token_name" in answer.output and "1 to 64 printable" in answer.output
    assert "Traceback" not in answer.output
    assert _rows(db, api_tokens) == []  # nothing stored


def test_a_64_character_name_is_taken_and_its_writes_carry_the_token_id(db: str) -> None:
    from fastapi.testclient import TestClient

    from gps_dagster.api import ApiServices, create_app
    from gps_dagster.clocks import VirtualClock
    from gps_dagster.engine.config import EngineConfig
    from gps_dagster.runtime import build_runtime, settings_from_env
    from gps_dagster.store.tokens import TokenRepository
    from tests.api.api_support import POOL, WED_10, seed

    name = "n" * 64
    rt = build_runtime(
        settings_from_env({}, backend="sim", db_url=db, pool_file=str(POOL)),
        clock=VirtualClock(WED_10),
        config=EngineConfig(holder="t"),
    )
    record, token = TokenRepository(rt.store.engine).create(name, "admin", now=WED_10, actor="test")
    services = ApiServices(
        store=rt.store, core=rt.core, engine=rt.engine, clock=rt.clock, pool=rt.pool
    )
    client = TestClient(create_app(services))
    headers = {"Authorization": f"Bearer {token}"}
    assert client.post("/admin/deploy-schedules", json=seed(), headers=headers).status_code == 201
    items = client.get(
        "/admin/audit", headers=headers, params={"name": "gpu-pool-h100-shared"}
    ).json()["items"]
    assert [(i["action"], i["actor_token_id"]) for i in items] == [("schedule_created", record.id)]
    assert items[0]["actor"] == f"token:{name}({record.id})"
    rows = [r for r in _rows(db, audit_log) if r.action == "token_created"]
    assert rows[0].actor_token_id is None  # made by the CLI ("test"), not by a token
    client.close()
    rt.store.engine.dispose()
