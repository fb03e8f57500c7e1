"""What an orchestrator's tick says: the lines and skip reasons of the sensors and schedules.

A tick that launches nothing says why, and a tick that served due work says what each
schedule did. The wording is the product's (operators read it in the UI's tick history), so it
is made here from the engine's own reports and the orchestrator only shows it; these are pure
functions of what the engine answered.
"""

# Decisions embodied here (docs/decisions.md):
# * “The Dagster layer translates; the engine decides what a tick launches and says”

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from gps_dagster.engine.reports import PassReport, PlanRef, StepRef

STORM_LINES = 20
"""Above this many schedules served in one tick, the skip reason / log gives one summary line."""
RELEASE_FIRST = "release_first"


def launchable(plans: Sequence[PlanRef], *, release_first_only: bool = False) -> list[PlanRef]:
    """The plans a run is needed for (a plan without steps only records that the engine
    processed an interval already satisfied); ``release_first_only``: without the
    acquire-first ones (a launcher of one job leaves them to the reconcile sensor)."""
    out = [p for p in plans if p.release_steps or p.acquire_steps]
    return [p for p in out if p.order == RELEASE_FIRST] if release_first_only else out


def swap_line(release: Iterable[StepRef], acquire: Iterable[StepRef], *, reverse: bool) -> str:
    """``release A, B → acquire C`` (``reverse``: acquire first, as the run takes them), a
    run's one line in the Runs list."""
    freed = ", ".join(s.deploy_id for s in release)
    taken = ", ".join(s.deploy_id for s in acquire)
    parts = [p for p in (freed and f"release {freed}", taken and f"acquire {taken}") if p]
    return " → ".join(reversed(parts) if reverse else parts)[:250]


def nothing_due(at: datetime | None) -> str:
    """The line of a tick that found no schedule due (``at``: the next pass due)."""
    when = f"next pass due at {at.isoformat()}" if at else "no schedule has a pass due"
    return f"nothing due ({when})"


def served_lines(report: PassReport, plans: int) -> list[str]:
    """A line per schedule that opened, refused or failed; one line for those with nothing new
    (their intent met, or a follow-up of steps in flight); one summary line in a storm."""
    outcomes = report.schedules
    quiet = [o.schedule for o in outcomes if not (o.errors or o.opened or o.refused)]
    news = [o for o in outcomes if o.errors or o.opened or o.refused]
    if len(news) > STORM_LINES:
        failed = f", {len(report.errors)} failed" if report.errors else ""
        return [f"{len(outcomes)} schedule(s) due: {plans} new plan(s){failed}"]
    lines = []
    for o in news:
        if o.errors:
            lines.append(f"{o.schedule}: failed ({'; '.join(o.errors)[:200]})")
        elif o.opened:
            lines.append(f"{o.schedule}: {len(o.opened)} plan(s)")
        else:
            lines.append(f"{o.schedule}: {len(o.refused)} target(s) refused by preflight")
    if quiet:
        more = ", …" if len(quiet) > 5 else ""
        lines.append(
            f"{len(quiet)} schedule(s) due, no new plan (intent met, or steps in flight): "
            f"{', '.join(quiet[:5])}{more}"
        )
    return lines


def reconcile_skip(changed: int) -> str:
    """The reconcile sensor's skip reason; ``changed``: deploy status changes it recorded."""
    tail = f"; {changed} deploy status change(s) recorded" if changed else ""
    return "pass done: no new intent interval and no plan left pending — nothing to launch" + tail


def capacity_skip(waiting: Sequence[str]) -> str:
    """The capacity-wait sensor's skip reason: the deploys whose steps wait for capacity."""
    if not waiting:
        return "no step waits for capacity"
    who = ", ".join(sorted(set(waiting)))
    return f"{len(waiting)} step(s) wait for capacity and none fits yet: {who}"[:900]


def with_warning(skip: str | None, warning: str | None) -> str | None:
    """A skip reason led by the automation warning, when there is one."""
    return f"WARNING: {warning} | {skip}"[:900] if skip and warning else skip


def reservation_tick(
    add: Sequence[str], drop: Sequence[str], observed: Sequence[str], have: int
) -> str:
    """What a reservation tick did, always (it never requests a run): with no text Dagster
    shows "Sensor function returned an empty result" on ticks that did record events."""
    parts = []
    if add:
        parts.append(f"partition(s) added: {', '.join(add)}")
    if drop:
        parts.append(f"partition(s) removed: {', '.join(drop)}")
    if observed:
        parts.append(f"members or verdicts changed, recorded: {', '.join(observed)}")
    if not parts:
        parts.append(f"{have} reservation partition(s) up to date, members and verdicts unchanged")
    return "; ".join(parts)[:900]


def late_tick(tick: datetime, served: str) -> str | None:
    """The ``late_tick`` line of a boundary tick that serves another boundary than its own
    (a daemon that was down fires the missed tick on restart; the engine serves now's)."""
    if served and datetime.fromisoformat(served) != tick:
        return f"tick of {tick.isoformat()} serves the boundary of {served}"
    return None


def boundary_skip(lines: Sequence[str]) -> str:
    """The boundary sensor's skip reason: what the due work served, a line per schedule."""
    return f"nothing to launch: {'; '.join(lines)}"[:900]


def minute_skip(lines: Sequence[str], upcoming: Iterable[tuple[datetime, str]]) -> str:
    """The every-minute schedule's skip reason: what it served and the next passes due."""
    nxt = ", ".join(f"{name} at {at.isoformat()}" for at, name in upcoming)
    return f"{'; '.join(lines)}. Next: {nxt or 'none'}"[:900]


def edge_skip(skipped: Sequence[str], edge_reason: str | None) -> str:
    """A boundary schedule's skip reason: the launches another origin owns, else why the
    edge needed no pass (``Intents.skipped_edge``), else that the intent did not change."""
    why = "; ".join(skipped) or edge_reason or "intent unchanged or already processed"
    return f"no transition to run ({why})"


BUSY_EDGE = "another pass holds the lock; the reconcile sensor follows up"


def apply_now_skip(log: Sequence[str]) -> str:
    """The apply-now sensor's skip reason: no request, or what each request got."""
    return "; ".join(log)[:900] if log else "no apply-now request"
