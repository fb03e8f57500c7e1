"""The placement witness on Kubernetes (R-GPS-7, R-K8S-5): the GPU UUIDs of each ready group.

They come from the node agent's ``gps.dagster.io/container.<c>.gpus.devices`` on the pods it
publishes (the kubelet's PodResources record, ``nodeagent``); no NVIDIA component writes GPU
UUIDs onto a Pod, so nothing else is read. A record whose heartbeat stamp is stale is not
evidence (``witness_unavailable``, with the fix).
"""

# Decisions embodied here (docs/decisions.md):
# * “`GPS_WITNESS_SOURCE` (`node_agent` | `none`), refused before anything moves”
# * “The node agent's heartbeat is a stamp on the pods it publishes”

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gps_dagster.backends.k8s import names, nodeagent, pods
from gps_dagster.backends.k8s.pods import Pod
from gps_dagster.backends.k8s.workloads import LWS, Workload
from gps_dagster.ports import Transient, WitnessResult

__all__ = [
    "WITNESS_NODE_AGENT",
    "WITNESS_NONE",
    "WITNESS_SOURCE",
    "WITNESS_SOURCES",
    "WITNESS_UNAVAILABLE",
    "witness",
]

WITNESS_SOURCE = "node_agent"
WITNESS_NODE_AGENT = "node_agent"
WITNESS_NONE = "none"
WITNESS_SOURCES = (WITNESS_NODE_AGENT, WITNESS_NONE)
"""Where the placement witness comes from (``GPS_WITNESS_SOURCE``): the chart's node-agent
DaemonSet (``nodeagent``; it reads the kubelet's PodResources API or dcgm-exporter), or none."""
WITNESS_UNAVAILABLE = "witness_unavailable"


def witness(
    w: Workload,
    own: Sequence[Pod],
    *,
    now: datetime | None = None,
    max_age_s: float = nodeagent.STALE_AFTER_S,
) -> WitnessResult:
    """UUIDs per ready replica group, from the node agent's annotation on its pods.

    With ``now``, a record whose heartbeat stamp (``names.AGENT_SEEN_AT``) is older than
    ``max_age_s`` is not evidence: the agent of that node stopped confirming it, so the read
    answers ``witness_unavailable`` (``Transient``: a restarted agent re-stamps it) with the fix.
    A record without a stamp (an agent that predates the heartbeat) is read as before."""
    ready = [p for p in own if pods.ready(p)]
    if now is not None:
        _refuse_stale(w, ready, now, max_age_s)
    groups: dict[str, list[str]] = {}
    for p in sorted(ready, key=lambda p: (_group_key(w, p), pods.name(p))):
        uuids = pods.devices(p)
        if uuids:
            groups.setdefault(_group_key(w, p), []).extend(uuids)
    out = tuple(
        tuple(dict.fromkeys(g)) for _, g in sorted(groups.items(), key=lambda kv: _order(kv[0]))
    )
    sources = {s for p in ready if (s := pods.annotations_of(p).get(names.AGENT_SOURCE))}
    source = f"node_agent_{sorted(sources)[0]}" if len(sources) == 1 else WITNESS_SOURCE
    return WitnessResult(w.deploy_id, out, source)


def _refuse_stale(w: Workload, ready: Sequence[Pod], now: datetime, max_age_s: float) -> None:
    for p in ready:
        last = nodeagent.seen_at(p)
        if last is None or not pods.devices(p):
            continue
        age = (now - last).total_seconds()
        if age > max_age_s:
            raise Transient(
                f"{WITNESS_UNAVAILABLE}: the node agent last confirmed the GPUs of pod "
                f"{pods.namespace(p)}/{pods.name(p)} on node {pods.node(p)} at {last.isoformat()} "
                f"({age:.0f} s ago, more than {max_age_s:.0f} s): the agent of that node is not "
                "running or cannot reach the API server; check the chart's node-agent DaemonSet "
                "pod on the node (kubectl -n <nodeAgent.namespace> get pods -o wide, its logs) — "
                "its placement is not trusted until the agent re-confirms it",
                reason=WITNESS_UNAVAILABLE,
            )


def _group_key(w: Workload, p: Pod) -> str:
    if w.kind == LWS:
        return pods.labels(p).get(names.LWS_GROUP_INDEX, pods.name(p))
    return pods.name(p)


def _order(key: str) -> tuple[int, str]:
    return (int(key), "") if key.isdigit() else (1 << 30, key)
