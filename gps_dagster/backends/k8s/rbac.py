"""The adapter's least-privilege manifests (``rbac.yaml``) with their bindings for a scope.

``rbac.yaml`` holds the ServiceAccount and the roles; this module renames the system namespace
if asked and adds the bindings: the capacity ClusterRole is always bound cluster-wide; the deploy
role is bound cluster-wide when the adapter watches every namespace, else by one RoleBinding per
namespace of its scope (``GPS_NAMESPACES``), so it cannot touch workloads anywhere else.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from importlib import resources
from typing import Any

import yaml
from kubernetes import client

from gps_dagster.backends.k8s import names
from gps_dagster.backends.k8s.api import Kube
from gps_dagster.ports import CoreError

SERVICE_ACCOUNT = "gps-dagster"
RBAC_GROUP = "rbac.authorization.k8s.io"


def documents() -> list[dict[str, Any]]:
    """The objects of ``rbac.yaml`` as written."""
    text = (
        resources.files("gps_dagster.backends.k8s")
        .joinpath("rbac.yaml")
        .read_text(encoding="utf-8")
    )
    return [d for d in yaml.safe_load_all(text) if d]


def rules() -> dict[str, list[dict[str, Any]]]:
    """Role name → its rules."""
    return {d["metadata"]["name"]: d["rules"] for d in documents() if "rules" in d}


def _subject(system: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": system}


def _binding(
    kind: str, name: str, role_kind: str, role: str, system: str, namespace: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role},
        "subjects": [_subject(system)],
    }


def manifests(
    *, system: str = names.POLICY_NAMESPACE, scope: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Everything to apply: account, roles, and bindings for ``scope`` (empty = every namespace)."""
    out = []
    for doc in documents():
        if doc["metadata"].get("namespace"):
            doc["metadata"]["namespace"] = system
        out.append(doc)
    out.append(
        _binding(
            "ClusterRoleBinding",
            f"gps-dagster-capacity-{system}",
            "ClusterRole",
            "gps-dagster-capacity",
            system,
        )
    )
    out.append(
        _binding("RoleBinding", "gps-dagster-policy", "Role", "gps-dagster-policy", system, system)
    )
    if not scope:
        out.append(
            _binding(
                "ClusterRoleBinding",
                f"gps-dagster-deploys-{system}",
                "ClusterRole",
                "gps-dagster-deploys",
                system,
            )
        )
    for ns in scope:
        out.append(
            _binding(
                "RoleBinding",
                "gps-dagster-deploys",
                "ClusterRole",
                "gps-dagster-deploys",
                system,
                ns,
            )
        )
    return out


def apply(kube: Kube, docs: Sequence[dict[str, Any]]) -> None:
    """Create the objects (an existing one is kept): for tests, the demo and quick setups."""
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    namespaced = {
        "ServiceAccount": kube.core.create_namespaced_service_account,
        "Role": rbac.create_namespaced_role,
        "RoleBinding": rbac.create_namespaced_role_binding,
    }
    cluster = {
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
    }
    for doc in docs:
        kind = doc["kind"]
        fn: Any = namespaced.get(kind) or cluster[kind]
        args: tuple[Any, ...] = (doc["metadata"]["namespace"],) if kind in namespaced else ()
        try:
            kube.call(
                fn,
                *args,
                doc,
                what=f"create {doc['kind']} {doc['metadata']['name']}",
                mutating=True,
            )
        except CoreError as exc:
            if "already exists" not in str(exc):
                raise


def service_account_token(kube: Kube, namespace: str, *, timeout_s: float = 30) -> str:
    """The token of the adapter's ServiceAccount (Kubernetes 1.20 keeps it in a Secret)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for s in kube.items(kube.core.list_namespaced_secret, namespace, what="list secrets"):
            notes = s["metadata"].get("annotations") or {}
            if (
                s.get("type") == "kubernetes.io/service-account-token"
                and notes.get("kubernetes.io/service-account.name") == SERVICE_ACCOUNT
                and s.get("data")
            ):
                return base64.b64decode(s["data"]["token"]).decode()
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no token Secret for {namespace}/{SERVICE_ACCOUNT} after {timeout_s} s"
            )
        time.sleep(0.1)


def as_identity(server: str, ca_file: str, token: str) -> Kube:
    """A client acting as ``token`` only: a fresh Configuration, not a copy of the kubeconfig's."""
    cfg = client.Configuration(
        host=server, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"}
    )
    cfg.ssl_ca_cert = ca_file
    return Kube(client.ApiClient(cfg))
