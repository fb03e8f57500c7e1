"""A fake kubelet and NVIDIA device plugin for GPU Nodes of a real control plane.

``sync()`` does, at the injected clock's ``now``, what the kubelets of the simulated nodes would
have done by then, through the API only:

* a pod newly bound to one of our nodes gets GPU UUIDs (the device plugin's choice, recorded as
  the kubelet's device manager records it) and goes Running; ``start_delay_s`` later it is
  Ready (never, for a deploy in ``never_ready``). A pod bound where no GPU is left is rejected
  like a real kubelet does (``Failed``, ``UnexpectedAdmissionError``);
* a pod with a deletionTimestamp is deleted (grace 0) once its own grace period has run out;
  its GPUs then stay unpublished for ``publish_lag_s`` (a GPU being reset), which the node
  reports by a lower allocatable ``nvidia.com/gpu`` — lowered *before* the pod goes, so the
  scheduler never sees a GPU that is not back yet;
* every GPU is advertised as ``nvidia.com/gpu``, reserved or not — as the real device plugin
  does (it knows nothing of reservations). What keeps unbound work off an exclusive
  reservation's GPUs is the product's holder pod (``kai.render_exclusive_holder_pod``), which
  requests them; the device plugin's choice prefers (like a ``GetPreferredAllocation``) a
  pod's own reservation's GPUs, and unreserved ones for other pods, but falls back to any free
  GPU as a real plugin would;
* the witness is published as on a real cluster: the node agent's own write path
  (``nodeagent.annotate``) runs against a fake PodResources source (``podresources``) fed by the
  record above — nothing writes a device annotation no real component writes;
* with a ``runner.PodRunner``, the pods of Jobs whose image it knows are really executed as
  local processes, and their phase follows the exit code (``runner`` module docstring).

Allocatable = GPUs − unpublished. Times are the clock's (virtual in
tests); ``next_event_at`` tells a driver when the next transition is due.
"""

# Decisions embodied here (docs/decisions.md):
# * “Reserved GPUs are not `nvidia.com/gpu` on the test cluster”
# * “Tests run the cluster on a virtual clock”
# * “The fake nodes publish the witness through the node agent's own write path”
# * “Reserved exclusive GPUs stay hidden from `nvidia.com/gpu` on the fake nodes”

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gps_dagster.backends.k8s import names, nodeagent, pods
from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.domain.gps.reservations import Reservation
from gps_dagster.domain.render import kai
from gps_dagster.ports import Clock, NotFound
from gps_dagster.testing.k8s import nodes as fnodes
from gps_dagster.testing.k8s.nodes import GpuNode
from gps_dagster.testing.k8s.podresources import FakePodResources

if TYPE_CHECKING:
    from gps_dagster.testing.k8s.runner import PodRunner

RESERVATIONS = names.PREFIX + "reservations"
STRATEGIC = "application/strategic-merge-patch+json"
MISPLACED = names.PREFIX + "fake-misplaced"
"""On a fake KAI reservation pod: the fake device plugin hands it a GPU outside its reservation
(the ``misplace`` fault of a time-sliced member, whose GPU is its reservation pod's)."""


@dataclass
class Track:
    """What our fake kubelet knows about one pod it runs."""

    uid: str
    namespace: str
    name: str
    node: str
    uuids: tuple[str, ...]
    holds: bool
    """Whether the pod holds its UUIDs whole (False for a fractional, time-sliced pod)."""
    ready_at: float | None
    ready: bool = False
    deleting_since: float | None = None
    grace_s: float = 0.0
    executed: bool = False
    """Whether the runner executes this pod (a Job pod of a local image)."""
    container: str = ""
    """The container the GPUs were allocated to (the kubelet records devices per container)."""


