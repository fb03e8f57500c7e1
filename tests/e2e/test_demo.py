"""The real ``make demo``, acted on from a second terminal and looked at in headless Chromium.

One demo for the module (its tests run in order on one worker: ``--dist loadfile``): the README's
demo-time commands act on it; a swap reads as one run group; the catalog shows both targets'
deploy assets with their phases and the reservation with its members, with no dialog in the
way; an injected ``alias_blocked`` turns the deploy's check red and a manual start yellow
(drift); stopping it leaves no process, no env file and no unfinished run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from demo_support import (
    CHROMIUM_FLAGS,
    Demo,
    readme_demo_commands,
    runs,
    start_demo,
    stop_demo,
    tag,
    wait_for,
)

from gps_dagster.dagster_defs import names
from gps_dagster.demo.devserver import REPO

pytestmark = [pytest.mark.slow]
A, B = "md-llama70b", "md-qwen32b"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    root = tmp_path_factory.mktemp("demo")
    running = start_demo(root / "var")
    try:
        yield running
    finally:
        stop_demo(running)


def _instance(demo: Demo) -> Any:
    import dagster as dg

    return dg.DagsterInstance.from_config(demo.env()["DAGSTER_HOME"])


def _asset_job_runs(demo: Demo) -> int:
    import dagster as dg

    with _instance(demo) as instance:
        return int(instance.get_runs_count(dg.RunsFilter(job_name="__ASSET_JOB")))


def _check(out: subprocess.CompletedProcess[str], command: str) -> None:
    text = out.stdout + out.stderr
    if command.startswith("gps-dagster status"):
        assert out.returncode == 0 and "demo-swap" in text and "demo-gpu42" in text, text
    elif command.startswith("gps-dagster pool show"):
        assert out.returncode == 0 and "pool demo-pool" in text, text
    elif command.startswith("gps-dagster reservations list"):
        assert out.returncode == 0 and "rsv-gpu42-shared" in text, text
    elif command.startswith("gps-dagster apply-now"):
        assert re.search(r"apply-now request \d+: (done|busy)", text), text  # the sensor answered
    elif command.startswith("gps-dagster dagster runs"):  # the demo's webserver answered
        none_yet = "no transition run of 'demo-swap' on http://127.0.0.1:" in text
        assert out.returncode == 0 and (text.startswith("RUN ") or none_yet), text
    elif command.startswith("gps-dagster pool stop"):
        assert out.returncode == 0 and f"stop {B}: operation" in text, text
    elif command.startswith("gps-dagster pool start"):
        # accepted, or done already when the simulated pool was faster than the answer
        made = re.search(r"operation \S+ (accepted|done)", text)
        accepted = out.returncode == 0 and made is not None
        refused = out.returncode == 1 and "reservation_overcommitted" in text
        assert accepted or refused, text
    else:
        raise AssertionError(f"no check for a README command: {command}")


def test_the_readme_commands_act_on_the_running_demo(demo: Demo) -> None:
    commands = readme_demo_commands()
    assert commands[0] == ". var/demo/env"
    for command in commands[1:]:
        before = _asset_job_runs(demo)
        out = demo.sh(command)
        if command.startswith(("dagster asset materialize", "dg launch")):
            lines = (out.stdout + out.stderr).strip().splitlines()
            assert out.returncode == 0, out.stdout + out.stderr
            assert len(lines) <= 3 and not any("DEBUG" in ln or "Warning" in ln for ln in lines), (
                lines
            )
            assert (
                _asset_job_runs(demo) == before + 1
            )  # on the demo's instance, not a throw-away one
        else:
            _check(out, command)


def test_a_command_that_misses_the_demo_says_how_to_reach_it(demo: Demo) -> None:
    exe = Path(sys.executable).with_name("gps-dagster")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPS_", "DAGSTER_"))}
    out = subprocess.run(
        [str(exe), "gate"],
        cwd=demo.var.parent,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert "a demo is running" in out.stderr and ". var/demo/env" in out.stderr, out.stderr


def _acquire_run(demo: Demo) -> dict[str, Any] | None:
    done = [
        r
        for r in runs(demo, gps__phase="acquire")
        if r["status"] == "SUCCESS"
        and r["jobName"] == names.ACQUIRE_JOB
        and tag(r, names.TAG_SCHEDULE) == "demo-swap"
    ]
    return done[0] if done else None


GROUP = """
query Group($id: ID!) {
  runGroupOrError(runId: $id) { ... on RunGroup { rootRunId runs { id jobName status } } }
}
"""
STEPS = """
query Steps($id: ID!) {
  runOrError(runId: $id) { ... on Run { stepStats { stepKey status } } }
}
"""


def _browser(demo: Demo, artifacts: Path, visits: list[tuple[str, str, str]]) -> dict[str, str]:
    """Open each (name, path, text to wait for); return each page's text; screenshots."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian chromium is missing: run tools/ensure_chromium.sh"
    texts: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="gps-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1500, "height": 1000},
        )
        try:
            page = context.new_page()
            for name, path, wanted in visits:
                page.goto(f"{demo.url}{path}", wait_until="domcontentloaded")
                page.get_by_text(wanted).first.wait_for(timeout=60_000)
                page.screenshot(path=str(artifacts / f"demo-{name}.png"), full_page=True)
                assert page.get_by_role("dialog").count() == 0, f"a dialog covers {path}"
                texts[name] = page.inner_text("body")
        finally:
            context.close()
    return texts


