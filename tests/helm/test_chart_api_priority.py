"""The chart's API Priority and Fairness objects: every identity of the release in a level of its
own.

Rendered offline (Kubernetes 1.31: ``flowcontrol.apiserver.k8s.io/v1``, the share named
``nominalConcurrencyShares``) and against the test control plane (1.20: ``helm template
--validate`` reads the server's API versions, so ``v1beta1`` and ``assuredConcurrencyShares``).
On the cluster the objects are applied and a request of the engine's ServiceAccount is answered
with the level's and the schema's UIDs in ``X-Kubernetes-PF-PriorityLevel-UID`` /
``X-Kubernetes-PF-FlowSchema-UID`` (kubernetes.io, "Flow control", Diagnostics): the schema really
captures the product ahead of the built-in ``service-accounts`` one.
"""

# Decisions embodied here (docs/decisions.md):
# * “The chart puts the product's identities in a priority level of their own”

from __future__ import annotations

import contextlib
import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from gps_dagster.backends.k8s import rbac
from gps_dagster.ports import CoreError
from tests.helm.helm_support import (
    CHART,
    FULLNAME,
    NAMESPACE,
    binary,
    ci,
    helm,
    one,
    template,
    validate,
)
from tests.k8s.apf import FLOWCONTROL, wait_in_force
from tests.k8s.cluster import kube, unique

IDENTITIES = {f"{FULLNAME}-{c}" for c in ("engine", "code-location", "api", "runs", "run-launcher")}


def subjects(flow: dict[str, Any]) -> set[tuple[str, str]]:
    (rule,) = flow["spec"]["rules"]
    return {
        (s["serviceAccount"]["namespace"], s["serviceAccount"]["name"]) for s in rule["subjects"]
    }


def test_every_identity_of_the_release_is_in_its_own_limited_level() -> None:
    docs = template([ci("default")])
    level, flow = one(docs, "PriorityLevelConfiguration", ""), one(docs, "FlowSchema", "")
    assert level["apiVersion"] == flow["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
    limited = level["spec"]["limited"]
    assert limited["nominalConcurrencyShares"] == 10 and limited["limitResponse"]["type"] == "Queue"
    assert flow["spec"]["priorityLevelConfiguration"]["name"] == level["metadata"]["name"]
    assert 1000 < flow["spec"]["matchingPrecedence"] < 9000  # ahead of service-accounts (9000)
    assert subjects(flow) == {(NAMESPACE, sa) for sa in IDENTITIES}
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert {name for _, name in subjects(flow)} == accounts  # every account the chart creates
    assert validate([level, flow]) == []


def test_existing_dagster_mode_has_no_run_launcher_subject_and_off_means_none() -> None:
    flow = one(template([ci("existing-dagster")]), "FlowSchema", "")
    assert {n for _, n in subjects(flow)} == IDENTITIES - {f"{FULLNAME}-run-launcher"}
    off = template([ci("default")], {"apiPriority.enabled": "false"})
    assert not [d for d in off if d["kind"] in ("FlowSchema", "PriorityLevelConfiguration")]


def test_a_precedence_behind_the_service_accounts_schema_is_refused_by_the_schema() -> None:
    done = helm(
        "template",
        "r",
        str(CHART),
        "-f",
        str(ci("default")),
        "--set",
        "apiPriority.matchingPrecedence=9500",
        check=False,
    )
    assert done.returncode != 0 and "apiPriority.matchingPrecedence" in done.stderr


def _as(server: str, ca: str, token: str, path: str) -> Any:
    """The answer's headers (case-insensitive: Go writes `X-Kubernetes-Pf-Flowschema-Uid`)."""
    req = urllib.request.Request(server + path, headers={"Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cafile=ca)
    try:
        with urllib.request.urlopen(req, context=context, timeout=10) as resp:
            return resp.headers
    except urllib.error.HTTPError as err:  # a 403 still passed APF (it runs before authorization)
        return err.headers


def test_on_the_cluster_the_engines_requests_land_in_the_charts_level(
    k8s_cluster: str, tmp_path: Path
) -> None:
    admin = kube(k8s_cluster)
    release, ns = f"f{unique('')}", unique("apfc")
    done = helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        ns,
        "-f",
        str(ci("default")),
        "--validate",
        kubeconfig=k8s_cluster,
    )
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    (level,) = [d for d in docs if d["kind"] == "PriorityLevelConfiguration"]
    (flow,) = [d for d in docs if d["kind"] == "FlowSchema"]
    assert level["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1beta1"  # what 1.20 serves
    assert level["spec"]["limited"]["assuredConcurrencyShares"] == 10
    engine_sa = f"{release}-gps-dagster-engine"
    admin.call(admin.core.create_namespace, {"metadata": {"name": ns}}, what="ns", mutating=True)
    manifest = tmp_path / "apf.yaml"
    manifest.write_text(yaml.safe_dump_all([level, flow]))
    group, version = FLOWCONTROL
    try:
        applied = subprocess.run(
            [binary("kubectl"), "--kubeconfig", k8s_cluster, "apply", "-f", str(manifest)],
            capture_output=True,
            text=True,
        )
        assert applied.returncode == 0, applied.stderr
        admin.call(
            admin.core.create_namespaced_service_account,
            ns,
            {"metadata": {"name": engine_sa}},
            what="sa",
            mutating=True,
        )
        wait_in_force(admin, flow["metadata"]["name"])
        token = rbac.service_account_token(admin, ns, account=engine_sa)
        uids = {
            kind: admin.call(
                admin.custom.get_cluster_custom_object,
                group,
                version,
                plural,
                level["metadata"]["name"],
                what=kind,
            )["metadata"]["uid"]
            for kind, plural in (("level", "prioritylevelconfigurations"), ("flow", "flowschemas"))
        }
        cfg = yaml.safe_load(Path(k8s_cluster).read_text())["clusters"][0]["cluster"]
        headers = _as(
            cfg["server"],
            cfg["certificate-authority"],
            token,
            f"/api/v1/namespaces/{ns}/configmaps",
        )
        assert headers.get("X-Kubernetes-PF-PriorityLevel-UID") == uids["level"], headers
        assert headers.get("X-Kubernetes-PF-FlowSchema-UID") == uids["flow"], headers
    finally:
        for plural in ("flowschemas", "prioritylevelconfigurations"):
            with contextlib.suppress(CoreError):
                admin.call(
                    admin.custom.delete_cluster_custom_object,
                    group,
                    version,
                    plural,
                    level["metadata"]["name"],
                    what="cleanup",
                    mutating=True,
                )
        with contextlib.suppress(CoreError):
            admin.call(admin.core.delete_namespace, ns, what="ns", mutating=True)
