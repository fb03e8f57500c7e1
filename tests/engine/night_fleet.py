"""The storm world: ``n`` schedules that all swap their pair at 22:00 +07 (issue 13).

Pair ``i`` is ``d{i}-a`` (running) and ``d{i}-b`` (stopped), one GPU each, on nodes of 8 GPUs
holding exactly as many GPUs as pairs, so every acquire needs the GPUs its release frees.
``tests/engine/test_storm.py``, ``tests/engine/test_due_releases_first.py`` and ``bench/storm.py``
build their pools and schedules here.
"""

from __future__ import annotations

from typing import Any


def night_pool(n: int, *, name: str = "storm", digits: int = 4) -> dict[str, Any]:
    deploys = []
    for i in range(n):
        deploys.append({"id": f"d{i}-a", "gpus_per_replica": 1, "state": "running"})
        deploys.append({"id": f"d{i}-b", "gpus_per_replica": 1, "state": "stopped"})
    nodes = [{"name": f"n{j:0{digits}d}", "gpus": 8} for j in range((n + 7) // 8)]
    # the usage history is a simulation report, not the engine's work: off at this size
    return {"name": name, "nodes": nodes, "deploys": deploys, "sim": {"record_usage": False}}


def night_schedule(i: int, *, digits: int = 4) -> dict[str, Any]:
    return {
        "name": f"s{i:0{digits}d}",
        "timezone": "Asia/Ho_Chi_Minh",
        "targets": [
            {"model_deploy_id": f"d{i}-a", "default_state": "running"},
            {"model_deploy_id": f"d{i}-b", "default_state": "stopped"},
        ],
        "windows": [
            {
                "name": "night",
                "kind": "recurring",
                "priority": 10,
                "cron": "0 22 * * *",
                "duration": "6h",
                "states": [
                    {"model_deploy_id": f"d{i}-a", "desired_state": "stopped"},
                    {"model_deploy_id": f"d{i}-b", "desired_state": "running"},
                ],
            }
        ],
    }
