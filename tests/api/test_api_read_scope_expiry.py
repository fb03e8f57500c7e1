"""Issue 21 item 15: a read-only tenant scope and token expiry.

``cmp:<project>:read`` may GET, dry-run, read the timeline and run an admission check on its
project's surface, never write; a token past its ``expires_at`` no longer authenticates;
``tokens list`` shows both. Before, the scope was refused and tokens never expired.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_support import Api, alpha_schedule, tenant_base

from gps_dagster.store.tokens import TokenRepository
from tests.cli.cli_support import run

BASE = tenant_base("alpha")
ONE = f"{BASE}/alpha-swap"
AT = {"at": "2026-10-21T14:00:00+07:00"}


def _token(api: Api, name: str, scope: str, **kw: object) -> dict[str, str]:
    _record, token = TokenRepository(api.services.store.engine).create(
        name, scope, now=api.clock.now(), actor="test", **kw
    )  # type: ignore[arg-type]
    return {"Authorization": f"Bearer {token}"}


def test_a_read_token_reads_and_dry_runs_but_never_writes(api: Api) -> None:
    assert api.call("alpha", "POST", BASE, json=alpha_schedule()).status_code == 201
    reader = _token(api, "alpha-dash", "cmp:alpha:read")
    reads = [
        api.client.get(BASE, headers=reader),
        api.client.get(ONE, headers=reader),
        api.client.get(f"{ONE}/status", headers=reader),
        api.client.get(f"{ONE}/timeline", headers=reader),
        api.client.post(f"{ONE}:dry-run", json=AT, headers=reader),
    ]
    assert [r.status_code for r in reads] == [200] * 5, [r.text for r in reads]
    writes = [
        api.client.post(BASE, json=alpha_schedule("other"), headers=reader),
        api.client.put(ONE, json=alpha_schedule(), headers={**reader, "If-Match": '"1"'}),
        api.client.delete(ONE, headers={**reader, "If-Match": '"1"'}),
        api.client.post(f"{ONE}:apply-now", headers=reader),
    ]
    assert [(w.status_code, w.json()["reason"]) for w in writes] == [(403, "read_only_token")] * 4
    assert "cmp:alpha" in writes[0].json()["fix"]
    assert api.services.store.get_schedule("alpha/alpha-swap").version == 1
    assert (
        api.client.get(tenant_base("beta"), headers=reader).status_code == 404
    )  # still its project only
    assert api.client.get("/admin/deploy-schedules", headers=reader).status_code == 403


def test_an_expired_token_no_longer_authenticates(api: Api) -> None:
    from datetime import timedelta

    soon = _token(api, "short", "cmp:alpha", expires_at=api.clock.now() + timedelta(hours=1))
    assert api.client.get(BASE, headers=soon).status_code == 200
    api.clock.advance(3599)
    assert api.client.get(BASE, headers=soon).status_code == 200
    api.clock.advance(1)
    late = api.client.get(BASE, headers=soon)
    assert late.status_code == 401 and "expired" in late.json()["message"]


def test_verify_judges_expiry_at_the_instant_it_is_given_and_needs_one(api: Api) -> None:
    """Time is a parameter: ``verify`` had ``now=None``, which skipped the expiry check."""
    import inspect
    from datetime import timedelta

    repo = TokenRepository(api.services.store.engine)
    start = api.clock.now()
    _record, token = repo.create(
        "brief", "cmp:alpha", now=start, actor="test", expires_at=start + timedelta(hours=1)
    )
    assert repo.verify(token, now=start + timedelta(minutes=59)) is not None
    assert repo.verify(token, now=start + timedelta(hours=1)) is None  # the clock was never read
    assert inspect.signature(repo.verify).parameters["now"].default is inspect.Parameter.empty


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    monkeypatch.setenv("GPS_DB_URL", url)
    monkeypatch.setenv("GPS_CLOCK", "2026-10-21T10:00:00+07:00")
    return url


def test_tokens_create_takes_the_read_scope_and_expires_and_list_shows_both(db: str) -> None:
    made = run(
        "tokens", "create", "--name", "dash", "--scope", "cmp:vision:read", "--expires", "30d"
    )
    assert made.exit_code == 0, made.output
    forever = run("tokens", "create", "--name", "ci", "--scope", "cmp:vision")
    assert forever.exit_code == 0, forever.output
    rows = {r["name"]: r for r in json.loads(run("tokens", "list", "--format", "json").output)}
    assert rows["dash"]["scope"] == "cmp:vision:read"
    assert rows["dash"]["expires_at"] == "2026-11-20T03:00:00+00:00"
    assert rows["ci"]["expires_at"] is None
    table = run("tokens", "list").output
    assert "EXPIRES" in table and "never" in table and "cmp:vision:read" in table
    past = run(
        "tokens", "create", "--name", "old", "--scope", "admin", "--expires", "2020-01-01T00:00:00Z"
    )
    assert past.exit_code == 1 and "invalid_expiry" in past.output
    bad = run("tokens", "create", "--name", "bad", "--scope", "admin", "--expires", "soon")
    assert bad.exit_code == 1 and "invalid_expiry" in bad.output and "Traceback" not in bad.output
