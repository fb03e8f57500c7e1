"""Issue 18 item 10: the unschedulable grace is the pool's (the schedule's
``unschedulable_grace_s``), the engine's global only by default.

A pool whose GPU nodes an autoscaler without scale-up events adds (Karpenter) needs minutes where
a static pool needs seconds. On the control plane, B's start is accepted and its pods are then
left Unschedulable by the real scheduler (another tenant's pods took the CPU between the preflight
and the placement, as in ``test_engine_on_cluster``): the engine's 120 s end it by 18:10; the
pool's own 900 s keep it waiting, and end it once they have run out.
"""

from __future__ import annotations

from typing import Any

import pytest

from gps_dagster.engine import EngineConfig
from tests.engine.harness import B, a_running_pool, local, seed_schedule
from tests.k8s.test_engine_on_cluster import EVENING, _before_start_patch, _bind_cpu_hogs


def _world(new_world: Any, grace: float | None) -> Any:
    doc = seed_schedule()
    if grace is not None:
        doc["unschedulable_grace_s"] = grace
    w = new_world(
        schedule=doc,
        pool=a_running_pool(),
        start=EVENING,
        config=EngineConfig(unschedulable_grace_s=120),
    )
    _before_start_patch(w, B, lambda: _bind_cpu_hogs(w))
    return w


def test_without_a_pool_grace_the_engines_ends_the_start_unschedulable(new_world: Any) -> None:
    w = _world(new_world, None)
    w.run_until(local("2026-10-19T18:10"))
    assert w.status(B).phase == "start_unschedulable"


@pytest.mark.parametrize("grace", [900])
def test_a_pool_grace_waits_its_own_time_before_start_unschedulable(
    new_world: Any, grace: float
) -> None:
    w = _world(new_world, grace)
    w.run_until(local("2026-10-19T18:10"))
    st = w.status(B)
    assert st.phase == "awaiting_ready" and w.deploy(B).unschedulable  # 120 s are long gone
    (start,) = [a for a in w.store.list_actions(deploy_id=B) if a.step == "start"]
    assert start.planned.unschedulable_grace_s == grace
    w.run_until(local("2026-10-19T18:17"))
    st = w.status(B)
    assert (st.phase, st.reason) == ("start_unschedulable", "start_unschedulable")
    assert (st.detail or {}).get("allocation_kept") is True
