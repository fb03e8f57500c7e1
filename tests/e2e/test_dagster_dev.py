"""End to end under the real ``dagster dev``: webserver, daemon, sensors, runs, GraphQL."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from e2e_support import SCHEDULE, Server

from gps_dagster.dagster_defs import names

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(name="dagster_dev")]
T = TypeVar("T")

TICKS = """
query Ticks($sel: SensorSelector!) {
  sensorOrError(sensorSelector: $sel) {
    ... on Sensor { sensorState { ticks(limit: 50) { status runKeys runIds skipReason } } }
  }
}
"""


def wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _tag(run: dict[str, Any], key: str) -> str | None:
    return next((t["value"] for t in run["tags"] if t["key"] == key), None)


def _reconcile_ticks(server: Server) -> list[dict[str, Any]]:
    sel = {
        "repositoryLocationName": "definitions.py",
        "repositoryName": "__repository__",
        "sensorName": names.RECONCILE_SENSOR,
    }
    data = server.dev.graphql(TICKS, {"sel": sel})["sensorOrError"]
    return list(data["sensorState"]["ticks"])


def test_webserver_answers_200(server: Server) -> None:
    with urllib.request.urlopen(server.dev.url, timeout=10) as resp:
        assert resp.status == 200


def test_daemon_drops_repeated_run_keys_then_the_gate_resumes_the_plan(server: Server) -> None:
    """One sequence on purpose: only this test touches the gate, so the tests of this
    module stay independent (pytest-xdist may hand them to different workers)."""
    from gps_dagster.store import Store
    from gps_dagster.store.launches import LaunchClaims

    key = names.plan_run_key(server.transition_id)

    def launched() -> list[dict[str, Any]]:
        runs = server.dev.runs_by_tag(names.TAG_TRANSITION, server.transition_id)
        return [r for r in runs if r["status"] == "SUCCESS"]

    wait_for(launched, 90, "the transition run")
    # The gate is off, so the plan's steps stay pending and every tick requests the key again.
    wait_for(
        lambda: sum(key in t["runKeys"] for t in _reconcile_ticks(server)) >= 3,
        60,
        "three ticks requesting the key",
    )
    runs = server.dev.runs_by_tag(names.TAG_TRANSITION, server.transition_id)
    assert [_tag(r, "dagster/run_key") for r in runs] == [key]
    (run,) = runs
    assert run["jobName"] == names.TRANSITION_JOB
    assert _tag(run, names.TAG_SCHEDULE) == SCHEDULE
    assert _tag(run, names.TAG_TRIGGER) == "sensor"

    store = Store.open(server.db_url)
    claim = LaunchClaims(store.engine).get(key)  # the one origin allowed to launch the plan
    assert claim is not None and claim.origin == f"sensor:{names.RECONCILE_SENSOR}"
    store.set_gate("enforce", now=datetime.now(UTC))
    resume_key = names.resume_run_key(server.transition_id, 1)

    def resumed() -> dict[str, Any] | None:
        runs = server.dev.runs_by_tag(names.TAG_SCHEDULE, SCHEDULE)
        done = [
            r for r in runs if _tag(r, "dagster/run_key") == resume_key and r["status"] == "SUCCESS"
        ]
        return done[0] if done else None

    run = wait_for(resumed, 90, "the resumed transition run")
    steps = run["stepStats"]
    releases = [s for s in steps if s["stepKey"].startswith("release[")]
    admits = [s for s in steps if s["stepKey"].startswith("admit[")]  # before acquire/capacity_wait
    assert releases and admits
    assert max(s["endTime"] for s in releases) <= min(s["startTime"] for s in admits)
    assert _tag(run, names.ROOT_RUN_TAG) == runs[0]["runId"]  # the resume joins the plan's group

    def converged() -> bool:
        status = {r.deploy_id: r.phase for r in store.list_status(SCHEDULE)}
        return status == {"md-llama70b": "converged", "md-qwen32b": "converged"}

    wait_for(converged, 120, "A and B converged (capacity-wait sensor launches A's acquire)")
    acquire_runs = [
        r
        for r in server.dev.runs_by_tag(names.TAG_PHASE, "acquire")
        if _tag(r, names.TAG_TRANSITION) == server.transition_id
    ]
    assert acquire_runs and all(r["status"] == "SUCCESS" for r in acquire_runs)
    store.engine.dispose()


def test_cli_lists_runs_and_reloads_the_code_location(server: Server) -> None:
    from click.testing import CliRunner

    from gps_dagster.cli.dagster_cmd import dagster_group

    wait_for(lambda: server.dev.runs_by_tag(names.TAG_SCHEDULE, SCHEDULE), 90, "a transition run")
    runner = CliRunner()
    runs = runner.invoke(dagster_group, ["runs", SCHEDULE, "--url", server.dev.url])
    assert runs.exit_code == 0, runs.output
    assert "plan" in runs.output and "sensor" in runs.output
    reload = runner.invoke(dagster_group, ["reload", "--url", server.dev.url])
    assert reload.exit_code == 0, reload.output
    assert "LOADED" in reload.output
