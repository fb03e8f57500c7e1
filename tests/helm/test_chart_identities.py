"""Issue 18 item 1: what each ServiceAccount of the chart may do, asked of the real authorizer.

The chart's ServiceAccounts and RBAC objects (``helm template``) are applied with ``kubectl
apply`` to the test control plane; then for every identity, every (verb, resource) of a universe
and every namespace — the workload namespace, the reservation namespace, another tenant's,
``kube-system`` and the release's own — the API server's RBAC authorizer answers a
SubjectAccessReview (what ``kubectl auth can-i --as=system:serviceaccount:…`` asks). The allowed
set must equal the expected table exactly: nothing missing, nothing extra, and every answer
outside the listed namespaces a deny. Run for the default (namespace-scoped) install and for the
explicit ``rbac.clusterWide=true`` one. A pod mounting a Secret in kube-system is really refused.
"""

from __future__ import annotations

import base64
import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gps_dagster.backends.k8s import Kube, rbac
from gps_dagster.ports import CoreError, Permanent
from tests.helm.helm_support import CHART, binary, ci, helm
from tests.k8s.cluster import kube, unique

Check = tuple[str, str, str, str]
"""(namespace or "*" for cluster scope, API group, resource, verb)."""

LWS = "leaderworkerset.x-k8s.io"
RESOURCES = [
    ("apps", "deployments"),
    ("apps", "deployments/scale"),
    (LWS, "leaderworkersets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "jobs/status"),
    ("", "pods"),
    ("", "pods/log"),
    ("", "pods/exec"),
    ("", "services"),
    ("", "resourcequotas"),
    ("", "events"),
    ("autoscaling", "horizontalpodautoscalers"),
    ("", "secrets"),
    ("", "configmaps"),
    ("", "serviceaccounts"),
    ("rbac.authorization.k8s.io", "rolebindings"),
]
CLUSTER = [("", "nodes"), ("", "namespaces"), ("rbac.authorization.k8s.io", "clusterroles")]
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]
POLICY = "gps-dagster-scheduling-policy"

# What each role of the chart grants, written out here (not read from rbac.yaml): widening a
# role in rbac.yaml or the chart fails this table.
CAPACITY = {
    ("*", "", "nodes", "list"),
    ("*", "", "pods", "list"),
    ("*", "", "namespaces", "get"),
    ("*", "", "nodes", "watch"),
    ("*", "", "pods", "watch"),
}  # the watch cache
READ = [
    ("apps", "deployments", "get"),
    ("apps", "deployments", "list"),
    ("apps", "deployments", "watch"),
    (LWS, "leaderworkersets", "get"),
    (LWS, "leaderworkersets", "list"),
    (LWS, "leaderworkersets", "watch"),
    ("apps", "statefulsets", "list"),
    ("apps", "daemonsets", "list"),
    ("batch", "jobs", "list"),
    ("", "services", "list"),
    ("", "services", "watch"),
    ("", "resourcequotas", "list"),
    ("", "resourcequotas", "watch"),  # the quota preflight reads the watch cache
    ("", "events", "list"),
    ("autoscaling", "horizontalpodautoscalers", "list"),
    ("autoscaling", "horizontalpodautoscalers", "watch"),
]
WRITE = [("apps", "deployments", "patch"), (LWS, "leaderworkersets", "patch")]
HOLDERS = [("", "pods", "create"), ("", "pods", "delete")]
LAUNCHER = [
    ("batch", "jobs", "create"),
    ("batch", "jobs", "delete"),
    ("batch", "jobs", "list"),
    ("batch", "jobs/status", "get"),
    ("", "pods", "delete"),
    ("", "pods", "list"),
    ("", "pods/log", "get"),
    ("", "events", "list"),
]


def _in(namespaces: list[str], rules: list[tuple[str, str, str]]) -> set[Check]:
    return {(ns, g, r, v) for ns in namespaces for g, r, v in rules}


