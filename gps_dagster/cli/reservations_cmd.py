"""``gps-dagster reservations …``: the reservation ledger from the command line.

An edge of the system: it opens the store of the settings (``GPS_DB_URL``,
default SQLite under ``var/``) and stamps writes with the runtime's clock
(``GPS_CLOCK``, else the wall clock) unless ``--at`` is given. Exit codes
follow the main CLI: 0 ok, 1 refused or invalid input (field path, reason and
fix printed, never a traceback), 2 usage error.
The main CLI mounts ``reservations_group``; this module does not import it.
"""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import sqlalchemy as sa

from gps_dagster.cli import wiring
from gps_dagster.cli.inputs import IsoDateTime, fail
from gps_dagster.domain.errors import FieldError, SpecInvalid
from gps_dagster.domain.gps.billing import usage
from gps_dagster.domain.gps.errors import ReservationError
from gps_dagster.domain.gps.reservations import Reservation, format_mib, parse_reservation_spec
from gps_dagster.runtime import Settings, build_clock, db_url
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.reservations import ReservationRepository, ensure_tables

T = TypeVar("T")


INSTANT = IsoDateTime()


def _fail(reason: str, message: str, fix: str) -> NoReturn:
    click.echo(f"error: {reason}: {message}\n  fix: {fix}", err=True)
    sys.exit(1)


@contextmanager
def _repository(settings: Settings) -> Iterator[ReservationRepository]:
    """The ledger of the configured store; every refusal becomes exit 1 with a fix."""
    try:
        engine = create_db_engine(db_url(settings))
        ensure_tables(engine)
    except sa.exc.SQLAlchemyError as exc:
        _fail(
            "store_unavailable",
            f"cannot open the store ({type(exc).__name__})",
            "check GPS_DB_URL and that the database is up",
        )
    try:
        yield ReservationRepository(engine)
    except SpecInvalid as exc:
        fail(exc)
    except ReservationError as exc:
        _fail(exc.reason, str(exc).split("; ")[0], exc.fix)
    except sa.exc.SQLAlchemyError as exc:
        _fail(
            "store_error",
            f"the store refused the operation ({type(exc).__name__})",
            "retry; if it persists check the database",
        )
    finally:
        engine.dispose()


def _run(action: Callable[[ReservationRepository], T]) -> T:
    with _repository(wiring.settings()) as repo:
        return action(repo)


def _write(action: Callable[[ReservationRepository, datetime], T], at: datetime | None) -> T:
    """Run a write stamped ``at``, or at the runtime clock's now when ``--at`` is not given."""
    settings = wiring.settings()
    when = at if at is not None else build_clock(settings).now()
    with _repository(settings) as repo:
        return action(repo, when)


def _summary(r: Reservation) -> dict[str, Any]:
    return {
        "id": r.id,
        "state": r.state.value,
        "generation": r.generation,
        "node": r.node,
        "namespace": r.namespace,
        "mode": r.mode.value,
        "gpus": list(r.gpu_uuids),
        "gpu_memory_mib": r.gpu_memory_mib,
        "headroom": str(r.headroom),
        "budget_mib": r.budget_mib,
        "created_at": r.created_at.isoformat(),
    }


_FORMAT = click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
_ACTOR = click.option(
    "--actor", default=None, help="Who makes the change (audit log); default: the OS user."
)
_AT = click.option(
    "--at", "at", type=INSTANT, default=None, help="Time of the change (RFC 3339); default: now."
)


def _actor(actor: str | None) -> str:
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


@click.group("reservations", context_settings={"help_option_names": ["-h", "--help"]})
def reservations_group() -> None:
    """GPU reservations (R-GPS): ledger, re-pin, usage."""


@reservations_group.command("list")
@click.option("--all", "include_released", is_flag=True, help="Include RELEASED reservations.")
@_FORMAT
def list_cmd(include_released: bool, fmt: str) -> None:
    """List reservations."""
    rows = _run(lambda repo: repo.list(include_released=include_released))
    if fmt == "json":
        click.echo(json.dumps([_summary(r) for r in rows], indent=2))
        return
    if not rows:
        click.echo(
            "no reservation in the ledger: create one with `gps-dagster reservations create "
            "-f examples/gpu42-reservation.yaml` (or a simulated pool file with a "
            "`reservations:` section, e.g. examples/gpu42-pool.yaml)"
        )
        return
    click.echo(
        f"{'ID':<28} {'STATE':<10} {'GEN':>4} {'NODE':<20} {'MODE':<12} {'GPUS':>4} "
        f"{'BUDGET MiB':>12}"
    )
    for r in rows:
        budget = format_mib(r.budget_mib) if r.mode.value == "time_sliced" else "-"
        click.echo(
            f"{r.id:<28} {r.state.value:<10} {r.generation:>4} {r.node:<20} {r.mode.value:<12} "
            f"{r.gpu_count:>4} {budget:>12}"
        )