class NodeSimulator:
    """The fake kubelets + device plugin of a set of GPU nodes."""

    def __init__(
        self,
        kube: Kube,
        clock: Clock,
        nodes: Sequence[GpuNode],
        *,
        start_delay_s: float = 120.0,
        publish_lag_s: float = 0.0,
        reservations: Iterable[Reservation] = (),
        runner: PodRunner | None = None,
    ) -> None:
        self.kube, self.clock, self.runner = kube, clock, runner
        self.nodes = {n.name: n for n in nodes}
        self.start_delay_s, self.publish_lag_s = start_delay_s, publish_lag_s
        self.reservations = {r.id: r for r in reservations}
        self.reserved = {u.lower(): r.id for r in self.reservations.values() for u in r.gpu_uuids}
        self.held: dict[str, str] = {}
        """uuid (lower) → uid of the pod holding it."""
        self.unpublished: dict[str, float] = {}
        """uuid (lower) → instant it is published again."""
        self.tracks: dict[str, Track] = {}
        self.never_ready: set[str] = set()
        self.misplace: set[str] = set()
        self._allocatable: dict[str, int] = {}
        self._heartbeat: fnodes.Heartbeat | None = None
        self._admitted_on: set[str] = set()
        """Nodes whose device record changed this sync: their node agent publishes."""

    # -- lifecycle ---------------------------------------------------------------------------------

    def register(self, *, heartbeat: bool = True) -> NodeSimulator:
        wanted = {n: self.allocatable(n) for n in self.nodes}
        fnodes.register(self.kube, list(self.nodes.values()), wanted)
        self._allocatable = wanted
        if heartbeat:
            self._heartbeat = fnodes.Heartbeat(self.kube, list(self.nodes)).start()
        return self

    def close(self, *, delete_nodes: bool = True) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if delete_nodes:
            fnodes.unregister(self.kube, list(self.nodes))

    def _now(self) -> float:
        return self.clock.now().timestamp()

    def _iso(self) -> str:
        return datetime.fromtimestamp(self._now(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    # -- GPU accounting ----------------------------------------------------------------------------

    def allocatable(self, node: str) -> int:
        spec = self.nodes[node]
        hidden = 0
        for u in spec.uuids:
            key = u.lower()
            if key in self.unpublished:
                hidden += 1
        return spec.gpus - hidden

    def _publish_allocatable(self, node: str, *, only_lower: bool = False) -> None:
        want = self.allocatable(node)
        have = self._allocatable.get(node)
        if want == have or (only_lower and have is not None and want > have):
            return
        fnodes.set_allocatable(self.kube, self.nodes[node], want)
        self._allocatable[node] = want

    def free_uuids(self, node: str, *, reserved_for: Sequence[str] | None) -> list[str]:
        """Free, published UUIDs of ``node``: of these reservations, or (None) of none."""
        out = []
        for u in self.nodes[node].uuids:
            key = u.lower()
            if key in self.held or key in self.unpublished:
                continue
            owner = self.reserved.get(key)
            if (reserved_for is None and owner is None) or (
                reserved_for is not None and owner in reserved_for
            ):
                out.append(u)
        return out

    # -- the sync step -----------------------------------------------------------------------------

    def sync(self) -> bool:
        """Apply every transition due at ``now``; True when anything changed."""
        now = self._now()
        bound = {p["metadata"]["uid"]: p for p in self._bound_pods()}
        changed = self._finish_deletions(bound, now)
        changed |= self._forget_vanished(bound, now)
        changed |= self._publish(now)
        for uid, pod in bound.items():
            if pods.terminal(pod):
                continue
            track = self.tracks.get(uid)
            if track is None:
                changed |= self._admit(pod, now)
            elif pods.deleting(pod) and track.deleting_since is None:
                track.deleting_since = now
                track.grace_s = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
                if track.executed and self.runner is not None:
                    self.runner.deleting(uid)
                changed = True
            elif track.executed:
                changed |= self._follow(pod)
            elif (
                not track.ready
                and track.ready_at is not None
                and track.ready_at <= now
                and not pods.deleting(pod)
            ):
                self._set_ready(track)
                changed = True
        for node in self.nodes:
            self._publish_allocatable(node)
        self._run_agents(bound)
        return changed

    def _run_agents(self, bound: dict[str, Obj]) -> None:
        """The node agent of each node whose record changed: the product's write path, fed by
        the fake PodResources source (``podresources`` module docstring)."""
        for node in sorted(self._admitted_on):
            on_node = [p for p in bound.values() if pods.node(p) == node]
            source = FakePodResources(self.tracks, node)
            nodeagent.annotate(self.kube, on_node, source.devices(), source.name)
        self._admitted_on.clear()

    def next_event_at(self) -> datetime | None:
        due = [
            t.deleting_since + t.grace_s
            for t in self.tracks.values()
            if t.deleting_since is not None
        ]
        due += [t.ready_at for t in self.tracks.values() if not t.ready and t.ready_at is not None]
        due += list(self.unpublished.values())
        return datetime.fromtimestamp(min(due), UTC) if due else None

    def _bound_pods(self) -> list[Obj]:
        found = self.kube.items(
            self.kube.core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName!=",
            what="list bound pods",
        )
        return [p for p in found if pods.node(p) in self.nodes]

    def _finish_deletions(self, bound: dict[str, Obj], now: float) -> bool:
        due = [
            t
            for t in self.tracks.values()
            if t.deleting_since is not None and t.deleting_since + t.grace_s <= now
        ]
        for track in due:
            if track.executed and self.runner is not None:
                self.runner.deleted(track.uid)
            self._release(track, now)
            self._publish_allocatable(
                track.node, only_lower=True
            )  # lower first: never show unreleased GPUs
            with contextlib.suppress(NotFound):
                self.kube.call(
                    self.kube.core.delete_namespaced_pod,
                    track.name,
                    track.namespace,
                    grace_period_seconds=0,
                    what=f"delete pod {track.name}",
                    mutating=True,
                )
            bound.pop(track.uid, None)
        return bool(due)

    def _forget_vanished(self, bound: dict[str, Obj], now: float) -> bool:
        gone = [
            t for uid, t in self.tracks.items() if uid not in bound or pods.terminal(bound[uid])
        ]
        for track in gone:
            self._release(track, now)
        return bool(gone)

    def _release(self, track: Track, now: float) -> None:
        self.tracks.pop(track.uid, None)
        if not track.holds:
            return
        for u in track.uuids:
            key = u.lower()
            if self.held.get(key) == track.uid:
                del self.held[key]
                if self.publish_lag_s > 0 and key not in self.reserved:
                    self.unpublished[key] = now + self.publish_lag_s

    def _publish(self, now: float) -> bool:
        due = [u for u, at in self.unpublished.items() if at <= now]
        for u in due:
            del self.unpublished[u]
        return bool(due)

    # -- a newly bound pod -------------------------------------------------------------------------

    def _admit(self, pod: Obj, now: float) -> bool:
        if self.runner is not None and self.runner.wants(pod):
            return self._admit_executed(pod, now)
        meta, node = pod["metadata"], str(pods.node(pod))
        deploy = (meta.get("labels") or {}).get(names.DEPLOY_ID)
        existing = pods.devices(pod)
        need = pods.gpus(pod)
        fractional = need == 0 and kai.GPU_MEMORY_ANNOTATION in (meta.get("annotations") or {})
        if existing:
            uuids, holds = existing, need > 0  # adopted after a restart of the simulator
        elif fractional:  # KAI shares its group's GPU: the device plugin allocates it nothing
            uuids, holds = (), False
        else:
            misplaced = (
                deploy in self.misplace or (meta.get("annotations") or {}).get(MISPLACED) == "true"
            )
            chosen = self._whole_uuids(pod, node, need, misplaced)
            if chosen is None:
                self._reject(pod, need)
                return True
            uuids, holds = chosen, need > 0
        track = Track(
            meta["uid"],
            meta["namespace"],
            meta["name"],
            node,
            uuids,
            holds,
            None if deploy in self.never_ready else now + self.start_delay_s,
        )
        if holds:
            for u in uuids:
                self.held[u.lower()] = track.uid
        self.tracks[track.uid] = track
        if pods.deleting(pod):
            track.deleting_since = now
            track.grace_s = float(meta.get("deletionGracePeriodSeconds") or 0)
        track.container = _gpu_container(pod) if holds else ""
        self._admitted_on.add(node)
        self._set_running(track, ready=track.ready_at is not None and track.ready_at <= now)
        return True

    def _admit_executed(self, pod: Obj, now: float) -> bool:
        assert self.runner is not None
        meta = pod["metadata"]
        track = Track(
            meta["uid"], meta["namespace"], meta["name"], str(pods.node(pod)), (), False, None
        )
        track.executed = True
        self.tracks[track.uid] = track
        if pods.deleting(pod):  # deleted before it ever started: nothing to run
            track.deleting_since = now
            track.grace_s = float(meta.get("deletionGracePeriodSeconds") or 0)
            return True
        self._patch_status(meta["namespace"], meta["name"], self.runner.admit(pod, at=self._iso()))
        return True

    def _follow(self, pod: Obj) -> bool:
        assert self.runner is not None
        status = self.runner.follow(pod, at=self._iso())
        if status is None:
            return False
        meta = pod["metadata"]
        self._patch_status(meta["namespace"], meta["name"], status)
        return True

    def _rsv_ids(self, pod: Obj) -> list[str]:
        meta = pod["metadata"]
        listed = (meta.get("annotations") or {}).get(RESERVATIONS, "")
        ids = [r for r in listed.split(",") if r] or [
            (meta.get("labels") or {}).get(kai.RESERVATION_LABEL, "")
        ]
        return [r for r in ids if r in self.reservations]

    def _whole_uuids(
        self, pod: Obj, node: str, need: int, misplaced: bool
    ) -> tuple[str, ...] | None:
        rsvs = self._rsv_ids(pod)
        choices = [self.free_uuids(node, reserved_for=rsvs or None)]
        if rsvs and misplaced:  # the fault: a binder that hands out GPUs outside the reservation
            others = [r for r in self.reservations if r not in rsvs]
            choices = [
                self.free_uuids(node, reserved_for=None),
                self.free_uuids(node, reserved_for=others),
                *choices,
            ]
        choices.append(self._any_free(node))  # a real plugin hands out any free GPU
        for free in choices:
            if len(free) >= need:
                return tuple(free[:need])
        return None

    def _any_free(self, node: str) -> list[str]:
        """Free, published UUIDs of ``node``: this pod's preference first is the caller's."""
        return [
            u
            for u in self.nodes[node].uuids
            if u.lower() not in self.held and u.lower() not in self.unpublished
        ]

    def _reject(self, pod: Obj, need: int) -> None:
        meta = pod["metadata"]
        status = {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": f"Pod Allocate failed due to requested number of devices unavailable for "
            f"{names.GPU}. Requested: {need}, Available: 0, which is unexpected",
        }
        self._patch_status(meta["namespace"], meta["name"], status)

    def _status(self, track: Track, ready: bool) -> Obj:
        now = self._iso()
        flag = "True" if ready else "False"
        conditions = [
            {"type": t, "status": s, "lastTransitionTime": now}
            for t, s in (
                ("PodScheduled", "True"),
                ("Initialized", "True"),
                ("ContainersReady", flag),
                ("Ready", flag),
            )
        ]
        return {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": "127.0.0.1",
            "podIP": "10.0.0.1",
            "startTime": now,
        }

    def _set_running(self, track: Track, *, ready: bool) -> None:
        track.ready = ready
        self._patch_status(track.namespace, track.name, self._status(track, ready))

    def _set_ready(self, track: Track) -> None:
        self._set_running(track, ready=True)

    def _patch_status(self, namespace: str, name: str, status: Obj) -> None:
        with contextlib.suppress(NotFound):
            self.kube.call(
                self.kube.core.patch_namespaced_pod_status,
                name,
                namespace,
                {"status": status},
                what=f"pod {name} status",
                mutating=True,
                _content_type=STRATEGIC,
            )


def _gpu_container(pod: Obj) -> str:
    """The first container that requests ``nvidia.com/gpu`` (else the first container)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    for c in containers:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(names.GPU) or (res.get("requests") or {}).get(
            names.GPU
        )
        if value and pods.quantity(value):
            return str(c.get("name", ""))
    return str(containers[0].get("name", "")) if containers else ""
