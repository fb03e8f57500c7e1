"""Ready-by on the real API server (R-NEXT-1): A READY at 08:00, B stopped early by the lead.

The seed on the control plane of ``make test`` (fake GPU nodes, real Deployments, scheduler
and controllers) with A ``ready_by`` and the simulator's delays of the replay (a start READY
420 s after placement, pods' grace 60 s, GPUs published at once). Friday's morning runs on
the configured default lead and teaches the engine A's start and B's stop; on Monday the
learned lead (what Friday's swap took) starts the swap early so A's Deployment is READY at
08:00 ± 30 s, and B's pods were deleted the lead before 08:00 — not earlier.

End-to-end (``tests/k8s/world.py``): the engine's own loop, woken by its due index (boundaries,
follow-ups every 2 s while steps fly, the ready-by early start), while the cluster moves.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gps_dagster.engine import EngineConfig
from tests.engine.harness import A, B, local, seed_pool, seed_schedule

FRIDAY = local("2026-10-16T07:00:00")
FRIDAY_8 = local("2026-10-16T08:00:00")
MONDAY_8 = local("2026-10-19T08:00:00")
PHYSICAL_S = 420 + 60
"""The swap as the fakes play it: B's pods' 60 s of grace, then A's start READY 420 s later."""


def test_a_is_ready_at_eight_on_the_cluster_and_b_loses_only_the_lead(new_world: Any) -> None:
    schedule = seed_schedule()
    schedule["targets"][0]["ready_by"] = True
    pool = seed_pool()
    pool["sim"]["timings"] = {"stop_grace_s": 60, "publish_lag_s": 0, "start_delay_s": 420}
    w = new_world(
        schedule=schedule,
        pool=pool,
        start=FRIDAY,
        config=EngineConfig(pass_interval_s=3600),  # the due index wakes it: a safety net
        max_step_s=None,
    )
    w.run_until(MONDAY_8 + timedelta(minutes=15))
    swaps = [t for t in w.store.list_transitions() if t.boundary_at == MONDAY_8]
    assert len(swaps) == 1
    steps = {s.deploy_id: s for s in w.store.list_actions(transition_id=swaps[0].id)}
    start, stop = steps[A], steps[B]
    assert start.state == stop.state == "converged"
    assert start.finished_at is not None and stop.accepted_at is not None
    leads = [
        e
        for e in w.store.list_events(limit=10_000)
        if e.kind == "ready_by_lead"
        and e.detail
        and e.detail["boundary"].startswith("2026-10-19T08:00")
    ]
    assert len(leads) == 1
    lead_s = leads[0].detail["lead_s"]  # type: ignore[index]
    assert leads[0].detail["start_s"][A]["source"] == "history"  # type: ignore[index]
    assert leads[0].detail["stop_s"][B]["source"] == "history"  # type: ignore[index]
    # The lead is what Friday's swap took as the engine saw it: A's start (accepted -> READY)
    # plus B's stop (accepted -> A's start submitted), one observation each.
    friday_start, friday_stop = friday_durations(w)
    assert lead_s == friday_start + friday_stop, (lead_s, friday_start, friday_stop)
    # ...and the swap starts that lead before 08:00: B stopped by the lead, never more.
    early = (MONDAY_8 - stop.accepted_at).total_seconds()
    assert lead_s - 5 <= early <= lead_s + 5, (early, lead_s)
    # So A is READY at 08:00 ± 30 s, give or take what this harness adds to a duration as the
    # engine observes it: the controllers and the watch run on wall time while the virtual
    # clock runs ahead of them, so on a loaded machine a pass meets a converged state later
    # (seconds to a minute of virtual time) than the fakes' 420 s start and 60 s grace.
    monday = (start.finished_at - stop.accepted_at).total_seconds()
    lag = abs(friday_start + friday_stop - PHYSICAL_S) + abs(monday - PHYSICAL_S)
    off = (start.finished_at - MONDAY_8).total_seconds()
    assert abs(off) <= 30 + lag, (start.finished_at, lead_s, monday, lag)
    assert w.deploy(A).ready_replicas >= 1


def friday_durations(w: Any) -> tuple[float, float]:
    """A's start and B's stop of Friday's 08:00 swap, as ``store/timings.py`` measures them."""
    (friday,) = [t for t in w.store.list_transitions() if t.boundary_at == FRIDAY_8]
    steps = {s.deploy_id: s for s in w.store.list_actions(transition_id=friday.id)}
    a, b = steps[A], steps[B]
    assert a.state == b.state == "converged"
    start = (a.finished_at - a.accepted_at).total_seconds()
    stop = (a.submitted_at - b.accepted_at).total_seconds()
    return start, stop
