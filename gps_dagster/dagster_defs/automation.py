"""Housekeeping automation: the hourly timeline and the periodic GPS asset checks.

* ``gps_timeline_hourly`` materialises the ``schedule_timeline`` partition of
  the hour that just ended (``build_schedule_from_partitioned_job``).
* ``gps_deploy_checks`` runs the phase check of every deploy asset (on demand).
* ``gps_reservation_checks`` runs the two asset checks of
  ``gpu_reservations`` every 10 minutes, without materialising the asset, so
  the UI always shows a fresh verdict (``no reservation`` until there are some).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.assets import (
    overcommit_check,
    placement_check,
    schedule_timeline,
)


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
