"""The ``gps-dagster`` CLI: the timeline contract, validation, exit codes 0/1/2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gps_dagster.cli.main import cli

ROOT = Path(__file__).parents[2]
SEED = str(ROOT / "examples" / "seed-schedule.json")
SCENARIO2 = str(ROOT / "examples" / "scenario2-schedule.json")
POOL10 = str(ROOT / "examples" / "seed-pool-10.yaml")
POOL16 = str(ROOT / "examples" / "seed-pool-16.yaml")
WEEK = ["--from", "2026-10-19T00:00:00+07:00", "--to", "2026-10-26T00:00:00+07:00"]


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _iv(
    day: int, h1: int, day2: int, h2: int, state: str, source: str, allow: bool
) -> dict[str, Any]:
    return {
        "start": f"2026-10-{day:02d}T{h1:02d}:00:00+07:00",
        "end": f"2026-10-{day2:02d}T{h2:02d}:00:00+07:00",
        "desired_state": state,
        "replicas": None,
        "allow_downtime": allow,
        "source": source,
    }


def seed_expected(target: str) -> list[dict[str, Any]]:
    a = target == "md-llama70b"
    on, off = ("running", "stopped") if a else ("stopped", "running")
    rows = [_iv(19, 0, 19, 8, off, "default", a)]
    for day in (19, 20, 21, 22, 23):
        if day == 21:
            rows += [
                _iv(21, 8, 21, 13, on, "business-hours", a),
                _iv(21, 13, 21, 15, off, "maint-wed", a),
                _iv(21, 15, 21, 18, on, "business-hours", a),
            ]
        else:
            rows.append(_iv(day, 8, day, 18, on, "business-hours", a))
        rows.append(
            _iv(day, 18, day + 1 if day < 23 else 26, 8 if day < 23 else 0, off, "default", a)
        )
    return rows


def test_seed_timeline_json_is_the_contract() -> None:
    result = run("timeline", SEED, *WEEK, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc == {
        "schedule": "gpu-pool-h100-shared",
        "timezone": "Asia/Ho_Chi_Minh",
        "from": "2026-10-19T00:00:00+07:00",
        "to": "2026-10-26T00:00:00+07:00",
        "targets": {
            "md-llama70b": seed_expected("md-llama70b"),
            "md-qwen32b": seed_expected("md-qwen32b"),
        },
    }


def test_seed_timeline_with_pool_adds_the_gpu_line() -> None:
    result = run("timeline", SEED, *WEEK, "--format", "json", "--pool", POOL10)
    assert result.exit_code == 0, result.output
    gpu = json.loads(result.output)["gpu"]
    assert gpu[0] == {
        "start": "2026-10-19T00:00:00+07:00",
        "end": "2026-10-19T08:00:00+07:00",
        "desired_gpus": 8,
        "capacity": 10,
    }
    assert max(g["desired_gpus"] for g in gpu) == 10 and len(gpu) == 13
    assert not any("overcommit" in g for g in gpu)


def test_overcommit_is_flagged_and_warned(tmp_path: Path) -> None:
    pool = (
        (ROOT / "examples" / "seed-pool-10.yaml")
        .read_text()
        .replace("gpus_per_replica: 2", "gpus_per_replica: 4")
    )
    (tmp_path / "pool.yaml").write_text(pool)
    result = CliRunner().invoke(
        cli, ["timeline", SEED, *WEEK, "--format", "json", "--pool", str(tmp_path / "pool.yaml")]
    )
    assert result.exit_code == 0
    assert (
        "warning: overcommit: 12 GPUs desired > capacity 10 from 2026-10-19T08:00:00+07:00"
        in result.stderr
    )
    gpu = json.loads(result.stdout)["gpu"]
    assert [g["desired_gpus"] for g in gpu if g.get("overcommit")] == [12] * 6


def test_scenario2_table_and_png(tmp_path: Path) -> None:
    out = tmp_path / "t.png"
    result = run("timeline", SCENARIO2, *WEEK, "--pool", POOL16, "--png", str(out))
    assert result.exit_code == 0, result.output
    assert "target md-llama70b" in result.stdout and "business-hours" in result.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_seed_png(tmp_path: Path) -> None:
    out = tmp_path / "seed.png"
    assert run("timeline", SEED, *WEEK, "--pool", POOL10, "--png", str(out)).exit_code == 0
    assert out.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("mutation", "path", "reason"),
    [
        ({"timezone": "Nowhere/City"}, "timezone", "unknown_timezone"),
        ({"windows.0.cron": "0 0 8 * * 1-5"}, "windows[0].cron", "cron_six_fields"),
        ({"windows.0.cron": "0 8 * * 9"}, "windows[0].cron", "invalid_cron"),
        ({"windows.0.duration": "0m"}, "windows[0].duration", "duration_not_positive"),
        (
            {"windows.1.active_from": "2026-10-21T13:00:00"},
            "windows[1].active_from",
            "naive_datetime",
        ),
        (
            {"windows.0.states.0.model_deploy_id": "md-x"},
            "windows[0].states[0].model_deploy_id",
            "unknown_target",
        ),
        ({"windows.1.name": "business-hours"}, "windows[1].name", "duplicate_window"),
        ({"windows.0.states.1.replicas": 0}, "windows[0].states[1].replicas", "replicas_zero"),
        # two recurring windows of equal priority that meet every Wednesday
        (
            {
                "windows.1": {
                    "name": "lunch",
                    "kind": "recurring",
                    "priority": 10,
                    "cron": "0 12 * * WED",
                    "duration": "1h",
                    "states": [{"model_deploy_id": "md-llama70b", "desired_state": "stopped"}],
                }
            },
            "windows[1].priority",
            "ambiguous_priority",
        ),
    ],
)
def test_bad_inputs_exit_1_with_a_field_path(
    tmp_path: Path, mutation: dict[str, Any], path: str, reason: str
) -> None:
    doc = json.loads(Path(SEED).read_text())
    for dotted, value in mutation.items():
        node: Any = doc
        parts = [int(p) if p.isdigit() else p for p in dotted.split(".")]
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    text = run("validate", str(bad))
    assert text.exit_code == 1 and f"{path}: {reason} — " in text.output
    as_json = run("validate", str(bad), "--format", "json")
    assert as_json.exit_code == 1
    assert [(e["path"], e["reason"]) for e in json.loads(as_json.stdout)["errors"]] == [
        (path, reason)
    ]
    tl = run("timeline", str(bad), *WEEK)
    assert tl.exit_code == 1 and f"{path}: {reason}" in tl.stderr


def test_validate_ok() -> None:
    result = run("validate", SEED)
    assert result.exit_code == 0 and "ok" in result.output
    assert json.loads(run("validate", SCENARIO2, "--format", "json").output) == {
        "source": SCENARIO2,
        "valid": True,
        "errors": [],
    }


def test_yaml_schedule_and_bad_pool(tmp_path: Path) -> None:
    import yaml

    sched = tmp_path / "s.yaml"
    sched.write_text(yaml.safe_dump(json.loads(Path(SEED).read_text())))
    assert run("timeline", str(sched), *WEEK, "--format", "json").exit_code == 0
    pool = tmp_path / "p.yaml"
    pool.write_text("name: p\nnodes: []\n")
    bad = run("timeline", str(sched), *WEEK, "--pool", str(pool))
    assert bad.exit_code == 1 and "nodes" in bad.stderr
    unknown = run("timeline", SEED, *WEEK, "--pool", POOL16)
    assert unknown.exit_code == 1 and "targets[1].model_deploy_id: unknown_deploy" in unknown.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["timeline", SEED, "--from", "2026-10-19T00:00:00", "--to", "2026-10-26T00:00:00+07:00"],
        ["timeline", SEED, "--from", "yesterday", "--to", "2026-10-26T00:00:00+07:00"],
        [
            "timeline",
            SEED,
            "--from",
            "2026-10-26T00:00:00+07:00",
            "--to",
            "2026-10-19T00:00:00+07:00",
        ],
        ["timeline", SEED, "--to", "2026-10-26T00:00:00+07:00"],
        ["timeline", SEED, *WEEK, "--format", "xml"],
        ["validate", "/nonexistent/schedule.json"],
        ["frobnicate"],
        ["validate"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args", [[], ["validate"], ["timeline"]])
def test_help_everywhere(args: list[str]) -> None:
    result = run(*args, "--help")
    assert result.exit_code == 0 and "Usage:" in result.output


def test_console_entry_point_never_prints_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gps_dagster.cli.main", "validate", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "invalid_yaml" in proc.stderr and "Traceback" not in proc.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "gps_dagster.cli.main", "timeline", SEED, *WEEK, "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)["schedule"] == "gpu-pool-h100-shared"