class Install:
    """The chart's identities and RBAC on the control plane, in namespaces of their own."""

    def __init__(self, admin: Kube, root: Path, *, cluster_wide: bool) -> None:
        self.admin, self.root = admin, root
        sfx = unique("")
        self.release, self.ns = f"i{sfx}", f"idm-{sfx}"
        self.serving, self.gpu, self.other = f"srv-{sfx}", f"gpu-{sfx}", f"oth-{sfx}"
        self.cluster_wide = cluster_wide
        self.fullname = f"{self.release}-gps-dagster"
        self.namespaces = [self.ns, self.serving, self.gpu, self.other]

    def values(self) -> dict[str, Any]:
        scope = (
            {"clusterWide": True, "namespaces": []}
            if self.cluster_wide
            else {"namespaces": [self.serving, self.gpu]}
        )
        return {"rbac": {**scope, "reservationNamespaces": [self.gpu], "policyNamespace": self.ns}}

    def apply(self) -> list[dict[str, Any]]:
        for ns in self.namespaces:
            self.admin.call(
                self.admin.core.create_namespace,
                {"metadata": {"name": ns}},
                what="namespace",
                mutating=True,
            )
        values = self.root / f"{self.release}.yaml"
        values.write_text(yaml.safe_dump(self.values()))
        done = helm(
            "template",
            self.release,
            str(CHART),
            "--namespace",
            self.ns,
            "-f",
            str(ci("default")),
            "-f",
            str(values),
            "--kube-version",
            "1.20.2",
        )
        kinds = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
        docs = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] in kinds]
        for d in docs:  # as helm install does: the release namespace where none is written
            if not d["kind"].startswith("Cluster"):
                d["metadata"].setdefault("namespace", self.ns)
        manifest = self.root / f"{self.release}-rbac.yaml"
        manifest.write_text(yaml.safe_dump_all(docs))
        done = subprocess.run(
            [binary("kubectl"), "--kubeconfig", self.kubeconfig, "apply", "-f", str(manifest)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        return docs

    kubeconfig = ""

    def close(self, docs: list[dict[str, Any]]) -> None:
        api = client.RbacAuthorizationV1Api(self.admin.api_client)
        for d in docs:
            if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                fn = (
                    api.delete_cluster_role
                    if d["kind"] == "ClusterRole"
                    else (api.delete_cluster_role_binding)
                )
                with contextlib.suppress(CoreError):
                    self.admin.call(fn, d["metadata"]["name"], what="delete", mutating=True)
        for ns in self.namespaces:
            with contextlib.suppress(CoreError):
                self.admin.call(self.admin.core.delete_namespace, ns, what="ns", mutating=True)

    def expected(self) -> dict[str, set[Check]]:
        scope = ["*"] if self.cluster_wide else [self.serving, self.gpu]
        reads = CAPACITY | _in(scope, READ)
        writer = reads | _in(scope, WRITE) | _in([self.gpu], HOLDERS)
        return {
            "engine": writer,
            "api": writer,
            "runs": writer,
            "code-location": reads | _in([self.gpu], [("", "pods", "delete")]),
            "run-launcher": _in([self.ns], LAUNCHER),
        }

    def universe(self) -> list[Check]:
        """Every check asked: "*" is all namespaces (or a cluster-scoped resource)."""
        spaces = ["*", *self.namespaces, "kube-system"]
        out = [(ns, g, r, v) for ns in spaces for g, r in RESOURCES for v in VERBS]
        return out + [("*", g, r, v) for g, r in CLUSTER for v in VERBS]

    def allowed_by_table(self, component: str) -> set[Check]:
        """The universe's checks the table allows: a "*" grant holds in every namespace too."""
        table = self.expected()[component]
        return {c for c in self.universe() if c in table or ("*", *c[1:]) in table}


def allowed(admin: Kube, user: str, check: Check, *, name: str | None = None) -> bool:
    ns, group, resource, verb = check
    res, _, sub = resource.partition("/")
    attrs: dict[str, Any] = {"group": group, "resource": res, "verb": verb}
    if sub:
        attrs["subresource"] = sub
    if ns != "*":
        attrs["namespace"] = ns
    if name:
        attrs["name"] = name
    account_ns = user.split(":")[2]
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "resourceAttributes": attrs,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{account_ns}",
                "system:authenticated",
            ],
        },
    }
    api = client.AuthorizationV1Api(admin.api_client)
    review = admin.call(api.create_subject_access_review, body, what="access review")
    return bool(review["status"].get("allowed"))


