"""R-K8S-8 through the API: ``:dry-run`` plans with the claims' pins, as the engine and the CLI do.

A claim is pinned to the object the engine first saw behind a deploy id. When another object
now carries the id, a pass refuses it (``ineligible{deploy_replaced}``) and the CLI's
``dry-run`` says so; the API's ``:dry-run`` must report the same plan, not steps the engine
would never take. Against a live server (uvicorn on loopback), over a core whose deploys carry
an object identity (the simulated pool has none, so it is added here, as Kubernetes gives a uid).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_support import ADMIN, WED_10, Api, make_api, seed
from click.testing import CliRunner
from fastapi.testclient import TestClient
from live_server import serving

from gps_dagster.api import ApiServices, create_app
from gps_dagster.cli import wiring
from gps_dagster.cli.main import cli
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.engine import Engine
from gps_dagster.engine.gps_hooks import hooks
from gps_dagster.ports import Core, DeployView

REPLACED = "md-qwen32b"
OLD, NEW = "uid-0001", "uid-0002"
AT = "2026-10-21T19:00:00+07:00"  # after business hours: the seed starts md-qwen32b


class Identified:
    """``core`` whose deploys carry an object identity; ``REPLACED`` now names object ``NEW``."""

    def __init__(self, core: Core) -> None:
        self._core = core

    def _view(self, view: Any) -> Any:
        if isinstance(view, DeployView):
            return dataclasses.replace(
                view, instance=NEW if view.id == REPLACED else f"uid-{view.id}"
            )
        if isinstance(view, Mapping):
            return {k: self._view(v) for k, v in view.items()}
        if isinstance(view, list):
            return [self._view(v) for v in view]
        return view

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._core, name)
        if not callable(attr):
            return attr
        return lambda *a, **kw: self._view(attr(*a, **kw))


@pytest.fixture
def pinned(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Api, httpx.Client]]:
    """The seed stored through the API, its claim of ``REPLACED`` pinned to ``OLD``."""
    base = make_api(sqlite_url)
    old = base.services
    core: Any = Identified(old.core)
    engine = Engine(
        old.store, core, old.clock, EngineConfig(holder="api-test"), **hooks(old.store, core)
    )
    services = ApiServices(
        store=old.store, core=core, engine=engine, clock=old.clock, pool=old.pool, limits=old.limits
    )
    api = Api(
        TestClient(create_app(services), raise_server_exceptions=False),
        services,
        base.clock,
        base.tokens,
    )
    real_runtime = wiring.runtime  # the CLI's runtime over the same identified core and clock

    def identified_runtime(chosen: Any, **kw: Any) -> Any:
        rt = real_runtime(chosen, **kw)
        return dataclasses.replace(rt, core=Identified(rt.core), clock=old.clock)

    monkeypatch.setattr(wiring, "runtime", identified_runtime)
    with serving(api.client.app) as url, httpx.Client(base_url=url, timeout=60) as http:
        created = http.post(ADMIN, json=seed(), headers=api.as_("admin"))
        assert created.status_code == 201, created.text
        old.store.pin(seed()["name"], REPLACED, OLD, now=WED_10)
        yield api, http
    api.client.close()
    base.client.close()
    old.store.engine.dispose()


def test_the_api_dry_run_of_a_replaced_deploy_is_the_plan_of_the_cli_and_of_a_pass(
    pinned: tuple[Api, httpx.Client], sqlite_url: str, tmp_path: Path
) -> None:
    api, http = pinned
    name = seed()["name"]
    answer = http.post(f"{ADMIN}/{name}:dry-run", json={"at": AT}, headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text
    over_http = answer.json()["instant"]
    assert {"target": REPLACED, "kind": "ineligible", "reason": "deploy_replaced"} in over_http[
        "warnings"
    ]
    assert all(s["target"] != REPLACED for s in over_http["steps"]), over_http["steps"]

    doc = tmp_path / "seed.json"
    doc.write_text(json.dumps(seed()))
    ran = CliRunner().invoke(
        cli,
        [
            "dry-run",
            str(doc),
            "--at",
            AT,
            "--format",
            "json",
            "--backend",
            "sim",
            "--db",
            sqlite_url,
            "--pool",
            str(Path(__file__).parent / "api-pool.yaml"),
        ],
    )
    assert ran.exit_code == 0, ran.output
    shown = {
        k: v for k, v in over_http.items() if not (k == "ready_by" and v is None)
    }  # the model's null
    assert json.loads(ran.output) == shown  # the CLI's view, at the same instant

    api.clock.set(datetime.fromisoformat(AT))
    api.services.store.set_gate("observe", now=api.clock.now())  # plan and record, submit nothing
    api.services.engine.run_pass(
        schedule=name
    )  # the engine's view: the pass refuses the replaced deploy
    (row,) = [r for r in api.services.store.list_status(name) if r.deploy_id == REPLACED]
    assert (row.phase, row.reason) == ("ineligible", "deploy_replaced")
