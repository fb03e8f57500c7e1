"""The CLI and the API are two edges over the same operations: same inputs, same store state.

Also: the ``tokens`` commands, and apply-now under contention (409 ``busy``, never a 500), on
SQLite and on the real PostgreSQL (advisory lock).
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from api_support import ADMIN, POOL, Api, make_api, seed
from click.testing import CliRunner

from gps_dagster.cli.main import cli
from gps_dagster.engine.engine import LOCK_NAME
from gps_dagster.store import Store

NAME = "gpu-pool-h100-shared"


def _state(url: str) -> dict[str, Any]:
    """The store's durable state, minus timestamps and actors (which differ by edge by design)."""
    store = Store.open(url)
    with store.engine.connect() as conn:
        schedules = [
            (r.name, r.version, r.scope, r.enabled, r.document)
            for r in conn.execute(sa.text("SELECT * FROM schedules ORDER BY name"))
        ]
        claims = sorted(
            tuple(r)
            for r in conn.execute(sa.text("SELECT deploy_id, schedule_name FROM target_claims"))
        )
        events = [
            (r.schedule_name, r.kind, r.detail)
            for r in conn.execute(
                sa.text(
                    "SELECT schedule_name, kind, detail FROM events WHERE schedule_name IS NOT "
                    "NULL ORDER BY id"
                )
            )
        ]
        audit = [
            (r.action, r.object_name, r.scope, r.version)
            for r in conn.execute(
                sa.text("SELECT * FROM audit_log WHERE object_kind = 'schedule' ORDER BY id")
            )
        ]
    store.engine.dispose()
    return {"schedules": schedules, "claims": claims, "events": events, "audit": audit}


def _edited() -> dict[str, Any]:
    doc = seed()
    doc["windows"][0]["priority"] = 20
    doc["targets"][1]["default_replicas"] = 2
    return doc


def test_cli_and_api_leave_the_same_store_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli_url, api_url = (
        f"sqlite:///{tmp_path / 'cli.sqlite'}",
        f"sqlite:///{tmp_path / 'api.sqlite'}",
    )
    monkeypatch.setenv("GPS_DB_URL", cli_url)
    monkeypatch.setenv("GPS_POOL_FILE", str(POOL))
    first, second = tmp_path / "seed.json", tmp_path / "edited.json"
    first.write_text(json.dumps(seed()))
    second.write_text(json.dumps(_edited()))
    runner = CliRunner()
    for args in (
        ["schedules", "apply", "-f", str(first)],
        ["schedules", "apply", "-f", str(second)],
    ):
        assert runner.invoke(cli, args).exit_code == 0

    api = make_api(api_url)
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201
    assert (
        api.call(
            "admin", "PUT", f"{ADMIN}/{NAME}", json=_edited(), headers={"If-Match": '"1"'}
        ).status_code
        == 200
    )
    assert _state(cli_url) == _state(api_url)
    assert _state(api_url)["schedules"][0][1] == 2

    assert runner.invoke(cli, ["schedules", "delete", NAME]).exit_code == 0
    assert api.call("admin", "DELETE", f"{ADMIN}/{NAME}").status_code == 204
    assert _state(cli_url) == _state(api_url)
    api.services.store.engine.dispose()


def test_both_edges_refuse_an_admin_schedule_on_a_cmp_deploy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPS_DB_URL", f"sqlite:///{tmp_path / 'cli.sqlite'}")
    monkeypatch.setenv("GPS_POOL_FILE", str(POOL))
    doc = {
        "name": "grab",
        "timezone": "UTC",
        "targets": [{"model_deploy_id": "alpha-chat", "default_state": "running"}],
    }
    path = tmp_path / "grab.json"
    path.write_text(json.dumps(doc))
    result = CliRunner().invoke(cli, ["schedules", "apply", "-f", str(path)])
    assert result.exit_code == 1 and "cmp_managed" in result.output
    assert Store.open().find_schedule("grab") is None


def test_tokens_commands_create_once_list_without_secrets_and_revoke(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(api.services.store.engine.url)
    runner = CliRunner()
    created = runner.invoke(
        cli, ["tokens", "create", "--name", "ci", "--scope", "cmp:alpha", "--db", url]
    )
    assert created.exit_code == 0, created.output
    token = created.stdout.strip().splitlines()[-1]
    assert token.startswith("gpsd_")
    listed = runner.invoke(cli, ["tokens", "list", "--format", "json", "--db", url])
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    secret = token.split("_", 2)[2]  # the secret may itself contain "_"
    assert len(secret) >= 40 and rows["ci"]["scope"] == "cmp:alpha" and secret not in listed.stdout
    headers = {"Authorization": f"Bearer {token}"}
    assert (
        api.client.get("/api/v1/cmp/projects/alpha/deploy-schedules", headers=headers).status_code
        == 200
    )
    assert runner.invoke(cli, ["tokens", "revoke", "ci", "--db", url]).exit_code == 0
    assert (
        api.client.get("/api/v1/cmp/projects/alpha/deploy-schedules", headers=headers).status_code
        == 401
    )
    bad = runner.invoke(cli, ["tokens", "create", "--name", "x", "--scope", "root", "--db", url])
    assert bad.exit_code == 1 and "invalid_scope" in bad.output


def test_concurrent_apply_now_answers_busy_never_500(api: Api) -> None:
    """While one schedule's apply-now pass runs, its others answer 409 busy at once (spending no
    rate budget: never 429), and other schedules' apply-nows run (issue 21 item 3)."""
    for i, deploy in enumerate(("md-llama70b", "md-qwen32b", "md-bge-embed")):
        doc = {
            "name": f"s{i}",
            "timezone": "UTC",
            "targets": [{"model_deploy_id": deploy, "default_state": "running"}],
        }
        assert api.call("admin", "POST", ADMIN, json=doc).status_code == 201
    entered, release = threading.Event(), threading.Event()
    real = api.services.engine.run_pass

    def slow_pass(**kw: Any) -> Any:
        if kw.get("schedule") == "s0":
            entered.set()
            assert release.wait(timeout=30)
        return real(**kw)

    api.services.engine.run_pass = slow_pass  # type: ignore[method-assign]
    headers = api.as_("admin")

    async def scenario() -> list[int]:
        transport = httpx.ASGITransport(app=api.client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            first = asyncio.create_task(client.post(f"{ADMIN}/s0:apply-now", headers=headers))
            await asyncio.to_thread(entered.wait, 30)
            same = await asyncio.gather(
                *(client.post(f"{ADMIN}/s0:apply-now", headers=headers) for _ in range(6))
            )
            others = [
                (await client.post(f"{ADMIN}/s{i}:apply-now", headers=headers)).status_code
                for i in (1, 2)
            ]
            release.set()
            return [(await first).status_code] + [r.status_code for r in same] + others

    codes = asyncio.run(scenario())
    assert codes == [200] + [409] * 6 + [200, 200], codes


@pytest.mark.postgres
def test_apply_now_is_busy_while_another_engine_holds_the_postgres_advisory_lock(
    pg_url: str,
) -> None:
    api = make_api(pg_url)
    assert api.call("admin", "POST", ADMIN, json=seed()).status_code == 201
    with api.services.store.lock(LOCK_NAME, holder="engine@other", now=api.clock.now()) as held:
        assert held.acquired
        answer = api.call("admin", "POST", f"{ADMIN}/{NAME}:apply-now")
    assert (answer.status_code, answer.json()["reason"]) == (409, "busy")
    assert api.call("admin", "POST", f"{ADMIN}/{NAME}:apply-now").status_code == 200
    api.services.store.engine.dispose()
