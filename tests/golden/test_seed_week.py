"""Golden replay of the seed week: the engine's decisions, pinned.

``seed-week.simulate.json`` is the output of::

    gps-dagster simulate examples/seed-schedule.json --pool examples/seed-pool-10.yaml \\
        --from 2026-10-19T00:00:00+07:00 --to 2026-10-26T00:00:00+07:00 --format json

checked in as it came out (as temporal's replayer tests replay checked-in histories). The test
runs the same command in process and compares the two documents as indented JSON, so any change
to what the engine decides — which steps, in which order, at which virtual instant, with which
idempotency key, which phases and events, the GPU line — fails with a unified diff that points
at the changed lines.

Nothing is stripped, because nothing in the document depends on the run: the simulation runs on
its own virtual clock from ``--from`` (never the wall clock, so the result is the same under
``faketime`` at any instant), its store is private to the run, transition ids are hashes of
(schedule, version, interval) and operation ids count from 1 in the simulated core. Two runs and
a run under ``faketime`` produced byte-identical output when the file was recorded; should a
field ever become run-dependent (a wall timing, a random id), pin or strip it in ``decisions``
below and say why here.

A deliberate change of behaviour regenerates the file:
``python -m tests.golden.test_seed_week`` (then review the diff in git like any other change).
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gps_dagster.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("seed-week.simulate.json")
ARGS = [
    "simulate",
    str(ROOT / "examples" / "seed-schedule.json"),
    "--pool",
    str(ROOT / "examples" / "seed-pool-10.yaml"),
    "--from",
    "2026-10-19T00:00:00+07:00",
    "--to",
    "2026-10-26T00:00:00+07:00",
    "--format",
    "json",
]
SHOWN = 120
"""Diff lines shown on a failure (the rest is counted)."""


def replay() -> dict[str, Any]:
    """The seed week's simulate document, produced now by the real CLI in process."""
    result = CliRunner().invoke(cli, ARGS, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def decisions(doc: dict[str, Any]) -> str:
    """The document as compared: indented JSON, keys in the order the report writes them."""
    return json.dumps(doc, indent=2) + "\n"


def readable_diff(want: str, got: str) -> str:
    lines = list(
        difflib.unified_diff(
            want.splitlines(),
            got.splitlines(),
            fromfile=f"golden {GOLDEN.name}",
            tofile="replayed now",
            lineterm="",
            n=4,
        )
    )
    more = len(lines) - SHOWN
    return "\n".join(lines[:SHOWN] + ([f"... {more} more diff lines"] if more > 0 else []))


def test_the_seed_week_replays_to_the_golden_document() -> None:
    want = decisions(json.loads(GOLDEN.read_text(encoding="utf-8")))
    got = decisions(replay())
    assert got == want, (
        "the engine's decisions on the seed week changed (regenerate with "
        "`python -m tests.golden.test_seed_week` only if the change is intended):\n"
        + readable_diff(want, got)
    )


def test_the_golden_document_holds_the_seed_swaps() -> None:
    """The pinned file is the seed week itself, not an empty or truncated run."""
    doc = json.loads(GOLDEN.read_text(encoding="utf-8"))
    swaps = [t for t in doc["transitions"] if t["steps"]]
    assert len(swaps) == 12  # Mon–Fri 08:00 and 18:00, and Wednesday's maintenance in and out
    assert doc["max_gpus_in_use"] <= doc["capacity"] == 10
    assert {t: s["phase"] for t, s in doc["final_status"].items()} == {
        "md-llama70b": "converged",
        "md-qwen32b": "converged",
    }


def test_a_changed_decision_shows_as_a_readable_diff() -> None:
    """The failure message names the changed field, so a reviewer sees what moved."""
    doc = json.loads(GOLDEN.read_text(encoding="utf-8"))
    moved = json.loads(json.dumps(doc))
    moved["transitions"][1]["steps"][0]["submitted_at"] = "2026-10-19T08:05:00+07:00"
    text = readable_diff(decisions(doc), decisions(moved))
    assert '-          "submitted_at": "2026-10-19T08:00:00+07:00",' in text
    assert '+          "submitted_at": "2026-10-19T08:05:00+07:00",' in text


if __name__ == "__main__":
    GOLDEN.write_text(decisions(replay()), encoding="utf-8")
    sys.stdout.write(f"wrote {GOLDEN}\n")
