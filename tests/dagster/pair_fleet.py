"""A fleet of swapping pairs: the world of the storm tests and the Dagster benchmarks.

Pair ``i`` is ``a{i}`` (8 GPUs, stopped by default) and ``b{i}`` (6 GPUs, running) pinned to
node ``n{i}`` of 8 GPUs, so A can start only once B's GPUs are free; its schedule runs A and
stops B inside one recurring window. ``tests/dagster/test_storm.py``, ``bench/dagster_scale.py``
and ``bench/dagster_lag.py`` build their pools and schedules here.
"""

from __future__ import annotations

from typing import Any


def pair_pool(n: int, *, name: str = "storm", stop_grace_s: float = 0) -> dict[str, Any]:
    """The pool document of ``n`` pairs (publish lag and start delay 0)."""
    nodes = [{"name": f"n{i}", "gpus": 8, "flavor": "H100-80GB", "region": "r"} for i in range(n)]
    deploys = []
    for i in range(n):
        deploys += [
            {
                "id": f"a{i}",
                "kind": "dgd",
                "gpus_per_replica": 8,
                "state": "stopped",
                "node_selector": [f"n{i}"],
            },
            {
                "id": f"b{i}",
                "kind": "dgd",
                "gpus_per_replica": 6,
                "state": "running",
                "node_selector": [f"n{i}"],
            },
        ]
    timings = {"stop_grace_s": stop_grace_s, "publish_lag_s": 0, "start_delay_s": 0}
    return {"name": name, "nodes": nodes, "deploys": deploys, "sim": {"timings": timings}}


def pair_schedule(
    i: int,
    *,
    name: str,
    cron: str = "0 8 * * 1-5",
    duration: str = "10h",
    timezone: str = "Asia/Ho_Chi_Minh",
    window: str = "business-hours",
) -> dict[str, Any]:
    """Pair ``i``'s schedule: A running and B stopped inside the window, the reverse outside."""
    return {
        "name": name,
        "timezone": timezone,
        "targets": [
            {
                "model_deploy_id": f"a{i}",
                "default_state": "stopped",
                "default_allow_downtime": True,
            },
            {"model_deploy_id": f"b{i}", "default_state": "running"},
        ],
        "windows": [
            {
                "name": window,
                "kind": "recurring",
                "priority": 10,
                "cron": cron,
                "duration": duration,
                "states": [
                    {"model_deploy_id": f"a{i}", "desired_state": "running"},
                    {"model_deploy_id": f"b{i}", "desired_state": "stopped"},
                ],
            }
        ],
    }
