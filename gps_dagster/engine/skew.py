"""Which clock is wrong when a pass finds itself behind a stored interval (R-PASS-14).

R-PASS-14 makes a pass plan nothing for a target whose stored interval is ahead of its clock.
Beyond ``max_clock_skew_s`` that is an anomaly, reported as a ``clock_skew`` event. The replica
that *notices* is not necessarily the one whose clock is wrong: with one replica 60 s fast, the
healthy ones are those that find themselves "behind" what it stored. Comparing the two clocks
with each other cannot tell which is wrong; comparing each with one shared reference can. The
reference is the database's clock (every replica reaches it; on PostgreSQL ``clock_timestamp()``):
each writer of an interval records its own offset against it at the write
(``target_status.interval_writer_offset_s``), and the pass that is behind measures its own.

* the writer's offset is beyond the bound, and further off than the observer's:
  ``clock_ahead``, naming the writer (the fast replica, or a ``GPS_CLOCK`` what-if left set);
* else the observer's offset is beyond the bound (below it): ``clock_behind``, naming itself;
* else neither clock is off against the database (a row written before writers were recorded,
  or by a clock corrected since): ``interval_ahead``, naming the writer when known.

When the observer could not measure its offset, the old reading stands: ``clock_behind``,
naming itself. The measurement is NTP's simplest form (the reference read between two reads of
the replica's clock, the midpoint taken), once per batch of schedules.
"""

# Decisions embodied here (docs/decisions.md):
# * “Clock skew: behind plans nothing, silently up to 5 s”
# * “A stored interval ahead of the clock: reported with its fix, cleared by one command or a new
#   version”
# * “`clock_skew` names the clock that is off against the database's”

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gps_dagster.ports import Clock
from gps_dagster.store.errors import StoreUnavailable

log = logging.getLogger(__name__)

CLOCK_SKEW_FIX = (
    "if this replica's clock is right, the stored interval was written by a clock ahead of it "
    "(a fast replica, or a GPS_CLOCK what-if left exported): fix that clock, then run "
    "`gps-dagster schedules clear-skew {schedule}` (or apply a new version of the schedule)"
)
FIXES = {
    "clock_ahead": "the clock of {holder} runs {offset_s:+.1f} s off the database's clock: fix "
    "it (NTP), then run `gps-dagster schedules clear-skew {schedule}` (or apply a new version "
    "of the schedule)",
    "clock_behind": "the clock of {holder} runs {offset_s:+.1f} s off the database's clock: "
    "fix it (NTP); nothing needs clearing, the stored interval is the right one",
}


@dataclass(frozen=True, slots=True)
class Blame:
    """The verdict on a skew: ``reason`` and the replica whose clock is off (None: unknown)."""

    reason: str
    holder: str | None
    offset_s: float | None


def blame(
    *,
    writer: str | None,
    writer_offset_s: float | None,
    observer: str,
    observer_offset_s: float | None,
    bound_s: float,
) -> Blame:
    """Whose clock is off (see the module docstring): pure, offsets against the database."""
    mine = observer_offset_s
    if (
        writer_offset_s is not None
        and writer_offset_s > bound_s
        and (mine is None or writer_offset_s >= abs(mine))
    ):
        return Blame("clock_ahead", writer, writer_offset_s)
    if mine is None or mine < -bound_s:
        return Blame("clock_behind", observer, mine)
    return Blame("interval_ahead", writer, writer_offset_s)


def fix_text(verdict: Blame, schedule: str) -> str:
    template = FIXES.get(verdict.reason) if verdict.offset_s is not None else None
    if template is None:
        return CLOCK_SKEW_FIX.format(schedule=schedule)
    return template.format(holder=verdict.holder, offset_s=verdict.offset_s, schedule=schedule)


def measure(clock: Clock, reference: Callable[[], datetime]) -> float | None:
    """``clock`` minus ``reference`` in seconds (midpoint of two reads around the reference);
    None when the reference cannot be read for another reason than an outage (logged)."""
    try:
        before = clock.now()
        ref = reference()
        after = clock.now()
    except StoreUnavailable:  # the database is down: the pass ends, the loop owns it
        raise
    except Exception as exc:  # an unmeasured offset only weakens a clock_skew verdict
        log.warning("clock offset against the database not measured: %s", exc)
        return None
    return ((before - ref).total_seconds() + (after - ref).total_seconds()) / 2


def detail(
    verdict: Blame,
    *,
    schedule: str,
    stored: datetime | None,
    now: datetime,
    skew_s: float,
    bound_s: float,
    writer: str | None,
    writer_offset_s: float | None,
    observer: str,
    observer_offset_s: float | None,
) -> dict[str, Any]:
    """The ``clock_skew`` event's detail: both instants, both replicas and the verdict."""
    return {
        "stored_interval_start": stored.isoformat() if stored else None,
        "replica_now": now.isoformat(),
        "behind_s": skew_s,
        "bound_s": bound_s,
        "holder": verdict.holder,
        "offset_s": verdict.offset_s,
        "writer": writer,
        "writer_offset_s": writer_offset_s,
        "observer": observer,
        "observer_offset_s": observer_offset_s,
        "fix": fix_text(verdict, schedule),
    }
