"""Ready-by (R-NEXT-1): act early so a target is READY *at* its boundary, not minutes after.

Why a lead learned per deploy: a 70B model server takes minutes from "start accepted" to
READY, and release-first must first free the GPUs it needs. The lead of a boundary is the
p90 of the acquiring deploy's last observed start -> READY durations, plus (release-first)
the p90 of the releasing deploys' accepted -> STOPPED durations; a configured default stands
in before any history, and the whole lead is capped. Pure: durations are a parameter (the
engine reads them from its finished steps), and so is time.

Priority semantics hold. A lead applies to a boundary where a ``ready_by`` target's intent
becomes running (or scales up) and the intent before it came from the default or from a
window of lower priority than the one bringing it: an override in force up to the boundary
(maint-wed until 15:00) still wins until its end, as without ready-by. A lead never starts a
target whose intent at the boundary is not running, never reaches back before the previous
boundary of the targets it moves, and moves only the acquiring targets and, release-first,
the targets released at that boundary: the releasing window is shortened by exactly the
lead, and no window's end moves.
"""

# Decisions embodied here (docs/decisions.md):
# * “Ready-by: the lead is learned from finished steps, one lead per boundary”
# * “Ready-by keeps priorities”

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gps_dagster.domain.evaluator import Boundary, Intent, boundaries, current_interval
from gps_dagster.domain.spec import DesiredState, Schedule, TransitionOrder

__all__ = ["Lead", "Timing", "early_targets", "leads_in", "learned", "next_early", "p90"]


@dataclass(frozen=True, slots=True)
class Timing:
    """One deploy's learned duration of one kind (start -> READY, or stop -> STOPPED)."""

    seconds: float
    samples: int
    """Observations it came from; 0 = the configured default."""

    @property
    def source(self) -> str:
        return "history" if self.samples else "default"


