"""Dry-run (SPEC R-PASS-13): what a pass would do, and every warning, without submitting.

It evaluates the schedule (stored or an edit of it, from a file) at an
instant, plans against the deploys as the core reports them now, runs the
same read-only preflight as a real pass (alias guard, quota, billing,
endpoint members, reservation budget), previews capacity for every acquiring
delta, re-checks eligibility (unsupported scale), and reports desired-GPU
overcommit over the week ahead. Only read-only core calls are made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gps_dagster.domain.evaluator import current_interval, effective_intent
from gps_dagster.domain.planner import Order, ordered, steps_for
from gps_dagster.domain.pool import PoolSpec
from gps_dagster.domain.readyby import early_targets
from gps_dagster.domain.spec import Schedule, TransitionOrder
from gps_dagster.domain.timeline import gpu_timeline
from gps_dagster.domain.timeline_doc import ReadyByTimings, ready_by_rows, skipped_at
from gps_dagster.engine.eligibility import ineligible_reason
from gps_dagster.engine.plan_inputs import intent_doc, observed, wanted
from gps_dagster.engine.preflight import QuotaLedger, check_step
from gps_dagster.engine.ready_by import ReadyBy
from gps_dagster.engine.store_ports import DryRunStore
from gps_dagster.ports import CoreError, DeployView, Insufficient, NotFound, PreviewingReads


@dataclass
class DryRunReport:
    schedule: str
    at: datetime
    steps: list[dict[str, Any]] = field(default_factory=list)
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    ready_by: list[dict[str, Any]] | None = None
    """Ready-by leads (R-NEXT-1) in force at ``at`` or in the day ahead; None without ready_by."""

    def as_dict(self) -> dict[str, Any]:
        out = {
            "schedule": self.schedule,
            "at": self.at.isoformat(),
            "intents": self.intents,
            "steps": self.steps,
            "warnings": self.warnings,
        }
        if self.ready_by is not None:
            out["ready_by"] = self.ready_by
        return out


def engine_dry_run(
    store: DryRunStore,
    ready_by: ReadyBy,
    schedule: Schedule,
    core: PreviewingReads,
    at: datetime,
    *,
    pool: PoolSpec | None = None,
) -> DryRunReport:
    """The dry-run a pass over ``store`` would agree with: the same learned ready-by figures
    (R-NEXT-1) and the same claim pins (R-K8S-8) the engine plans with.

    The one way every surface (CLI ``dry-run``, the API's ``:dry-run``) builds its plan at an
    instant, so no surface can report a plan the engine would not make.
    """
    return dry_run(
        schedule,
        core,
        at,
        pool=pool,
        timings=ready_by.for_timeline(store, schedule),
        pins=store.pins_for(list(schedule.target_ids)),
    )


def dry_run(
    schedule: Schedule,
    core: PreviewingReads,
    at: datetime,
    *,
    pool: PoolSpec | None = None,
    deploys: Mapping[str, DeployView] | None = None,
    timings: ReadyByTimings | None = None,
    pins: Mapping[str, str | None] | None = None,
) -> DryRunReport:
    """The plan at ``at``; ``deploys`` replaces the core's reads of targets (a supposed state).

    ``timings``: learned ready-by figures (the engine's defaults without them): inside a lead
    the targets it moves are planned as of their boundary, as a pass would (R-NEXT-1).
    ``pins``: the claims' pinned objects (``Store.pins_for``): a replaced deploy is reported
    ineligible as a pass would (R-K8S-8); read only, nothing is pinned here.
    """
    rep = DryRunReport(schedule.name, at.astimezone(schedule.tz))
    planned = []
    skipped = skipped_at(schedule, at)
    early: dict[str, datetime] = {}
    if any(schedule.is_ready_by(t) for t in schedule.target_ids):
        timings = timings or ReadyByTimings.defaults(schedule)
        early, lead = early_targets(
            schedule, at, start_times=timings.start, stop_times=timings.stop, cap_s=timings.cap_s
        )
        ahead = ready_by_rows(schedule, at, at + timedelta(days=1), timings)
        rep.ready_by = ([{**lead.as_dict(), "in_force": True}] if lead is not None else []) + ahead
    for target in schedule.target_ids:
        when = early.get(target, at)  # inside a ready-by lead: as of the boundary (R-NEXT-1)
        interval = current_interval(schedule, target, when)
        in_force = effective_intent(
            schedule, target, when
        ).source  # not the merged interval's first window
        rep.intents[target] = {
            **intent_doc(interval),
            "source": in_force,
            "interval_start": interval.start.isoformat(),
            "interval_end": interval.end.isoformat() if interval.end else None,
        }
        if target in skipped:  # a holiday removed the occurrence that would be in force (R-NEXT-2)
            rep.intents[target]["skipped"] = skipped[target]
        try:
            deploy = (
                deploys[target]
                if deploys is not None and target in deploys
                else core.get_deploy(target)
            )
        except NotFound:
            deploy = None
        except CoreError as exc:
            rep.warnings.append({"target": target, "kind": "core_unreadable", "detail": str(exc)})
            continue
        reason = ineligible_reason(schedule, deploy, pinned=(pins or {}).get(target))
        if reason is not None or deploy is None:
            rep.warnings.append({"target": target, "kind": "ineligible", "reason": reason})
            continue
        for step in steps_for(wanted(interval), observed(deploy)):
            planned.append((step, wanted(interval), deploy))
    by_deploy = {step.deploy_id: (want, deploy) for step, want, deploy in planned}
    ledger = QuotaLedger.for_plan(
        {step.deploy_id: (step, want, deploy) for step, want, deploy in planned},
        release_first=schedule.transition_order is TransitionOrder.RELEASE_FIRST,
    )
    for step in ordered([p[0] for p in planned], schedule.transition_order):
        want, deploy = by_deploy[step.deploy_id]
        row: dict[str, Any] = {
            "target": step.deploy_id,
            "step": step.kind.value,
            "order": step.order.value,
            "replicas": step.replicas,
            "delta_replicas": step.delta_replicas,
        }
        refusal = check_step(core, step, want, deploy, ledger=ledger)
        if refusal is not None:
            row["refused"] = refusal.phase.value
            rep.warnings.append(
                {
                    "target": step.deploy_id,
                    "kind": refusal.phase.value,
                    "reason": refusal.reason,
                    "fix": refusal.fix,
                }
            )
        if step.order is Order.ACQUIRE:
            preview = core.preview_capacity(step.deploy_id, delta_replicas=step.delta_replicas)
            row["capacity"] = "insufficient" if isinstance(preview, Insufficient) else "fits"
        rep.steps.append(row)
    if pool is not None:
        for seg in gpu_timeline(schedule, pool, at, at + timedelta(days=7)):
            if seg.overcommit:
                rep.warnings.append(
                    {
                        "kind": "overcommit",
                        "from": seg.start.isoformat(),
                        "to": seg.end.isoformat(),
                        "desired_gpus": seg.desired_gpus,
                        "capacity": seg.capacity,
                    }
                )
    return rep
