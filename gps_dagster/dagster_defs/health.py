"""Whether the sensors the product relies on are on (``engine/sensor_health.py``), read from
the instance: the reconcile sensor's status line and each schedule asset's ``automation``
check say it, in yellow; a stopped ``gps_reconcile`` is reported by ``gps_boundaries``.
"""

# Decisions embodied here (docs/decisions.md):
# * “A stopped GPS sensor is said, in yellow”

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg

from gps_dagster.dagster_defs import names
from gps_dagster.engine import sensor_health
from gps_dagster.engine.sensor_health import WATCHED, warning_text

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime


def stopped_sensors(
    instance: dg.DagsterInstance,
    defaults: Mapping[str, dg.DefaultSensorStatus],
    *,
    location: str | None = None,
    repository: str | None = None,
) -> list[str]:
    """The watched sensors that are off; ``location`` / ``repository`` narrow the stored
    states to this code location (a sensor of the same name elsewhere is another sensor)."""
    stored: dict[str, str] = {}
    for state in instance.all_instigator_state():  # Dagster's own enums are not public API
        sel = state.selector
        if state.instigator_type.value != "SENSOR" or location not in (None, sel.location_name):
            continue
        if repository is None or sel.repository_name == repository:
            stored[state.name] = state.status.value
    off = {n: s == dg.DefaultSensorStatus.STOPPED for n, s in defaults.items()}
    return sensor_health.stopped(stored, off)


def sensor_defaults(repository_def: Any) -> dict[str, dg.DefaultSensorStatus]:
    """Default status of each watched sensor a code location defines."""
    if repository_def is None:
        return {}
    return {s.name: s.default_status for s in repository_def.sensor_defs if s.name in WATCHED}


def automation(
    context: Any,
    runtime: Runtime,
    reported: str | None,
    schedule_keys: Mapping[str, dg.AssetKey],
    *,
    stand_in: bool = False,
) -> tuple[str, list[dg.AssetCheckEvaluation]]:
    """The warning for the stopped sensors of a sensor ``context``'s code location ("" when
    none), and the schedule assets' ``automation`` checks when it changed since ``reported``."""
    origin = getattr(context, "code_location_origin", None)
    defaults = sensor_defaults(getattr(context, "repository_def", None))
    stopped = stopped_sensors(
        context.instance,
        defaults,
        location=getattr(origin, "location_name", None),
        repository=getattr(context, "repository_name", None),
    )
    if not sensor_health.reports(stopped, reported, stand_in=stand_in):
        return "", []
    text = automation_warning(runtime, stopped)
    return text, ([] if text == reported else check_evaluations(schedule_keys, text))


def automation_warning(runtime: Runtime, stopped: Sequence[str]) -> str:
    """The warning for these stopped sensors ("" when none), naming the deploys left waiting."""
    return warning_text(stopped, runtime.intents.capacity_waiting()) if stopped else ""


def check_evaluations(
    schedule_keys: Mapping[str, dg.AssetKey], text: str
) -> list[dg.AssetCheckEvaluation]:
    """The ``automation`` check of every schedule asset: WARN with ``text``, or passed."""
    return [
        dg.AssetCheckEvaluation(
            asset_key=key,
            check_name=names.CHECK_AUTOMATION,
            passed=not text,
            severity=dg.AssetCheckSeverity.WARN,
            description=sensor_health.check_text(text),
            metadata={"schedule": schedule},
        )
        for schedule, key in sorted(schedule_keys.items())
    ]
