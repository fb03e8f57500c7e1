"""Issue 18 item 16, the remainder: what the chart does on upgrade and under load, rendered.

Dagster's own schema migrated by the pre-install/pre-upgrade hook (and the command really run on
PostgreSQL with the hook's dagster.yaml), the daemon's liveness in minutes, a compute-log choice
Dagster can load, startup probes / priority class / hostname spread on every component, and the
image's writable HOME and digest-pinned base.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dagster._serdes.config_class import ConfigurableClassData

from tests.helm.helm_support import CHART, FULLNAME, REPO, ci, container, dagster_yaml, env_of, one
from tests.helm.helm_support import template as render

COMPONENTS = {
    "engine": "engine",
    "api": "api",
    "code-location": "codeLocation",
    "webserver": "dagsterWebserver",
    "daemon": "dagsterDaemon",
}


def _hook_docs() -> list[dict[str, Any]]:
    return render([ci("default")])


def test_the_migrate_hook_migrates_dagsters_schema_with_its_own_copy_of_dagster_yaml() -> None:
    docs = _hook_docs()
    job = one(docs, "Job", "migrate")
    cm = one(docs, "ConfigMap", "migrate-instance")
    # a hook created before the Job (install: the release's ConfigMaps do not exist yet)
    notes = cm["metadata"]["annotations"]
    assert notes["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(notes["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    own = yaml.safe_load(cm["data"]["dagster.yaml"])
    assert own["storage"] == dagster_yaml(docs)["storage"]  # the instance's database, the same way
    assert "run_launcher" not in own  # K8sRunLauncher would need credentials the Job has not
    script = container(job)["command"][-1]
    assert script.index("gps-dagster db upgrade") < script.index("exec dagster instance migrate")
    spec = job["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in container(job)["volumeMounts"]}
    home = env_of(container(job))["DAGSTER_HOME"]
    assert mounts[f"{home}/dagster.yaml"]["subPath"] == "dagster.yaml" and "/tmp" in mounts
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts[f"{home}/dagster.yaml"]["name"]]["configMap"]["name"] == (
        f"{FULLNAME}-migrate-instance"
    )
    # with an existing Dagster its schema is not ours: only the product's tables
    existing = render([ci("existing-dagster")])
    script = container(one(existing, "Job", "migrate"))["command"][-1]
    assert "dagster instance migrate" not in script and "gps-dagster db upgrade" in script
    assert not [d for d in existing if d["metadata"]["name"].endswith("migrate-instance")]


def test_the_hooks_dagster_instance_migrate_runs_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    """The hook's command with the rendered dagster.yaml against a real database: a fresh
    install (no Dagster tables yet) and a re-run (an upgrade with nothing to migrate)."""
    cm = one(_hook_docs(), "ConfigMap", "migrate-instance")
    (tmp_path / "dagster.yaml").write_text(cm["data"]["dagster.yaml"])
    url = pg_url.replace("postgresql://", "postgresql+psycopg2://", 1)
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "DAGSTER_PG_URL": url}
    dagster = str(Path(sys.executable).with_name("dagster"))
    for _ in range(2):
        done = subprocess.run(
            [dagster, "instance", "migrate"], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stderr


def test_the_daemon_liveness_fires_in_minutes_after_a_startup_window() -> None:
    daemon = container(one(_hook_docs(), "Deployment", "daemon"))
    tolerance = int(env_of(daemon)["DAGSTER_DAEMON_HEARTBEAT_TOLERANCE"])
    live = daemon["livenessProbe"]
    assert live["exec"]["command"] == ["dagster-daemon", "liveness-check"]
    assert daemon["startupProbe"]["exec"]["command"] == ["dagster-daemon", "liveness-check"]
    assert "initialDelaySeconds" not in live  # the startup probe holds it off
    worst = tolerance + live["periodSeconds"] * live["failureThreshold"]
    assert worst <= 600, f"a wedged daemon lives {worst} s"  # Dagster's default: 1800 s + probes


@pytest.mark.parametrize("choice", ["NoOpComputeLogManager", "LocalComputeLogManager", "custom"])
def test_the_compute_log_manager_is_a_choice_dagster_loads(choice: str, tmp_path: Path) -> None:
    sets = {
        "computeLogManager.type": choice,
        "computeLogManager.localBaseDir": str(tmp_path / "logs"),
    }
    if choice == "custom":  # any importable manager; here Dagster's local one by module/class
        sets |= {
            "computeLogManager.custom.module": "dagster._core.storage.local_compute_log_manager",
            "computeLogManager.custom.class": "LocalComputeLogManager",
            "computeLogManager.custom.config.base_dir": str(tmp_path / "custom"),
        }
    logs = dagster_yaml(render([ci("default")], sets))["compute_logs"]
    manager = ConfigurableClassData(
        logs["module"], logs["class"], yaml.safe_dump(logs.get("config") or {})
    ).rehydrate()
    assert type(manager).__name__ == (
        "LocalComputeLogManager" if choice != "NoOpComputeLogManager" else "NoOpComputeLogManager"
    )
    if choice == "LocalComputeLogManager":
        assert logs["config"]["base_dir"] == str(tmp_path / "logs")


def test_a_custom_compute_log_manager_without_its_class_is_refused() -> None:
    from tests.helm.helm_support import helm

    done = helm(
        "template",
        "r",
        str(CHART),
        "-f",
        str(ci("default")),
        "--set",
        "computeLogManager.type=custom",
        check=False,
    )
    assert done.returncode != 0 and "computeLogManager.custom: module and class" in done.stderr
    done = helm(
        "template",
        "r",
        str(CHART),
        "-f",
        str(ci("default")),
        "--set",
        "computeLogManager.type=S3",
        check=False,
    )
    assert done.returncode != 0 and "computeLogManager" in done.stderr


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_every_component_has_a_startup_probe_a_priority_class_value_and_hostname_spread(
    component: str,
) -> None:
    key = COMPONENTS[component]
    docs = render([ci("default")], {f"{key}.priorityClassName": "gpu-platform"})
    spec = one(docs, "Deployment", component)["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "gpu-platform"
    assert "startupProbe" in spec["containers"][0]
    if component == "daemon":  # one per instance: nothing to spread
        assert "topologySpreadConstraints" not in spec
        return
    [spread] = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
    assert (
        "priorityClassName"
        not in one(_hook_docs(), "Deployment", component)["spec"]["template"]["spec"]
    )  # empty by default: the cluster's default class


def test_the_image_has_a_writable_home_and_a_digest_pinned_base() -> None:
    text = (REPO / "Containerfile").read_text()
    base = re.search(r"^ARG BASE=(\S+)$", text, re.M)
    assert base is not None and re.fullmatch(r"[\w./:-]+@sha256:[0-9a-f]{64}", base.group(1))
    env = re.search(r"^ENV (.+?)(?=^\S)", text, re.M | re.S)
    assert env is not None and re.search(r"\bHOME=/tmp\b", env.group(1))
    # /tmp is an emptyDir in every pod of the chart (the root is read-only)
    for component in COMPONENTS:
        mounts = container(one(_hook_docs(), "Deployment", component))["volumeMounts"]
        assert "/tmp" in {m["mountPath"] for m in mounts}, component
