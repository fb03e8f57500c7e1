"""The labels, annotations and resource names the Kubernetes adapter reads and writes.

Everything the product keeps on a cluster object lives under ``gps.dagster.io/``; everything it
reads from others is theirs (``nvidia.com/gpu``, KAI's names in ``domain.render.kai``). The GPU
witness is the node agent's annotation: no NVIDIA component writes device ids onto a Pod.
``docs/kubernetes-backend.md`` lists them for operators.
"""

from __future__ import annotations

PREFIX = "gps.dagster.io/"

# -- labels on a workload (set by whoever deploys the model) ---------------------------------------
DEPLOY_ID = PREFIX + "deploy-id"
"""The deploy id of a workload: how the adapter finds a deploy (unique within its scope)."""
PROJECT = PREFIX + "project"
"""CMP project of the deploy; absent = an admin (not CMP-managed) deploy."""
ENDPOINT = PREFIX + "endpoint"
"""CMP endpoint the deploy is a member of."""
ALIAS_OF = PREFIX + "alias-of"
"""On a Service: the deploy id this Service is an alias (a serving name) of."""

# -- annotations on a workload ---------------------------------------------------------------------
ALIASES = PREFIX + "aliases"
"""Comma-separated serving aliases of the deploy (the other source of the alias guard)."""
REPLICAS = PREFIX + "replicas"
"""Replicas to start with: remembered by stop (scale to 0) and set by a persist-only intent."""
ROLE_MIN = PREFIX + "replicas-min"
ROLE_MAX = PREFIX + "replicas-max"
"""Role replica floor/ceiling for quota accounting (R-SCALE-3), set with the replicas."""
OPERATIONS = PREFIX + "operations"
"""The idempotency ledger: JSON of the last operations applied to the workload."""
RESERVATION = PREFIX + "reservation"
"""GPU reservation binding (JSON, the pool file's shape): exclusive or time-sliced."""

# -- annotations on namespaces ---------------------------------------------------------------------
BILLING = PREFIX + "billing"
"""``unpaid`` refuses starts and scale-ups of the namespace's CMP deploys (default billing)."""

# -- read from the cluster -------------------------------------------------------------------------
GPU = "nvidia.com/gpu"
GPU_PRODUCT = "nvidia.com/gpu.product"
"""Node label of the GPU flavor (set by NVIDIA GPU feature discovery)."""
REGION = "topology.kubernetes.io/region"
HOSTNAME = "kubernetes.io/hostname"
AGENT_DEVICE_ANNOTATION = PREFIX + "container.{container}.gpus.devices"
"""Per container, the device ids the kubelet gave it, published by the node agent (``nodeagent``)
from the kubelet's PodResources API or dcgm-exporter: a source that exists on a real cluster."""
AGENT_SOURCE = PREFIX + "gpu-devices-source"
"""Which source the node agent read (``podresources`` or ``dcgm``)."""
AGENT_SEEN_AT = PREFIX + "gpu-devices-seen-at"
"""The node agent's heartbeat on the pods it publishes: when it last confirmed their device ids
(ISO 8601, UTC, from the agent's clock). The witness trusts a record only this fresh
(``nodeagent.STALE_AFTER_S``): a dead agent is ``witness_unavailable``, never old data."""

# -- the scheduling policy object (GPS, R-GPS-5) ---------------------------------------------------
POLICY_CONFIGMAP = "gps-dagster-scheduling-policy"
"""ConfigMap holding ``SchedulingPolicy`` fields (scheduler_name, queue_template, ...)."""
POLICY_NAMESPACE = "gps-dagster-system"

# -- LeaderWorkerSet -------------------------------------------------------------------------------
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_VERSION = "v1"
LWS_PLURAL = "leaderworkersets"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def agent_device_annotation(container: str) -> str:
    return AGENT_DEVICE_ANNOTATION.format(container=container)
