"""The GPU witness node agent: which device ids did the kubelet give each container? (R-GPS-7)

No NVIDIA component writes GPU UUIDs onto the Pod object: the device plugin hands them to the
container runtime (``NVIDIA_VISIBLE_DEVICES``) and the kubelet's device manager records them.
This agent runs on every GPU node (a DaemonSet) and publishes that record on the pods, as the
annotations the adapter's witness reads (``names.AGENT_DEVICE_ANNOTATION`` per container, and
``names.AGENT_SOURCE`` naming where it came from). Two sources, pluggable:

* ``PodResourcesSource`` — the kubelet's PodResources v1 gRPC API
  (``/var/lib/kubelet/pod-resources/kubelet.sock``), the API dcgm-exporter itself uses to map
  GPUs to pods (``pkg/kubelet/apis/podresources`` in 1.20);
* ``DcgmSource`` — a dcgm-exporter ``/metrics`` page, for clusters that already run it: its
  samples carry ``UUID``, ``namespace``, ``pod`` and ``container`` labels.

A KAI GPU-sharing pod requests no ``nvidia.com/gpu``, so neither source lists it: it gets the
device ids of its group's reservation pod (``shared_devices``, label ``runai-gpu-group``).

``annotate`` is the one write path; the fake nodes of the test cluster feed it from a fake
PodResources source (``fake/podresources.py``), so the witness reaches the adapter the same way.
An agent with no source refuses to start (``WitnessUnavailable``): it never guesses.

**Heartbeat.** With a clock (the agent's loop always has one), every annotation carries
``names.AGENT_SEEN_AT``, the instant the agent last confirmed it, re-stamped once it is older than
``HEARTBEAT_S``. The adapter's witness trusts a record only up to ``STALE_AFTER_S`` old
(``gps.witness``): an agent that died (DaemonSet pod evicted, crash-looping, its node's kubelet
socket gone) then reads ``witness_unavailable`` with the fix, not yesterday's device ids, and is
told apart from a pod that simply has no GPU (no device annotation at all). The stamp rides on the
pods the agent already patches, so its RBAC stays ``pods: list, patch``.
"""

# Decisions embodied here (docs/decisions.md):
# * “The witness node agent annotates pods under our own prefix”
# * “A time-sliced member's GPU is its KAI reservation pod's”
# * “The node agent's heartbeat is a stamp on the pods it publishes”

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import grpc

from gps_dagster.backends.k8s import kubelet_wire as wire
from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.ports import Clock, NotFound

POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
WITNESS_UNAVAILABLE = "witness_unavailable"
STRATEGIC = "application/strategic-merge-patch+json"
PODRESOURCES = "podresources"
HEARTBEAT_S = 30.0
"""The agent re-stamps ``names.AGENT_SEEN_AT`` on a pod once its stamp is this old (one patch
per pod per 30 s: the write load of a node's heartbeat, not of every sync)."""
STALE_AFTER_S = 120.0
"""The witness refuses a record older than this (four heartbeats: one missed sync, API latency
and clock skew between the agent's node and the engine stay inside it)."""
KAI_GPU_GROUP = "runai-gpu-group"
"""KAI's label on a GPU-sharing pod and on the reservation pod holding its GPU whole
(KAI-Scheduler ``pkg/common/constants``: ``GPUGroup = "runai-gpu-group"``; reservation pods run in
``kai-resource-reservation``, docs/gpu-sharing). A shared pod requests no ``nvidia.com/gpu``, so
the kubelet records no device for it: its GPU is the one its group's reservation pod was given."""

Devices = dict[tuple[str, str], dict[str, tuple[str, ...]]]
"""(namespace, pod) -> container -> device ids."""


class WitnessUnavailable(RuntimeError):
    """No witness source is configured or reachable; the message says how to fix it."""

    reason = WITNESS_UNAVAILABLE


class Source(Protocol):
    @property
    def name(self) -> str: ...

    def devices(self) -> Devices: ...


