"""``make demo BACKEND=kubernetes``: the live Dagster demo against a local Kubernetes control plane.

Starts a real control plane (etcd, kube-apiserver, controller-manager, scheduler; built once by
``tools/k8s/build_control_plane.sh``), lays the demo pool out on it (fake GPU nodes whose fake
kubelets run on the wall clock: ``gps_dagster.testing.k8s``), applies the demo schedule (A and B
swap every two minutes) and runs ``dagster dev`` with ``GPS_BACKEND=kubernetes``: every transition
run scales real Deployments through the API server. The banner prints the environment to point
``gps-dagster pool show --backend kubernetes`` (or kubectl) at the cluster. Ctrl-C (or SIGTERM)
stops dagster, the fakes and the control plane, and leaves nothing running.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from gps_dagster.backends.k8s import Kube, connect
from gps_dagster.demo.devserver import REPO, DagsterDev, prepare_home
from gps_dagster.demo.teardown import exit_on_signals, signals_held
from gps_dagster.domain.pool import parse_pool
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.domain.step_state import Gate
from gps_dagster.ports import Clock
from gps_dagster.runtime import clock_from_env
from gps_dagster.store import Store
from gps_dagster.testing.k8s import controlplane as cp
from gps_dagster.testing.k8s.lws import install_crd
from gps_dagster.testing.k8s.pools import ClusterPool

BANNER = """
  gps_dagster demo on Kubernetes is running: {url}

  * Runs       {url}/runs       transition runs scaling real Deployments (release, then acquire)
  * Automation {url}/automation gps_reconcile, gps_capacity_wait, boundary schedules
  The API server runs at {server}; to look at it:
    export GPS_BACKEND=kubernetes GPS_KUBECONFIG={kubeconfig} GPS_NAMESPACES={namespaces}
    .venv/bin/gps-dagster pool show          # nodes, GPUs, pods (device UUIDs)
  Ctrl-C stops everything.
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gps_dagster.demo.k8s", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument("--pool", type=Path, default=REPO / "examples" / "demo-pool.yaml")
    parser.add_argument("--schedule", type=Path, default=REPO / "examples" / "demo-schedule.json")
    return parser.parse_args(argv)


def seed(db_url: str, schedule: Path, clock: Clock) -> None:
    store = Store.open(db_url)
    now = clock.now()
    store.apply_schedule(parse_schedule(schedule.read_text(), source=str(schedule)), now=now)
    store.set_gate(Gate.ENFORCE, now=now)
    store.engine.dispose()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cp.binaries()
    except cp.ControlPlaneError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    with exit_on_signals():
        print("demo: starting a local Kubernetes control plane ...", flush=True)
        plane = cp.start()
        try:
            return _run(args, plane)
        except KeyboardInterrupt:
            print("\ndemo: stopping ...", flush=True)
            return 0
        finally:
            with signals_held():
                plane.stop()
                print("demo: control plane stopped, no process left", flush=True)


def _run(args: argparse.Namespace, plane: cp.ControlPlane) -> int:
    kube = Kube(connect(str(plane.kubeconfig), None))
    install_crd(kube)
    spec = parse_pool(args.pool.read_text(), source=str(args.pool))
    clock = clock_from_env()  # the wall clock, as the runtime's (GPS_CLOCK would freeze the fakes)
    pool = ClusterPool(kube, clock, spec, prefix="demo").create()
    driver = pool.drive(every_s=0.5)
    var = REPO / "var"
    home, data = var / "dagster_home_k8s", var / "demo_k8s"
    for path in (home, data):
        shutil.rmtree(path, ignore_errors=True)
    data.mkdir(parents=True)
    prepare_home(home)
    env = {
        "GPS_DB_URL": f"sqlite:///{data / 'gps.sqlite'}",
        "GPS_BACKEND": "kubernetes",
        "GPS_KUBECONFIG": str(plane.kubeconfig),
        "GPS_NAMESPACES": ",".join(pool.namespaces),
        "DAGSTER_HOME": str(home),
    }
    seed(env["GPS_DB_URL"], args.schedule, clock)
    dev = DagsterDev(dagster_home=home, env=env, host=args.host, port=args.port)
    print(
        f"demo: cluster ready in {plane.started_s:.1f} s; starting dagster dev on {dev.url} ...",
        flush=True,
    )
    try:
        dev.start()
        dev.wait_ready(timeout=180)
        print(
            BANNER.format(
                url=dev.url,
                server=plane.server,
                kubeconfig=plane.kubeconfig,
                namespaces=env["GPS_NAMESPACES"],
            ),
            flush=True,
        )
        while dev.proc is not None and dev.proc.poll() is None:
            time.sleep(1)
        print(f"demo: dagster dev exited; see {dev.log_path}", flush=True)
        return 1
    finally:
        with signals_held():
            left = dev.stop()
            driver.stop()
            pool.close()
            print("demo: dagster stopped" + (f"; still alive: {left}" if left else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
