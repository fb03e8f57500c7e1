"""``apply-now`` prints each step once, with where the pass left it (issue 9 §2.12).

The pass behind ``apply-now`` reports a step every time it touches it: a release
submitted and then observed in the same pass came out twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from gps_dagster.cli.main import cli
from tests.engine.harness import A, B, local, make_world, seed_pool

SWAP = {
    "name": "always-a",
    "timezone": "UTC",
    "targets": [
        {"model_deploy_id": A, "default_state": "running"},
        {"model_deploy_id": B, "default_state": "stopped", "default_allow_downtime": True},
    ],
}
"""No window: the intent is the defaults at every instant, so the test holds at any wall time."""


def test_apply_now_prints_each_step_once(tmp_path: Path) -> None:
    pool = seed_pool()
    pool["sim"]["timings"] = {"stop_grace_s": 0, "publish_lag_s": 0, "start_delay_s": 0}
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool))
    (tmp_path / "swap.json").write_text(json.dumps(SWAP))
    where = ["--db", f"sqlite:///{tmp_path / 'gps.sqlite'}"]
    runner = CliRunner()
    applied = runner.invoke(
        cli,
        [
            "schedules",
            "apply",
            "-f",
            str(tmp_path / "swap.json"),
            *where,
            "--pool",
            str(tmp_path / "pool.yaml"),
        ],
    )
    assert applied.exit_code == 0, applied.output
    assert runner.invoke(cli, ["gate", "enforce", *where]).exit_code == 0
    result = runner.invoke(
        cli, ["apply-now", "always-a", *where, "--pool", str(tmp_path / "pool.yaml")]
    )
    assert result.exit_code == 0, result.output
    steps = [line.strip() for line in result.output.splitlines() if line.startswith("  ")]
    assert sorted(s.split(":")[0] for s in steps) == [A, B], result.output
    assert f"{B}: converged" in steps, result.output  # stopped at once: its last state


def test_step_lines_keep_the_first_position_and_the_last_state(sqlite_url: str) -> None:
    from gps_dagster.cli.apply_now_cmd import step_lines

    w = make_world(sqlite_url, start=local("2026-10-19T08:00:05"))
    w.engine.run_pass(schedule=w.spec.name, trigger="apply_now")  # B's stop accepted, A waits
    w.clock.advance(150)  # B stops and its GPUs are published; no pass in between
    w.pool.settle()
    report = w.engine.run_pass(schedule=w.spec.name, trigger="apply_now")
    lines = step_lines(report.steps)
    assert len(report.steps) > len(lines)  # the pass did report steps more than once
    assert lines == [f"  {B}: converged", f"  {A}: accepted"]
