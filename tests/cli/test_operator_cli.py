"""The commands added for the demo and an operator: pool stop|start|scale through the core and
its admission, empty answers that say what to do, unchanged re-apply, the demo's env file and
its hint, leftover runs canceled when the demo stops (issue 12 §1, §7, §8)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from gps_dagster.cli.inputs import load_schedule_file
from gps_dagster.demo import env as demo_env
from gps_dagster.store import Store
from tests.cli.cli_support import run

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
SEED = str(EXAMPLES / "seed-schedule.json")
MONDAY = datetime.fromisoformat("2026-10-19T09:00:00+07:00")


@pytest.fixture
def gpu42(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    monkeypatch.setenv("GPS_DB_URL", url)
    monkeypatch.setenv("GPS_POOL_FILE", str(EXAMPLES / "gpu42-pool.yaml"))
    return url


def test_a_manual_start_goes_through_the_reservation_budget(gpu42: str) -> None:
    # batch (80 000) + embed (24 000) run: chat (96 000) would exceed 136 582 MiB
    refused = run("pool", "start", "md-vision-chat")
    assert refused.exit_code == 1
    assert "reservation_overcommitted" in refused.output and "fix:" in refused.output
    stopped = run("pool", "stop", "md-vision-batch")
    assert stopped.exit_code == 0 and "stop md-vision-batch: operation" in stopped.output
    started = run("pool", "start", "md-vision-chat")
    assert started.exit_code == 0 and "accepted" in started.output


def test_pool_stop_of_an_aliased_deploy_needs_consent_and_scale_sets_replicas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPS_DB_URL", f"sqlite:///{tmp_path / 'g.sqlite'}")
    monkeypatch.setenv("GPS_POOL_FILE", str(EXAMPLES / "seed-pool-16.yaml"))
    refused = run("pool", "stop", "md-llama70b")
    assert (
        refused.exit_code == 1
        and "alias" in refused.output
        and "--allow-downtime" in refused.output
    )
    scaled = run("pool", "scale", "md-llama70b", "2")
    assert scaled.exit_code == 0 and "scale md-llama70b: operation" in scaled.output
    assert run("pool", "stop", "md-llama70b", "--allow-downtime").exit_code == 0


def test_a_manual_stop_of_a_scheduled_deploy_says_it_will_be_respected(gpu42: str) -> None:
    run("schedules", "apply", "-f", str(EXAMPLES / "gpu42-schedule.json"))
    out = run("pool", "stop", "md-vision-batch")
    assert out.exit_code == 0 and "drift_detected" in out.output and "gpu42-shared" in out.output


def test_reapplying_an_unchanged_schedule_says_so_and_keeps_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    monkeypatch.setenv("GPS_DB_URL", url)
    assert "version 1" in run("schedules", "apply", "-f", SEED).output
    again = run("schedules", "apply", "-f", SEED)
    assert again.exit_code == 0 and "unchanged: still version 1" in again.output
    assert Store.open(url).get_schedule("gpu-pool-h100-shared").version == 1


def test_empty_answers_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPS_DB_URL", f"sqlite:///{tmp_path / 'gps.sqlite'}")
    listed = run("reservations", "list")
    assert listed.exit_code == 0 and "no reservation in the ledger" in listed.output
    assert "reservations create" in listed.output
    # Monday 19:00: the seed pool already has A stopped and B running
    dry = run("dry-run", SEED)
    assert dry.exit_code == 0 and "nothing to do" in dry.output


def test_the_demo_env_file_round_trips_and_a_stray_command_gets_a_hint(tmp_path: Path) -> None:
    path = tmp_path / demo_env.ENV_FILE
    values = {"GPS_DB_URL": "sqlite:////x/it's here.sqlite", "DAGSTER_HOME": "/x/home"}
    demo_env.write(path, values, venv_bin=Path("/venv/bin"))
    read = demo_env.read(path)
    assert {k: read[k] for k in values} == values  # quoted for the shell
    assert read[demo_env.PID_VARIABLE] == str(os.getpid())
    note = demo_env.hint(tmp_path, {})
    assert note is not None and ". var/demo/env" in note
    assert demo_env.hint(tmp_path, {demo_env.PID_VARIABLE: "1"}) is None  # sourced: no hint
    assert demo_env.hint(tmp_path, {"GPS_DB_URL": values["GPS_DB_URL"]}) is None  # same store
    path.write_text(path.read_text().replace(str(os.getpid()), "999999999"))
    assert demo_env.hint(tmp_path, {}) is None  # the demo is gone


def test_runs_left_queued_or_started_are_canceled_when_the_demo_stops(tmp_path: Path) -> None:
    import dagster as dg

    from gps_dagster.demo.devserver import prepare_home
    from gps_dagster.demo.main import cancel_leftover_runs

    home = prepare_home(tmp_path / "dagster_home")

    @dg.op
    def nothing() -> None:
        pass

    @dg.job
    def job() -> None:
        nothing()

    with dg.DagsterInstance.from_config(str(home)) as instance:
        queued = instance.create_run_for_job(job, status=dg.DagsterRunStatus.NOT_STARTED)
        started = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
        done = instance.create_run_for_job(job, status=dg.DagsterRunStatus.SUCCESS)
    canceled = cancel_leftover_runs(home)
    assert sorted(canceled) == sorted([queued.run_id, started.run_id])
    with dg.DagsterInstance.from_config(str(home)) as instance:
        statuses = {r.run_id: r.status for r in instance.get_runs()}
    assert statuses[queued.run_id] == statuses[started.run_id] == dg.DagsterRunStatus.CANCELED
    assert statuses[done.run_id] == dg.DagsterRunStatus.SUCCESS


def test_dagster_runs_prints_a_header_and_says_when_there_is_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gps_dagster.cli import dagster_client as devserver

    monkeypatch.setattr(devserver, "runs_by_tag", lambda url, key, value: [])
    empty = run("dagster", "runs", "demo-swap", "--url", "http://127.0.0.1:1")
    assert empty.exit_code == 0 and "no transition run of 'demo-swap'" in empty.output
    one = {
        "runId": "0123456789",
        "status": "SUCCESS",
        "startTime": 0.0,
        "tags": [
            {"key": "gps/phase", "value": "plan"},
            {"key": "gps/trigger", "value": "sensor"},
            {"key": "gps/targets", "value": "a,b"},
        ],
    }
    monkeypatch.setattr(devserver, "runs_by_tag", lambda url, key, value: [one])
    listed = run("dagster", "runs", "demo-swap", "--url", "http://127.0.0.1:1")
    lines = listed.output.splitlines()
    assert lines[0].split() == [
        "RUN",
        "STATUS",
        "STARTED",
        "PHASE",
        "TRIGGER",
        "SCHEDULE",
        "TARGETS",
    ]
    assert lines[1].split()[0] == "01234567" and lines[1].split()[-2:] == ["demo-swap", "a,b"]


def test_dagster_runs_of_a_tenants_bare_name_asks_dagster_for_its_identity(
    gpu42: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs are tagged with the identity ``vision/gpu42-shared``: before the name was resolved
    through the store, ``dagster runs gpu42-shared`` asked Dagster for a tag no run carries and
    said "no transition run" while runs existed."""
    from gps_dagster.cli import dagster_client as devserver

    asked: list[str] = []
    monkeypatch.setattr(devserver, "runs_by_tag", lambda url, key, value: asked.append(value) or [])
    assert run("schedules", "apply", "-f", str(EXAMPLES / "gpu42-schedule.json")).exit_code == 0
    bare = run("dagster", "runs", "gpu42-shared", "--url", "http://127.0.0.1:1")
    assert bare.exit_code == 0 and "no transition run of 'vision/gpu42-shared'" in bare.output
    assert asked == ["vision/gpu42-shared"]
    # A second project's schedule of the same name: the bare name is ambiguous, said with both.
    other = tmp_path / "other.json"
    doc = (EXAMPLES / "gpu42-schedule.json").read_text().replace("cmp:vision", "cmp:speech")
    other.write_text(doc.replace('"md-vision-', '"md-speech-'))
    Store.open(gpu42).apply_schedule(load_schedule_file(str(other)), now=MONDAY)
    ambiguous = run("dagster", "runs", "gpu42-shared", "--url", "http://127.0.0.1:1")
    assert ambiguous.exit_code == 1 and "ambiguous_schedule_name" in ambiguous.output
    assert "speech/gpu42-shared" in ambiguous.output and "vision/gpu42-shared" in ambiguous.output
    assert asked == ["vision/gpu42-shared"]  # nothing asked of Dagster for an ambiguous name
