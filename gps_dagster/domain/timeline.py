"""Desired GPUs over time against the pool capacity (R-EVAL-5).

The red capacity line of the seed: per instant, the GPUs the schedule wants
(targets whose intent is running) plus the GPUs of always-on deploys the
schedule does not own (the seed's embedding deploy C), against the pool's
total. A segment above capacity is an overcommit; dry-run warns about it.
"""

# Decisions embodied here (docs/decisions.md):
# * “A time-sliced reservation holds exactly one GPU”

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gps_dagster.domain.crons import local_time
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.evaluator import segments
from gps_dagster.domain.gps.bindings import TimeSlicedBinding
from gps_dagster.domain.occurrences import compile_schedule, floor_ts
from gps_dagster.domain.pool import DeploySpec, PoolSpec
from gps_dagster.domain.spec import DesiredState, Schedule

__all__ = ["GpuSegment", "gpu_summary", "gpu_timeline"]


@dataclass(frozen=True, slots=True)
class GpuSegment:
    """A maximal range of constant desired GPUs."""

    start: datetime
    end: datetime
    desired_gpus: int
    capacity: int
    overcommit: bool
    """True when ``desired_gpus > capacity``."""


def _time_sliced(dep: DeploySpec) -> bool:
    return dep.reservation is not None and dep.reservation.mode == "time_sliced"


def _gpus_per_replica(schedule: Schedule, pool: PoolSpec) -> dict[str, tuple[int, int]]:
    """Target -> (GPUs per replica, replicas when the intent leaves scale untouched)."""
    out: dict[str, tuple[int, int]] = {}
    problems: list[FieldError] = []
    for i, t in enumerate(schedule.targets):
        dep = pool.deploy(t.model_deploy_id)
        members = pool.members(t.model_deploy_id)
        if dep is None and members:  # a CMP endpoint: its members start and stop together
            out[t.model_deploy_id] = (sum(m.gpus_per_replica * m.replicas for m in members), 1)
            continue
        if dep is None:
            problems.append(
                FieldError(
                    f"targets[{i}].model_deploy_id",
                    "unknown_deploy",
                    f"'{t.model_deploy_id}' is not a deploy of pool '{pool.name}'; add it under "
                    "deploys or fix the id",
                )
            )
            continue
        per = (
            0 if _time_sliced(dep) else dep.gpus_per_replica
        )  # its reservation's GPU is counted once, below
        out[t.model_deploy_id] = (per, t.default_replicas or dep.replicas)
    if problems:
        raise SpecInvalid(problems, source=f"pool {pool.name}")
    return out


def gpu_timeline(
    schedule: Schedule, pool: PoolSpec, start: datetime, end: datetime
) -> list[GpuSegment]:
    """Desired GPUs per maximal segment of ``[start, end)``, in the schedule's time zone."""
    sizes = _gpus_per_replica(schedule, pool)
    owned = set(schedule.target_ids)
    always_on = sum(
        d.gpus_per_replica * d.replicas
        for d in pool.deploys
        if d.id not in owned
        and d.endpoint not in owned
        and d.state == "running"
        and not _time_sliced(d)
    )
    # A time-sliced reservation holds its GPU whether members run or not (the holder, R-GPS-6).
    shared = {
        d.reservation.reservation
        for d in pool.deploys
        if isinstance(d.reservation, TimeSlicedBinding)
    }
    always_on += sum(len(r.gpu_uuids) for r in pool.reservations if r.id in shared)
    always_on += sum(
        f.gpus for f in pool.sim.foreign if f.kind == "static"
    )  # workloads no schedule owns
    c = compile_schedule(schedule)
    s, e = floor_ts(start), floor_ts(end)
    if e <= s:
        raise ValueError("end must be after start")
    deltas: dict[int, int] = {}
    for target, segs in segments(c, list(c.targets), s, e).items():
        per, fallback = sizes[target]
        previous = 0
        for seg in segs:
            state, replicas, _ = seg[1]
            gpus = per * (replicas or fallback) if state is DesiredState.RUNNING else 0
            deltas[seg[0]] = deltas.get(seg[0], 0) + gpus - previous
            previous = gpus
    capacity = pool.capacity
    points = sorted(deltas)
    rows: list[tuple[int, int]] = []
    level = always_on
    for ts in points:
        level += deltas[ts]
        if not rows or rows[-1][1] != level:
            rows.append((ts, level))
    bounds = [ts for ts, _ in rows[1:]] + [e]
    tz = c.tz
    out = []
    for (ts, gpus), stop in zip(rows, bounds, strict=True):
        a = local_time(start if ts == s else ts, tz)
        b = local_time(end if stop == e else stop, tz)
        out.append(GpuSegment(a, b, gpus, capacity, gpus > capacity))
    return out


def gpu_summary(
    schedules: Iterable[Schedule], pool: PoolSpec, start: datetime, end: datetime
) -> dict[str, Any]:
    """Desired GPUs against capacity over ``[start, end)`` for these schedules: the peak, the
    overcommitted segments, and each schedule's segments (the timeline asset's figures)."""
    per_schedule: dict[str, Any] = {}
    peak, over = 0, 0
    for spec in schedules:
        segs = gpu_timeline(spec, pool, start, end)
        peak = max([peak, *(s.desired_gpus for s in segs)])
        over += sum(1 for s in segs if s.overcommit)
        per_schedule[spec.name] = [
            {"start": s.start.isoformat(), "end": s.end.isoformat(), "desired_gpus": s.desired_gpus}
            for s in segs
        ]
    return {
        "capacity": pool.capacity,
        "peak_desired_gpus": peak,
        "overcommit_segments": over,
        "schedules": per_schedule,
    }
