"""A run in flight when the demo stops ends CANCELED, not FAILURE (issue 20 §2).

Under the real ``dagster dev`` (the repository's ``dagster.yaml``: the default run launcher), a
run whose op is still working when the demo stops. Killing the process group first (the old
stop) killed its run worker: the run ended FAILURE. ``stop_dagster`` terminates the runs in
flight through the webserver first — ``terminateRuns`` with SAFE_TERMINATE, what the UI's
Terminate button sends — then stops the group."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest

from gps_dagster.demo.devserver import DagsterDev, free_port, prepare_home
from gps_dagster.demo.main import stop_dagster

pytestmark = [pytest.mark.slow]
DEFINITIONS = """
import threading
import dagster as dg

@dg.op
def works_until_stopped() -> None:
    threading.Event().wait(600)  # ended by the termination under test, never by the timeout

@dg.job(executor_def=dg.in_process_executor)
def long_swap() -> None:
    works_until_stopped()

defs = dg.Definitions(jobs=[long_swap])
"""


def _status(home: Path, run_id: str) -> dg.DagsterRunStatus:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None
        return run.status


def test_a_run_in_flight_at_stop_ends_canceled(tmp_path: Path) -> None:
    (tmp_path / "defs.py").write_text(DEFINITIONS)
    home = prepare_home(tmp_path / "dagster_home")
    dev = DagsterDev(
        dagster_home=home, port=free_port(), definitions=tmp_path / "defs.py", cwd=tmp_path
    )
    dev.start()
    try:
        dev.wait_ready(timeout=240)
        from dagster_graphql import DagsterGraphQLClient

        client = DagsterGraphQLClient("127.0.0.1", port_number=dev.port)
        run_id = client.submit_job_execution("long_swap")
        deadline = time.monotonic() + 180
        while _status(home, run_id) != dg.DagsterRunStatus.STARTED:
            assert time.monotonic() < deadline, f"run {run_id}: {_status(home, run_id)}"
            time.sleep(0.5)
        left, canceled = stop_dagster(dev, home)
    finally:
        dev.stop()
    assert left == []
    assert run_id in canceled
    assert _status(home, run_id) == dg.DagsterRunStatus.CANCELED
