"""The adapter's least-privilege manifests (``rbac.yaml``) with their bindings for a scope.

``rbac.yaml`` holds the ServiceAccount and the roles; this module renames the system namespace
and the account if asked and adds the bindings: the capacity ClusterRole (reads) is always bound
cluster-wide; the deploy reads and writes are bound cluster-wide when the adapter watches every
namespace, else by one RoleBinding per namespace of its scope (``GPS_NAMESPACES``), so it cannot
touch workloads anywhere else; the holder pods only where reservations live; a read-only
identity gets the reads alone.
"""

# Decisions embodied here (docs/decisions.md):
# * “The adapter's RBAC is one file”

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


READ_ROLES = ("gps-dagster-deploys-read",)
WRITE_ROLES = ("gps-dagster-deploys-write",)
HOLDER_ROLE = "gps-dagster-holders"


def _subject(system: str, account: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": account, "namespace": system}


def _binding(
    kind: str,
    name: str,
    role_kind: str,
    role: str,
    subject: dict[str, str],
    namespace: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role},
        "subjects": [subject],
    }


def _bind(
    role: str, where: Sequence[str], subject: dict[str, str], system: str
) -> list[dict[str, Any]]:
    """``role`` (a ClusterRole) in each namespace of ``where``; cluster-wide when it is empty."""
    name = f"{subject['name']}-{role.removeprefix('gps-dagster-')}"
    if not where:
        return [_binding("ClusterRoleBinding", f"{name}-{system}", "ClusterRole", role, subject)]
    return [_binding("RoleBinding", name, "ClusterRole", role, subject, ns) for ns in where]


def manifests(
    *,
    system: str = names.POLICY_NAMESPACE,
    scope: Sequence[str] = (),
    holder_namespaces: Sequence[str] | None = None,
    account: str = SERVICE_ACCOUNT,
    readonly: bool = False,
) -> list[dict[str, Any]]:
    """Everything to apply: account, roles, and the bindings of ``account`` in ``system``.

    ``scope``: the workload namespaces (empty = every namespace); ``holder_namespaces``: where the
    GPS holder pods may be created and deleted (None = ``scope``); ``readonly``: the reads only
    (capacity, deploys), for status / dry-run / pool show identities.
    """
    out = []
    for doc in documents():
        doc = dict(doc, metadata=dict(doc["metadata"]))
        if doc["kind"] == "ServiceAccount":
            doc["metadata"]["name"] = account
        if doc["metadata"].get("namespace"):
            doc["metadata"]["namespace"] = system
        out.append(doc)
    subject = _subject(system, account)
    out += _bind("gps-dagster-capacity", (), subject, system)
    for role in READ_ROLES:
        out += _bind(role, scope, subject, system)
    if readonly:
        return out
    for role in WRITE_ROLES:
        out += _bind(role, scope, subject, system)
    holders = scope if holder_namespaces is None else holder_namespaces
    out += _bind(HOLDER_ROLE, holders, subject, system)
    out.append(
        _binding(
            "RoleBinding",
            f"{account}-policy",
            "Role",
            "gps-dagster-policy",
            subject,
            system,
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


def service_account_token(
    kube: Kube, namespace: str, *, timeout_s: float = 30, account: str = SERVICE_ACCOUNT
) -> str:
    """The token of ``account`` (Kubernetes 1.20 keeps it in a Secret)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for s in kube.items(kube.core.list_namespaced_secret, namespace, what="list secrets"):
            notes = s["metadata"].get("annotations") or {}
            if (
                s.get("type") == "kubernetes.io/service-account-token"
                and notes.get("kubernetes.io/service-account.name") == account
                and s.get("data")
            ):
                return base64.b64decode(s["data"]["token"]).decode()
        if time.monotonic() > deadline:
            raise TimeoutError(f"no token Secret for {namespace}/{account} after {timeout_s} s")
        time.sleep(0.1)


def as_identity(server: str, ca_file: str, token: str) -> Kube:
    """A client acting as ``token`` only: a fresh Configuration, not a copy of the kubeconfig's."""
    cfg = client.Configuration(
        host=server, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"}
    )
    cfg.ssl_ca_cert = ca_file
    return Kube(client.ApiClient(cfg))
