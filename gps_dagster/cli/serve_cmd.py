"""``gps-dagster serve``: the schedule API and the timeline page on uvicorn.

An edge: it builds the runtime (store, core, engine, clock) the other commands use, through the
composition root, wraps it in ``ApiServices`` and serves ``gps_dagster.api`` on uvicorn. With
``GPS_DAGSTER_URL`` set, a schedule change asks the Dagster webserver to reload its code location
(R-DAG-1) in the background, as ``schedules apply`` does.
"""

# Decisions embodied here (docs/decisions.md):
# * “The API is FastAPI on uvicorn, one process”

from __future__ import annotations

import os
import socket
import threading
from typing import Any

import click

from gps_dagster.cli import wiring
from gps_dagster.cli.wiring import core_options
from gps_dagster.engine.config import EngineConfig
from gps_dagster.runtime import Settings


def build_services(settings: Settings) -> Any:
    """``ApiServices`` over the runtime of ``settings`` (the composition root's clock)."""
    from gps_dagster.api import ApiServices

    holder = f"api@{socket.gethostname()}:{os.getpid()}"
    rt = wiring.runtime(settings, config=EngineConfig(holder=holder))
    return ApiServices(
        store=rt.store,
        core=rt.core,
        engine=rt.engine,
        clock=rt.clock,
        pool=rt.pool,
        on_schedule_change=_reload_in_background,
    )


def _reload_in_background(_name: str) -> None:
    url = os.environ.get("GPS_DAGSTER_URL")
    if not url:
        return

    def reload() -> None:
        from gps_dagster.cli.dagster_client import reload_code_location

        try:
            reload_code_location(url, os.environ.get("GPS_DAGSTER_LOCATION", "definitions.py"))
        except (OSError, RuntimeError) as exc:
            click.echo(f"warning: dagster code location reload failed ({exc})", err=True)

    threading.Thread(target=reload, name="gps-dagster-reload", daemon=True).start()


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--secure-cookies",
    is_flag=True,
    help="Mark the page's session cookie Secure (serving behind TLS or an ingress).",
)
@click.option(
    "--forwarded-allow-ips",
    default=None,
    metavar="IPS",
    help="Proxies (e.g. the ingress) whose X-Forwarded-Proto/For are trusted (uvicorn's option).",
)
@core_options
def serve(
    host: str, port: int, secure_cookies: bool, forwarded_allow_ips: str | None, settings: Settings
) -> None:
    """Serve the schedule API (/admin, /api/v1/cmp/projects/…), /docs and the timeline page /ui."""
    import uvicorn

    from gps_dagster.api import create_app

    services = build_services(settings)
    services.secure_cookies = secure_cookies
    click.echo(
        f"gps-dagster serve: http://{host}:{port}  (API docs /docs, timeline /ui/)", err=True
    )
    uvicorn.run(
        create_app(services),
        host=host,
        port=port,
        log_level="info",
        timeout_graceful_shutdown=5,
        proxy_headers=True,
        forwarded_allow_ips=forwarded_allow_ips,
    )