def p90(values: Sequence[float]) -> float:
    """The 90th percentile, nearest rank (a value that was observed, never an interpolation)."""
    if not values:
        raise ValueError("p90 of no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def learned(durations: Sequence[float], default_s: float) -> Timing:
    """The p90 of ``durations`` (a deploy's last N), or ``default_s`` before any history."""
    return Timing(p90(durations), len(durations)) if durations else Timing(default_s, 0)


@dataclass(frozen=True)
class Lead:
    """The planned early start of one boundary: when, for whom, and the figures behind it."""

    boundary: datetime
    early_at: datetime
    acquiring: tuple[str, ...]
    releasing: tuple[str, ...]
    seconds: float
    start: dict[str, Timing] = field(default_factory=dict)
    stop: dict[str, Timing] = field(default_factory=dict)
    capped: bool = False
    clamped: bool = False
    """The previous boundary came first: the lead starts there (shorter than learned)."""

    @property
    def targets(self) -> tuple[str, ...]:
        return self.acquiring + self.releasing

    @property
    def reason(self) -> str:
        start = " + ".join(
            f"{t} start p90 {v.seconds:.0f} s ({v.source}, {v.samples} obs.)"
            for t, v in self.start.items()
        )
        stop = " + ".join(
            f"{t} stop p90 {v.seconds:.0f} s ({v.source}, {v.samples} obs.)"
            for t, v in self.stop.items()
        )
        tail = (
            " (capped)" if self.capped else " (from the previous boundary)" if self.clamped else ""
        )
        return (
            f"ready by {self.boundary.isoformat()}: {start}{' + max ' + stop if stop else ''}{tail}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "boundary": self.boundary.isoformat(),
            "early_start": self.early_at.isoformat(),
            "lead_s": self.seconds,
            "acquiring": list(self.acquiring),
            "releasing": list(self.releasing),
            "start_s": {
                t: {"p90_s": v.seconds, "samples": v.samples, "source": v.source}
                for t, v in self.start.items()
            },
            "stop_s": {
                t: {"p90_s": v.seconds, "samples": v.samples, "source": v.source}
                for t, v in self.stop.items()
            },
            "capped": self.capped,
            "clamped": self.clamped,
            "reason": self.reason,
        }


def _priority(schedule: Schedule, source: str) -> float:
    for w in schedule.windows:
        if w.name == source:
            return w.priority
    return -math.inf  # the default


def _acquires(before: Intent, after: Intent) -> bool:
    if after.desired_state is not DesiredState.RUNNING:
        return False
    if before.desired_state is DesiredState.STOPPED:
        return True
    return (
        after.replicas is not None
        and before.replicas is not None
        and after.replicas > before.replicas
    )


def _releases(before: Intent, after: Intent) -> bool:
    if before.desired_state is not DesiredState.RUNNING:
        return False
    if after.desired_state is DesiredState.STOPPED:
        return True
    return (
        after.replicas is not None
        and before.replicas is not None
        and after.replicas < before.replicas
    )


def leads_in(
    schedule: Schedule,
    start: datetime,
    end: datetime,
    *,
    start_times: Mapping[str, Timing],
    stop_times: Mapping[str, Timing],
    cap_s: float,
) -> list[Lead]:
    """The lead of every boundary in ``[start, end)`` that brings a ready-by target up."""
    if not any(schedule.is_ready_by(t) for t in schedule.target_ids):
        return []
    by_instant: dict[datetime, list[Boundary]] = {}
    for b in boundaries(schedule, start, end):
        if b.at >= start:
            by_instant.setdefault(b.at, []).append(b)
    out = []
    for at, group in sorted(by_instant.items()):
        lead = _lead(schedule, at, group, start_times, stop_times, cap_s)
        if lead is not None:
            out.append(lead)
    return out


def _lead(
    schedule: Schedule,
    at: datetime,
    group: list[Boundary],
    start_times: Mapping[str, Timing],
    stop_times: Mapping[str, Timing],
    cap_s: float,
) -> Lead | None:
    acquiring = tuple(
        b.target
        for b in group
        if schedule.is_ready_by(b.target)
        and _acquires(b.before, b.after)
        and _priority(schedule, b.before.source) < _priority(schedule, b.after.source)
    )
    if not acquiring:
        return None
    release_first = schedule.transition_order is TransitionOrder.RELEASE_FIRST
    releasing = tuple(b.target for b in group if release_first and _releases(b.before, b.after))
    start = {t: start_times[t] for t in acquiring}
    stop = {t: stop_times[t] for t in releasing}
    seconds = max(v.seconds for v in start.values()) + max(
        (v.seconds for v in stop.values()), default=0.0
    )
    capped = seconds > cap_s
    seconds = min(seconds, cap_s)
    early = at - timedelta(seconds=seconds)
    floor = max(
        current_interval(schedule, t, at - timedelta(seconds=1)).start
        for t in acquiring + releasing
    )
    clamped = early < floor
    if clamped:
        early, seconds = floor, (at - floor).total_seconds()
    if seconds <= 0:
        return None
    return Lead(at, early, acquiring, releasing, seconds, start, stop, capped, clamped)


def _window(cap_s: float) -> timedelta:
    return timedelta(seconds=cap_s + 1)


def early_targets(
    schedule: Schedule,
    now: datetime,
    *,
    start_times: Mapping[str, Timing],
    stop_times: Mapping[str, Timing],
    cap_s: float,
) -> tuple[dict[str, datetime], Lead | None]:
    """Targets to plan *as of their boundary* at ``now`` (inside a lead), and that lead."""
    for lead in leads_in(
        schedule,
        now,
        now + _window(cap_s),
        start_times=start_times,
        stop_times=stop_times,
        cap_s=cap_s,
    ):
        if lead.early_at <= now < lead.boundary:
            return {t: lead.boundary for t in lead.targets}, lead
    return {}, None


def next_early(
    schedule: Schedule,
    after: datetime,
    *,
    start_times: Mapping[str, Timing],
    stop_times: Mapping[str, Timing],
    cap_s: float,
) -> datetime | None:
    """The first early start strictly after ``after`` (boundaries up to 8 days ahead), for the due
    index: the schedule is due then, before its boundary."""
    for days in (1, 8):
        for lead in leads_in(
            schedule,
            after,
            after + timedelta(days=days) + _window(cap_s),
            start_times=start_times,
            stop_times=stop_times,
            cap_s=cap_s,
        ):
            if lead.early_at > after:
                return lead.early_at
    return None
