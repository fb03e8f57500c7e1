"""Assets: reservations (one dynamic partition each, with the two GPS checks, "no
reservation" until there are some) and the hourly timeline, whose single-run backfill policy
computes a week of plans in one run (``--partition-range``); their housekeeping jobs and
schedules. Deploy assets: ``deploys.py``.
"""

# Decisions embodied here (docs/decisions.md):
# * “Asset checks cover the whole ledger”
# * “The timeline plans against the runtime's pool”

import warnings
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster import AssetCheckExecutionContext, AssetExecutionContext

from gps_dagster.dagster_defs import names
from gps_dagster.domain.timeline import gpu_summary

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime

TIMELINE_START = "2026-01-01-00:00"

reservation_partitions = dg.DynamicPartitionsDefinition(name=names.RESERVATION_PARTITIONS)
hourly = dg.HourlyPartitionsDefinition(start_date=TIMELINE_START, timezone="UTC")


@dg.asset(
    name=names.RESERVATIONS_ASSET,
    partitions_def=reservation_partitions,
    required_resource_keys={"gps"},
    group_name="gps",
    description="One GPU reservation of the ledger (node, GPU UUIDs, mode, budget, generation).",
)
def gpu_reservations(context: AssetExecutionContext) -> dg.MaterializeResult[Any]:
    runtime = context.resources.gps.get_runtime()
    rsv = runtime.intents.ledger().get(context.partition_key)
    return dg.MaterializeResult(
        metadata={
            "node": rsv.node,
            "gpus": len(rsv.gpu_uuids),
            "gpu_uuids": ", ".join(rsv.gpu_uuids),
            "mode": str(rsv.mode),
            "budget_mib": rsv.budget_mib,
            "state": str(getattr(rsv, "state", "")),
            "generation": int(getattr(rsv, "generation", 0)),
        }
    )


def _ledger_check(context: AssetCheckExecutionContext, which: str) -> dg.AssetCheckResult:
    """One GPS check on every reservation of the ledger (``Intents.ledger_verdict``): failed
    when any reservation fails; each one's outcome in the metadata, so the UI shows which one
    failed, its figures and its fix text."""
    verdict = context.resources.gps.get_runtime().intents.ledger_verdict(which)
    metadata = {
        k: dg.MetadataValue.json(v) if isinstance(v, dict) else v
        for k, v in verdict.metadata.items()
    }
    return dg.AssetCheckResult(
        passed=verdict.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=verdict.description,
        metadata=metadata,
    )


@dg.asset_check(
    asset=gpu_reservations,
    name=names.CHECK_PLACEMENT,
    required_resource_keys={"gps"},
    description="Placement witness: every bound pod got GPUs of its reservation (R-GPS-7).",
)
def placement_check(context: AssetCheckExecutionContext) -> dg.AssetCheckResult:
    return _ledger_check(context, names.CHECK_PLACEMENT)


@dg.asset_check(
    asset=gpu_reservations,
    name=names.CHECK_OVERCOMMIT,
    required_resource_keys={"gps"},
    description="Admission: no time-sliced reservation over its VRAM budget (R-GPS-3).",
)
def overcommit_check(context: AssetCheckExecutionContext) -> dg.AssetCheckResult:
    return _ledger_check(context, names.CHECK_OVERCOMMIT)


def timeline_summary(runtime: "Runtime", start: datetime, end: datetime) -> dict[str, Any]:
    """Desired GPUs against capacity over ``[start, end)`` for every schedule in the store."""
    specs = [r.spec for r in runtime.intents.schedules()]
    return gpu_summary(specs, runtime_pool(runtime), start, end)


def runtime_pool(runtime: "Runtime") -> Any:
    """The pool spec of the runtime (capacity, GPUs per deploy): ``Runtime.pool``, the one the
    runtime was built with — never re-read from the environment (another process's pool file)."""
    pool = getattr(runtime, "pool", None)
    if pool is not None:
        return pool
    backend = getattr(getattr(runtime, "settings", None), "backend", "this")
    raise dg.Failure(
        description=f"schedule_timeline needs the pool's layout (capacity, GPUs per deploy), which "
        f"the {backend} backend does not provide: materialise it on the sim backend "
        "(GPS_BACKEND=sim, GPS_POOL_FILE), or run `gps-dagster timeline FILE --pool POOL`",
    )


