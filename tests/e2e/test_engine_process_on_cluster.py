"""``gps-dagster engine run`` as its own process on the control plane, on the wall clock.

Here (tests/e2e), not in tests/k8s: it is the one cluster test that runs on the real clock, which
the clock scan (tests/test_layers.py) allows only in e2e. Its outcome is still the same at any
instant: the schedule is written around the wall clock's "now" when the test starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gps_dagster.clocks import WallClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.testing.k8s.pools import ClusterPool
from tests.engine.harness import A, B, C, a_running_pool
from tests.k8s.cluster import kube, unique
from tests.k8s.test_cli_on_cluster import SEED, replicas, run
from tests.k8s.world import rename_nodes


def _window_around_the_wall_clock(tmp_path: Path) -> Path:
    """The seed, with its one-shot window (A stopped with downtime, B running) in force from a
    minute ago to an hour ahead of the wall clock: the only schedule whose outcome is the same at
    any real instant, so a process on the wall clock has something to do whenever it runs."""
    doc = json.loads(Path(SEED).read_text())
    now = datetime.now(UTC).replace(microsecond=0)  # the process under test reads this clock too
    (maint,) = (w for w in doc["windows"] if w["kind"] == "one_shot")
    maint["active_from"] = (now - timedelta(minutes=1)).isoformat()
    maint["active_until"] = (now + timedelta(hours=1)).isoformat()
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(doc))
    return path


def test_engine_run_as_its_own_process_swaps_a_for_b_while_the_cluster_moves(
    k8s_cluster: str, tmp_path: Path
) -> None:
    """The production shape: ``gps-dagster engine run`` is a process of its own on the wall clock
    (it refuses a frozen GPS_CLOCK: no boundary would come), looping on its interval with no test
    code between its passes. It releases A, sees A's pods go at the kubelet's pace, starts B when
    the GPUs are free, and stops cleanly at SIGTERM."""
    # Its own pool on the wall clock, its fakes driven on a thread: nothing steps them for it.
    # The seed's timings are minutes of model start (start_delay_s 120, publish_lag_s 60); on the
    # wall clock they are seconds, so the run is about the loop, not about waiting.
    prefix = unique("clw")
    doc = rename_nodes(a_running_pool(), prefix)
    doc["sim"]["timings"] = {"stop_grace_s": 1, "publish_lag_s": 1, "start_delay_s": 2}
    pool = ClusterPool(kube(), WallClock(), load_pool(doc), prefix=prefix).create()
    driver = pool.drive(every_s=0.2)
    env = {
        "GPS_BACKEND": "kubernetes",
        "GPS_KUBECONFIG": k8s_cluster,
        "GPS_NAMESPACES": ",".join(pool.namespaces),
        "GPS_DB_URL": f"sqlite:///{tmp_path / 'gps.sqlite'}",
    }
    try:
        _engine_process_swaps(pool, env, tmp_path)
    finally:
        driver.stop()
        pool.close()


def _engine_process_swaps(pool: ClusterPool, env: dict[str, str], tmp_path: Path) -> None:
    run(env, "schedules", "apply", "-f", str(_window_around_the_wall_clock(tmp_path)))
    run(env, "gate", "enforce")
    wall = {k: v for k, v in env.items() if not k.startswith("GPS_CLOCK")}
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPS_CLOCK")}
    log = (tmp_path / "engine.err").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gps_dagster.cli.main", "engine", "run", "--interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=log,
        env={**base, **wall, "PYTHONUNBUFFERED": "1"},
        cwd=tmp_path,
    )
    phases: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 180  # a bound on a hang, not a timing: it ends on state
        while time.monotonic() < deadline and proc.poll() is None:
            status = json.loads(run(wall, "status", "--format", "json").output)
            phases = {r["target"]: r["phase"] for r in status["targets"]}
            if phases.get(B) == "converged" and replicas(pool, B) == 1:
                break
            time.sleep(0.5)
        assert proc.poll() is None, (tmp_path / "engine.err").read_text()
        # mutations: B started before A's GPUs are free (start_unschedulable), or no loop at all
        assert phases.get(B) == "converged", (phases, (tmp_path / "engine.err").read_text())
        assert replicas(pool, A) == 0 and replicas(pool, B) == 1 and replicas(pool, C) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (tmp_path / "engine.err").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    err = (tmp_path / "engine.err").read_text()
    assert "stopped" in err and "Traceback" not in err, err
