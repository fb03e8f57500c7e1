"""The in-memory pool's driver surface (``backends.sim.driver``'s twin): settle, history, faults,
foreign work.

Not part of the ``Core`` port: what a simulation driver (``simulate``, tests) uses
to move time, read the usage history and the operation log, and inject faults and
foreign workloads.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from gps_dagster.backends.sim.driver import UsagePoint
from gps_dagster.backends.sim.memory import mutations
from gps_dagster.backends.sim.memory.context import MemCtx
from gps_dagster.backends.sim.memory.dynamics import (
    allocate,
    free_by_node,
    grab_for_intruders,
    place_pending,
    release,
)
from gps_dagster.backends.sim.memory.state import ForeignRec, PoolState, ProjectRec
from gps_dagster.backends.sim.pure import Blocks, choose_nodes, to_dt, to_operation
from gps_dagster.domain.pool import FaultSpec, fault_problem
from gps_dagster.ports import AdmissionRefused, DeployView, NotFound, Operation, OperationState

if TYPE_CHECKING:
    from gps_dagster.backends.sim.memory.state import DeployRec

__all__ = ["MemoryDriver"]


class MemoryDriver:
    name: str
    state: PoolState

    if TYPE_CHECKING:

        def _ctx(self) -> tuple[MemCtx, Blocks]: ...
        def _tx(self, *, undo: bool = False) -> AbstractContextManager[tuple[MemCtx, Blocks]]: ...
        def _commit_changes(self, ctx: MemCtx) -> None: ...
        def _view(self, ctx: MemCtx, row: DeployRec) -> DeployView: ...

    def settle(self) -> datetime | None:
        """Apply every transition due up to the clock's now; return the next event instant."""
        self._ctx()
        nxt = self.state.next_event_at
        return None if nxt is None else to_dt(nxt)

    def next_event_at(self) -> datetime | None:
        self._ctx()
        nxt = self.state.next_event_at
        return None if nxt is None else to_dt(nxt)

    def revision(self) -> int:
        return self.state.revision

    def usage_history(self) -> list[UsagePoint]:
        return [
            UsagePoint(
                to_dt(at),
                dict(d["in_use"]),
                d["terminating"],
                d["unpublished"],
                d["free"],
                {k: list(v) for k, v in d.get("shared", {}).items()},
            )
            for at, d in self.state.usage
        ]

    def operation_log(self) -> list[Operation]:
        """Every accepted mutation, in order, with its recorded (not live) state."""
        return [to_operation(op, OperationState(op.state)) for op in self.state.operations]

    def observe(self) -> dict[str, DeployView]:
        """Every deploy, read the way an observer would: injected faults do not apply."""
        ctx, _b = self._ctx()
        return {d.id: self._view(ctx, d) for d in ctx.state.deploys.values()}

    def deploy_ids(self) -> list[str]:
        return list(self.state.deploys)

    # -- faults --------------------------------------------------------------------------

    def inject_fault(self, fault: FaultSpec) -> None:
        reason = fault_problem(fault, set(self.deploy_ids()))
        if reason:
            raise AdmissionRefused(
                reason, f"fault {fault.model_dump(exclude_defaults=True)}: {reason}"
            )
        with self._tx() as (ctx, _b):
            mutations.insert_fault(ctx.state, fault)
            self._commit_changes(ctx)

    def clear_faults(self) -> None:
        with self._tx() as (ctx, _b):
            mutations.clear_faults(ctx.state, ctx.now + ctx.timings.start_delay_s)
            place_pending(ctx, blocked=set(), never_ready=set())
            self._commit_changes(ctx)

    def faults(self) -> list[FaultSpec]:
        return mutations.listed(self.state)

    # -- foreign workloads and accounts -------------------------------------------------

    def add_foreign(
        self,
        workload_id: str,
        gpus: int,
        *,
        kind: Literal["static", "intruder"] = "static",
        node: str | None = None,
        flavor: str | None = None,
    ) -> None:
        """A workload no schedule owns: ``static`` takes GPUs now; ``intruder`` grabs published
        ones."""
        with self._tx(undo=True) as (ctx, _b):
            if workload_id in ctx.state.foreign or workload_id in ctx.state.deploys:
                raise AdmissionRefused("duplicate_holder", f"{workload_id!r} already exists")
            ctx.state.foreign[workload_id] = ForeignRec(workload_id, kind, gpus, flavor)
            if kind == "static":
                free = free_by_node(ctx)
                if node is None:
                    chosen = choose_nodes(ctx, free, flavor, gpus, 1)
                    node = chosen[0] if chosen else None
                if node is None or free.get(node, 0) < gpus:
                    raise AdmissionRefused(
                        "insufficient_capacity",
                        f"{workload_id}: {gpus} free GPUs not available on one node",
                    )
                allocate(ctx, node, gpus, workload_id, "foreign", None)
            self._commit_changes(ctx)

    def remove_foreign(self, workload_id: str) -> None:
        """The workload ends: its GPUs terminate, then are published after the lag."""
        with self._tx() as (ctx, _b):
            if ctx.state.foreign.pop(workload_id, None) is None:
                raise NotFound(f"no foreign workload {workload_id!r}")
            release(ctx, workload_id)
            self._commit_changes(ctx)

    def set_project(
        self, project: str, *, gpu_quota: int | None = None, billing: str | None = None
    ) -> None:
        """Change a project's quota and/or billing status (admin action)."""
        with self._tx() as (ctx, _b):
            current = ctx.state.projects.get(project)
            if current is None or (gpu_quota is None and billing is None):
                raise NotFound(f"no project {project!r} (or nothing to change)")
            ctx.state.projects[project] = ProjectRec(
                current.gpu_quota if gpu_quota is None else gpu_quota,
                current.billing if billing is None else billing,
            )
            self._commit_changes(ctx)

    def grab_now(self) -> None:
        """Let intruders take currently published free GPUs (normally only at publish time)."""
        with self._tx() as (ctx, _b):
            grab_for_intruders(ctx)
            self._commit_changes(ctx)