@pytest.fixture(scope="module")
def artifacts() -> Path:
    path = Path(os.environ.get("GPS_E2E_ARTIFACTS", REPO / "var" / "e2e"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_a_swap_is_one_run_group_and_the_deferred_acquire_is_skipped(
    demo: Demo, artifacts: Path
) -> None:
    acquire = wait_for(lambda: _acquire_run(demo), 300, "a swap with a deferred acquire")
    plan_id = tag(acquire, names.ROOT_RUN_TAG)
    assert plan_id and tag(acquire, names.PARENT_RUN_TAG) == plan_id
    group = demo.gql(GROUP, {"id": plan_id})["runGroupOrError"]
    assert {r["id"] for r in group["runs"]} == {plan_id, acquire["runId"]}

    def plan_steps() -> list[dict[str, Any]] | None:
        # The deferred acquire's run can exist before the plan run's own acquire step is
        # recorded (the full run of 4ef5d25 read its step stats in between: no "acquire" key).
        found = demo.gql(STEPS, {"id": plan_id})["runOrError"]["stepStats"]
        keys = {s["stepKey"].split("[")[0] for s in found}
        return found if {"acquire", "capacity_wait"} <= keys else None

    steps = wait_for(plan_steps, 300, "the plan run's acquire and capacity_wait steps")
    status = {s["stepKey"].split("[")[0]: s["status"] for s in steps}
    assert status["acquire"] == "SKIPPED" and status["capacity_wait"] == "SUCCESS", steps
    texts = _browser(demo, artifacts, [("run-group", f"/runs/{plan_id}", "Re-executions (1)")])
    assert acquire["runId"][:8] in texts["run-group"]


def test_the_catalog_shows_both_targets_with_phases_and_the_reservation_members(
    demo: Demo, artifacts: Path
) -> None:
    import dagster as dg

    def members_observed() -> bool:
        with _instance(demo) as instance:
            records = instance.fetch_observations(
                dg.AssetKey(names.RESERVATIONS_ASSET), limit=1
            ).records
        return bool(records) and "members" in records[0].asset_observation.metadata  # type: ignore[union-attr]

    wait_for(members_observed, 120, "the reservation's members observed")
    texts = _browser(
        demo,
        artifacts,
        [
            ("catalog", "/assets", "deploy / md_qwen32b"),
            ("deploy-a", "/assets/deploy/md_llama70b", "status_version"),
            ("reservation", "/assets/gpu_reservations?view=events", "md-vision-embed"),
        ],
    )
    catalog = texts["catalog"]
    for name in ("deploy / md_llama70b", "deploy / md_qwen32b", "deploy / md_vision_chat"):
        assert name in catalog
    assert "md_bge_embed" not in catalog  # C is in no schedule
    assert re.search(
        r"phase\s+.*\s+(pending|releasing|capacity_wait|acquiring|awaiting_ready|"
        r"converged)",
        texts["deploy-a"],
        re.S,
    )
    assert "rsv-gpu42-shared" in texts["reservation"] and "memory_mib" in texts["reservation"]


def _latest_check_record(demo: Demo, deploy: str) -> Any:
    import dagster as dg

    key = dg.AssetCheckKey(
        dg.AssetKey(["deploy", deploy.replace("-", "_")]), names.CHECK_DEPLOY_PHASE
    )
    with _instance(demo) as instance:
        return instance.get_latest_asset_check_evaluation_record(key)


def _latest_check(demo: Demo, deploy: str) -> Any:
    record = _latest_check_record(demo, deploy)
    return None if record is None else record.evaluation


def _row(demo: Demo, schedule: str, target: str) -> dict[str, Any]:
    out = demo.sh(f"gps-dagster status {schedule} --format json")
    assert out.returncode == 0, out.stderr
    return next(r for r in json.loads(out.stdout)["targets"] if r["target"] == target)


def _converged_running(demo: Demo, schedule: str) -> str | None:
    out = demo.sh(f"gps-dagster status {schedule} --format json")
    rows = json.loads(out.stdout)["targets"] if out.returncode == 0 else []
    running = [
        r["target"]
        for r in rows
        if r["phase"] == "converged" and (r["intent"] or {}).get("desired_state") == "running"
    ]
    return running[0] if running else None


def test_a_manual_stop_after_convergence_is_drift_and_turns_the_check_yellow(demo: Demo) -> None:
    """U1 through the operator command: respected, not reverted, and the check warns.

    The demo swaps every two minutes: when its next boundary falls between the stop and the
    engine's next pass (a loaded machine), the new interval rightly plans again and may want the
    deploy stopped anyway, so the first evaluation after the stop passes. Only then — a passing
    evaluation *and* a new interval — is the scenario replayed in the next interval (at most three
    times); a passing evaluation inside the same interval (the stop reverted) keeps waiting and
    fails at the deadline.
    """
    for _attempt in range(3):
        deploy = wait_for(
            lambda: _converged_running(demo, "demo-gpu42"),
            240,
            "a demo-gpu42 target converged running",
        )
        interval = _row(demo, "demo-gpu42", deploy)["interval_start"]
        before = _latest_check_record(demo, deploy)
        stopped = demo.sh(f"gps-dagster pool stop {deploy}")
        assert stopped.returncode == 0, stopped.stderr

        def seen(deploy: str = deploy, before: Any = before, interval: str = interval) -> Any:
            record = _latest_check_record(demo, deploy)
            if record is None or (before is not None and record.id == before.id):
                return None  # no evaluation since the stop yet
            if not record.evaluation.passed:
                return record.evaluation
            moved = _row(demo, "demo-gpu42", deploy)["interval_start"] != interval
            return "next interval" if moved else None

        outcome = wait_for(seen, 120, f"{deploy}'s phase check warning on drift")
        if outcome == "next interval":
            continue
        assert outcome.severity.value == "WARN", outcome
        assert "drift_detected" in (outcome.description or ""), outcome
        row = _row(demo, "demo-gpu42", deploy)
        if row["interval_start"] == interval:  # same interval: respected, not reverted
            assert row["phase"] == "drift_detected", row
            return
    raise AssertionError("the demo's boundary fell inside every attempt")


def test_an_injected_alias_blocked_turns_the_deploy_check_red(
    demo: Demo, artifacts: Path, tmp_path: Path
) -> None:
    # A running while a new version of demo-swap wants it stopped without consent. First a
    # version without windows holds A running: the demo's two-minute swaps would otherwise race
    # the setup (seen on a loaded machine: its boundary stopped A, with consent, first).
    hold = json.loads((REPO / "examples" / "demo-schedule.json").read_text())
    hold["windows"] = []
    for t in hold["targets"]:
        t["default_state"] = "running" if t["model_deploy_id"] == A else "stopped"
        t["default_allow_downtime"] = True
    (tmp_path / "hold.json").write_text(json.dumps(hold))
    held = demo.sh(f"gps-dagster schedules apply -f {tmp_path / 'hold.json'}")
    assert held.returncode == 0, held.stderr
    demo.sh("gps-dagster apply-now demo-swap --queue --wait 60")

    def a_running() -> bool:
        rows = json.loads(demo.sh("gps-dagster status demo-swap --format json").stdout)["targets"]
        phases = {r["target"]: (r["phase"], (r["intent"] or {}).get("desired_state")) for r in rows}
        return phases.get(A) == ("converged", "running") and phases.get(B, ("",))[0] == "converged"

    wait_for(a_running, 240, "A held running by a version without windows")
    doc = (REPO / "examples" / "demo-schedule.json").read_text()
    doc = re.sub(r'"windows": \[.*\]\s*}', '"windows": []\n}', doc, flags=re.S)
    doc = doc.replace('"default_allow_downtime": true', '"default_allow_downtime": false')
    doc = doc.replace('"default_state": "running"', '"default_state": "stopped"')
    (tmp_path / "no-consent.json").write_text(doc)
    applied = demo.sh(f"gps-dagster schedules apply -f {tmp_path / 'no-consent.json'}")
    assert applied.returncode == 0, applied.stderr
    answer = demo.sh("gps-dagster apply-now demo-swap --queue --wait 60")
    assert "done" in answer.stdout, answer.stdout + answer.stderr

    def red() -> Any:
        ev = _latest_check(demo, A)
        return ev if ev is not None and not ev.passed else None

    evaluation = wait_for(red, 180, "A's phase check failing")
    assert evaluation.severity.value == "ERROR" and "alias_blocked" in (
        evaluation.description or ""
    )
    texts = _browser(
        demo,
        artifacts,
        [
            ("alias-blocked", "/assets/deploy/md_llama70b?view=checks", "phase"),
            ("alias-blocked-events", "/assets/deploy/md_llama70b", "alias_blocked"),
        ],
    )
    assert "Failed" in texts["alias-blocked"]


def test_stopping_the_demo_leaves_nothing_behind(demo: Demo) -> None:
    import dagster as dg

    home = demo.env()["DAGSTER_HOME"]
    left = stop_demo(demo)
    assert left == [], f"processes left behind: {left}"
    assert not demo.env_file.exists()
    unfinished = [
        dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
    ]
    with dg.DagsterInstance.from_config(home) as instance:
        assert instance.get_runs_count(dg.RunsFilter(statuses=unfinished)) == 0
