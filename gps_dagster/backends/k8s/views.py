"""A ``DeployView`` read from a workload and its pods (SPEC R-K8S-3).

* STOPPED as soon as ``spec.replicas`` is 0, like the simulator: ``terminating_pods`` is the
  evidence the GPUs are free, never the state alone. It counts pods with a deletionTimestamp
  *and* pods beyond the desired count that no controller has deleted yet (right after a scale
  to 0, before the ReplicaSet controller acts, the pods still hold their GPUs).
* READY when the controller observed the current generation, every desired replica group is
  ready, and no extra pod is left.
* ``applied_generation`` is the generation whose pods are all placed: the observed generation,
  or the one before while a pod of the workload still waits for a node.
* ``unschedulable`` is the scheduler's own verdict, ``PodScheduled=False reason=Unschedulable``.
* FAILED is the Deployment controller's ``Progressing=False reason=ProgressDeadlineExceeded``;
  DELETING a workload with a deletionTimestamp.
* ``crash_loop``/``restarts``: a container of a live pod waiting with reason
  ``CrashLoopBackOff`` — the kubelet's own word for a container it restarts after an
  exponential back-off (0 s, then 10 s doubling to a 5 min cap, reset after 10 min of running:
  Kubernetes in Action 2e §6.2.1; KEP-4603 "Tune CrashLoopBackoff") — and its
  ``restartCount``. The state stays what the counts say (READY while it happens to be up);
  the engine judges the loop (``crash_loop``).
"""
# Decisions embodied here (docs/decisions.md):
# * “Terminating pods include the ones no controller deleted yet”
# * “API-side refusals are `start_refused` (new terminal phase)”
# * “A server that crash-loops after it was ready ends `crash_loop`”

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gps_dagster.backends.k8s import ledger, names, pods
from gps_dagster.backends.k8s.pods import Pod
from gps_dagster.backends.k8s.workloads import LWS, Workload
from gps_dagster.ports import DeployState, DeployView, ReservationBinding


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def desired_replicas(w: Workload) -> int:
    """``spec.replicas``, or (stopped) the replicas remembered for the next start."""
    return w.replicas if w.replicas > 0 else max(_int(w.annotations.get(names.REPLICAS), 1), 1)


def gpus_per_replica(w: Workload, binding: ReservationBinding | None) -> int:
    if binding is not None and binding.mode == "time_sliced":
        return 1  # a member shares one GPU; its pods request a VRAM share, not nvidia.com/gpu
    per_pod = pods.spec_gpus(w.template.get("spec") or {})
    if w.kind != LWS:
        return per_pod
    lwt = (w.raw.get("spec") or {}).get("leaderWorkerTemplate") or {}
    leader = lwt.get("leaderTemplate")
    lead = pods.spec_gpus((leader or {}).get("spec") or {}) if leader else per_pod
    return lead + per_pod * (w.group_size - 1)


def failed(w: Workload) -> bool:
    for cond in w.status.get("conditions") or []:
        if (
            cond.get("type") == "Progressing"
            and cond.get("status") == "False"
            and cond.get("reason") == "ProgressDeadlineExceeded"
        ):
            return True
    return False


def refused(w: Workload) -> str | None:
    """The Deployment controller's ``ReplicaFailure=True`` condition (it copies its ReplicaSet's,
    ``pkg/controller/deployment/progress.go``): the API server refused a pod — ``FailedCreate``
    with the admission's message (``exceeded quota: …``, a LimitRange, Pod Security, a webhook)."""
    for cond in w.status.get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return f"{cond.get('reason') or 'ReplicaFailure'}: {cond.get('message') or ''}".strip()
    return None


def observed_generation(w: Workload) -> int:
    if w.kind == LWS:
        return lws_observed_generation(w)
    return _int(w.status.get("observedGeneration"))


def lws_observed_generation(w: Workload) -> int:
    """The generation an LWS controller has acted on, from either status shape.

    LWS v0.9.0 added ``status.observedGeneration`` and stamps its conditions with it; up to
    v0.8.0 neither exists (kubernetes-sigs/lws ``api/leaderworkerset/v1/leaderworkerset_types.go``
    at v0.8.0 vs v0.9.0; v0.8.0's controller never sets ``ObservedGeneration``). Then the counts
    stand in: the controller has caught up with ``spec.replicas`` when it reports that many groups,
    all on the current template (``updatedReplicas``), and no ``UpdateInProgress`` condition is
    True. A template change it has not yet seen looks current there until its first status write:
    the start/stop of a schedule changes ``replicas``, which the counts do show.
    """
    top = w.status.get("observedGeneration")
    if top is not None:
        return _int(top)
    conditions = w.status.get("conditions") or []
    stamped = [c["observedGeneration"] for c in conditions if c.get("observedGeneration")]
    if stamped:
        return max(_int(g) for g in stamped)
    updating = any(
        c.get("type") == "UpdateInProgress" and c.get("status") == "True" for c in conditions
    )
    counts = (_int(w.status.get("replicas")), _int(w.status.get("updatedReplicas")))
    if not updating and counts == (w.replicas, w.replicas):
        return w.generation
    return max(w.generation - 1, 0)


