"""The pod template of a deploy bound to exclusive reservations (R-GPS-2, Track S).

Whole GPUs on the reservations' node(s): the scheduler and the queue come from the
scheduling policy, the node is pinned, and the rendered template names the reservations its
replica may land on (``RESERVATIONS``) so the witness and the holders can tell.
"""

from __future__ import annotations

from collections.abc import Sequence

from gps_dagster.backends.k8s import names, pods
from gps_dagster.backends.k8s.api import Obj
from gps_dagster.backends.k8s.pods import Pod
from gps_dagster.domain.gps.reservations import Reservation
from gps_dagster.domain.render import kai

__all__ = [
    "RESERVATIONS",
    "exclusive_template",
    "is_holder",
    "keep_template_metadata",
    "pod_reservations",
]

RESERVATIONS = names.PREFIX + "reservations"
"""On a rendered exclusive pod template: the reservation ids its replica may land on."""


def exclusive_template(
    template: Obj, rsvs: Sequence[Reservation], *, project: str, policy: kai.SchedulingPolicy
) -> Obj:
    """Whole GPUs on the reservations' node(s): scheduler and queue from the policy, node pinned."""
    meta, spec = dict(template["metadata"]), dict(template["spec"])
    labels = dict(meta.get("labels") or {})
    labels.pop(kai.LEGACY_QUEUE_LABEL, None)
    labels[kai.QUEUE_LABEL] = policy.queue_for(project)
    annotations = dict(meta.get("annotations") or {})
    annotations[RESERVATIONS] = ",".join(r.id for r in rsvs)
    if len(rsvs) == 1:
        labels[kai.RESERVATION_LABEL] = rsvs[0].id
    spec["schedulerName"] = policy.scheduler_name
    spec.pop("nodeName", None)
    nodes = sorted({r.node for r in rsvs})
    selector = dict(spec.get("nodeSelector") or {})
    affinity = dict(spec.get("affinity") or {})
    affinity.pop("nodeAffinity", None)
    if len(nodes) == 1:
        selector[kai.HOSTNAME_LABEL] = nodes[0]
    else:
        selector.pop(kai.HOSTNAME_LABEL, None)
        term = {
            "matchExpressions": [{"key": kai.HOSTNAME_LABEL, "operator": "In", "values": nodes}]
        }
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    spec["nodeSelector"] = selector
    if affinity:
        spec["affinity"] = affinity
    else:
        spec.pop("affinity", None)
    if policy.priority_class_name:
        spec["priorityClassName"] = policy.priority_class_name
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


def keep_template_metadata(source: Obj, rendered: Obj) -> Obj:
    """``rendered`` with every key of ``source``'s metadata the render does not set (it sets
    labels and annotations). The API server always returns a template's ``creationTimestamp``
    (``null``); a render without it would make the start's merge patch delete a key the server
    keeps, and the ETag predicted after the write would not be the object's."""
    meta = {
        k: v
        for k, v in (source.get("metadata") or {}).items()
        if k not in ("labels", "annotations")
    }
    return {**rendered, "metadata": {**meta, **(rendered.get("metadata") or {})}}


def is_holder(p: Pod) -> bool:
    """A GPS holder pod (time-sliced or exclusive): never a workload's pod."""
    return pods.labels(p).get(kai.ROLE_LABEL) == "holder"


def pod_reservations(p: Pod) -> list[str]:
    """The reservation ids a rendered pod names (the exclusive render's annotation, else the
    KAI reservation label)."""
    listed = pods.annotations_of(p).get(RESERVATIONS, "")
    ids = [r for r in listed.split(",") if r]
    return ids or [r for r in [pods.labels(p).get(kai.RESERVATION_LABEL, "")] if r]