@reservations_group.command("show")
@click.argument("reservation_id")
@_FORMAT
def show_cmd(reservation_id: str, fmt: str) -> None:
    """Show one reservation with its state history and audit log."""

    def read(repo: ReservationRepository) -> dict[str, Any]:
        doc = _summary(repo.get(reservation_id))
        doc["history"] = [
            {"at": at.isoformat(), "state": s.value} for at, s in repo.history(reservation_id)
        ]
        doc["audit"] = [
            {
                "at": e.at.isoformat(),
                "actor": e.actor,
                "action": e.action,
                "old_generation": e.old_generation,
                "new_generation": e.new_generation,
                "old": e.old_value,
                "new": e.new_value,
            }
            for e in repo.audit(reservation_id)
        ]
        return doc

    doc = _run(read)
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2))
        return
    for key in (
        "id",
        "state",
        "generation",
        "node",
        "namespace",
        "mode",
        "gpu_memory_mib",
        "headroom",
        "budget_mib",
        "created_at",
    ):
        click.echo(f"{key + ':':<16}{doc[key]}")
    click.echo("gpus:")
    for u in doc["gpus"]:
        click.echo(f"  - {u}")
    click.echo("history:")
    for h in doc["history"]:
        click.echo(f"  {h['at']}  {h['state']}")
    click.echo("audit:")
    for a in doc["audit"]:
        click.echo(
            f"  {a['at']}  {a['actor']}  {a['action']}  gen {a['old_generation']} -> "
            f"{a['new_generation']}  {json.dumps(a['old'])} -> {json.dumps(a['new'])}"
        )


@reservations_group.command("create")
@click.option(
    "-f",
    "--file",
    "path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Reservation file (YAML or JSON).",
)
@_ACTOR
@_AT
def create_cmd(path: str, actor: str | None, at: datetime | None) -> None:
    """Create a reservation from a file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(
            SpecInvalid(
                [FieldError("", "unreadable_file", f"cannot read the file: {exc}")], source=path
            )
        )
    try:
        spec = parse_reservation_spec(text, source=path)
    except SpecInvalid as exc:
        fail(exc)
    r = _write(lambda repo, when: repo.create(spec, at=when, actor=_actor(actor)), at)
    budget = f", budget {format_mib(r.budget_mib)} MiB" if r.mode.value == "time_sliced" else ""
    click.echo(
        f"created {r.id} (generation {r.generation}): {r.gpu_count} GPU(s) on {r.node}, "
        f"{r.mode.value}{budget}"
    )


@reservations_group.command("release")
@click.argument("reservation_id")
@_ACTOR
@_AT
def release_cmd(reservation_id: str, actor: str | None, at: datetime | None) -> None:
    """Release a reservation: billing stops and its GPUs return to the pool."""
    r = _write(lambda repo, when: repo.release(reservation_id, at=when, actor=_actor(actor)), at)
    click.echo(f"{r.id} is {r.state.value}")


@reservations_group.command("repin")
@click.argument("reservation_id")
@click.option(
    "--gpus",
    "gpus",
    required=True,
    multiple=True,
    help="New GPU UUID(s); repeat or comma-separate.",
)
@click.option(
    "--generation",
    type=click.IntRange(min=1),
    required=True,
    help="The generation you read (fence).",
)
@_ACTOR
@_AT
def repin_cmd(
    reservation_id: str,
    gpus: tuple[str, ...],
    generation: int,
    actor: str | None,
    at: datetime | None,
) -> None:
    """Move a reservation to other GPUs, fenced by generation (R-GPS-9)."""
    uuids = [u.strip() for item in gpus for u in item.split(",") if u.strip()]
    r = _write(
        lambda repo, when: repo.repin(
            reservation_id, uuids, expected_generation=generation, at=when, actor=_actor(actor)
        ),
        at,
    )
    click.echo(f"{r.id} re-pinned to {', '.join(r.gpu_uuids)} (generation {r.generation})")


@reservations_group.command("usage")
@click.option(
    "--from", "start", type=INSTANT, required=True, help="Range start, RFC 3339 with offset."
)
@click.option(
    "--to", "end", type=INSTANT, required=True, help="Range end (exclusive), RFC 3339 with offset."
)
@_FORMAT
def usage_cmd(start: datetime, end: datetime, fmt: str) -> None:
    """Billed reservation-hours and GPU-hours over [--from, --to)."""
    if end <= start:
        raise click.BadParameter("--to must be after --from", param_hint="--to")

    def read(repo: ReservationRepository) -> list[dict[str, Any]]:
        out = []
        for r in repo.list():
            u = usage(r, repo.history(r.id), start=start, end=end)
            out.append(
                {
                    "id": r.id,
                    "gpus": r.gpu_count,
                    "billed_hours": str(u.billed_hours),
                    "gpu_hours": str(u.gpu_hours),
                }
            )
        return out

    rows = _run(read)
    if fmt == "json":
        click.echo(
            json.dumps(
                {"from": start.isoformat(), "to": end.isoformat(), "reservations": rows}, indent=2
            )
        )
        return
    click.echo(f"{'ID':<28} {'GPUS':>4} {'BILLED H':>14} {'GPU-H':>14}")
    for row in rows:
        click.echo(
            f"{row['id']:<28} {row['gpus']:>4} {row['billed_hours']:>14} {row['gpu_hours']:>14}"
        )
