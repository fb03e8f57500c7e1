"""Which boundaries are near enough to launch their run ahead (R-NEXT-3).

A Dagster run takes seconds to start (3.3 s on a quiet machine with the default launcher,
8–22 s under load, a Job pod on Kubernetes): a run created at the boundary starts its first
op that late. A run launched ``lead`` seconds before the boundary waits for it on the injected
clock and opens the plan at the boundary instant exactly as a run launched by the boundary
would (``dagster_defs/prearm.py``). This module only answers *which* schedules have an intent
boundary within the lead: the next instant any target's intent changes
(``domain.evaluator.next_boundary``), for enabled release-first schedules (an acquire-first
plan keeps today's path: its first op is an acquire that the pre-armed job does not run), and
how long the lead is: a setting, or measured from the orchestrator's own recent run starts.
"""

# Decisions embodied here (docs/decisions.md):
# * “Pre-armed runs”
# * “The measured pre-arm lead keeps ahead of the run starts”

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gps_dagster.domain.evaluator import next_boundary
from gps_dagster.domain.spec import TransitionOrder
from gps_dagster.engine.store_ports import ScheduleStore
from gps_dagster.ports import Clock


@dataclass(frozen=True, slots=True)
class NearBoundary:
    schedule: str
    at: datetime
    """The intent boundary (an instant strictly after the tick's now)."""
    version: int
    """The schedule version the boundary was computed from (informational: the run decides
    at the boundary from the version of then)."""


def boundaries_within(store: ScheduleStore, now: datetime, lead_s: float) -> list[NearBoundary]:
    """Enabled release-first schedules whose next intent boundary is in ``(now, now + lead]``,
    soonest first."""
    if lead_s <= 0:
        return []
    horizon = now + timedelta(seconds=lead_s)
    out: list[NearBoundary] = []
    for record in store.list_schedules():
        if not record.enabled or record.spec.transition_order is not TransitionOrder.RELEASE_FIRST:
            continue
        at = next_boundary(record.spec, now)
        if at is not None and at <= horizon:
            out.append(NearBoundary(record.name, at, record.version))
    return sorted(out, key=lambda b: (b.at, b.schedule))


DEFAULT_LEAD_S = 30.0
"""The least lead (and the lead before any run was measured): the default launcher's run start
p95 under moderate load (~22 s, measured) plus a sensor tick (~5 s). Unset, the lead follows
the instance's measured run starts (``measured_lead``): a Kubernetes Job (pod scheduling,
image, Python start) or a loaded machine gets more."""
MEASURED_RUNS = 20
TICK_AND_MARGIN_S = 10.0
"""The least added to the measured start p95: the sensor's ~5 s tick floor and a margin."""
MARGIN_SHARE = 1.0
"""...and at least this share of the p95 itself: starts move with the load faster than the p95 of
the last runs follows them (bench/dagster_lag_jobs.py, load 10–19: Jobs measured at p95 ~24 s, a
34 s lead, and the next Job armed 38.5 s after its creation, 4.5 s after its boundary)."""
MAX_LEAD_S = 600.0


def lead_from_env(env: Mapping[str, str]) -> float | None:
    """``GPS_PREARM_LEAD_S`` of the code location (``definitions.py``); None (unset) = measured
    from the instance's own run starts (``measured_lead``); a bad value is refused with the
    setting, the reason and the fix."""
    raw = env.get("GPS_PREARM_LEAD_S", "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise ValueError(
            f"GPS_PREARM_LEAD_S={raw[:40]!r}: not a number of seconds in 0..3600; "
            "fix: unset it (30 s), 0 to turn pre-arming off, or e.g. 90 for Kubernetes Jobs"
        )
    return value


RunStart = tuple[float, float | None, float | None]
"""A run's (creation, start, end) instants in epoch seconds; start and end None until then."""


def measured_lead(runs: Iterable[RunStart], now: datetime | None = None) -> float:
    """The p95 of these runs' creation → start (the last ``MEASURED_RUNS`` of the instance: its
    run launcher and coordinator, under the machine's load of now) + a margin (the p95 again, at
    least 10 s: a sensor tick and more), never below ``DEFAULT_LEAD_S`` nor above ``MAX_LEAD_S``:
    a Kubernetes Job launcher, or a loaded machine, gets the lead it needs without a setting.

    A run still waiting to start (neither started nor ended) has waited ``now`` − its creation
    so far: that counts, as the least its start will take. Left out, the lead of a fresh
    instance whose first runs were all still starting stayed at the floor, and its first
    pre-armed Job started after its boundary (bench/dagster_lag_jobs.py: Job starts of 45–70 s
    under load, a 38 s lead). Runs that ended without starting are left out."""
    waits = sorted(
        _waited(created, started, now)
        for created, started, ended in runs
        if started is not None or (ended is None and now is not None)
    )
    if not waits:
        return DEFAULT_LEAD_S
    p95 = waits[min(len(waits) - 1, round(0.95 * (len(waits) - 1)))]
    margin = max(TICK_AND_MARGIN_S, MARGIN_SHARE * p95)
    return min(MAX_LEAD_S, max(DEFAULT_LEAD_S, p95 + margin))


def _waited(created: float, started: float | None, now: datetime | None) -> float:
    """Creation → start, or → ``now`` for a run not started yet (never below 0)."""
    end = started if started is not None else (now.timestamp() if now is not None else created)
    return max(0.0, end - created)


def lead_s(setting: float | None, measure: Callable[[], float] | None) -> float:
    """The lead: the setting (0 = off), else measured (``measure``), else the default."""
    if setting is None:
        return measure() if measure is not None else DEFAULT_LEAD_S
    return float(setting or 0.0)


def run_key(schedule: str, at: datetime) -> str:
    """One pre-armed run per schedule and boundary: the daemon drops a repeated launch."""
    return f"prearm:{schedule}:{at.astimezone(UTC).isoformat()}"


def no_boundary_near(lead_s: float, now: datetime) -> str:
    """Why a pre-arm tick launches nothing (pre-arming off, or no boundary within the lead)."""
    if lead_s <= 0:
        return "pre-arming is off (prearm_lead_s = 0): boundaries are served when they come"
    return f"no release-first boundary within {lead_s:.0f} s of {now.isoformat()}"


def wait_until(clock: Clock, at: datetime, pause: Callable[[float], object]) -> float:
    """Pause (at most a second at a time: a virtual clock advances) until ``at`` on ``clock``;
    how many seconds late it is then."""
    while True:
        left = float((at - clock.now()).total_seconds())
        if left <= 0:
            return -left
        pause(min(left, 1.0))
