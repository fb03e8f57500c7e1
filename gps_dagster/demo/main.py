"""``make demo``: the live demo in the Dagster UI (``python -m gps_dagster.demo``).

Starts ``dagster dev`` on 127.0.0.1:3000 over a fresh simulated pool running in wall-clock
time (examples/demo-pool.yaml) with two schedules: ``demo-swap`` swaps A and B every two
minutes (the seed's day, compressed), ``demo-gpu42`` swaps two members of the time-sliced
reservation rsv-gpu42-shared a minute later (SPEC R-GPS-11). Sensors and schedules start on
load, so within a few minutes the UI shows each swap as one run group, every managed deploy
as its own asset with a phase check, the reservation with its members and checks, and the
``schedule_timeline`` asset (its last 24 hours materialised before the server starts).

While it runs, ``var/demo/env`` holds its settings: ``. var/demo/env`` in a second terminal
and every README command acts on the demo (same store, pool and Dagster instance).
``gps-dagster serve`` runs beside it on port 8080 over the same store. Ctrl-C (or SIGTERM)
stops everything: runs in flight are terminated through the webserver (they end CANCELED),
then the API and the whole ``dagster dev`` process group (SIGTERM, then SIGKILL); any run
still left queued or started is marked canceled, and the env file is removed.
"""

# Decisions embodied here (docs/decisions.md):
# * “Quiet terminal runs”
# * “Demo stop terminates runs through the webserver first”

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

from gps_dagster.cli.dagster_client import terminate_in_flight
from gps_dagster.demo import env as demo_env
from gps_dagster.demo.devserver import (
    REPO,
    DagsterDev,
    hourly_key,
    materialize_timeline,
    prepare_home,
    seed_database,
)
from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.runtime import clock_from_env

SCHEDULES = ("demo-schedule.json", "demo-gpu42-schedule.json")
BANNER = """
  gps_dagster demo is running: {url}

  * Runs       {url}/runs        each swap is one run group: the plan run, then (when
                                 the GPUs publish late) its gps_acquire run
  * Assets     {url}/assets      deploy/* per managed deploy (group per schedule) with a
                                 phase check; gpu_reservations with its members; timeline
  * Automation {url}/automation  gps_reconcile, gps_capacity_wait, boundary schedules
  * Schedule API {api}/docs   timeline page {api}/ui/  (token in $GPS_API_TOKEN)

  In a second terminal, act on this demo (same store, pool and Dagster instance):
      . {env_file}
      gps-dagster status
      gps-dagster apply-now demo-swap --queue --wait 60    # served by gps_apply_now
      gps-dagster dagster runs demo-swap                   # the swap runs, newest first
      gps-dagster pool stop md-qwen32b                     # after convergence: drift, respected
      gps-dagster pool start md-vision-chat                # refused while batch + embed run

  demo-swap swaps A (md-llama70b, 8 GPUs) and B (md-qwen32b, 6 GPUs) every 2 minutes;
  demo-gpu42 swaps md-vision-chat and md-vision-batch on one shared H200 a minute later.
  Ctrl-C stops everything.
"""


def _sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gps_dagster.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument("--api-port", type=int, default=8080, help="port of gps-dagster serve")
    parser.add_argument(
        "--keep", action="store_true", help="keep var/demo and var/dagster_home from the last demo"
    )
    parser.add_argument("--pool", type=Path, default=REPO / "examples" / "demo-pool.yaml")
    parser.add_argument(
        "--schedule",
        type=Path,
        action="append",
        default=None,
        help="schedule file (repeatable; default: the two demo schedules)",
    )
    parser.add_argument(
        "--var", type=Path, default=REPO / "var", help="where the demo's state lives"
    )
    parser.add_argument(
        "--no-timeline", action="store_true", help="skip the 24-hour timeline backfill at start"
    )
    return parser.parse_args(argv)


def prepare(args: argparse.Namespace) -> tuple[Path, dict[str, str]]:
    home, data = args.var / "dagster_home", args.var / "demo"
    if not args.keep and (home.exists() or data.exists()):
        print(
            f"demo: starting fresh: the previous demo's runs and store ({home}, {data}) are "
            "removed (--keep keeps them)",
            flush=True,
        )
    if not args.keep:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True, exist_ok=True)
    prepare_home(home)
    env = {
        "GPS_BACKEND": "sim",
        "GPS_DB_URL": f"sqlite:///{data / 'gps.sqlite'}",
        "GPS_POOL_FILE": str(args.pool),
        "DAGSTER_HOME": str(home),
        "GPS_RECONCILE_INTERVAL_S": "10",
    }
    if not args.keep:
        files = args.schedule or [REPO / "examples" / name for name in SCHEDULES]
        seed_database(env["GPS_DB_URL"], pool_file=args.pool, schedule_files=files)
    return home, env


