"""The engine commands of ``gps-dagster``: schedules, status, gate, apply-now, dry-run, simulate,
metrics.

Each runs at the instant of ``GPS_CLOCK`` (the conftest pins Monday 19:00 +07; a test that needs
business hours says ``at=TUESDAY_1000``), so the expected phases are exact at any wall-clock time.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gps_dagster.engine.engine import LOCK_NAME
from gps_dagster.store import Store
from tests.cli.cli_support import MONDAY_1900, TUESDAY_1000, instant, run

ROOT = Path(__file__).parents[2]
SEED = str(ROOT / "examples" / "seed-schedule.json")
POOL10 = str(ROOT / "examples" / "seed-pool-10.yaml")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    monkeypatch.setenv("GPS_DB_URL", url)
    monkeypatch.setenv("GPS_POOL_FILE", POOL10)
    return {"url": url, "tmp": str(tmp_path)}


def write(tmp: str, name: str, doc: dict[str, Any]) -> str:
    path = Path(tmp) / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_apply_list_show_delete_round_trip_bumps_the_version(env: dict[str, str]) -> None:
    first = run("schedules", "apply", "-f", SEED)
    assert first.exit_code == 0, first.output
    assert "version 1" in first.output
    doc = json.loads(Path(SEED).read_text())
    doc["windows"][0]["priority"] = 20  # a change: a new version
    again = run("schedules", "apply", "-f", write(env["tmp"], "edited.json", doc))
    assert "version 2" in again.output
    listed = json.loads(run("schedules", "list", "--format", "json").output)
    assert [(r["name"], r["version"]) for r in listed] == [("gpu-pool-h100-shared", 2)]
    shown = json.loads(run("schedules", "show", "gpu-pool-h100-shared").output)
    assert shown["windows"][0]["duration"] == "10h"
    assert run("schedules", "delete", "gpu-pool-h100-shared").exit_code == 0
    assert json.loads(run("schedules", "list", "--format", "json").output) == []
    missing = run("schedules", "show", "gpu-pool-h100-shared")
    assert missing.exit_code == 1 and "schedule_not_found" in missing.output


def test_a_deploy_owned_by_another_schedule_is_refused_with_the_owner_and_nothing_is_written(
    env: dict[str, str],
) -> None:
    assert run("schedules", "apply", "-f", SEED).exit_code == 0
    other = json.loads(Path(SEED).read_text())
    other["name"] = "thief"
    result = run("schedules", "apply", "-f", write(env["tmp"], "thief.json", other))
    assert result.exit_code == 1
    assert "targets[0].model_deploy_id: target_owned" in result.output
    assert "gpu-pool-h100-shared" in result.output
    assert "Traceback" not in result.output
    assert [r.name for r in Store.open(env["url"]).list_schedules()] == ["gpu-pool-h100-shared"]


def test_replicas_on_a_deploy_kind_that_cannot_scale_fail_at_apply(env: dict[str, str]) -> None:
    doc = json.loads(Path(SEED).read_text())
    doc["targets"].append(
        {"model_deploy_id": "md-bge-embed", "default_state": "running", "default_replicas": 2}
    )
    pool = Path(POOL10).read_text().replace("kind: deployment", "kind: kserve")
    pool_path = Path(env["tmp"]) / "pool.yaml"
    pool_path.write_text(pool)
    result = run(
        "schedules", "apply", "-f", write(env["tmp"], "s.json", doc), "--pool", str(pool_path)
    )
    assert result.exit_code == 1
    assert "targets[2].model_deploy_id: unsupported_scale_for_mode" in result.output
    assert Store.open(env["url"]).list_schedules() == []


def test_gate_defaults_to_off_and_status_reports_it(env: dict[str, str]) -> None:
    run("schedules", "apply", "-f", SEED)
    assert "execution gate: off" in run("gate").output
    assert run("gate", "enforce").exit_code == 0
    doc = json.loads(run("status", "--format", "json").output)
    assert doc["gate"] == "enforce"
    assert run("gate", "sideways").exit_code == 2


def test_apply_now_runs_a_pass_at_the_runtime_clock_and_status_shows_each_target(
    env: dict[str, str],
) -> None:
    run("schedules", "apply", "-f", SEED, at=TUESDAY_1000)
    run("gate", "enforce", at=TUESDAY_1000)
    result = run("apply-now", "gpu-pool-h100-shared", at=TUESDAY_1000)
    assert result.exit_code == 0, result.output
    assert "gpu-pool-h100-shared v1: opened 1 plan(s), refused 0" in result.output
    assert "md-llama70b: capacity_wait (insufficient_capacity)" in result.output
    doc = json.loads(run("status", "gpu-pool-h100-shared", "--format", "json").output)
    targets = {t["target"]: t for t in doc["targets"]}
    # Tuesday 10:00 +07 is business hours (08:00-18:00): B is released first, A waits for its GPUs
    assert {t: (s["phase"], s["intent"]["source"]) for t, s in targets.items()} == {
        "md-llama70b": ("capacity_wait", "business-hours"),
        "md-qwen32b": ("releasing", "business-hours"),
    }
    assert {(s["interval_start"], s["interval_end"]) for s in targets.values()} == {
        ("2026-10-20T01:00:00+00:00", "2026-10-20T11:00:00+00:00")
    }
    # the pass ran at GPS_CLOCK
    assert {s["since"] for s in targets.values()} == {"2026-10-20T03:00:00+00:00"}
    last = targets["md-qwen32b"]["last_action"]
    assert last == {"step": "stop", "state": "accepted", "reason": None}


def test_apply_now_outside_business_hours_finds_the_pool_converged(env: dict[str, str]) -> None:
    run("schedules", "apply", "-f", SEED)
    run("gate", "enforce")
    assert run("apply-now", "gpu-pool-h100-shared").exit_code == 0
    doc = json.loads(run("status", "gpu-pool-h100-shared", "--format", "json").output)
    seen = {
        t["target"]: (t["phase"], t["intent"]["desired_state"], t["interval_start"])
        for t in doc["targets"]
    }
    assert seen == {
        "md-llama70b": ("converged", "stopped", "2026-10-19T11:00:00+00:00"),
        "md-qwen32b": ("converged", "running", "2026-10-19T11:00:00+00:00"),
    }
    assert Store.open(env["url"]).list_actions() == []  # nothing to do: A is stopped and B runs


def test_apply_now_answers_busy_with_exit_3_while_another_pass_holds_the_lock(
    env: dict[str, str],
) -> None:
    run("schedules", "apply", "-f", SEED)
    store = Store.open(env["url"])
    lease = store.lock(LOCK_NAME, holder="another-engine", now=instant(MONDAY_1900), ttl_s=600)
    with lease as held:
        assert held.acquired
        result = run("apply-now", "gpu-pool-h100-shared")
        assert result.exit_code == 3
        assert "409 busy" in result.output
        # the same lease, read by a CLI whose clock is past its TTL, no longer blocks
        later = (instant(MONDAY_1900) + timedelta(seconds=601)).isoformat()
        taken_over = run("apply-now", "gpu-pool-h100-shared", at=later)
        assert taken_over.exit_code == 0, taken_over.output


def test_apply_now_queue_records_a_request_for_the_dagster_sensor(env: dict[str, str]) -> None:
    run("schedules", "apply", "-f", SEED)
    result = run("apply-now", "gpu-pool-h100-shared", "--queue")
    assert result.exit_code == 0
    assert [r.schedule for r in Store.open(env["url"]).pending_apply_now()] == [
        "gpu-pool-h100-shared"
    ]


def test_dry_run_warns_about_alias_blocked_before_anything_happens(env: dict[str, str]) -> None:
    doc = json.loads(Path(SEED).read_text())
    doc["targets"][0]["default_allow_downtime"] = False
    doc["windows"][1]["states"][0].pop("allow_downtime")
    path = write(env["tmp"], "no-consent.json", doc)
    # Monday 2026-10-19 09:00: A must run; the pool file has it stopped; at 18:00 it must stop
    # without consent.
    result = run(
        "dry-run", path, "--at", "2026-10-19T18:30:00+07:00", "--format", "json", "--pool", POOL10
    )
    assert result.exit_code == 0, result.output
    rep = json.loads(result.output)
    # the pool holds A stopped, so at 18:30 nothing releases; B would start: capacity fits (A is not
    # running)
    assert [s["step"] for s in rep["steps"]] == []
    rep2 = json.loads(
        run("dry-run", path, "--at", "2026-10-19T09:00:00+07:00", "--format", "json").output
    )
    assert {(s["target"], s["step"]) for s in rep2["steps"]} == {
        ("md-qwen32b", "stop"),
        ("md-llama70b", "start"),
    }
    assert rep2["intents"]["md-llama70b"]["desired_state"] == "running"
    assert Store.open(env["url"]).list_schedules() == []


def test_dry_run_flags_a_stop_of_an_aliased_deploy_without_consent(env: dict[str, str]) -> None:
    pool = yaml.safe_load(Path(POOL10).read_text())
    states = {"md-llama70b": "running", "md-qwen32b": "stopped"}
    for d in pool["deploys"]:
        d["state"] = states.get(d["id"], d["state"])
    pool_path = Path(env["tmp"]) / "pool.yaml"
    pool_path.write_text(yaml.safe_dump(pool))
    doc = json.loads(Path(SEED).read_text())
    doc["targets"][0]["default_allow_downtime"] = False
    rep = json.loads(
        run(
            "dry-run",
            write(env["tmp"], "s.json", doc),
            "--at",
            "2026-10-19T19:00:00+07:00",
            "--format",
            "json",
            "--pool",
            str(pool_path),
        ).output
    )
    kinds = {w["kind"] for w in rep["warnings"]}
    assert "alias_blocked" in kinds
    stop = next(s for s in rep["steps"] if s["step"] == "stop")
    assert stop["refused"] == "alias_blocked"


def test_simulate_json_has_the_contract_keys(env: dict[str, str]) -> None:
    result = run(
        "simulate",
        SEED,
        "--pool",
        POOL10,
        "--from",
        "2026-10-19T06:00:00+07:00",
        "--to",
        "2026-10-19T20:00:00+07:00",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    for key in (
        "events",
        "final_status",
        "max_gpus_in_use",
        "capacity",
        "downtime_seconds",
        "gpu_idle_seconds",
    ):
        assert key in doc
    assert doc["capacity"] == 10
    assert doc["max_gpus_in_use"] == 10
    assert set(doc["events"][0]) >= {"at", "target", "kind", "phase", "reason"}
    assert doc["final_status"]["md-qwen32b"]["phase"] == "converged"
    assert doc["downtime_seconds"]["md-llama70b"] > 0  # A starts at 08:00 and needs its start delay


def test_simulate_draws_a_png(env: dict[str, str]) -> None:
    out = Path(env["tmp"]) / "sim.png"
    result = run(
        "simulate",
        SEED,
        "--pool",
        POOL10,
        "--from",
        "2026-10-19T06:00:00+07:00",
        "--to",
        "2026-10-19T10:00:00+07:00",
        "--png",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("at", "serving"),
    [
        (MONDAY_1900, {"md-llama70b": ("converged", "0.0"), "md-qwen32b": ("converged", "1.0")}),
        (
            TUESDAY_1000,
            {"md-llama70b": ("capacity_wait", "0.0"), "md-qwen32b": ("releasing", "1.0")},
        ),
    ],
    ids=["outside-business-hours", "inside-business-hours"],
)
def test_metrics_are_prometheus_text(
    env: dict[str, str], at: str, serving: dict[str, tuple[str, str]]
) -> None:
    run("schedules", "apply", "-f", SEED, at=at)
    run("gate", "enforce", at=at)
    run("apply-now", "gpu-pool-h100-shared", at=at)
    text = run("metrics").output
    assert "# TYPE deployschedule_target_serving gauge" in text
    gauge = "deployschedule_target_serving"
    lines = [line for line in text.splitlines() if line.startswith(gauge + "{")]
    assert lines == [
        f'{gauge}{{phase="{phase}",schedule="gpu-pool-h100-shared",target="{target}"}} {value}'
        for target, (phase, value) in sorted(serving.items())
    ]
    assert "deployschedule_boundary_lag_seconds_count 1.0" in text


def test_db_upgrade_reports_the_head_revision(env: dict[str, str]) -> None:
    from gps_dagster.store import migrate

    result = run("db", "upgrade")
    assert result.exit_code == 0
    assert f"revision {migrate.head_revision()}" in result.output


def test_engine_run_once_performs_one_pass_at_the_runtime_clock_and_records_status(
    env: dict[str, str],
) -> None:
    run("schedules", "apply", "-f", SEED, at=TUESDAY_1000)
    run("gate", "enforce", at=TUESDAY_1000)
    result = run("engine", "run", "--once", at=TUESDAY_1000)
    assert result.exit_code == 0, result.output
    head = "2026-10-20T03:00:00+00:00 gate=enforce busy=False plans=1 steps="
    assert result.output.startswith(head)
    statuses = Store.open(env["url"]).list_status("gpu-pool-h100-shared")
    phases = {s.deploy_id: s.phase for s in statuses}
    assert phases == {"md-llama70b": "capacity_wait", "md-qwen32b": "releasing"}
    assert {s.interval_start for s in statuses} == {instant("2026-10-20T08:00:00+07:00")}


def test_engine_run_refuses_to_loop_on_a_frozen_clock(env: dict[str, str]) -> None:
    result = run("engine", "run", "--interval", "1")
    assert result.exit_code == 2
    assert "GPS_CLOCK is a frozen instant" in result.output and "--once" in result.output


def test_db_prune_deletes_finished_history_older_than_asked_and_says_what(
    env: dict[str, str],
) -> None:
    from gps_dagster.store import tables as t

    run("schedules", "apply", "-f", SEED, at=TUESDAY_1000)
    assert run("gate", "enforce", at=TUESDAY_1000).exit_code == 0
    assert run("engine", "run", "--once", at=TUESDAY_1000).exit_code == 0
    store = Store.open(env["url"])
    events = len(store.list_events(limit=10_000))
    assert events > 0
    kept = run("db", "prune", at=TUESDAY_1000)  # default 30 days: all of it is recent
    assert kept.exit_code == 0, kept.output
    assert "0 plan(s), 0 step(s), 0 event(s)" in kept.output
    later = (instant(TUESDAY_1000) + timedelta(days=2)).isoformat()
    pruned = run("db", "prune", "--older-than", "1", at=later)
    assert pruned.exit_code == 0, pruned.output
    assert f"{events} event(s)" in pruned.output and "older than 1 day(s)" in pruned.output
    assert store.list_events(limit=10_000) == []
    with store.engine.connect() as conn:  # the plan a status names is kept
        assert conn.execute(t.transitions.select()).first() is not None
