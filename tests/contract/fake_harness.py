"""The contract suite's harness for ``FakeCore`` (gps_dagster.testing): the pool file's fault
vocabulary translated into one handler (call faults) and the fake's world levers (placement
faults and forced states), so the same cases run on it as on the simulator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from contract_harness import T0, at_the_instant

from gps_dagster.backends.sim import SimulatedCrash
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import FaultSpec, PoolSpec
from gps_dagster.ports import AliasGuardUnavailable, DeployState, Permanent, Transient
from gps_dagster.testing import CoreCall, FakeCore

FORCED = {"failed": DeployState.FAILED, "deleting": DeployState.DELETING}
PERSISTENT_CALL_FAULTS = {
    "alias_guard_unwired": (
        "alias_guard",
        lambda: AliasGuardUnavailable("unwired", "the alias guard is not wired"),
    ),
    "alias_guard_error": (
        "alias_guard",
        lambda: AliasGuardUnavailable("read_error", "the alias guard is unreadable"),
    ),
    "fail_start": ("start", lambda: Permanent("injected start failure", reason="start_failed")),
    "fail_stop": ("stop", lambda: Permanent("injected stop failure", reason="stop_failed")),
}


@dataclass
class FaultHandler:
    """One-shot faults hit ``times`` calls of their op (and deploy); the others persist."""

    one_shots: list[list[object]] = field(default_factory=list)
    """[FaultSpec, remaining] pairs."""
    persistent: list[FaultSpec] = field(default_factory=list)

    def _matches(self, f: FaultSpec, call: CoreCall) -> bool:
        return f.deploy is None or f.deploy == call.deploy_id

    def __call__(self, call: CoreCall, proceed: Callable[[], object]) -> object:
        hits: list[FaultSpec] = []
        for pair in self.one_shots:
            f, left = pair
            assert isinstance(f, FaultSpec) and isinstance(left, int)
            if left > 0 and f.op == call.method and self._matches(f, call):
                pair[1] = left - 1
                hits.append(f)
        for f in hits:
            if f.effect == "fail_next":
                raise (Transient if f.error == "transient" else Permanent)(
                    f"injected failure of {call.method}", reason="injected"
                )
            if f.effect == "crash" and f.point in ("before_mutation", "before_commit"):
                raise SimulatedCrash(
                    f.point, call.method
                )  # FakeCore is atomic: nothing applied yet
        for f in self.persistent:
            method, error = PERSISTENT_CALL_FAULTS[f.effect]
            if method == call.method and self._matches(f, call):
                raise error()
        result = proceed()
        if any(f.effect == "crash" and f.point == "after_commit" for f in hits):
            raise SimulatedCrash("after_commit", call.method)
        if any(f.effect == "lose_response" for f in hits):
            raise Transient(
                f"response of {call.method} lost (the mutation was applied)", reason="response_lost"
            )
        return result


class FakeHarness:
    def __init__(self, _db_url: str = "") -> None:
        self.clock = VirtualClock(T0)
        self.handler = FaultHandler()
        self.fake: FakeCore | None = None

    def load(self, spec: PoolSpec) -> FakeCore:
        self.fake = FakeCore(spec, self.clock, timings=spec.sim.timings, handler=self.handler)
        return self.fake

    @property
    def core(self) -> FakeCore:
        assert self.fake is not None
        return self.fake

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def eventually(self, check: Callable[[], object], *, within_s: float) -> None:
        at_the_instant(self, check, within_s)

    def inject(self, fault: FaultSpec) -> None:
        if fault.effect in ("fail_next", "lose_response", "crash"):
            self.handler.one_shots.append([fault, fault.times])
        elif fault.effect in PERSISTENT_CALL_FAULTS:
            self.handler.persistent.append(fault)
        elif fault.effect in FORCED:
            assert fault.deploy is not None
            self.core.forced[fault.deploy] = FORCED[fault.effect]
        else:
            assert fault.deploy is not None, "FakeCore's placement faults name their deploy"
            levers = {
                "unschedulable": self.core.pool.unschedulable,
                "never_ready": self.core.pool.never_ready,
            }
            levers[fault.effect].add(fault.deploy)

    def add_foreign(self, workload_id: str, gpus: int, kind: Literal["static", "intruder"]) -> None:
        self.core.add_foreign(workload_id, gpus, kind=kind)

    def remove_foreign(self, workload_id: str) -> None:
        self.core.remove_foreign(workload_id)

    def mutations(self, deploy_id: str) -> int:
        return self.core.mutations(deploy_id)

    def close(self) -> None:
        pass
