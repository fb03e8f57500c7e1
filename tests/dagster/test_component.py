"""gps_dagster as a Dagster Component, loaded through the real ``dg`` CLI (SPEC R-DAG-10).

The example project (examples/dg-project) names the store, the backend, the pool and a folder
of schedule files in its defs.yaml. ``dg`` lists the component, checks and lists the
definitions — the same as ``definitions.py`` builds from the same store — and launches a
timeline backfill on the instance of DAGSTER_HOME.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster_support import EXAMPLES, faketime

from gps_dagster.dagster_defs import GpsResource, build_definitions, names
from gps_dagster.dagster_defs.component import GpsComponent

DG = str(Path(sys.executable).with_name("dg"))
PROJECT = EXAMPLES / "dg-project"
AFTER = datetime(2026, 10, 26, 1, 0, tzinfo=UTC)


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    copy = tmp_path / "dg-project"
    shutil.copytree(PROJECT, copy)
    defs = copy / "gps_dg_example" / "defs" / "gps" / "defs.yaml"
    defs.write_text(
        defs.read_text().replace("../../../../demo-pool.yaml", str(EXAMPLES / "demo-pool.yaml"))
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GPS_", "DAGSTER_"))},
        "GPS_DB_URL": f"sqlite:///{tmp_path / 'gps.sqlite'}",
        "GPS_CLOCK": AFTER.isoformat(),
        "DAGSTER_HOME": str(home),
    }
    return copy, env


def _dg(project: Path, env: dict[str, str], *args: str, prefix: list[str] | None = None) -> Any:
    return subprocess.run(
        [*(prefix or []), DG, *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_dg_lists_the_component_and_checks_the_example_project(
    project: tuple[Path, dict[str, str]],
) -> None:
    path, env = project
    listed = _dg(path, env, "list", "components", "--json")
    assert listed.returncode == 0, listed.stderr
    keys = {c["key"] for c in json.loads(listed.stdout)["items"]}
    assert "gps_dagster.dagster_defs.component.GpsComponent" in keys
    checked = _dg(path, env, "check", "defs")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr


def test_the_component_builds_the_same_definitions_as_definitions_py(
    project: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, env = project
    out = _dg(path, env, "list", "defs", "--json")
    assert out.returncode == 0, out.stderr
    via_dg = json.loads(out.stdout)
    # the component applied its schedule folder to the store; definitions.py reads that store
    for key in ("GPS_DB_URL", "GPS_CLOCK"):
        monkeypatch.setenv(key, env[key])
    gps = GpsResource(pool_file=str(EXAMPLES / "demo-pool.yaml"))
    repo = build_definitions(gps).get_repository_def()
    assert {a["asset_key"] for a in via_dg["assets"]} == {
        k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()
    }
    assert {j["name"] for j in via_dg["jobs"]} == {
        j.name for j in repo.get_all_jobs() if not j.name.startswith("__")
    }
    assert {s["name"] for s in via_dg["schedules"]} == {s.name for s in repo.schedule_defs}
    assert {s["name"] for s in via_dg["sensors"]} == {s.name for s in repo.sensor_defs}
    assert "demo_swap__business_hours__start" in {s["name"] for s in via_dg["schedules"]}


def test_dg_launch_backfills_the_timeline_on_the_instance(
    project: tuple[Path, dict[str, str]],
) -> None:
    path, env = project
    out = _dg(
        path,
        env,
        "launch",
        "--assets",
        names.TIMELINE_ASSET,
        "--partition-range",
        "2026-10-19-00:00...2026-10-19-05:00",
        prefix=faketime(AFTER),
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        (run,) = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.SUCCESS
        partitions = instance.get_materialized_partitions(dg.AssetKey(names.TIMELINE_ASSET))
        assert len(partitions) == 6


def test_an_invalid_schedule_file_is_a_clear_error_and_nothing_is_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gps_dagster.dagster_defs.component import apply_schedule_dir
    from gps_dagster.store import Store

    folder = tmp_path / "schedules"
    folder.mkdir()
    shutil.copy(EXAMPLES / "demo-schedule.json", folder / "a.json")
    (folder / "b.json").write_text('{"name": "broken", "timezone": "Mars/Olympus"}')
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    monkeypatch.setenv("GPS_CLOCK", AFTER.isoformat())
    gps = GpsResource(db_url=url, pool_file=str(EXAMPLES / "demo-pool.yaml"))
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="timezone"):
        apply_schedule_dir(gps, folder)
    assert Store.open(url).list_schedules() == []  # a.json was valid, yet nothing was written
    assert GpsComponent.model_fields["schedule_dir"].description
