"""Preview sessions of ``K8sCore`` (its ``BatchingCore`` side): a block's previews count its fits.

The engine previews a batch of acquires together and submits the fitting ones in one
``submit_many`` only when the core's previews in one ``batch()`` block count the groups earlier
previews found fitting as taken (``previews_count_fits``); otherwise it previews and submits one
acquire at a time — on Kubernetes a full write (a GET and a preconditioned PATCH) per acquire
between two previews, so a storm's acquires went out one by one.

Here a block remembers each fit's pod templates (one replica group per replica of the delta) and
every later preview of the block places them first, as pending pods the scheduler serves ahead of
the previewed one (``capacity.preview``'s ``queued``): kube-scheduler's active queue is sorted
by ``PrioritySort``, "based on their priority. When priorities are equal, it uses
PodQueueInfo.timestamp" (``pkg/scheduler/framework/plugins/queuesort``, v1.18–v1.35), and the
block's fits are submitted, so their pods created, before the previewed one's. Nothing is
written and nothing is held against the API server: the block is only the caller's promise to
submit what fitted; a fit that is then not submitted costs at worst a "does not fit" answer to a
later preview of the same block, retried by the next pass.

The block keeps one placement per kind of preview (``capacity.World``, keyed by the usable nodes
and the queue rank): the first preview of a kind places the bound, nominated and queued pods, and
every later one of that kind places its groups on what the earlier left, a fit committed to it —
a block's previews are linear in its size, not quadratic (each used to re-place every earlier
fit). The block's reads are those of its first preview of a kind: a pod bound or gone during the
block is seen by the next block, as by a preview that read a moment earlier. A fit invalidates
the other kinds' placements (they are built again, the block's fits queued first).

A block belongs to its thread (``K8sCore`` is shared by the engine loop, the sensors and the
API of one process): another thread's preview never counts it. A nested block is the outer one.
"""

# Decisions embodied here (docs/decisions.md):
# * “Kubernetes previews in one batch block count the block's fits”
# * “A preview block keeps one placement per kind of preview”

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from gps_dagster.backends.k8s.api import Obj
from gps_dagster.backends.k8s.capacity import World

WorldKey = tuple[object, ...]


class PreviewSessions:
    """The current thread's block, if any: the pods its fits will create."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _taken(self) -> list[Obj] | None:
        taken: list[Obj] | None = getattr(self._local, "taken", None)
        return taken

    @contextmanager
    def block(self) -> Iterator[None]:
        if self._taken() is not None:  # nested: the outer block goes on counting
            yield
            return
        self._local.taken = []
        self._local.worlds = {}
        try:
            yield
        finally:
            self._local.taken = None
            self._local.worlds = None

    def world(self, key: WorldKey) -> World | None:
        """The block's placement of this kind, if an earlier preview of the block built it."""
        worlds: dict[WorldKey, World] | None = getattr(self._local, "worlds", None)
        return worlds.get(key) if worlds is not None else None

    def keep(self, key: WorldKey, world: World) -> None:
        """Keep a placement for the block's later previews of this kind (none outside a block)."""
        worlds: dict[WorldKey, World] | None = getattr(self._local, "worlds", None)
        if worlds is not None and self._taken() is not None:
            worlds[key] = world

    def taken(self) -> list[Obj]:
        """Pods the block's earlier fits will create, in the order they fitted (none outside a
        block)."""
        return list(self._taken() or [])

    def took(
        self,
        group: Sequence[Obj],
        *,
        namespace: str,
        replicas: int,
        deploy_id: str,
        world: WorldKey | None = None,
    ) -> None:
        """A preview of the block found ``replicas`` groups of these pod templates fitting (and
        committed them to its placement ``world``: the other kinds' placements are dropped)."""
        taken = self._taken()
        if taken is None:
            return
        worlds: dict[WorldKey, World] | None = getattr(self._local, "worlds", None)
        if worlds is not None:
            for key in [k for k in worlds if k != world]:
                del worlds[key]
        for r in range(max(replicas, 0)):
            for i, template in enumerate(group):
                meta = template.get("metadata") or {}
                taken.append(
                    {
                        "metadata": {
                            "name": f"{deploy_id}-previewed-{r}-{i}",
                            "namespace": namespace,
                            "labels": dict(meta.get("labels") or {}),
                        },
                        "spec": template.get("spec") or {},
                        "status": {"phase": "Pending"},
                    }
                )
