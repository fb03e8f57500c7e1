"""A witness read that answers ``witness_unavailable`` (a stale node-agent record) through the
real engine: the acquire keeps its readiness clock, says why at each retry, and ends
``readiness_timeout`` with reason ``witness_unavailable`` and the node agent's fix — not
``converged`` on data nobody vouches for, and not the generic "inspect the deploy (logs,
probes)". Mutations caught: the hook swallowing the refusal as "no evidence yet" (the reason
would be ``readiness_timeout``), or treating it as confirmation (``converged``).
"""

from __future__ import annotations

import copy
from typing import Any

from gps_sim import A, B, C, gpu42_schedule, local, open_sim, shared_pool

from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.engine.gps_hooks import hooks
from gps_dagster.ports import Transient, WitnessResult


class StaleAgent:
    """The simulated pool, whose witness of ``deploy`` is refused as a Kubernetes core refuses a
    record whose node-agent heartbeat is too old."""

    def __init__(self, pool: Any, deploy: str) -> None:
        self._pool, self._deploy = pool, deploy

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def witness(self, deploy_id: str) -> WitnessResult:
        if deploy_id == self._deploy:
            raise Transient(
                "witness_unavailable: the node agent last confirmed the GPUs of pod x 300 s ago",
                reason="witness_unavailable",
            )
        result: WitnessResult = self._pool.witness(deploy_id)
        return result


def test_a_stale_witness_ends_the_acquire_with_witness_unavailable(sqlite_url: str) -> None:
    sim = open_sim(
        sqlite_url,
        shared_pool({A: 96_000, B: 80_000, C: 24_000}, running=(B, C)),
        local("2026-10-19T07:59:30"),
    )
    schedule = load_schedule(copy.deepcopy(gpu42_schedule()))
    sim.store.apply_schedule(schedule, now=sim.clock.now())
    sim.store.set_gate("enforce", now=sim.clock.now())
    core = StaleAgent(sim.pool, A)
    engine = Engine(
        sim.store, core, sim.clock, EngineConfig(readiness_timeout_s=600), **hooks(sim.store, core)
    )  # type: ignore[arg-type]
    phases = []
    while sim.clock.now() < local("2026-10-19T08:20"):
        engine.run_pass()
        row = sim.store.get_status(schedule.name, A)
        phases.append(row.phase if row else "")
        sim.clock.advance(30)
    row = sim.store.get_status(schedule.name, A)
    acquiring = phases[phases.index("awaiting_ready") :]
    assert (
        row is not None and "converged" not in acquiring
    )  # never converged on an unvouched record
    assert (row.phase, row.reason) == ("readiness_timeout", "witness_unavailable")
    assert "node agent" in (row.fix or "") and "300 s ago" in (row.fix or "")
    assert sim.pool.get_deploy(A).ready_replicas == 1  # A runs; only its placement is unvouched
