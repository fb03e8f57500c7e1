"""How every ``gps-dagster`` command reaches its settings, clock, store and core.

One place, the composition root (``gps_dagster.runtime``): the options below are overrides of
the settings it reads from the environment (``GPS_DB_URL``, ``GPS_POOL_FILE``, ``GPS_BACKEND``,
``GPS_KUBECONFIG``, ``GPS_KUBE_CONTEXT``, ``GPS_CLOCK``), and "now" is always the runtime's
clock — so ``GPS_CLOCK=<instant>`` runs any command at that instant (tests, what-ifs). A bad
setting exits 1 with the setting, the reason and the fix, never a traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from gps_dagster.cli.inputs import fail
from gps_dagster.domain.errors import GpsError, SpecInvalid
from gps_dagster.engine.config import EngineConfig
from gps_dagster.ports import Clock
from gps_dagster.runtime import (
    BACKENDS,
    Runtime,
    Settings,
    build_runtime,
    open_store,
    settings_from_env,
)
from gps_dagster.store import Store

F = TypeVar("F", bound=Callable[..., Any])

DB_OPTION = click.option(
    "--db", "db_url", default=None, help="Store URL (default: GPS_DB_URL or sqlite var/gps.sqlite)."
)
POOL_OPTION = click.option(
    "--pool",
    "pool",
    default=None,
    help=(
        "Simulated pool file (sim backend; default: GPS_POOL_FILE or the packaged seed pool, see "
        "`gps-dagster examples`)."
    ),
)
BACKEND_OPTIONS = (
    click.option(
        "--backend",
        type=click.Choice(BACKENDS),
        default=None,
        help="Where the deploys live (default: GPS_BACKEND or sim).",
    ),
    click.option(
        "--kubeconfig",
        default=None,
        help="Kubeconfig file (kubernetes; default: GPS_KUBECONFIG, KUBECONFIG or in-cluster).",
    ),
    click.option(
        "--context",
        "kube_context",
        default=None,
        help="Kubeconfig context (kubernetes; default: GPS_KUBE_CONTEXT or the current one).",
    ),
)


def store_options(fn: F) -> F:
    """``--db``; the command receives ``settings`` instead."""

    @functools.wraps(fn)
    def wrapper(*args: Any, db_url: str | None, **kwargs: Any) -> Any:
        return fn(*args, settings=settings(db_url=db_url), **kwargs)

    return DB_OPTION(wrapper)  # type: ignore[return-value]


def core_options(fn: F) -> F:
    """``--db --pool --backend --kubeconfig --context``; the command receives ``settings``."""

    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        db_url: str | None,
        pool: str | None,
        backend: str | None,
        kubeconfig: str | None,
        kube_context: str | None,
        **kwargs: Any,
    ) -> Any:
        chosen = settings(
            db_url=db_url,
            pool_file=pool,
            backend=backend,
            kubeconfig=kubeconfig,
            kube_context=kube_context,
        )
        return fn(*args, settings=chosen, **kwargs)

    decorated: Any = wrapper
    for option in (*reversed(BACKEND_OPTIONS), POOL_OPTION, DB_OPTION):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def settings(**overrides: Any) -> Settings:
    """The settings of this invocation (environment + the given options)."""
    try:
        return settings_from_env(**overrides)
    except SpecInvalid as exc:
        fail(exc)


def store(chosen: Settings) -> Store:
    return open_store(chosen)


def runtime(
    chosen: Settings, *, clock: Clock | None = None, config: EngineConfig | None = None
) -> Runtime:
    """The full runtime (store, core, engine, clock); a start-up problem exits 1."""
    try:
        return build_runtime(chosen, clock=clock, config=config)
    except SpecInvalid as exc:
        fail(exc)
    except GpsError as exc:
        refuse_start(exc)


def refuse_start(exc: GpsError) -> NoReturn:
    reason = getattr(exc, "reason", None) or type(exc).__name__
    fix = getattr(exc, "fix", None) or "check the settings (gps-dagster --help) and retry"
    click.echo(f"error: {reason} — {exc} — fix: {fix}", err=True)
    sys.exit(1)
