"""``gps-dagster reservations …`` through click's runner, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from gps_fixtures import EXAMPLE, GPU42_UUID, uuid_n

from gps_dagster.cli.reservations_cmd import reservations_group

AT = "2026-10-19T08:00:00+07:00"


@pytest.fixture
def run(db_url: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPS_DB_URL", db_url)
    monkeypatch.setenv(
        "GPS_CLOCK", AT
    )  # a write without --at is stamped with it, never the wall clock

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(reservations_group, list(args), catch_exceptions=False)

    return invoke


def test_create_list_show_release_round_trip(run) -> None:  # type: ignore[no-untyped-def]
    got = run("create", "-f", str(EXAMPLE), "--actor", "alice", "--at", AT)
    assert got.exit_code == 0, got.output
    assert (
        "created rsv-gpu42-shared (generation 1)" in got.output
        and "budget 136 582 MiB" in got.output
    )
    listed = run("list")
    assert "rsv-gpu42-shared" in listed.output and "136 582" in listed.output
    doc = json.loads(run("show", "rsv-gpu42-shared", "--format", "json").output)
    assert doc["budget_mib"] == 136582 and doc["gpus"] == [GPU42_UUID]
    assert (
        doc["audit"][0]["actor"] == "alice"
        and doc["history"][0]["at"] == "2026-10-19T01:00:00+00:00"
    )
    assert "history:" in run("show", "rsv-gpu42-shared").output
    released = run("release", "rsv-gpu42-shared", "--at", "2026-10-19T10:00:00+07:00")
    assert released.exit_code == 0 and "RELEASED" in released.output
    assert "rsv-gpu42-shared" not in run("list").output
    assert "rsv-gpu42-shared" in run("list", "--all").output


def test_repin_with_a_stale_generation_exits_1_with_a_fix(run) -> None:  # type: ignore[no-untyped-def]
    run("create", "-f", str(EXAMPLE), "--at", AT)
    ok = run(
        "repin",
        "rsv-gpu42-shared",
        "--gpus",
        uuid_n(5),
        "--generation",
        "1",
        "--actor",
        "bob",
        "--at",
        AT,
    )
    assert ok.exit_code == 0 and "(generation 2)" in ok.output
    stale = run("repin", "rsv-gpu42-shared", "--gpus", uuid_n(6), "--generation", "1", "--at", AT)
    assert stale.exit_code == 1
    assert "stale_generation" in stale.output and "--generation 2" in stale.output
    assert "Traceback" not in stale.output
    doc = json.loads(run("show", "rsv-gpu42-shared", "--format", "json").output)
    assert doc["gpus"] == [uuid_n(5)] and [a["action"] for a in doc["audit"]] == ["create", "repin"]


def test_bad_file_prints_every_problem_and_exits_1(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "id: rsv-x\nnode: n1\ngpu_uuids: [GPU-1]\nnamespace: ns\nmode: mps\ngpu_memory_mib: 1\n"
    )
    got = run("create", "-f", str(bad))
    assert got.exit_code == 1
    assert "gpu_uuids[0]: invalid_gpu_uuid" in got.output and "mode: invalid_value" in got.output
    missing = run("create", "-f", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 1 and "unreadable_file" in missing.output


def test_refusals_exit_1(run) -> None:  # type: ignore[no-untyped-def]
    assert run("show", "nope").exit_code == 1
    assert "reservation_not_found" in run("release", "nope").output
    run("create", "-f", str(EXAMPLE), "--at", AT)
    dup = run("create", "-f", str(EXAMPLE), "--at", AT)
    assert dup.exit_code == 1 and "reservation_exists" in dup.output
    bad_uuid = run("repin", "rsv-gpu42-shared", "--gpus", "GPU-xyz", "--generation", "1")
    assert bad_uuid.exit_code == 1 and "gpus[0]: invalid_gpu_uuid" in bad_uuid.output


def test_usage_errors_exit_2(run) -> None:  # type: ignore[no-untyped-def]
    assert run("repin", "rsv-gpu42-shared", "--gpus", uuid_n(1)).exit_code == 2  # no --generation
    assert run("repin", "rsv-gpu42-shared", "--gpus", uuid_n(1), "--generation", "0").exit_code == 2
    assert run("usage", "--from", "2026-10-19T00:00:00", "--to", AT).exit_code == 2  # naive
    assert run("usage", "--from", AT, "--to", AT).exit_code == 2
    assert run("create").exit_code == 2


def test_usage_reports_billed_and_gpu_hours(run) -> None:  # type: ignore[no-untyped-def]
    run("create", "-f", str(EXAMPLE), "--at", "2026-10-19T00:00:00+00:00")
    run("release", "rsv-gpu42-shared", "--at", "2026-10-19T10:30:00+00:00")
    got = run(
        "usage",
        "--from",
        "2026-10-19T00:00:00+07:00",
        "--to",
        "2026-10-20T00:00:00+07:00",
        "--format",
        "json",
    )
    assert got.exit_code == 0, got.output
    (row,) = json.loads(got.output)["reservations"]
    # billed from 00:00 UTC (inside the range) to 10:30 UTC: 10.5 h, one GPU
    assert (row["gpus"], row["billed_hours"], row["gpu_hours"]) == (1, "10.500000", "10.500000")
    assert (
        "rsv-gpu42-shared"
        in run("usage", "--from", "2026-10-19T00:00:00Z", "--to", "2026-10-20T00:00:00Z").output
    )
