"""A product error no command caught ends as one line with reason and fix, exit 1 (no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gps_dagster.cli.main import cli
from gps_dagster.store.errors import StoreUnavailable


def test_a_database_outage_in_a_read_only_command_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def down(*_a: object, **_k: object) -> None:
        raise StoreUnavailable("OperationalError: connection refused")

    monkeypatch.setenv("GPS_DB_URL", f"sqlite:///{tmp_path / 'gps.sqlite'}")
    monkeypatch.setattr("gps_dagster.store.repository.Store.list_schedules", down)
    result = CliRunner().invoke(cli, ["schedules", "list"])
    assert result.exit_code == 1, result.output
    assert "error: store_unavailable" in result.output and "fix:" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
