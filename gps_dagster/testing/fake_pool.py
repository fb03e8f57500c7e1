"""The world behind ``FakeCore``: GPUs, replica groups and foreign workloads in dicts.

The same dynamics as the simulated pool (``backends.sim.dynamics``), without a database: a
released GPU terminates for ``stop_grace_s``, is unpublished for ``publish_lag_s``, then free;
placement uses published free GPUs only and fits whole replica groups per node (a group of
``nodes_per_replica`` nodes takes that many distinct nodes of one flavor); a placed group is
ready ``start_delay_s`` later; intruders take published GPUs the moment they appear. Time moves
lazily: every call first applies what is due up to the clock's now, in time order.
"""

# Decisions embodied here (docs/decisions.md):
# * “FakeCore is never kinder than the adapters”

from __future__ import annotations

from dataclasses import dataclass, field

from gps_dagster.domain.kinds import DeployKind
from gps_dagster.domain.pool import DeploySpec, Timings, gpu_uuid

__all__ = ["FakeDeploy", "FakeGpu", "FakeGroup", "FakePool"]


@dataclass
class FakeGpu:
    uuid: str
    node: str
    index: int
    state: str = "free"
    """``free``, ``held``, ``terminating`` or ``unpublished``."""
    holder: str | None = None
    group: int | None = None
    until: float | None = None


@dataclass
class FakeGroup:
    state: str = "pending"
    """``pending``, ``starting`` or ``ready``."""
    ready_at: float | None = None


@dataclass
class FakeDeploy:
    spec: DeploySpec
    ordinal: int
    running: bool
    desired: int
    version: int = 1
    generation: int = 1
    applied_generation: int = 1
    next_group: int = 0
    groups: dict[int, FakeGroup] = field(default_factory=dict)

    @property
    def kind(self) -> DeployKind:
        return self.spec.kind

    @property
    def per_node(self) -> int:
        return self.spec.gpus_per_replica // self.spec.nodes_per_replica


