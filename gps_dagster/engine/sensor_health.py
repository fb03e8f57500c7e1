"""Which of the sensors the product relies on are off, and what the warning says.

Stopping ``gps_capacity_wait`` looks harmless (the demo's swaps still go through: the admit op
watches 10 s) and is not: an acquire that waits longer is never launched. Dagster says nothing
about it, so the product does, from the states the orchestrator stores: RUNNING / STOPPED are
an operator's action, anything else defers to the definition's default status.
"""

# Decisions embodied here (docs/decisions.md):
# * “A stopped GPS sensor is said, in yellow”
# * “The Dagster layer translates; the engine decides what a tick launches and says”
# * “The ops' and ticks' remaining rules are the engine's; one factory per kind of op”

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

RECONCILE = "gps_reconcile"
BOUNDARY = "gps_boundaries"
CAPACITY_WAIT = "gps_capacity_wait"
APPLY_NOW = "gps_apply_now"
PREARM = "gps_prearm"

WATCHED: Mapping[str, str] = {
    RECONCILE: "no sweep: a schedule applied or edited since the code location "
    "loaded, plans never launched or left pending, and deploy status changes are not served "
    "(reported by gps_boundaries, since the stopped sensor cannot say it)",
    CAPACITY_WAIT: "an acquire that waits for capacity longer than the plan "
    "run's 10 s watch is never launched: the deploy stays down after its release",
    BOUNDARY: "boundaries no cron expresses (one-shot windows, DST-shifted ends) "
    "and follow-ups of steps in flight are served only by the next reconcile page",
    PREARM: "no run is launched ahead of a boundary: each swap waits for a run "
    "process to boot after the boundary",
    APPLY_NOW: "`gps-dagster apply-now NAME --queue` requests are never answered",
}
"""The sensors whose stop is reported, and what stops with each."""


def stopped(stored: Mapping[str, str], declared_off: Mapping[str, bool]) -> list[str]:
    """The watched sensors a code location defines (``declared_off``: whether its default
    status is STOPPED) that are off: ``stored`` STOPPED, or not RUNNING and declared off."""
    out = []
    for name in WATCHED:
        if name not in declared_off:
            continue
        status = stored.get(name, "DECLARED_IN_CODE")
        if status == "STOPPED" or (status != "RUNNING" and declared_off[name]):
            out.append(name)
    return out


def reports(stopped: Sequence[str], reported: str | None, *, stand_in: bool) -> bool:
    """Whether a tick reports the automation state: always, except for the stand-in (the
    boundary sensor), which reports only while ``gps_reconcile`` is stopped (it cannot report
    its own stop) or was when last reported (the all-clear)."""
    return not stand_in or RECONCILE in stopped or bool(reported)


def warning_text(stopped: Sequence[str], waiting: Iterable[str] = ()) -> str:
    """One line per stopped sensor: what stops with it, the deploys it leaves waiting, the fix."""
    lines = []
    for name in stopped:
        line = f"{name} is stopped: {WATCHED[name]}"
        who = sorted(set(waiting)) if name == CAPACITY_WAIT else []
        if who:
            line += f" (waiting for capacity now: {', '.join(who)})"
        lines.append(
            f"{line}. Fix: turn it on (Automation → {name}, or `dagster sensor start {name}`)"
        )
    return "; ".join(lines)


def check_text(warning: str) -> str:
    """The ``automation`` check's description: the warning, or that every sensor is on."""
    return (warning or "every GPS sensor is on")[:900]
