"""``gps-dagster apply-now``: a pass for one schedule now, or a request for the Dagster sensor."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from gps_dagster.cli import wiring
from gps_dagster.cli.inputs import cli_actor
from gps_dagster.cli.refusals import EXIT_BUSY, FROZEN_CLOCK_WRITES, refuse, refuse_frozen_clock
from gps_dagster.cli.wiring import core_options
from gps_dagster.engine import operations
from gps_dagster.engine.errors import Busy
from gps_dagster.engine.reports import StepOutcome
from gps_dagster.runtime import Runtime, Settings
from gps_dagster.store.errors import StoreError


@click.command("apply-now")
@click.argument("name")
@core_options
@click.option(
    "--queue", is_flag=True, help="Only record the request for the Dagster apply-now sensor."
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="With --queue: wait up to this many seconds for the sensor's answer.",
)
@FROZEN_CLOCK_WRITES
def apply_now(
    name: str, settings: Settings, queue: bool, wait_s: float, frozen_writes: bool
) -> None:
    """Run a pass for schedule NAME now (exit 3 when another pass holds the lock: 409 busy)."""
    if not queue:
        refuse_frozen_clock(
            settings,
            "apply-now",
            allowed=frozen_writes,
            what_if=f"`dry-run` of {name}'s file --at that instant",
        )
    rt = wiring.runtime(settings)
    try:
        name = rt.store.resolve_name(name)
        if queue:
            request = rt.store.request_apply_now(name, now=rt.clock.now())
            click.echo(
                f"apply-now request {request} recorded for '{name}': the gps_apply_now "
                "sensor serves it within ~5 s (its tick names the run, or why none was "
                "needed)"
            )
            _await_answer(rt, request, wait_s)
            return
        report = operations.apply_now(rt.engine, rt.store, name, actor=cli_actor())
    except Busy as exc:
        click.echo(f"409 busy: {exc}", err=True)
        sys.exit(EXIT_BUSY)
    except StoreError as exc:
        refuse(exc)
    for outcome in report.schedules:
        click.echo(
            f"{outcome.schedule} v{outcome.version}: opened {len(outcome.opened)} plan(s), "
            f"refused {len(outcome.refused)}"
        )
    for line in step_lines(report.steps):
        click.echo(line)


def _await_answer(rt: Runtime, request: int, wait_s: float) -> None:
    """Poll the request's answer (the sensor writes it); exit 3 on 409 busy."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        answer = rt.store.get_apply_now(request)
        if answer.state != "pending":
            click.echo(f"apply-now request {request}: {answer.state}: {answer.result}")
            if answer.state == "busy":
                sys.exit(EXIT_BUSY)
            return
        if time.monotonic() >= deadline:
            if wait_s:
                click.echo(
                    f"apply-now request {request}: no answer within {wait_s:.0f} s (is "
                    "Dagster running? `make demo`, or dagster dev -f definitions.py)",
                    err=True,
                )
                sys.exit(1)
            return
        time.sleep(0.5)


def step_lines(steps: Sequence[StepOutcome]) -> list[str]:
    """One line per step, with where the pass left it.

    A pass may report a step more than once (submitted, then observed in the
    same pass): the operator wants its last outcome, in the order steps came.
    """
    last: dict[str, StepOutcome] = {}
    for step in steps:
        last[step.step_id] = step  # a dict keeps the first position of a key and the last value
    return [_step_line(step) for step in last.values()]


def _step_line(step: StepOutcome) -> str:
    return f"  {step.deploy_id}: {step.state}{' (' + step.reason + ')' if step.reason else ''}"
