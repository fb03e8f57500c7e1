"""The CLI takes its settings and its clock from the composition root: ``GPS_CLOCK`` reaches
every command that reads "now" (in process and as a subprocess), every command that touches the
core accepts ``--backend --kubeconfig --context``, and a bad setting exits 1 with the setting,
the reason and the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gps_dagster.store import Store
from tests.cli.cli_support import TUESDAY_1000, instant, run
from tests.fake_k8s_backend import FakeK8sBackend

ROOT = Path(__file__).parents[2]
SEED = str(ROOT / "examples" / "seed-schedule.json")
POOL10 = str(ROOT / "examples" / "seed-pool-10.yaml")
RESERVATION = str(ROOT / "examples" / "gpu42-reservation.yaml")
CORE_COMMANDS = [
    ["schedules", "apply"],
    ["apply-now"],
    ["dry-run"],
    ["engine", "run"],
    ["pool", "show"],
]


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'gps.sqlite'}"
    monkeypatch.setenv("GPS_DB_URL", url)
    monkeypatch.setenv("GPS_POOL_FILE", POOL10)
    return url


@pytest.mark.parametrize("command", CORE_COMMANDS, ids=" ".join)
def test_every_command_that_touches_the_core_accepts_the_backend_options(
    command: list[str],
) -> None:
    result = run(*command, "--help")
    assert result.exit_code == 0, result.output
    for option in ("--backend [sim|kubernetes]", "--kubeconfig", "--context"):
        assert option in result.output, f"{' '.join(command)} lacks {option}"


def test_schedules_apply_and_gate_stamp_the_runtime_clock(db: str) -> None:
    assert run("schedules", "apply", "-f", SEED, at=TUESDAY_1000).exit_code == 0
    assert run("gate", "enforce", at=TUESDAY_1000).exit_code == 0
    store = Store.open(db)
    record = store.get_schedule("gpu-pool-h100-shared")
    assert record.created_at == record.updated_at == instant(TUESDAY_1000)
    assert (
        run("schedules", "delete", "gpu-pool-h100-shared", at="2026-10-20T11:00:00+07:00").exit_code
        == 0
    )
    events = store.list_events(limit=1000)
    assert {e.at for e in events if e.kind.startswith("gate")} == {instant(TUESDAY_1000)}
    assert max(e.at for e in events) == instant("2026-10-20T11:00:00+07:00")  # the delete's event


def test_dry_run_evaluates_at_the_runtime_clock_without_at(db: str) -> None:
    result = run("dry-run", SEED, "--format", "json", at=TUESDAY_1000)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["at"] == TUESDAY_1000
    assert doc["intents"]["md-llama70b"]["desired_state"] == "running"  # business hours on Tuesday
    assert {(s["target"], s["step"]) for s in doc["steps"]} == {
        ("md-qwen32b", "stop"),
        ("md-llama70b", "start"),
    }


def test_reservations_are_stamped_with_the_runtime_clock_without_at(db: str) -> None:
    assert run("reservations", "create", "-f", RESERVATION, at=TUESDAY_1000).exit_code == 0
    shown = json.loads(run("reservations", "show", "rsv-gpu42-shared", "--format", "json").output)
    assert shown["created_at"] == "2026-10-20T03:00:00+00:00"
    assert shown["history"][0]["at"] == "2026-10-20T03:00:00+00:00"
    assert (
        run("reservations", "release", "rsv-gpu42-shared", at="2026-10-20T12:00:00+07:00").exit_code
        == 0
    )
    shown = json.loads(run("reservations", "show", "rsv-gpu42-shared", "--format", "json").output)
    assert shown["history"][-1] == {"at": "2026-10-20T05:00:00+00:00", "state": "RELEASED"}


def test_pool_show_reads_the_pool_at_the_runtime_clock(db: str) -> None:
    doc = json.loads(
        run("pool", "show", "--pool", POOL10, "--format", "json", at=TUESDAY_1000).output
    )
    assert doc["at"] == "2026-10-20T03:00:00+00:00"
    run("schedules", "apply", "-f", SEED, at=TUESDAY_1000)  # loads the pool into the store
    stored = json.loads(
        run("pool", "show", "--format", "json", at="2026-10-20T11:00:00+07:00").output
    )
    assert stored["at"] == "2026-10-20T04:00:00+00:00"


def test_a_subprocess_of_the_cli_reads_gps_clock(db: str) -> None:
    env = dict(os.environ, GPS_CLOCK=TUESDAY_1000)
    proc = subprocess.run(
        [sys.executable, "-m", "gps_dagster.cli.main", "dry-run", SEED, "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["at"] == TUESDAY_1000


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "GPS_CLOCK",
            "tomorrow",
            "GPS_CLOCK: invalid_clock — 'tomorrow' is neither 'wall' nor an RFC 3339",
        ),
        ("GPS_CLOCK", "2026-10-20T10:00:00", "GPS_CLOCK: naive_datetime"),
        ("GPS_BACKEND", "k8s", "GPS_BACKEND: invalid_backend — 'k8s' is not a backend"),
        ("GPS_POOL_FILE", "/nonexistent/pool.yaml", "GPS_POOL_FILE: pool_file_not_found"),
        ("GPS_NAMESPACES", "Team_A", "GPS_NAMESPACES: invalid_namespace"),
    ],
)
def test_a_bad_setting_exits_1_with_the_setting_reason_and_fix(
    db: str, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    result = run("apply-now", "gpu-pool-h100-shared")
    assert result.exit_code == 1, result.output
    assert expected in result.output
    assert "Traceback" not in result.output


def test_validate_reads_no_setting_its_verdict_needs_no_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPS_BACKEND", "k8s")
    assert run("validate", SEED).exit_code == 0  # validate opens no store and no backend
    monkeypatch.setenv("GPS_CLOCK", "soon")  # nor a clock: its verdict never depends on today
    assert run("validate", SEED).exit_code == 0


def test_a_bad_clock_stops_a_command_that_reads_the_clock(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPS_CLOCK", "soon")
    bad = run("gate", "enforce")
    assert bad.exit_code == 1 and "GPS_CLOCK: invalid_clock" in bad.output
    assert Store.open(db).get_gate() == "off"  # nothing written


def test_kubernetes_without_a_kubeconfig_or_the_backend_is_refused_clearly(
    db: str, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = run("apply-now", "gpu-pool-h100-shared", "--backend", "kubernetes")
    assert missing.exit_code == 1 and "GPS_KUBECONFIG: kubeconfig_missing" in missing.output
    wrong = run(
        "apply-now", "gpu-pool-h100-shared", "--backend", "kubernetes", "--kubeconfig", "/nope"
    )
    assert wrong.exit_code == 1 and "kubeconfig: kubeconfig_not_found" in wrong.output
    monkeypatch.setitem(sys.modules, "gps_dagster.backends.k8s", None)  # not installed
    absent = run(
        "apply-now", "gpu-pool-h100-shared", "--backend", "kubernetes", "--kubeconfig", kubeconfig
    )
    assert absent.exit_code == 1, absent.output
    assert (
        "GPS_BACKEND: backend_unavailable" in absent.output and "GPS_BACKEND=sim" in absent.output
    )
    assert "Traceback" not in absent.output
    assert (
        run("apply-now", "x", "--backend", "openstack").exit_code == 2
    )  # not a choice: usage error


def test_the_cli_hands_the_kubernetes_core_its_options_and_runs_the_engine_on_it(
    db: str, kubeconfig: str, fake_k8s: FakeK8sBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPS_NAMESPACES", "team-a")
    assert (
        run(
            "schedules",
            "apply",
            "-f",
            SEED,
            "--backend",
            "kubernetes",
            "--kubeconfig",
            kubeconfig,
            at=TUESDAY_1000,
        ).exit_code
        == 0
    )
    run("gate", "enforce", at=TUESDAY_1000)
    result = run(
        "apply-now",
        "gpu-pool-h100-shared",
        "--backend",
        "kubernetes",
        "--kubeconfig",
        kubeconfig,
        "--context",
        "kind-gpu",
        at=TUESDAY_1000,
    )
    assert result.exit_code == 0, result.output
    call = fake_k8s.calls[-1]
    assert (call["kubeconfig"], call["context"], call["namespaces"]) == (
        kubeconfig,
        "kind-gpu",
        ("team-a",),
    )
    assert call["clock"].now() == instant(TUESDAY_1000)
    log = fake_k8s.cores[-1].operation_log()  # type: ignore[attr-defined]
    (op,) = [o for o in log if o.deploy_id == "md-qwen32b"]
    assert op.kind.value == "stop"  # the engine's pass acted through the backend's core


def test_pool_show_on_kubernetes_asks_the_core_the_composition_root_builds(
    db: str, kubeconfig: str, fake_k8s: FakeK8sBackend
) -> None:
    """The cluster listing itself is tested on the real control plane (tests/k8s); here: the
    command goes through build_core, and a core without a node listing is a clear refusal."""
    result = run("pool", "show", "--backend", "kubernetes", "--kubeconfig", kubeconfig)
    assert result.exit_code == 1
    assert "--backend: pool_show_unsupported" in result.output and "kubectl" in result.output
    assert [c["kubeconfig"] for c in fake_k8s.calls] == [kubeconfig]
