"""``make demo``: the live demo in the Dagster UI (``python -m gps_dagster.cli.demo``).

Starts ``dagster dev`` on 127.0.0.1:3000 over a fresh simulated pool running
in wall-clock time (examples/demo-pool.yaml) and a demo schedule that swaps A
and B every two minutes (examples/demo-schedule.json: the seed's day,
compressed). Sensors and schedules start on load, so within a few minutes
the UI shows transition runs (release ops, then acquire ops), sensor ticks,
``target_status`` observations and the ``schedule_timeline`` asset, whose
last 24 hours are materialised in one single-run backfill before the server
starts. Ctrl-C stops the whole ``dagster dev`` process group (SIGTERM, then
SIGKILL) and leaves nothing running. ``gps-dagster serve`` runs beside it on port 8080 over
the same store (its URL and an admin token are printed; stopped with the demo). The virtual-clock replay stays available
as ``gps-dagster simulate``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import FrameType

from gps_dagster.cli.devserver import (
    REPO,
    DagsterDev,
    hourly_key,
    materialize_timeline,
    prepare_home,
    seed_database,
)
from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.runtime import clock_from_env

BANNER = """
  gps_dagster demo is running: {url}

  * Runs       {url}/runs            transition runs (release ops, then acquire ops)
  * Automation {url}/automation      gps_reconcile, gps_capacity_wait, boundary schedules
  * Assets     {url}/assets          target_status observations, schedule_timeline
  * Schedule API {api}/docs   timeline page {api}/ui/  (admin token below)
      curl -H "Authorization: Bearer $TOKEN" {api}/admin/deploy-schedules
      TOKEN={token}
  The demo schedule swaps A (md-llama70b, 8 GPUs) and B (md-qwen32b, 6 GPUs) every
  2 minutes on a 10-GPU pool; the first swap run appears within a minute.
  Ctrl-C stops everything.
"""


def _sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gps_dagster.cli.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument("--api-port", type=int, default=8080, help="port of gps-dagster serve")
    parser.add_argument("--keep", action="store_true", help="keep var/demo and var/dagster_home from the last demo")
    parser.add_argument("--pool", type=Path, default=REPO / "examples" / "demo-pool.yaml")
    parser.add_argument("--schedule", type=Path, default=REPO / "examples" / "demo-schedule.json")
    return parser.parse_args(argv)


def prepare(args: argparse.Namespace) -> tuple[Path, dict[str, str]]:
    var = REPO / "var"
    home, data = var / "dagster_home", var / "demo"
    if not args.keep:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True, exist_ok=True)
    prepare_home(home)
    env = {
        "GPS_DB_URL": f"sqlite:///{data / 'gps.sqlite'}",
        "GPS_POOL_FILE": str(args.pool),
        "DAGSTER_HOME": str(home),
    }
    if not args.keep:
        seed_database(env["GPS_DB_URL"], pool_file=args.pool, schedule_files=[args.schedule])
    return home, env


def start_api(env: dict[str, str], host: str, port: int) -> tuple[subprocess.Popen[bytes], str]:
    """``gps-dagster serve`` beside dagster dev, over the same store; returns it and an admin token."""
    from gps_dagster.store import Store
    from gps_dagster.store.tokens import TokenRepository

    store = Store.open(env["GPS_DB_URL"])
    token = TokenRepository(store.engine).create("demo-admin", "admin", now=clock_from_env().now(), actor="demo")[1]
    store.engine.dispose()
    (REPO / "var").mkdir(exist_ok=True)
    log = open(REPO / "var" / "demo-api.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "gps_dagster.cli.main", "serve", "--host", host, "--port", str(port)],
        env={**os.environ, **env}, stdout=log, stderr=log, start_new_session=True)
    return proc, token


def stop_api(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        home, env = prepare(args)
        now = clock_from_env().now()  # the runtime's clock: GPS_CLOCK, else the wall clock
    except SpecInvalid as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    print("demo: materialising the last 24 hours of schedule_timeline (one run) ...", flush=True)
    done = materialize_timeline(env, hourly_key(now - timedelta(hours=24)), hourly_key(now - timedelta(hours=1)))
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
    os.environ.update(env)
    dev = DagsterDev(dagster_home=home, env=env, host=args.host, port=args.port)
    signal.signal(signal.SIGTERM, _sigterm)
    print(f"demo: starting dagster dev on {dev.url} (log: {dev.log_path}) ...", flush=True)
    api, token = start_api({**env, "GPS_DAGSTER_URL": dev.url}, args.host, args.api_port)
    try:
        dev.start()
        dev.wait_ready(timeout=120)
        api_url = f"http://{args.host}:{args.api_port}"
        print(BANNER.format(url=dev.url, api=api_url, token=token), flush=True)
        while dev.proc is not None and dev.proc.poll() is None:
            time.sleep(1)
        print(f"demo: dagster dev exited ({dev.proc.returncode if dev.proc else '?'}); see {dev.log_path}")
        return 1
    except KeyboardInterrupt:
        print("\ndemo: stopping dagster dev ...", flush=True)
        return 0
    finally:
        stop_api(api)
        left = dev.stop()
        print("demo: stopped" + (f"; still alive: {left}" if left else ", no process left"), flush=True)


if __name__ == "__main__":
    sys.exit(main())