@dataclass
class FakePool:
    """GPUs by node and what holds them; the deploys' replica groups."""

    name: str
    timings: Timings
    flavors: dict[str, str] = field(default_factory=dict)
    ordinals: dict[str, int] = field(default_factory=dict)
    gpus: list[FakeGpu] = field(default_factory=list)
    deploys: dict[str, FakeDeploy] = field(default_factory=dict)
    intruders: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    """Intruder id -> (GPUs it wants, flavor it grabs or None)."""
    unschedulable: set[str] = field(default_factory=set)
    never_ready: set[str] = field(default_factory=set)
    now: float = 0.0

    def add_node(self, name: str, gpus: int, flavor: str) -> None:
        self.flavors[name], self.ordinals[name] = flavor, len(self.ordinals)
        self.gpus += [FakeGpu(gpu_uuid(self.name, name, i), name, i) for i in range(gpus)]

    # -- capacity ---------------------------------------------------------------------------

    def free_by_node(self) -> dict[str, int]:
        """Published free GPUs per node (nodes with none omitted)."""
        out: dict[str, int] = {}
        for g in self.gpus:
            if g.state == "free":
                out[g.node] = out.get(g.node, 0) + 1
        return out

    def eligible(
        self, free: dict[str, int], flavor: str | None, selector: tuple[str, ...] = ()
    ) -> dict[str, int]:
        allowed = set(selector)
        return {
            n: f
            for n, f in free.items()
            if (flavor is None or self.flavors[n] == flavor) and (not allowed or n in allowed)
        }

    def choose_nodes(
        self,
        free: dict[str, int],
        flavor: str | None,
        per_node: int,
        count: int,
        selector: tuple[str, ...] = (),
    ) -> list[str] | None:
        """Best fit: ``count`` distinct nodes of one flavor with ``per_node`` free GPUs each."""
        fitting = [n for n, f in self.eligible(free, flavor, selector).items() if f >= per_node]
        if flavor is None:  # a group never mixes flavors
            by_flavor: dict[str, list[str]] = {}
            for n in fitting:
                by_flavor.setdefault(self.flavors[n], []).append(n)
            fitting = next((ns for _, ns in sorted(by_flavor.items()) if len(ns) >= count), [])
        if len(fitting) < count:
            return None
        fitting.sort(key=lambda n: (free[n], self.ordinals[n]))
        return fitting[:count]

    def allocate(self, node: str, count: int, holder: str, group: int | None) -> None:
        free = [g for g in self.gpus if g.node == node and g.state == "free"][:count]
        assert len(free) == count, f"{count} free GPUs on {node} expected"
        for g in free:
            g.state, g.holder, g.group, g.until = "held", holder, group, None

    def release(self, holder: str, groups: set[int] | None = None) -> None:
        """The holder's GPUs (of ``groups``) enter their termination grace."""
        for g in self.gpus:
            if g.holder == holder and g.state == "held" and (groups is None or g.group in groups):
                g.state, g.until = "terminating", self.now + self.timings.stop_grace_s

    def terminating_pods(self, holder: str) -> int:
        return len(
            {
                (g.group, g.node)
                for g in self.gpus
                if g.holder == holder and g.state == "terminating"
            }
        )

    # -- placement --------------------------------------------------------------------------

    def place_pending(self) -> set[str]:
        """Place every pending group, in deploy order; the deploys placed."""
        free = self.free_by_node()
        placed: set[str] = set()
        for d in sorted(self.deploys.values(), key=lambda x: x.ordinal):
            if d.spec.id in self.unschedulable:
                continue
            for grp, group in sorted(d.groups.items()):
                if group.state != "pending":
                    continue
                chosen = self.choose_nodes(
                    free, d.spec.flavor, d.per_node, d.spec.nodes_per_replica, d.spec.node_selector
                )
                if chosen is None:
                    continue
                for node in chosen:
                    self.allocate(node, d.per_node, d.spec.id, grp)
                    free[node] -= d.per_node
                group.state = "starting"
                group.ready_at = (
                    None if d.spec.id in self.never_ready else self.now + self.timings.start_delay_s
                )
                placed.add(d.spec.id)
        for dep in placed:
            self.mark_applied_if_placed(self.deploys[dep])
        return placed

    @staticmethod
    def mark_applied_if_placed(d: FakeDeploy) -> None:
        if not any(g.state == "pending" for g in d.groups.values()):
            d.applied_generation = d.generation

    def grab_for_intruders(self) -> None:
        for fid, (want, flavor) in sorted(self.intruders.items()):
            need = want - sum(1 for g in self.gpus if g.holder == fid and g.state == "held")
            for node, n in sorted(self.free_by_node().items(), key=lambda kv: self.ordinals[kv[0]]):
                if need <= 0:
                    break
                if flavor is not None and self.flavors[node] != flavor:
                    continue
                take = min(n, need)
                self.allocate(node, take, fid, None)
                need -= take

    # -- time -------------------------------------------------------------------------------

    def _next_event(self) -> float | None:
        found = [g.until for g in self.gpus if g.until is not None]
        found += [
            grp.ready_at
            for d in self.deploys.values()
            for grp in d.groups.values()
            if grp.state == "starting" and grp.ready_at is not None
        ]
        return min(found) if found else None

    def _apply_due(self, at: float) -> None:
        self.now = at
        for g in self.gpus:
            if g.state == "terminating" and g.until is not None and g.until <= at:
                g.state, g.holder, g.group, g.until = (
                    "unpublished",
                    None,
                    None,
                    g.until + self.timings.publish_lag_s,
                )
        published = 0
        for g in self.gpus:
            if g.state == "unpublished" and g.until is not None and g.until <= at:
                g.state, g.until = "free", None
                published += 1
        for d in self.deploys.values():
            for grp in d.groups.values():
                if grp.state == "starting" and grp.ready_at is not None and grp.ready_at <= at:
                    grp.state, grp.ready_at = "ready", None
        if published:
            self.grab_for_intruders()
            self.place_pending()

    def advance(self, target: float) -> None:
        """Apply every transition due up to ``target``, batch by batch, in time order."""
        nxt = self._next_event()
        while nxt is not None and nxt <= target:
            self._apply_due(nxt)
            nxt = self._next_event()
        self.now = max(self.now, target)
