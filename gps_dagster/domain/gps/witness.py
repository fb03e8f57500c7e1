"""The placement witness (R-GPS-7): which GPU UUIDs did a bound pod actually get?

Track S cannot choose the UUID up front (KAI binpacks on the node), so the
product checks *after* bind, through the API only (never ``exec nvidia-smi``):

1. the node agent's ``gps.dagster.io/container.<container>.gpus.devices`` (the kubelet's
   PodResources record, R-K8S-5) — comma-separated UUIDs, per container. Nothing else on a pod
   is evidence: no NVIDIA component writes GPU UUIDs onto a Pod, so a
   ``nvidia.com/container.*.gpus.devices`` annotation (anyone's write) is not read;
2. else DCGM exporter samples, whose label sets carry ``UUID``,
   ``namespace``, ``pod`` and ``container``.

No evidence yet is ``Unknown`` (not converged, not a mismatch: keep waiting
within the readiness clock). UUIDs inside the reservation are ``Confirmed``;
anything else is ``Mismatch`` — terminal ``placement_mismatch``, a fix text,
and no automatic repair (moving a serving pod is an operator's call).
"""

# Decisions embodied here (docs/decisions.md):
# * “The witness node agent annotates pods under our own prefix”

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PLACEMENT_MISMATCH = "placement_mismatch"
WITNESS_UNAVAILABLE = "witness_unavailable"
"""A core's witness read that cannot vouch for its record (the node agent's heartbeat is stale):
not "no evidence yet", so the step says it while it waits and ends with it at its deadline."""
_ANNOTATION = re.compile(
    r"^gps\.dagster\.io/container\.(?P<container>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.gpus\.devices$"
)


@dataclass(frozen=True, slots=True)
class Confirmed:
    uuids: tuple[str, ...]
    source: str


@dataclass(frozen=True, slots=True)
class Mismatch:
    uuids: tuple[str, ...]
    outside: tuple[str, ...]
    source: str
    reservation_id: str
    reason: str = PLACEMENT_MISMATCH

    @property
    def fix(self) -> str:
        return (
            f"the pod got {', '.join(self.outside)}, outside reservation '{self.reservation_id}'; "
            "no automatic repair: check what else runs on the node, stop the pod and apply-now, "
            "or re-pin the reservation if the ledger is wrong"
        )


@dataclass(frozen=True, slots=True)
class Unknown:
    why: str


Verdict = Confirmed | Mismatch | Unknown


def annotation_uuids(
    pod: Mapping[str, Any], *, container: str | None = None
) -> tuple[str, ...] | None:
    """UUIDs from the node agent's annotations (all containers, or one); ``None`` when absent or
    empty."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    found: list[str] = []
    seen_any = False
    for key, value in sorted(annotations.items()):
        match = _ANNOTATION.match(key)
        if not match or (container is not None and match["container"] != container):
            continue
        seen_any = True
        found.extend(u.strip() for u in str(value).split(",") if u.strip())
    return _unique(found) if seen_any and found else None


def dcgm_uuids(
    samples: Iterable[Mapping[str, str]], *, namespace: str, pod: str, container: str | None = None
) -> tuple[str, ...] | None:
    """UUIDs from DCGM exporter label sets of this pod; ``None`` when it has no sample."""
    found = [
        s["UUID"]
        for s in samples
        if s.get("namespace") == namespace
        and s.get("pod") == pod
        and (container is None or s.get("container") == container)
        and s.get("UUID")
    ]
    return _unique(found) or None


def judge(
    uuids: Collection[str] | None, reservation_id: str, reserved: Collection[str], *, source: str
) -> Verdict:
    """Compare what a pod got with what the reservation holds (case-insensitive UUIDs)."""
    if not uuids:
        return Unknown(f"no GPU UUID reported by {source} yet")
    allowed = {u.lower() for u in reserved}
    got = tuple(uuids)
    outside = tuple(u for u in got if u.lower() not in allowed)
    if outside:
        return Mismatch(got, outside, source, reservation_id)
    return Confirmed(got, source)


def witness_pod(
    pod: Mapping[str, Any],
    reservation_id: str,
    reserved: Collection[str],
    *,
    dcgm: Iterable[Mapping[str, str]] = (),
    container: str | None = None,
) -> Verdict:
    """The verdict for one pod: the node agent's annotation first, DCGM samples as the fallback."""
    uuids = annotation_uuids(pod, container=container)
    if uuids is not None:
        return judge(uuids, reservation_id, reserved, source="node_agent")
    meta = pod.get("metadata") or {}
    uuids = dcgm_uuids(
        dcgm,
        namespace=str(meta.get("namespace", "")),
        pod=str(meta.get("name", "")),
        container=container,
    )
    if uuids is not None:
        return judge(uuids, reservation_id, reserved, source="dcgm")
    return Unknown("no node-agent annotation and no DCGM sample for the pod yet")


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))
