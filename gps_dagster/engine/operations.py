"""The operator-facing operations on schedules, shared by the CLI and the HTTP API.

Both edges are thin layers over these functions, so the same input leaves the
same store state whichever surface it came through (R-API). Time and the
actor are parameters; the edges read the clock and name who acts.

``target_problems`` is where R-MODEL-9 and R-MODEL-7 are checked at
create/update, against what the core reports now:

* an ``admin`` schedule may not target a CMP-managed deploy (``cmp_managed``);
* a ``cmp:<project>`` schedule may target only that project's deploys and
  endpoints; a deploy of another project and a deploy that does not exist get
  the same ``unknown_deploy`` answer, so a tenant learns nothing about others;
* replicas on a deploy kind that cannot scale are ``unsupported_scale_for_mode``.

The engine re-checks all of this on every pass (eligibility), so an admin
schedule naming a deploy the core cannot read now is accepted (it will be
``ineligible`` until the deploy exists); a tenant schedule is not: claiming a
deploy that may belong to another project would block that project.
"""

# Decisions embodied here (docs/decisions.md):
# * “Scope checks at create/update, on both edges”

from __future__ import annotations

from datetime import datetime
from typing import Any

from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.spec import Schedule
from gps_dagster.engine.eligibility import declares_replicas, ineligible_reason
from gps_dagster.engine.endpoints import read_target
from gps_dagster.engine.engine import Engine
from gps_dagster.engine.reports import PassReport
from gps_dagster.engine.store_ports import EngineStore
from gps_dagster.ports import DeployReads, NotFound
from gps_dagster.store.records import Deleted, ScheduleRecord

__all__ = ["apply", "apply_now", "delete", "pass_summary", "status_rows", "target_problems"]


def target_problems(core: DeployReads, spec: Schedule) -> list[FieldError]:
    """Scope (R-MODEL-9) and scale (R-MODEL-7) problems of ``spec``'s targets, with field paths."""
    out: list[FieldError] = []
    project = spec.project
    for i, target in enumerate(spec.targets):
        path = f"targets[{i}].model_deploy_id"
        deploy_id = target.model_deploy_id
        try:
            view, _members = read_target(core, deploy_id)
        except NotFound:
            if project is not None:
                out.append(_unknown(path, deploy_id, project))
            continue
        if project is not None and view.project != project:
            out.append(_unknown(path, deploy_id, project))
            continue
        if project is None and view.cmp_managed:
            out.append(
                FieldError(
                    path,
                    "cmp_managed",
                    (
                        f"'{deploy_id}' is managed by CMP project '{view.project}': "
                        "an admin schedule may not "
                        "target it; schedule it through "
                        f"/api/v1/cmp/projects/{view.project}/deploy-schedules"
                    ),
                )
            )
            continue
        if (
            declares_replicas(spec, deploy_id)
            and ineligible_reason(spec, view) == "unsupported_scale_for_mode"
        ):
            out.append(
                FieldError(
                    path,
                    "unsupported_scale_for_mode",
                    (
                        f"{view.id} is a {view.kind.value} deploy that a schedule cannot scale: "
                        f'drop "replicas" for it'
                    ),
                )
            )
    return out


def _unknown(path: str, deploy_id: str, project: str) -> FieldError:
    return FieldError(
        path,
        "unknown_deploy",
        (
            f"no deploy or endpoint '{deploy_id}' in project '{project}': "
            "name one of the project's own deploys or endpoints"
        ),
    )


def apply(
    store: EngineStore,
    core: DeployReads,
    spec: Schedule,
    *,
    now: datetime,
    actor: str,
    expected_version: int | None = None,
    source: str = "<schedule>",
) -> ScheduleRecord:
    """Check the targets, then create or update ``spec`` (nothing is written on any problem)."""
    problems = target_problems(core, spec)
    if problems:
        raise SpecInvalid(problems, source=source)
    return store.apply_schedule(spec, now=now, actor=actor, expected_version=expected_version)


def delete(
    store: EngineStore,
    name: str,
    *,
    now: datetime,
    actor: str,
    expected_version: int | None = None,
    force: bool = False,
) -> Deleted:
    """Delete schedule ``name`` (claims released, deploys left as they are).

    Refused with ``ScheduleInFlight`` (409) while steps are in flight, unless ``force``.
    """
    return store.delete_schedule(
        name, now=now, actor=actor, expected_version=expected_version, force=force
    )


def apply_now(engine: Engine, store: EngineStore, name: str, *, actor: str) -> PassReport:
    """A pass for schedule ``name`` now (raises ``Busy`` when another pass holds the lock)."""
    record = store.get_schedule(name)
    report = engine.run_pass(schedule=name, trigger="apply_now")
    store.add_audit(
        at=report.at,
        actor=actor,
        action="apply_now",
        kind="schedule",
        name=name,
        scope=record.spec.scope,
        version=record.version,
        detail=_counts(report),
    )
    return report


def _counts(report: PassReport) -> dict[str, int]:
    return {"plans": sum(len(s.opened) for s in report.schedules), "steps": len(report.steps)}


def pass_summary(report: PassReport) -> dict[str, Any]:
    """A pass report as a JSON-able document (the API's answer to apply-now)."""
    return {
        "at": report.at.isoformat(),
        "gate": report.gate,
        "schedules": [
            {
                "schedule": o.schedule,
                "version": o.version,
                "opened": len(o.opened),
                "refused": len(o.refused),
            }
            for o in report.schedules
        ],
        "steps": [
            {
                "target": s.deploy_id,
                "state": s.state,
                "phase": s.phase,
                "reason": s.reason,
                "fix": s.fix,
            }
            for s in report.steps
        ],
    }


def status_rows(store: EngineStore, name: str | None) -> list[dict[str, Any]]:
    """Per target: phase, reason, fix, interval, intent and last action (``status --format
    json``)."""
    rows: list[dict[str, Any]] = []
    for s in store.list_status(name):
        last = store.get_action(s.last_action) if s.last_action else None
        rows.append(
            {
                "schedule": s.schedule,
                "target": s.deploy_id,
                "phase": s.phase,
                "reason": s.reason,
                "fix": s.fix,
                "interval_start": s.interval_start.isoformat() if s.interval_start else None,
                "interval_end": s.interval_end.isoformat() if s.interval_end else None,
                "intent": s.intent,
                "last_action": None
                if last is None
                else {"step": last.step, "state": last.state, "reason": last.reason},
                "since": s.phase_since.isoformat(),
            }
        )
    return rows
