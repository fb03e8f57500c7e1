"""The asset graph's edges: schedule → its deploys, reservation → its members (R-DAG-8), so
the lineage reads as an operator thinks: this schedule decides these deploys, which share that
reservation. Members are read when the code location loads (a later one at the next reload).
A large fleet (``LEAN_ABOVE`` deploys) gets neither: a graph of 20,000 nodes is not read.
"""

# Decisions embodied here (docs/decisions.md):
# * “Schedule assets and reservation edges”

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from gps_dagster.dagster_defs import health, names
from gps_dagster.engine import sensor_health


def schedule_keys(schedules: Sequence[Any]) -> dict[str, dg.AssetKey]:
    """The asset key of every schedule: readable, collision-safe over the schedules given."""
    readable = names.readable(s.name for s in schedules)
    return {n: dg.AssetKey([names.SCHEDULE_KEY_PREFIX, r]) for n, r in readable.items()}


def schedule_specs(schedules: Sequence[Any], keys: Mapping[str, dg.AssetKey]) -> list[dg.AssetSpec]:
    """One asset per schedule, in the group of its deploys."""
    return [
        dg.AssetSpec(
            keys[spec.name],
            group_name=names.group_name(spec.name),
            description=f"Deploy schedule {spec.name} ({spec.timezone}): decides "
            f"{', '.join(spec.target_ids)}. Its automation check is yellow while a GPS sensor "
            "is stopped.",
            metadata={"schedule": spec.name, "targets": ", ".join(spec.target_ids)},
            kinds={"schedule"},
        )
        for spec in schedules
    ]


def upstream(
    schedule: str,
    deploy: str,
    keys: Mapping[str, dg.AssetKey],
    members: set[str],
) -> list[dg.AssetKey]:
    """A deploy's upstream assets: its schedule, and the reservations asset for a member."""
    out = [keys[schedule]] if schedule in keys else []
    if deploy in members:
        out.append(dg.AssetKey(names.RESERVATIONS_ASSET))
    return out


def build_automation_check(specs: Sequence[dg.AssetSpec]) -> dg.AssetChecksDefinition | None:
    """The executable ``automation`` check of every schedule asset ("Execute" in the UI): the
    sensors' state read from the instance, like the reconcile sensor reports it."""
    if not specs:
        return None
    check_specs = [
        dg.AssetCheckSpec(
            names.CHECK_AUTOMATION,
            asset=s.key,
            description="Yellow (warn) while a sensor the product relies on is stopped "
            "(gps_capacity_wait, gps_boundaries, gps_prearm, gps_apply_now).",
        )
        for s in specs
    ]

    @dg.multi_asset_check(
        name="gps_schedule_automation",
        specs=check_specs,
        can_subset=True,
        required_resource_keys={"gps"},
    )
    def automation(context):  # type: ignore[no-untyped-def]  # dagster reads the hint
        repo = context.op_execution_context.repository_def
        stopped = health.stopped_sensors(context.instance, health.sensor_defaults(repo))
        text = health.automation_warning(context.resources.gps.get_runtime(), stopped)
        for check_key in context.selected_asset_check_keys:
            yield dg.AssetCheckResult(
                asset_key=check_key.asset_key,
                check_name=names.CHECK_AUTOMATION,
                passed=not text,
                severity=dg.AssetCheckSeverity.WARN,
                description=sensor_health.check_text(text),
            )

    return automation
