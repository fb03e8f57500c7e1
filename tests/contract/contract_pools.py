"""Pool files the contract suite loads (any adapter must be able to set them up)."""

from __future__ import annotations

from gps_dagster.domain.pool import PoolSpec, gpu_uuid, load_pool

TIMINGS = {"stop_grace_s": 30, "publish_lag_s": 60, "start_delay_s": 120}


def seed10(**sim: object) -> PoolSpec:
    """The seed: A stopped (8, alias), B running (6), C running (2, pinned to hgx-02)."""
    return load_pool(
        {
            "name": "seed10",
            "nodes": [{"name": "hgx-01", "gpus": 8}, {"name": "hgx-02", "gpus": 2}],
            "deploys": [
                {"id": "A", "gpus_per_replica": 8, "aliases": ["chat-prod"]},
                {"id": "B", "gpus_per_replica": 6, "state": "running"},
                {
                    "id": "C",
                    "kind": "deployment",
                    "gpus_per_replica": 2,
                    "state": "running",
                    "node_selector": ["hgx-02"],
                },
            ],
            "sim": {"timings": TIMINGS, **sim},
        }
    )


def split16() -> PoolSpec:
    """Two 8-GPU nodes, each half taken: 8 free GPUs, split 4 + 4."""
    return load_pool(
        {
            "name": "split16",
            "nodes": [
                {"name": "n1", "gpus": 8},
                {"name": "n2", "gpus": 8},
                {"name": "a100", "gpus": 8, "flavor": "A100-40GB"},
            ],
            "deploys": [
                {"id": "f1", "gpus_per_replica": 4, "state": "running", "node_selector": ["n1"]},
                {"id": "f2", "gpus_per_replica": 4, "state": "running", "node_selector": ["n2"]},
                {"id": "f3", "gpus_per_replica": 8, "state": "running", "flavor": "A100-40GB"},
                {"id": "big", "gpus_per_replica": 8, "flavor": "H100-80GB"},
                {
                    "id": "wide",
                    "gpus_per_replica": 8,
                    "nodes_per_replica": 2,
                    "flavor": "H100-80GB",
                },
                {"id": "small", "gpus_per_replica": 4, "flavor": "H100-80GB"},
            ],
            "sim": {"timings": TIMINGS},
        }
    )


def accounts() -> PoolSpec:
    """Projects with a quota, an unpaid project, an HPA deploy and a CMP endpoint."""
    return load_pool(
        {
            "name": "accounts",
            "nodes": [{"name": "n1", "gpus": 8}, {"name": "n2", "gpus": 8}],
            "projects": {"team": {"gpu_quota": 6}, "broke": {"billing": "unpaid"}},
            "deploys": [
                {"id": "t-run", "project": "team", "gpus_per_replica": 4, "state": "running"},
                {"id": "t-big", "project": "team", "gpus_per_replica": 4},
                {"id": "t-small", "project": "team", "gpus_per_replica": 2},
                {"id": "b-1", "project": "broke", "gpus_per_replica": 1},
                {"id": "hpa", "kind": "deployment", "hpa": True, "gpus_per_replica": 1},
                {"id": "ep-a", "project": "team", "endpoint": "ep", "gpus_per_replica": 1},
                {"id": "ep-b", "project": "team", "endpoint": "ep", "gpus_per_replica": 1},
            ],
            "sim": {"timings": TIMINGS},
        }
    )


def reserved() -> PoolSpec:
    """GPS: node n1's GPUs 0-3 are exclusive reservation rsv-x, GPU 4 is time-sliced rsv-ts (budget
    10 000 MiB)."""
    name = "reserved"
    uuids = [gpu_uuid(name, "n1", i) for i in range(5)]
    return load_pool(
        {
            "name": name,
            "nodes": [{"name": "n1", "gpus": 8}],
            "reservations": [
                {
                    "id": "rsv-x",
                    "node": "n1",
                    "gpu_uuids": uuids[:4],
                    "namespace": "serving",
                    "mode": "exclusive",
                    "gpu_memory_mib": 81559,
                },
                {
                    "id": "rsv-ts",
                    "node": "n1",
                    "gpu_uuids": uuids[4:],
                    "namespace": "cmp-team",
                    "mode": "time_sliced",
                    "gpu_memory_mib": 10000,
                    "headroom": "1",
                },
            ],
            "deploys": [
                {
                    "id": "x",
                    "gpus_per_replica": 4,
                    "reservation": {"mode": "exclusive", "reservations": ["rsv-x"]},
                },
                {
                    "id": "m1",
                    "gpus_per_replica": 1,
                    "reservation": {
                        "mode": "time_sliced",
                        "reservation": "rsv-ts",
                        "memory_mib": 6000,
                    },
                },
                {
                    "id": "m2",
                    "gpus_per_replica": 1,
                    "reservation": {
                        "mode": "time_sliced",
                        "reservation": "rsv-ts",
                        "memory_mib": 5000,
                    },
                },
                {"id": "plain", "gpus_per_replica": 3},
                {"id": "too-big", "gpus_per_replica": 4},
            ],
            "sim": {"timings": TIMINGS},
        }
    )


ONE_NODE_TIMINGS = {"stop_grace_s": 1, "publish_lag_s": 0, "start_delay_s": 1}
"""A model server that loads and drains in about a second, capacity published as it is freed
(what one real kubelet does: no exporter lag to model)."""


def solo4() -> PoolSpec:
    """One 4-GPU node, half taken: A stopped (2, alias), B running (2), wide stopped (4)."""
    return load_pool(
        {
            "name": "solo4",
            "nodes": [{"name": "solo", "gpus": 4}],
            "deploys": [
                {"id": "A", "gpus_per_replica": 2, "aliases": ["chat-prod"]},
                {"id": "B", "gpus_per_replica": 2, "state": "running"},
                {"id": "wide", "gpus_per_replica": 4},
            ],
            "sim": {"timings": ONE_NODE_TIMINGS},
        }
    )
