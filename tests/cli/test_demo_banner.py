"""The demo's banner and the README say the same commands (issue 20 §3): the banner offered
``pool stop md-llama70b --allow-downtime`` and ``--wait 30`` where the README (run line by line
by tests/e2e/test_demo.py) says ``pool stop md-qwen32b`` and ``--wait 60``; and a fresh demo
says it removes the previous one's history."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from gps_dagster.demo import main as demo
from gps_dagster.demo.devserver import REPO

sys.path.insert(0, str(REPO / "tests" / "e2e"))
from demo_support import readme_demo_commands


def _banner_commands() -> list[str]:
    text = demo.BANNER.format(url="http://127.0.0.1:3000", api="http://x", env_file="var/demo/env")
    out = []
    for line in text.splitlines():
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command.startswith("gps-dagster "):
            out.append(command)
    return out


def test_every_banner_command_is_a_readme_demo_command() -> None:
    banner = _banner_commands()
    assert len(banner) >= 4
    readme = readme_demo_commands()
    assert [c for c in banner if c not in readme] == []


def test_a_fresh_demo_says_it_removes_the_previous_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    var = tmp_path / "var"
    (var / "dagster_home").mkdir(parents=True)
    (var / "dagster_home" / "old-run").write_text("x")
    monkeypatch.setattr(demo, "seed_database", lambda *a, **k: None)
    args = argparse.Namespace(
        keep=False, var=var, pool=REPO / "examples" / "demo-pool.yaml", schedule=None
    )
    demo.prepare(args)
    said = capsys.readouterr().out
    assert "previous demo's runs and store" in said and "--keep keeps them" in said
    assert not (var / "dagster_home" / "old-run").exists()
    (var / "dagster_home" / "kept").write_text("x")
    demo.prepare(argparse.Namespace(**{**vars(args), "keep": True}))
    assert "removed" not in capsys.readouterr().out
    assert (var / "dagster_home" / "kept").exists()