def _timeline(context: AssetExecutionContext) -> dg.MaterializeResult[Any]:
    window = context.partition_time_window
    summary = timeline_summary(context.resources.gps.get_runtime(), window.start, window.end)
    hours = int((window.end - window.start) / timedelta(hours=1))
    context.log.info(
        f"timeline {window.start} → {window.end}: {hours} hour(s), "
        f"peak {summary['peak_desired_gpus']}/{summary['capacity']} GPUs"
    )
    return dg.MaterializeResult(
        metadata={
            "hours": hours,
            "capacity": summary["capacity"],
            "peak_desired_gpus": summary["peak_desired_gpus"],
            "overcommit_segments": summary["overcommit_segments"],
            "timeline": dg.MetadataValue.json(summary["schedules"]),
        }
    )


with warnings.catch_warnings():
    # backfill_policy is "beta" in Dagster 1.13; a single-run backfill is what R-DAG-5 needs.
    warnings.simplefilter("ignore", dg.BetaWarning)
    schedule_timeline = dg.asset(
        name=names.TIMELINE_ASSET,
        partitions_def=hourly,
        backfill_policy=dg.BackfillPolicy.single_run(),
        required_resource_keys={"gps"},
        group_name="gps",
        description="Desired GPUs per schedule against pool capacity, per hour (R-EVAL-5).",
    )(_timeline)


def build_automation(
    schedule_status: dg.DefaultScheduleStatus,
    deploy_checks: Sequence[dg.AssetChecksDefinition] = (),
) -> tuple[list[Any], list[Any]]:
    """The timeline and reservation-check jobs with their schedules, and the ``gps_deploy_checks``
    job (every deploy's phase check, run from the UI or the CLI; sensors report them anyway)."""
    timeline_job = dg.define_asset_job(names.TIMELINE_JOB, selection=[schedule_timeline])
    checks_job = dg.define_asset_job(
        names.CHECKS_JOB, selection=dg.AssetSelection.checks(placement_check, overcommit_check)
    )
    jobs: list[Any] = [timeline_job, checks_job]
    if deploy_checks:
        jobs.append(
            dg.define_asset_job(
                names.DEPLOY_CHECKS_JOB, selection=dg.AssetSelection.checks(*deploy_checks)
            )
        )
    schedules = [
        dg.build_schedule_from_partitioned_job(
            timeline_job,
            name=names.TIMELINE_SCHEDULE,
            minute_of_hour=1,
            default_status=schedule_status,
        ),
        dg.ScheduleDefinition(
            name=names.CHECKS_SCHEDULE,
            job=checks_job,
            cron_schedule="*/10 * * * *",
            default_status=schedule_status,
        ),
    ]
    return jobs, schedules


def reservation_events(
    runtime: "Runtime", reservation_ids: list[str], seen: dict[str, str]
) -> list[dg.AssetObservation | dg.AssetCheckEvaluation]:
    """What the UI shows of each reservation between materialisations (R-DAG-4): for those
    whose members or verdicts changed since ``seen``, an observation of its partition and the
    two checks' verdicts (the reservation sensor's, not waiting for the check schedule)."""
    out: list[dg.AssetObservation | dg.AssetCheckEvaluation] = []
    for view in runtime.intents.reservation_changes(reservation_ids, seen):
        rsv, members = view.reservation, view.members
        out.append(
            dg.AssetObservation(
                asset_key=names.RESERVATIONS_ASSET,
                partition=rsv.id,
                metadata={
                    "node": rsv.node,
                    "gpu_uuids": ", ".join(rsv.gpu_uuids),
                    "mode": str(rsv.mode.value),
                    "budget_mib": rsv.budget_mib,
                    "members": dg.MetadataValue.json(members),
                    "started": ", ".join(
                        m["deploy_id"] for m in members if m["state"] != "STOPPED"
                    ),
                },
            )
        )
        out += [
            dg.AssetCheckEvaluation(
                asset_key=dg.AssetKey(names.RESERVATIONS_ASSET),
                check_name=check,
                passed=v.passed,
                severity=dg.AssetCheckSeverity.ERROR,
                description=f"{rsv.id}: {v.description}"[:900],
                partition=rsv.id,  # one verdict per reservation: another's never overwrites it
                metadata={k: str(x) for k, x in v.metadata.items()},
            )
            for check, v in view.verdicts.items()
        ]
    return out