@dataclass(frozen=True, slots=True)
class PodResourcesSource:
    """The kubelet's PodResources v1 ``List`` over its unix socket."""

    socket: str = POD_RESOURCES_SOCKET
    resource: str = names.GPU
    timeout_s: float = 5.0
    name: str = PODRESOURCES

    def devices(self) -> Devices:
        m = wire.podresources
        try:
            with grpc.insecure_channel(f"unix:{self.socket}") as ch:
                call = ch.unary_unary(
                    wire.POD_RESOURCES_LIST,
                    request_serializer=m["ListPodResourcesRequest"].SerializeToString,
                    response_deserializer=m["ListPodResourcesResponse"].FromString,
                )
                resp = call(m["ListPodResourcesRequest"](), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise WitnessUnavailable(
                f"kubelet PodResources API at {self.socket} unreachable ({exc.code().name}): "
                "mount the "
                "host's /var/lib/kubelet/pod-resources into the agent, or configure a DCGM source"
            ) from exc
        out: Devices = {}
        for pod in resp.pod_resources:
            for c in pod.containers:
                ids = tuple(
                    i for d in c.devices if d.resource_name == self.resource for i in d.device_ids
                )
                if ids:
                    out.setdefault((pod.namespace, pod.name), {})[c.name] = ids
        return out


_SAMPLE = re.compile(r"^(?P<metric>DCGM_FI_[A-Z0-9_]+)\{(?P<labels>[^}]*)\}")
_LABEL = re.compile(r'(?P<k>[A-Za-z_][A-Za-z0-9_]*)="(?P<v>(?:[^"\\]|\\.)*)"')


def dcgm_devices(text: str) -> Devices:
    """Device UUIDs per pod/container from a dcgm-exporter page (samples without a pod are idle
    GPUs)."""
    out: Devices = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = {m["k"]: m["v"] for m in _LABEL.finditer(match["labels"])}
        ns, pod, container, uuid = (
            labels.get(k, "") for k in ("namespace", "pod", "container", "UUID")
        )
        if ns and pod and container and uuid:
            have = out.setdefault((ns, pod), {}).get(container, ())
            if uuid not in have:
                out[(ns, pod)][container] = (*have, uuid)
    return out


@dataclass(frozen=True, slots=True)
class DcgmSource:
    """A dcgm-exporter metrics URL (e.g. ``http://localhost:9400/metrics``)."""

    url: str
    timeout_s: float = 5.0
    name: str = "dcgm"

    def devices(self) -> Devices:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
                return dcgm_devices(resp.read().decode(errors="replace"))
        except OSError as exc:
            raise WitnessUnavailable(
                f"dcgm-exporter at {self.url} unreachable ({exc}): check the exporter's Service, "
                "or use the PodResources source"
            ) from exc


def source_from(*, pod_resources_socket: str | None, dcgm_url: str | None) -> Source:
    """The configured source; ``WitnessUnavailable`` with the fix when none is."""
    if pod_resources_socket:
        return PodResourcesSource(socket=pod_resources_socket)
    if dcgm_url:
        return DcgmSource(url=dcgm_url)
    raise WitnessUnavailable(
        f"{WITNESS_UNAVAILABLE}: no witness source configured: set --pod-resources-socket "
        f"(default {POD_RESOURCES_SOCKET}, hostPath-mounted) or --dcgm-url"
    )


def annotations_for(
    containers: Mapping[str, Iterable[str]], source: str, *, seen_at: datetime | None = None
) -> dict[str, str]:
    ann = {names.agent_device_annotation(c): ",".join(ids) for c, ids in sorted(containers.items())}
    ann[names.AGENT_SOURCE] = source
    if seen_at is not None:
        ann[names.AGENT_SEEN_AT] = stamp(seen_at)
    return ann


def stamp(instant: datetime) -> str:
    return instant.isoformat(timespec="seconds")


def seen_at(pod: Mapping[str, Any]) -> datetime | None:
    """The agent's last confirmation of ``pod``'s record; None when unstamped or unreadable."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.AGENT_SEEN_AT)
    if not raw:
        return None
    try:
        got = datetime.fromisoformat(str(raw))
    except ValueError:
        return None
    return got if got.tzinfo is not None else None


def publish(
    kube: Kube,
    node: str,
    source: Source,
    *,
    namespaces: Sequence[str] = (),
    clock: Clock | None = None,
    heartbeat_s: float = HEARTBEAT_S,
) -> int:
    """One sync: annotate every pod of ``node`` that holds devices; returns how many changed.

    ``namespaces`` limits the pods it reads and annotates (the chart's namespace-scoped install
    binds the agent's role only there); empty = every namespace."""
    found = source.devices()
    selector = f"spec.nodeName={node}"
    if namespaces:
        on_node = [
            p
            for ns in namespaces
            for p in kube.items(
                kube.core.list_namespaced_pod,
                ns,
                field_selector=selector,
                what=f"list pods of {node} in {ns}",
            )
        ]
    else:
        on_node = kube.items(
            kube.core.list_pod_for_all_namespaces,
            field_selector=selector,
            what=f"list pods on node {node}",
        )
    now = clock.now() if clock is not None else None
    return annotate(kube, on_node, found, source.name, now=now, heartbeat_s=heartbeat_s)


def annotate(
    kube: Kube,
    on_node: Iterable[Obj],
    found: Devices,
    source: str,
    *,
    now: datetime | None = None,
    heartbeat_s: float = HEARTBEAT_S,
) -> int:
    """Patch the device annotations of the pods in ``found`` that lack them (idempotent); with
    ``now``, also the heartbeat stamp of each whose stamp is ``heartbeat_s`` old or missing.

    The one write path of the agent, shared by the fake nodes of the test cluster (their fake
    PodResources source feeds it), so the witness is published the same way everywhere.
    """
    pods = list(on_node)
    found = {**found, **shared_devices(pods, found)}
    changed = 0
    for pod in pods:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if key not in found:
            continue
        want = annotations_for(found[key], source)
        have = meta.get("annotations") or {}
        last = seen_at(pod)
        fresh = now is None or (
            last is not None and 0 <= (now - last).total_seconds() < heartbeat_s
        )
        if fresh and all(have.get(k) == v for k, v in want.items()):
            continue
        if now is not None:
            want[names.AGENT_SEEN_AT] = stamp(now)
        with contextlib.suppress(NotFound):  # the pod went meanwhile: nothing to witness
            kube.call(
                kube.core.patch_namespaced_pod,
                key[1],
                key[0],
                {"metadata": {"annotations": want}},
                what=f"annotate pod {key[1]} devices",
                mutating=True,
                _content_type=STRATEGIC,
            )
            changed += 1
    return changed


def shared_devices(on_node: Iterable[Obj], found: Devices) -> Devices:
    """Devices of KAI GPU-sharing pods: their group's reservation pod's, on their first
    container."""
    pods = list(on_node)
    by_group: dict[str, tuple[str, ...]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        group = (meta.get("labels") or {}).get(KAI_GPU_GROUP)
        held = found.get((str(meta.get("namespace", "")), str(meta.get("name", ""))))
        if group and held:
            by_group[group] = tuple(dict.fromkeys(i for ids in held.values() for i in ids))
    out: Devices = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        group = (meta.get("labels") or {}).get(KAI_GPU_GROUP)
        containers = spec.get("containers") or []
        if key not in found and group in by_group and containers:
            out[key] = {str(containers[0].get("name", "")): by_group[str(group)]}
    return out


def describe(found: Devices) -> str:
    return json.dumps({f"{ns}/{pod}": c for (ns, pod), c in sorted(found.items())}, sort_keys=True)


def run(
    kube: Kube,
    node: str,
    source: Source,
    *,
    interval_s: float,
    stop: threading.Event,
    log: logging.Logger,
    clock: Clock,
    namespaces: Sequence[str] = (),
    heartbeat_s: float = HEARTBEAT_S,
) -> None:
    """Sync every ``interval_s`` until ``stop``; a failed sync is logged and retried next tick
    (the agent owns its errors: it never exits on an unreachable kubelet or API server)."""
    while not stop.is_set():
        try:
            changed = publish(
                kube, node, source, namespaces=namespaces, clock=clock, heartbeat_s=heartbeat_s
            )
            if changed:
                log.info("node %s: annotated %d pod(s) from %s", node, changed, source.name)
        except WitnessUnavailable as exc:
            log.warning("%s: %s", WITNESS_UNAVAILABLE, exc)
        except Exception as exc:
            log.warning(
                "node %s: sync failed (%s: %s); retrying in %.0f s",
                node,
                type(exc).__name__,
                exc,
                interval_s,
            )
        stop.wait(interval_s)
