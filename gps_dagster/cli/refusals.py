"""How the engine's commands refuse: a store refusal as field path / reason / fix (exit 1, no
traceback), 409 busy as exit 3 (R-PASS-2), and a frozen ``GPS_CLOCK`` that would act on the
core (R-NEXT-4).

Exit codes of the engine's commands: 0 ok, 1 invalid input or a refusal (field path / reason /
fix, no traceback), 2 usage error, 3 busy (the 409 of R-PASS-2). These commands are an edge:
they read files and take their settings and their clock from the composition root
(``cli/wiring.py``: ``GPS_CLOCK`` runs them at a chosen instant), and hand everything below them
time as a parameter.
"""

# Decisions embodied here (docs/decisions.md):
# * “A stored interval ahead of the clock: reported with its fix, cleared by one command or a new
#   version”

from __future__ import annotations

import sys
from typing import NoReturn

import click

from gps_dagster.runtime import Settings
from gps_dagster.store.errors import StoreError

EXIT_BUSY = 3


def refuse(exc: StoreError) -> NoReturn:
    path = getattr(exc, "path", "") or ""
    click.echo(
        f"error: {path + ': ' if path else ''}{exc.reason} — {exc} — fix: {exc.fix}", err=True
    )
    sys.exit(1)


# -- a frozen clock never mutates the core unless asked (R-NEXT-4) ----------------------------

FROZEN_CLOCK_WRITES = click.option(
    "--frozen-clock-writes",
    "frozen_writes",
    is_flag=True,
    envvar="GPS_CLOCK_WRITES",
    help="With GPS_CLOCK set: act on the core at that instant anyway (tests, a simulated "
    "what-if); env GPS_CLOCK_WRITES=1.",
)


def refuse_frozen_clock(settings: Settings, command: str, *, allowed: bool, what_if: str) -> None:
    """Exit 1 when ``command`` would submit steps to the core on a GPS_CLOCK instant.

    An instant left exported after a what-if planned that instant's intent on the real deploys,
    and time only moves forward (R-PASS-14): the present then planned nothing (R-NEXT-4).
    """
    if settings.clock is None or allowed:
        return
    click.echo(
        f"error: GPS_CLOCK: clock_frozen — `{command}` would act on the core as if it were "
        f"{settings.clock.isoformat()}, not now — fix: unset GPS_CLOCK (or GPS_CLOCK=wall); "
        f"{what_if} shows what it would do without writing; --frozen-clock-writes "
        "(GPS_CLOCK_WRITES=1) acts anyway",
        err=True,
    )
    sys.exit(1)
