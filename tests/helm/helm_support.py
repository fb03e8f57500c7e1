"""Helm and the rendered chart, for the chart's tests.

``helm`` and ``kubectl`` come from the cache ``tools/k8s/fetch_helm.py`` fills (``make install``
and ``make test`` run it); a missing binary fails the test with that command, never a skip.
Rendered objects are validated offline with ``kubernetes-validate`` (strict, Kubernetes 1.31).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "gps-dagster"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
KUBE_VERSION = "1.31.0"
RELEASE, NAMESPACE = "r", "gps"
FULLNAME = f"{RELEASE}-gps-dagster"
NO_SCHEMA = {"ServiceMonitor"}
"""Kinds of CRDs kubernetes-validate has no schema for (checked by the tests themselves)."""

RUN_LAUNCHER_RULES = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "list"]},
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
]
"""What K8sRunLauncher does (docs/kubernetes.md, one line per rule): the chart grants exactly
this in the job namespace."""


def cache_bin() -> Path:
    root = os.environ.get("GPS_K8S_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gps_dagster" / "k8s"
    )
    return Path(root) / "bin"


def binary(name: str) -> str:
    path = cache_bin() / name
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            f"{path} is missing: run `.venv/bin/python tools/k8s/fetch_helm.py` "
            "(make install and make test do)"
        )
    return str(path)


def helm(
    *args: str, kubeconfig: str | None = None, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/gps-helm-cache"}
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    done = subprocess.run(
        [binary("helm"), *args], capture_output=True, text=True, env=env, timeout=timeout
    )
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def set_args(sets: Mapping[str, str]) -> list[str]:
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def template(
    values: Sequence[Path] = (),
    sets: Mapping[str, str] | None = None,
    *,
    check: bool = True,
) -> list[dict[str, Any]]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    args += ["--kube-version", KUBE_VERSION]
    for v in values:
        args += ["-f", str(v)]
    done = helm(*args, *set_args(sets or {}), check=check)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def ci(name: str) -> Path:
    return CHART / "ci" / f"{name}-values.yaml"


def validate(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """kubernetes-validate --strict of every object; the errors (empty = all valid)."""
    errors = []
    for doc in docs:
        if doc["kind"] in NO_SCHEMA:
            continue
        try:
            kubernetes_validate.validate(dict(doc), KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    return errors


def objects(docs: Sequence[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def one(docs: Sequence[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    name = f"{FULLNAME}-{component}" if component else FULLNAME
    found = objects(docs, kind)
    assert name in found, f"no {kind} {name}; have {sorted(found)}"
    return found[name]


def container(deployment: Mapping[str, Any]) -> dict[str, Any]:
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def env_of(c: Mapping[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env") or []}


def dagster_yaml(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    cm = one(docs, "ConfigMap", "instance")
    return dict(yaml.safe_load(cm["data"]["dagster.yaml"]))
