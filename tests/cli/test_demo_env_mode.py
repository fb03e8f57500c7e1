"""Issue 21 item 14: ``var/demo/env`` holds the demo's admin token, so it is 0600, even
rewritten."""

from __future__ import annotations

import stat
from pathlib import Path

from gps_dagster.demo import env as demo_env


def test_the_env_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / demo_env.ENV_FILE
    path.parent.mkdir(parents=True)
    path.write_text("old\n")
    path.chmod(0o644)  # a file left by an older demo
    demo_env.write(path, {"GPS_API_TOKEN": "gpsd_x_secret"}, venv_bin=Path("/venv/bin"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert demo_env.read(path)["GPS_API_TOKEN"] == "gpsd_x_secret"
