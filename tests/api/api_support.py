"""Building the API over a real store and the simulated pool, on a virtual clock.

Requests go through FastAPI's TestClient (httpx over the ASGI app, in
process): the same app ``gps-dagster serve`` runs on uvicorn, without a
socket. Tokens are real rows of the store, created through the repository.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from gps_dagster.api import ApiServices, Limits, create_app
from gps_dagster.clocks import VirtualClock
from gps_dagster.engine.config import EngineConfig
from gps_dagster.runtime import build_runtime, settings_from_env
from gps_dagster.store.tokens import TokenRepository

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
POOL = HERE / "api-pool.yaml"
SEED = json.loads((ROOT / "examples" / "seed-schedule.json").read_text())
WED_10 = datetime.fromisoformat("2026-10-21T10:00:00+07:00")
ADMIN = "/admin/deploy-schedules"


def tenant_base(project: str) -> str:
    return f"/api/v1/cmp/projects/{project}/deploy-schedules"


def alpha_schedule(name: str = "alpha-swap") -> dict[str, Any]:
    """A tenant schedule of project alpha: chat in business hours, batch outside."""
    return {
        "name": name,
        "timezone": "Asia/Ho_Chi_Minh",
        "targets": [
            {"model_deploy_id": "alpha-chat", "default_state": "stopped"},
            {"model_deploy_id": "alpha-batch", "default_state": "running"},
        ],
        "windows": [
            {
                "name": "business-hours",
                "kind": "recurring",
                "priority": 10,
                "cron": "0 8 * * 1-5",
                "duration": "10h",
                "states": [
                    {"model_deploy_id": "alpha-chat", "desired_state": "running"},
                    {"model_deploy_id": "alpha-batch", "desired_state": "stopped"},
                ],
            }
        ],
    }


def beta_schedule(name: str = "beta-nightly") -> dict[str, Any]:
    return {
        "name": name,
        "timezone": "Asia/Ho_Chi_Minh",
        "targets": [{"model_deploy_id": "beta-chat", "default_state": "stopped"}],
        "windows": [
            {
                "name": "night",
                "kind": "recurring",
                "priority": 10,
                "cron": "0 22 * * *",
                "duration": "6h",
                "states": [{"model_deploy_id": "beta-chat", "desired_state": "running"}],
            }
        ],
    }


def seed() -> dict[str, Any]:
    return copy.deepcopy(SEED)


@dataclass
class Api:
    client: TestClient
    services: ApiServices
    clock: VirtualClock
    tokens: dict[str, str] = field(default_factory=dict)

    def as_(self, who: str) -> dict[str, str]:
        """Headers of caller ``who`` (a key of ``tokens``; 'anonymous' sends none)."""
        return {} if who == "anonymous" else {"Authorization": f"Bearer {self.tokens[who]}"}

    def call(self, who: str, method: str, path: str, **kw: Any) -> Any:
        headers = {**self.as_(who), **kw.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **kw)


def make_api(
    db_url: str, *, pool: Path = POOL, start: datetime = WED_10, limits: Limits | None = None
) -> Api:
    clock = VirtualClock(start)
    settings = settings_from_env({}, backend="sim", db_url=db_url, pool_file=str(pool))
    rt = build_runtime(settings, clock=clock, config=EngineConfig(holder="api-test"))
    services = ApiServices(
        store=rt.store,
        core=rt.core,
        engine=rt.engine,
        clock=clock,
        pool=rt.pool,
        limits=limits or Limits(),
    )
    api = Api(TestClient(create_app(services), raise_server_exceptions=False), services, clock)
    repo = TokenRepository(rt.store.engine)
    for name, scope in (
        ("admin", "admin"),
        ("alpha", "cmp:alpha"),
        ("beta", "cmp:beta"),
        ("revoked", "admin"),
    ):
        api.tokens[name] = repo.create(name, scope, now=start, actor="test")[1]
    repo.revoke("revoked", now=start, actor="test")
    api.tokens["garbage"] = "gpsd_000000000000_notarealsecretatallnotreal"
    return api
