"""``gps-dagster schedules reclaim``: the documented fix of ``ineligible{deploy_replaced}``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gps_dagster.cli.main import cli
from gps_dagster.store import Store
from tests.cli.cli_support import MONDAY_1900, instant
from tests.engine.harness import B, seed_schedule

OLD = "Deployment team/md-qwen32b uid=0001"


def test_reclaim_forgets_the_pin_and_says_what_comes_next(sqlite_url: str, tmp_path: Path) -> None:
    doc = tmp_path / "s.json"
    doc.write_text(json.dumps(seed_schedule()))
    runner = CliRunner()
    assert (
        runner.invoke(cli, ["schedules", "apply", "-f", str(doc), "--db", sqlite_url]).exit_code
        == 0
    )
    store = Store.open(sqlite_url)
    store.pin("gpu-pool-h100-shared", B, OLD, now=instant(MONDAY_1900))
    done = runner.invoke(
        cli, ["schedules", "reclaim", "gpu-pool-h100-shared", B, "--db", sqlite_url]
    )
    assert done.exit_code == 0, done.output
    assert (
        f"{B} re-claimed (was {OLD})" in done.output
        and "apply-now gpu-pool-h100-shared" in done.output
    )
    assert store.pins_for([B]) == {B: None}
    unknown = runner.invoke(
        cli, ["schedules", "reclaim", "gpu-pool-h100-shared", "md-x", "--db", sqlite_url]
    )
    assert (
        unknown.exit_code == 1
        and "not_claimed" in unknown.output
        and "Traceback" not in unknown.output
    )
    missing = runner.invoke(cli, ["schedules", "reclaim", "no-such", B, "--db", sqlite_url])
    assert missing.exit_code == 1 and "Traceback" not in missing.output
    store.engine.dispose()
