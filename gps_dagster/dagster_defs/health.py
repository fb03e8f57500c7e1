"""Whether the sensors the product relies on are on: a sensor turned off is said, in yellow.

An operator can stop any sensor in Automation. Stopping ``gps_capacity_wait`` looks harmless
(the swaps of the demo still go through: the plan run's admit op watches 10 s) and is not: an
acquire that waits longer is never launched, and the deploy stays down. Dagster says nothing
about it, so the product does: the reconcile sensor's status line names every stopped GPS
sensor and what stops with it, and each schedule asset's ``automation`` check turns yellow
(WARN) until it is on again. A stopped ``gps_reconcile`` cannot report itself: the boundary
sensor (``gps_boundaries``, ticking every few seconds) reports the same warning, once per
change, through its own cursor.

A sensor is stopped when the instance stores it STOPPED (the UI's toggle,
``dagster sensor stop``), or when nothing is stored and its definition's default status is
STOPPED (``InstigatorState`` in ``dagster/_core/scheduler/instigation.py``: RUNNING / STOPPED
are an operator's action, DECLARED_IN_CODE defers to the definition).
"""

# Decisions embodied here (docs/decisions.md):
# * “A stopped GPS sensor is said, in yellow”

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg

from gps_dagster.dagster_defs import names

if TYPE_CHECKING:
    from gps_dagster.runtime import Runtime

WATCHED: Mapping[str, str] = {
    names.RECONCILE_SENSOR: "no sweep: a schedule applied or edited since the code location "
    "loaded, plans never launched or left pending, and deploy status changes are not served "
    "(reported by gps_boundaries, since the stopped sensor cannot say it)",
    names.CAPACITY_WAIT_SENSOR: "an acquire that waits for capacity longer than the plan "
    "run's 10 s watch is never launched: the deploy stays down after its release",
    names.BOUNDARY_SENSOR: "boundaries no cron expresses (one-shot windows, DST-shifted ends) "
    "and follow-ups of steps in flight are served only by the next reconcile page",
    names.PREARM_SENSOR: "no run is launched ahead of a boundary: each swap waits for a run "
    "process to boot after the boundary",
    names.APPLY_NOW_SENSOR: "`gps-dagster apply-now NAME --queue` requests are never answered",
}
"""The sensors whose stop is reported, and what stops with each."""


def _selector(context: Any) -> tuple[str | None, str | None]:
    origin = getattr(context, "code_location_origin", None)
    location = getattr(origin, "location_name", None) if origin is not None else None
    return location, getattr(context, "repository_name", None)


def stopped_sensors(
    instance: dg.DagsterInstance,
    defaults: Mapping[str, dg.DefaultSensorStatus],
    *,
    location: str | None = None,
    repository: str | None = None,
) -> list[str]:
    """The watched sensors that are off: stored STOPPED, or nothing stored and declared off.

    ``location`` / ``repository`` narrow the stored states to this code location (a sensor
    of the same name in another location is another sensor)."""
    stored: dict[str, str] = {}
    for state in instance.all_instigator_state():  # Dagster's own enums are not public API
        if state.instigator_type.value != "SENSOR":
            continue
        sel = state.selector
        if location is not None and sel.location_name != location:
            continue
        if repository is not None and sel.repository_name != repository:
            continue
        stored[state.name] = state.status.value
    out = []
    for name in WATCHED:
        if name not in defaults:
            continue
        status = stored.get(name, "DECLARED_IN_CODE")
        declared_off = defaults[name] == dg.DefaultSensorStatus.STOPPED
        if status == "STOPPED" or (status != "RUNNING" and declared_off):
            out.append(name)
    return out


def sensor_defaults(repository_def: Any) -> dict[str, dg.DefaultSensorStatus]:
    """Default status of each watched sensor a code location defines."""
    if repository_def is None:
        return {}
    return {s.name: s.default_status for s in repository_def.sensor_defs if s.name in WATCHED}


def stopped_in(context: Any, instance: dg.DagsterInstance) -> list[str]:
    """The watched sensors of a sensor ``context``'s code location that are off."""
    location, repository = _selector(context)
    defaults = sensor_defaults(getattr(context, "repository_def", None))
    return stopped_sensors(instance, defaults, location=location, repository=repository)


def automation(
    context: Any,
    runtime: Runtime,
    reported: str | None,
    schedule_keys: Mapping[str, dg.AssetKey],
    *,
    stand_in: bool = False,
) -> tuple[str, list[dg.AssetCheckEvaluation]]:
    """The warning for the stopped sensors of a sensor ``context``'s code location ("" when
    none), and the schedule assets' ``automation`` check evaluations when it changed since
    ``reported``. ``stand_in`` (the boundary sensor): only once ``gps_reconcile`` is among the
    stopped (it cannot report its own stop) or was when last reported (the all-clear)."""
    stopped = stopped_in(context, context.instance)
    if stand_in and names.RECONCILE_SENSOR not in stopped and not reported:
        return "", []
    text = automation_warning(runtime, stopped)
    return text, ([] if text == reported else check_evaluations(schedule_keys, text))


def automation_warning(runtime: Runtime, stopped: Sequence[str]) -> str:
    """The warning for these stopped sensors ("" when none), naming the deploys left waiting."""
    if not stopped:
        return ""
    waiting = runtime.intents.capacity_waiting()
    return warning_text(stopped, waiting)


def warning_text(stopped: Sequence[str], waiting: Iterable[str] = ()) -> str:
    """One line per stopped sensor: what stops with it, the deploys it leaves waiting, the fix."""
    lines = []
    for name in stopped:
        line = f"{name} is stopped: {WATCHED[name]}"
        who = sorted(set(waiting)) if name == names.CAPACITY_WAIT_SENSOR else []
        if who:
            line += f" (waiting for capacity now: {', '.join(who)})"
        lines.append(
            f"{line}. Fix: turn it on (Automation → {name}, or `dagster sensor start {name}`)"
        )
    return "; ".join(lines)


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
            description=(text or "every GPS sensor is on")[:900],
            metadata={"schedule": schedule},
        )
        for schedule, key in sorted(schedule_keys.items())
    ]
