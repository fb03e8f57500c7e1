"""Dry-run over a range (R-PASS-13): the plan at the start, then at every intent boundary.

The plan at the range start is the plan a pass would open now, against the
deploys as the core reports them. Each later boundary is planned against the
state the previous interval leaves behind, supposing it converged (a stopped
target STOPPED, a running one READY with its replicas), with the same
read-only preflight a pass runs (alias guard, quota, billing, reservation
budget, capacity preview against today's capacity). Desired-GPU overcommit is
reported over the whole range. Nothing is submitted.
"""

# Decisions embodied here (docs/decisions.md):
# * “Range dry-run”

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gps_dagster.domain.evaluator import Intent, boundaries, effective_intent
from gps_dagster.domain.occurrences import WORK_BUDGET, counting
from gps_dagster.domain.pool import PoolSpec
from gps_dagster.domain.spec import DesiredState, Schedule
from gps_dagster.domain.timeline import gpu_timeline
from gps_dagster.engine.dry_run import DryRunReport, dry_run
from gps_dagster.ports import CoreError, DeployReads, DeployState, DeployView, PreviewingReads

MAX_BOUNDARIES = 200
"""Boundaries planned per request (a busy week of the seed has ten)."""
RANGE_BUDGET = 4 * WORK_BUDGET
"""Evaluator work one ranged dry-run may spend planning boundaries; the rest are ``truncated``."""


@dataclass
class RangeReport:
    instant: DryRunReport
    at_boundaries: list[DryRunReport] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)


def dry_run_range(
    schedule: Schedule,
    core: PreviewingReads,
    start: datetime,
    end: datetime,
    *,
    pool: PoolSpec | None = None,
    pins: Mapping[str, str | None] | None = None,
) -> RangeReport:
    """Plans at ``start`` and at each boundary in ``(start, end)`` (at most ``MAX_BOUNDARIES``).

    ``pins``: the claims' pinned objects (``Store.pins_for``), as ``dry_run`` takes them.
    """
    report = RangeReport(dry_run(schedule, core, start, pins=pins))
    live = _reads(core, schedule)
    instants = sorted({b.at for b in boundaries(schedule, start, end) if b.at > start})
    with counting() as work:  # each plan costs a few current_interval calls: bound their sum
        for at in instants[:MAX_BOUNDARIES]:
            if work.units > RANGE_BUDGET - WORK_BUDGET:
                break
            supposed = {
                t: _converged(v, effective_intent(schedule, t, _just_before(at)))
                for t, v in live.items()
            }
            report.at_boundaries.append(dry_run(schedule, core, at, deploys=supposed, pins=pins))
    if len(instants) > len(report.at_boundaries):
        report.warnings.append(
            {"kind": "truncated", "boundaries": len(instants), "planned": len(report.at_boundaries)}
        )
    if pool is not None:
        for seg in gpu_timeline(schedule, pool, start, end):
            if seg.overcommit:
                report.warnings.append(
                    {
                        "kind": "overcommit",
                        "from": seg.start.isoformat(),
                        "to": seg.end.isoformat(),
                        "desired_gpus": seg.desired_gpus,
                        "capacity": seg.capacity,
                    }
                )
    return report


def _reads(core: DeployReads, schedule: Schedule) -> dict[str, DeployView]:
    try:
        return dict(core.get_deploys(list(schedule.target_ids)))
    except CoreError:
        return {}  # each plan then reads (and reports) the core on its own


def _just_before(at: datetime) -> datetime:
    """The last instant of the previous interval (the evaluator works in whole seconds)."""
    return at - timedelta(seconds=1)


def _converged(deploy: DeployView, intent: Intent) -> DeployView:
    """``deploy`` as the interval of ``intent`` leaves it, once converged."""
    if intent.desired_state is DesiredState.STOPPED:
        return dataclasses.replace(
            deploy,
            state=DeployState.STOPPED,
            ready_replicas=0,
            terminating_pods=0,
            unschedulable=False,
        )
    replicas = intent.replicas or deploy.desired_replicas or 1
    return dataclasses.replace(
        deploy,
        state=DeployState.READY,
        desired_replicas=replicas,
        ready_replicas=replicas,
        applied_generation=deploy.generation,
        terminating_pods=0,
        unschedulable=False,
    )
