"""A small, bounded correctness version of bench/api_load.py (the benchmark reports the figures).

50 concurrent clients on a real uvicorn socket list, read status and dry-run for at most 300
requests: every answer is a 200. Then an apply-now burst under contention: 200, 409 ``busy``
or 429, never a 5xx. Nothing here asserts a latency (figures belong to the benchmark).
"""

from __future__ import annotations

import asyncio
import importlib.util
from types import ModuleType

import pytest
from api_support import ADMIN, ROOT, make_api, seed
from live_server import serving

pytestmark = [pytest.mark.slow]


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_load", ROOT / "bench" / "api_load.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fifty_concurrent_clients_get_no_error_and_apply_now_is_never_a_500(
    sqlite_url: str,
) -> None:
    api = make_api(sqlite_url, pool=ROOT / "examples" / "seed-pool-10.yaml")
    names = []
    for i in range(10):
        doc = (
            seed()
            if i == 0
            else {
                "name": f"bench-{i}",
                "timezone": "UTC",
                "targets": [{"model_deploy_id": f"ghost-{i}", "default_state": "running"}],
            }
        )
        doc["name"] = f"bench-{i}"
        assert api.call("admin", "POST", ADMIN, json=doc).status_code == 201
        names.append(doc["name"])
    load = bench()
    with serving(api.client.app) as url:
        lat = asyncio.run(
            load.load(
                url, api.tokens["admin"], names=names, clients=50, seconds=60, max_requests=300
            )
        )
        codes = asyncio.run(load.contention(url, api.tokens["admin"], "bench", n=30))
    assert load.errors_of(lat) == 0, {k: len(v) for k, v in lat.items()}
    assert {k: len(v) > 0 for k, v in lat.items()} == {
        "list": True,
        "status": True,
        "dry-run": True,
    }
    assert sum(len(v) for v in lat.values()) >= 300
    assert set(codes) <= {200, 409, 429} and codes.get(200, 0) >= 1, codes
