"""Prometheus metrics over HTTP (``cli/metrics_server.py``): real scrapes over loopback.

``/metrics`` serves ``engine.metrics.render`` of a real store in the Prometheus text format,
``/healthz`` the liveness the engine loop reports, a store outage a one-line 503; the code
location's ``serve_from_env`` reads ``GPS_METRICS_PORT``; ``gps-dagster engine run
--metrics-port`` serves both while its loop runs and stops on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gps_dagster.cli.metrics_server import Heartbeat, MetricsServer, serve_from_env
from gps_dagster.demo.devserver import free_port
from gps_dagster.engine.metrics import render
from gps_dagster.runtime import SettingsInvalid
from gps_dagster.store import Store
from gps_dagster.store.errors import StoreUnavailable
from tests.cli.cli_support import run

ROOT = Path(__file__).parents[2]
SEED = str(ROOT / "examples" / "seed-schedule.json")
POOL10 = str(ROOT / "examples" / "seed-pool-10.yaml")


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    monkeypatch.setenv("GPS_DB_URL", url)
    monkeypatch.setenv("GPS_POOL_FILE", POOL10)
    assert run("schedules", "apply", "-f", SEED).exit_code == 0
    assert run("gate", "enforce").exit_code == 0
    assert run("apply-now", "gpu-pool-h100-shared").exit_code == 0  # a transition with steps
    return url


def test_metrics_are_scraped_over_http_in_the_prometheus_format(seeded: str) -> None:
    store = Store.open(seeded)
    server = MetricsServer(lambda: render(store)).start()
    try:
        status, ctype, body = _get(f"http://127.0.0.1:{server.port}/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        assert body == render(store)  # exactly what `gps-dagster metrics` prints
        families = {f.name for f in text_string_to_metric_families(body)}
        assert {
            "deployschedule_target_serving",
            "deployschedule_actions",
            "deployschedule_boundary_lag_seconds",
        } <= families
        assert _get(f"http://127.0.0.1:{server.port}/healthz")[:1] == (200,)
        assert _get(f"http://127.0.0.1:{server.port}/nope")[0] == 404
    finally:
        server.stop()
        store.engine.dispose()


def test_healthz_follows_the_heartbeat_and_a_store_outage_is_a_one_line_503() -> None:
    now = [100.0]
    beat = Heartbeat(stale_after_s=60, monotonic=lambda: now[0])

    def broken() -> str:
        raise StoreUnavailable("database down")

    server = MetricsServer(broken, alive=beat.alive).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert _get(f"{base}/healthz")[0] == 200
        now[0] += 61  # no pass for longer than allowed: the loop is stuck
        assert _get(f"{base}/healthz") == (503, "text/plain", "stalled\n")
        beat.beat()
        assert _get(f"{base}/healthz")[0] == 200
        status, _, body = _get(f"{base}/metrics")
        assert status == 503 and body.count("\n") == 1 and "store_unavailable" in body
        assert "Traceback" not in body
    finally:
        server.stop()


def test_serve_from_env_listens_only_when_asked(seeded: str) -> None:
    assert serve_from_env({"GPS_DB_URL": seeded}) is None
    with pytest.raises(SettingsInvalid, match="GPS_METRICS_PORT"):
        serve_from_env({"GPS_DB_URL": seeded, "GPS_METRICS_PORT": "http"})
    port = free_port()
    server = serve_from_env(
        {"GPS_DB_URL": seeded, "GPS_METRICS_PORT": str(port), "GPS_METRICS_HOST": "127.0.0.1"}
    )
    assert server is not None
    try:
        assert "deployschedule_actions" in _get(f"http://127.0.0.1:{port}/metrics")[2]
        # a second process on the same port (a code-location reload) warns and goes on
        assert (
            serve_from_env(
                {
                    "GPS_DB_URL": seeded,
                    "GPS_METRICS_PORT": str(port),
                    "GPS_METRICS_HOST": "127.0.0.1",
                }
            )
            is None
        )
    finally:
        server.stop()


def test_engine_run_serves_metrics_while_it_loops_and_stops_on_sigterm(
    seeded: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "GPS_CLOCK"}  # a loop needs a moving clock
    exe = Path(sys.executable).with_name("gps-dagster")
    log = open(tmp_path / "engine.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(exe), "engine", "run", "--interval", "1", "--metrics-port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline, body = time.monotonic() + 60, ""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, _, body = _get(f"http://127.0.0.1:{port}/metrics")
                if status == 200:
                    break
            except (TimeoutError, urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        assert "deployschedule_actions_total" in body, (tmp_path / "engine.log").read_text()
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        with pytest.raises(urllib.error.URLError):  # the server went with the loop
            _get(f"http://127.0.0.1:{port}/metrics")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