def terminating(w: Workload, own: Sequence[Pod]) -> int:
    live = [p for p in own if not pods.terminal(p)]
    going = sum(1 for p in live if pods.deleting(p))
    staying = len(live) - going
    return going + max(0, staying - w.replicas * w.group_size)


CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"


def crash_loop(own: Sequence[Pod]) -> tuple[int, str | None]:
    """(restarts, words) of the live pods' container waiting in ``CrashLoopBackOff`` with the
    most restarts; (0, None) when none is."""
    worst: tuple[int, str | None] = (0, None)
    for p in own:
        if pods.terminal(p) or pods.deleting(p):
            continue
        status = p.get("status") or {}
        for cs in [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") != CRASH_LOOP_BACK_OFF:
                continue
            n = _int(cs.get("restartCount"))
            last = (cs.get("lastState") or {}).get("terminated") or {}
            code = last.get("exitCode")
            words = (
                f"pod {pods.name(p)} container {cs.get('name')}: {CRASH_LOOP_BACK_OFF} after {n} "
                f"restart(s), last exit code {code if code is not None else '?'}"
                + (f" ({last['reason']})" if last.get("reason") else "")
            )
            if worst[1] is None or n > worst[0]:
                worst = (n, words)
    return worst


def derive_state(w: Workload, own: Sequence[Pod], ready: int) -> DeployState:
    if w.deleting:
        return DeployState.DELETING
    if failed(w):
        return DeployState.FAILED
    if w.replicas == 0:
        return DeployState.STOPPED
    active = [p for p in own if not pods.terminal(p) and not pods.deleting(p)]
    current = observed_generation(w) >= w.generation
    if current and ready == w.replicas and len(active) == w.replicas * w.group_size:
        return DeployState.READY
    return DeployState.UPDATING if ready else DeployState.STARTING


def deploy_view(
    w: Workload,
    own: Sequence[Pod],
    *,
    aliases: tuple[str, ...],
    hpa: bool,
    binding: ReservationBinding | None,
) -> DeployView:
    """The view of ``w`` from its own pods (those its selector matches)."""
    active = [p for p in own if not pods.terminal(p) and not pods.deleting(p)]
    ready = min(_int(w.status.get("readyReplicas")), w.replicas)
    observed = observed_generation(w)
    waiting = any(pods.node(p) is None for p in active)
    project = w.labels.get(names.PROJECT) or None
    restarts, looping = crash_loop(own) if w.replicas > 0 else (0, None)
    return DeployView(
        id=w.deploy_id,
        kind=w.deploy_kind,
        state=derive_state(w, own, ready),
        etag=ledger.etag(w),
        aliases=aliases,
        project=project,
        cmp_managed=project is not None,
        endpoint=w.labels.get(names.ENDPOINT) or None,
        gpus_per_replica=gpus_per_replica(w, binding),
        nodes_per_replica=w.group_size,
        desired_replicas=desired_replicas(w),
        ready_replicas=ready,
        generation=w.generation,
        applied_generation=min(observed, w.generation - 1) if waiting else observed,
        terminating_pods=terminating(w, own),
        unschedulable=any(pods.unschedulable(p) for p in active),
        hpa=hpa,
        role_min=_role(w, names.ROLE_MIN),
        role_max=_role(w, names.ROLE_MAX),
        reservation=binding,
        refused=refused(w) if w.replicas > 0 else None,
        crash_loop=looping,
        restarts=restarts,
        instance=instance(w),
    )


def instance(w: Workload) -> str:
    """The object's identity for the claim pin: a name is re-used by a re-created object, its
    ``metadata.uid`` never is (kubernetes.io "Object Names and IDs": "Every object created over
    the whole lifetime of a Kubernetes cluster has a distinct UID")."""
    return f"{w.kind} {w.namespace}/{w.name} uid={w.uid}"


def _role(w: Workload, key: str) -> int | None:
    value = w.annotations.get(key)
    return _int(value) if value is not None else None


def annotation_aliases(w: Workload) -> tuple[str, ...]:
    raw = w.annotations.get(names.ALIASES, "")
    return tuple(a.strip() for a in raw.split(",") if a.strip())


def hpa_targets(hpas: Sequence[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    """(namespace, kind, name) of every workload an HPA scales."""
    out = set()
    for h in hpas:
        ref = (h.get("spec") or {}).get("scaleTargetRef") or {}
        out.add(
            (
                (h.get("metadata") or {}).get("namespace", ""),
                str(ref.get("kind")),
                str(ref.get("name")),
            )
        )
    return out
