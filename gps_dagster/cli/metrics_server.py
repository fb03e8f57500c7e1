"""Prometheus metrics over HTTP, so that a ServiceMonitor has a target.

``GET /metrics`` answers the engine metrics (``engine.metrics.render``: computed from the
store, so every replica reports the same figures), ``GET /healthz`` whether the process serving
them is alive. Served by ``gps-dagster engine run --metrics-port`` (alive = its pass loop
ticked recently, a failed pass included: a database outage does not get the pod restarted) and
by the code location: ``definitions.py`` calls ``serve_from_env()``, which listens on
``GPS_METRICS_PORT`` when it is set (the chart sets it on the code-location container only).

A store error while rendering is a one-line ``503`` (never a traceback); a port that cannot be
bound in the code location is a warning: the gRPC server matters more than its metrics.
"""

# Decisions embodied here (docs/decisions.md):
# * “Metrics are served at /metrics in text format 0.0.4”

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from gps_dagster.domain.errors import FieldError, GpsError
from gps_dagster.runtime import SettingsInvalid, open_store, settings_from_env

log = logging.getLogger(__name__)

PORT_ENV, HOST_ENV = "GPS_METRICS_PORT", "GPS_METRICS_HOST"


class Heartbeat:
    """Alive while ``beat()`` was called within ``stale_after_s`` (monotonic time)."""

    def __init__(
        self, stale_after_s: float, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.stale_after_s, self._monotonic = stale_after_s, monotonic
        self._last = monotonic()

    def beat(self, *_: object) -> None:
        self._last = self._monotonic()

    def alive(self) -> bool:
        return self._monotonic() - self._last <= self.stale_after_s


class MetricsServer:
    """``/metrics`` and ``/healthz`` on a daemon thread (``ThreadingHTTPServer``)."""

    def __init__(
        self,
        render: Callable[[], str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        alive: Callable[[], bool] = lambda: True,
    ) -> None:
        self.render, self.alive = render, alive
        self._httpd = ThreadingHTTPServer((host, port), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="gps-metrics-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler(server: MetricsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._metrics()
            elif path == "/healthz":
                ok = server.alive()
                self._send(200 if ok else 503, "ok\n" if ok else "stalled\n", "text/plain")
            else:
                self._send(404, "not found: try /metrics or /healthz\n", "text/plain")

        def _metrics(self) -> None:
            try:
                body = server.render()
            except GpsError as exc:  # the store is down: say so, scrape fails, no traceback
                reason = getattr(exc, "reason", type(exc).__name__)
                self._send(503, f"metrics unavailable: {reason}: {exc}\n", "text/plain")
                return
            self._send(200, body, CONTENT_TYPE_PLAIN_0_0_4)  # every Prometheus 2.x and 3.x

        def _send(self, status: int, body: str, content_type: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("metrics http: " + format, *args)

    return Handler


def store_metrics(env: Mapping[str, str] | None = None) -> Callable[[], str]:
    """A renderer of the engine metrics of the store the settings name (not migrated here)."""
    from gps_dagster.engine.metrics import render

    store = open_store(settings_from_env(env), upgrade=False)
    return lambda: render(store)


def port_from_env(env: Mapping[str, str]) -> int | None:
    """``GPS_METRICS_PORT`` as a port, None when unset; a bad value is ``SettingsInvalid``."""
    raw = env.get(PORT_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        fix = f"{raw[:40]!r} is not a TCP port: give a number from 1 to 65535, or unset it"
        raise SettingsInvalid([FieldError(PORT_ENV, "invalid_port", fix)])
    return int(raw)


def serve_from_env(env: Mapping[str, str] | None = None) -> MetricsServer | None:
    """The code location's metrics server, when ``GPS_METRICS_PORT`` is set (else None)."""
    env = os.environ if env is None else env
    port = port_from_env(env)
    if port is None:
        return None
    host = env.get(HOST_ENV, "").strip() or "0.0.0.0"
    try:
        server = MetricsServer(store_metrics(env), host=host, port=port)
    except OSError as exc:  # e.g. a reload's new server process while the old one still listens
        log.warning("metrics not served on %s:%s: %s", host, port, exc)
        return None
    return server.start()