def _matrix(install: Install) -> dict[str, set[Check]]:
    out: dict[str, set[Check]] = {}
    for component in install.expected():
        user = f"system:serviceaccount:{install.ns}:{install.fullname}-{component}"
        out[component] = {c for c in install.universe() if allowed(install.admin, user, c)}
    return out


@pytest.fixture(params=[False, True], ids=["default", "cluster-wide"])
def install(request: pytest.FixtureRequest, k8s_cluster: str, tmp_path: Path) -> Iterator[Install]:
    it = Install(kube(), tmp_path, cluster_wide=request.param)
    it.kubeconfig = k8s_cluster
    docs = it.apply()
    try:
        yield it
    finally:
        it.close(docs)


def test_every_service_account_may_do_exactly_its_table_and_nothing_outside(
    install: Install,
) -> None:
    seen = _matrix(install)
    for component in install.expected():
        expected = install.allowed_by_table(component)
        assert seen[component] - expected == set(), f"{component} may do more than it needs"
        assert expected - seen[component] == set(), f"{component} lacks what it needs"
    # the policy read is one ConfigMap by name, for the identities that render
    for component in ("engine", "api", "runs", "code-location", "run-launcher"):
        user = f"system:serviceaccount:{install.ns}:{install.fullname}-{component}"
        check = (install.ns, "", "configmaps", "get")
        assert allowed(install.admin, user, check, name=POLICY) is (
            component in ("engine", "api", "runs")
        ), component
        assert not allowed(install.admin, user, check, name="another")


def test_kubectl_auth_can_i_agrees(install: Install) -> None:
    """The same authorizer through kubectl (impersonating the ServiceAccount)."""

    def can_i(component: str, *args: str) -> bool:
        user = f"system:serviceaccount:{install.ns}:{install.fullname}-{component}"
        done = subprocess.run(
            [
                binary("kubectl"),
                "--kubeconfig",
                install.kubeconfig,
                "auth",
                "can-i",
                *args,
                "--as",
                user,
            ],
            capture_output=True,
            text=True,
        )
        return done.stdout.strip() == "yes"

    assert can_i("engine", "patch", "deployments", "-n", install.serving)
    assert not can_i("code-location", "patch", "deployments", "-n", install.serving)
    assert can_i("engine", "create", "pods", "-n", install.gpu)
    assert not can_i("engine", "create", "pods", "-n", install.serving)
    assert not can_i("engine", "create", "pods", "-n", "kube-system")
    assert not can_i("api", "get", "secrets", "-n", install.ns)
    assert can_i("engine", "patch", "deployments", "-n", install.other) is install.cluster_wide


def _token(admin: Kube, ns: str, account: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for s in admin.items(admin.core.list_namespaced_secret, ns, what="secrets"):
            notes = s["metadata"].get("annotations") or {}
            if notes.get("kubernetes.io/service-account.name") == account and s.get("data"):
                return base64.b64decode(s["data"]["token"]).decode()
        time.sleep(0.2)
    raise AssertionError(f"no token for {ns}/{account}")


def test_a_secret_mounting_pod_in_kube_system_is_refused_to_every_identity(
    install: Install,
) -> None:
    """The issue's own attack: today's adapter could create it (cluster-wide pod create)."""
    cfg = yaml.safe_load(Path(install.kubeconfig).read_text())["clusters"][0]["cluster"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": unique("steal")},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "volumes": [{"name": "s", "secret": {"secretName": "anything"}}],
        },
    }
    for component in ("engine", "api", "runs", "code-location"):
        token = _token(install.admin, install.ns, f"{install.fullname}-{component}")
        identity = rbac.as_identity(cfg["server"], cfg["certificate-authority"], token)
        with pytest.raises(Permanent) as err:
            identity.call(
                identity.core.create_namespaced_pod, "kube-system", pod, what="steal", mutating=True
            )
        assert err.value.http_status == 403, component