def start_api(
    env: dict[str, str], host: str, port: int, log_dir: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """``gps-dagster serve`` beside dagster dev, over the same store; returns it and a token."""
    from gps_dagster.store import Store
    from gps_dagster.store.tokens import TokenNameTaken, TokenRepository

    store = Store.open(env["GPS_DB_URL"])
    now = clock_from_env().now()
    tokens = TokenRepository(store.engine)
    try:
        token = tokens.create("demo-admin", "admin", now=now, actor="demo")[1]
    except TokenNameTaken:  # a previous demo's token on the same store: this run's replaces it
        tokens.revoke("demo-admin", now=now, actor="demo")
        token = tokens.create("demo-admin", "admin", now=now, actor="demo")[1]
    store.engine.dispose()
    log = open(log_dir / "demo-api.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gps_dagster.cli.main",
            "serve",
            "--host",
            host,
            "--port",
            str(port),
        ],
        env={**os.environ, **env},
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    return proc, token


def stop_api(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def cancel_leftover_runs(dagster_home: Path) -> list[str]:
    """Runs the stopped instance left queued or started are marked canceled, so a ``--keep``
    restart neither dequeues a stale run nor shows one as running forever."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(dagster_home)
    left = [
        dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
    ]
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        runs = list(instance.get_runs(dg.RunsFilter(statuses=left)))
        for run in runs:
            instance.report_run_canceled(run, message="the demo stopped before this run ended")
    return [r.run_id for r in runs]


def stop_dagster(dev: DagsterDev, home: Path) -> tuple[list[int], list[str]]:
    """Stop the demo's Dagster: runs in flight are terminated through the webserver first (they
    end CANCELED, as the UI's Terminate would end them), then the process group is stopped, then
    whatever is still unfinished in the instance is marked canceled. Returns the pids left
    alive and the ids of the runs canceled."""
    canceled: list[str] = []
    if dev.proc is not None and dev.proc.poll() is None:
        try:
            canceled = terminate_in_flight(dev.url)
        except (OSError, RuntimeError, ValueError) as exc:  # the webserver no longer answers
            print(f"demo: could not terminate runs through {dev.url} ({exc})", flush=True)
    left = dev.stop()
    canceled += [r for r in cancel_leftover_runs(home) if r not in canceled]
    return left, canceled


def demo_env_values(
    env: dict[str, str], dev: DagsterDev, api_url: str, token: str
) -> dict[str, str]:
    """What a second terminal needs: the demo's settings, its URLs and token, quiet warnings."""
    return {
        **{k: v for k, v in env.items() if k != "GPS_RECONCILE_INTERVAL_S"},
        "GPS_DAGSTER_URL": dev.url,
        "GPS_API_URL": api_url,
        "GPS_API_TOKEN": token,
        "PYTHONWARNINGS": "ignore::FutureWarning",  # dagster's CLI: "superseded by dg launch"
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.var.mkdir(parents=True, exist_ok=True)
    try:
        home, env = prepare(args)
        now = clock_from_env().now()  # the runtime's clock: GPS_CLOCK, else the wall clock
    except SpecInvalid as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    if not args.no_timeline:
        print(
            "demo: materialising the last 24 hours of schedule_timeline (one run) ...", flush=True
        )
        first, last = hourly_key(now - timedelta(hours=24)), hourly_key(now - timedelta(hours=1))
        done = materialize_timeline(env, first, last)
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
    os.environ.update(env)
    dev = DagsterDev(dagster_home=home, env=env, host=args.host, port=args.port)
    signal.signal(signal.SIGTERM, _sigterm)
    print(f"demo: starting dagster dev on {dev.url} (log: {dev.log_path}) ...", flush=True)
    api_url = f"http://{args.host}:{args.api_port}"
    api, token = start_api({**env, "GPS_DAGSTER_URL": dev.url}, args.host, args.api_port, args.var)
    env_file = args.var / "demo" / "env"
    try:
        dev.start()
        dev.wait_ready(timeout=180)
        values = demo_env_values(env, dev, api_url, token)
        demo_env.write(env_file, values, venv_bin=Path(sys.executable).parent)
        shown = os.path.relpath(env_file) if env_file.is_relative_to(Path.cwd()) else env_file
        print(BANNER.format(url=dev.url, api=api_url, env_file=shown), flush=True)
        while dev.proc is not None and dev.proc.poll() is None:
            time.sleep(1)
        print(
            f"demo: dagster dev exited ({dev.proc.returncode if dev.proc else '?'}); "
            f"see {dev.log_path}"
        )
        return 1
    except KeyboardInterrupt:
        print("\ndemo: stopping dagster dev ...", flush=True)
        return 0
    finally:
        env_file.unlink(missing_ok=True)
        stop_api(api)
        left, canceled = stop_dagster(dev, home)
        note = f"; {len(canceled)} unfinished run(s) canceled" if canceled else ""
        print(
            "demo: stopped" + (f"; still alive: {left}" if left else ", no process left") + note,
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
