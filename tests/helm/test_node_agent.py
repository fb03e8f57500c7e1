"""Issue 19 item 3 (the chart's part): the node agent's DaemonSet, its namespace and its RBAC.

The agent mounts the kubelet's pod-resources directory read-only (hostPath), as dcgm-exporter's
chart does (NVIDIA/dcgm-exporter ``deployment/templates/daemonset.yaml``: volume
``pod-gpu-resources``, ``readOnly: true``, ``mountPath: /var/lib/kubelet/pod-resources``; values
``kubeletPath``). The Kubernetes docs recommend mounting the directory, not the socket, so a
kubelet restart's new socket is seen (blog "Kubelet podresources API GA", 2023). hostPath is
forbidden by Pod Security baseline and restricted, so the agent lives in a namespace of its own
labelled ``privileged``; everything else restricted asks for still holds.

Rendered offline, then its RBAC objects applied to the real control plane: the real authorizer
must allow exactly ``list`` and ``patch`` of pods in the scoped namespaces, and the agent's own
write path, run with the ServiceAccount's token, must work there and be refused elsewhere.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gps_dagster.backends.k8s import names, nodeagent, rbac
from gps_dagster.ports import CoreError, Permanent
from tests.helm.helm_support import CHART, binary, ci, helm, template, validate
from tests.helm.psa import restricted
from tests.helm.test_chart_identities import allowed
from tests.k8s.cluster import kube, unique

SOCKET_DIR = "/var/lib/kubelet/pod-resources"
HOST_PATH_ONLY = {
    "spec.volumes[1].hostPath: hostPath volumes are forbidden",
    "spec.volumes[1]: ['hostPath'] not allowed",
    "spec.securityContext.runAsUser: must not be 0",
    "spec.containers[0].securityContext.runAsNonRoot: must be true (pod or container)",
}
"""What the restricted profile refuses in the agent's pod: the hostPath and root, nothing else."""


def _agent(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith("node-agent")]


def test_off_by_default_and_the_witness_source_is_passed_to_every_process() -> None:
    docs = template([ci("default")])
    assert not [d for d in docs if "node-agent" in d["metadata"]["name"]]
    env = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-env")
    )
    assert env["data"]["GPS_WITNESS_SOURCE"] == "node_agent"
    off = template([ci("default")], {"gps.witnessSource": "none"})
    env = next(
        d for d in off if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-env")
    )
    assert env["data"]["GPS_WITNESS_SOURCE"] == "none"
    bad = template([ci("default")], {"gps.witnessSource": "guess"}, check=False)
    assert bad == []  # the schema refuses it (helm exits non-zero, nothing rendered)


def test_the_daemonset_reads_podresources_read_only_in_its_privileged_namespace() -> None:
    docs = template([ci("node-agent")])
    assert validate(docs) == []
    (ns,) = _agent(docs, "Namespace") or [d for d in docs if d["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    (ds,) = _agent(docs, "DaemonSet")
    assert ds["metadata"]["namespace"] == ns["metadata"]["name"] != "gps"  # never the release's
    spec = ds["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["command"][:2] == ["gps-dagster", "node-agent"]
    assert (
        c["command"][c["command"].index("--pod-resources-socket") + 1]
        == f"{SOCKET_DIR}/kubelet.sock"
    )
    vol = next(v for v in spec["volumes"] if "hostPath" in v)
    assert vol["hostPath"] == {"path": SOCKET_DIR, "type": "Directory"}
    mount = next(m for m in c["volumeMounts"] if m["name"] == vol["name"])
    assert mount == {"name": vol["name"], "mountPath": SOCKET_DIR, "readOnly": True}
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["GPS_NAMESPACES"]["value"] == "serving,cmp-team,kai-resource-reservation"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": names.GPU, "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert set(restricted(spec)) == HOST_PATH_ONLY
    (sa,) = _agent(docs, "ServiceAccount")
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    assert sa["metadata"]["namespace"] == ns["metadata"]["name"]


def test_its_role_is_list_and_patch_of_pods_bound_only_in_scope() -> None:
    docs = template([ci("node-agent")])
    (role,) = _agent(docs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch"]}]
    bindings = _agent(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == [
        "cmp-team",
        "kai-resource-reservation",
        "serving",
    ]
    assert not _agent(docs, "ClusterRoleBinding")
    no_kai = template([ci("node-agent")], {"nodeAgent.kaiReservationNamespace": ""})
    assert sorted(b["metadata"]["namespace"] for b in _agent(no_kai, "RoleBinding")) == [
        "cmp-team",
        "serving",
    ]
    wide = template([ci("node-agent")], {"rbac.clusterWide": "true", "rbac.namespaces": "null"})
    assert len(_agent(wide, "ClusterRoleBinding")) == 1 and not _agent(wide, "RoleBinding")
    (ds,) = _agent(wide, "DaemonSet")
    env = {e["name"]: e for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPS_NAMESPACES"]["value"] == ""


def test_a_dcgm_source_needs_no_host_path() -> None:
    docs = template(
        [ci("node-agent")], {"nodeAgent.dcgmUrl": "http://dcgm-exporter.gpu-operator:9400/metrics"}
    )
    (ds,) = _agent(docs, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert not [v for v in spec["volumes"] if "hostPath" in v]
    cmd = spec["containers"][0]["command"]
    assert "--pod-resources-socket" not in cmd and cmd[cmd.index("--dcgm-url") + 1].endswith(
        ":9400/metrics"
    )


class Static:
    """A witness source with fixed answers (what PodResources would list)."""

    name = "podresources"

    def __init__(self, found: nodeagent.Devices) -> None:
        self.found = found

    def devices(self) -> nodeagent.Devices:
        return self.found


def test_the_agents_identity_may_do_exactly_what_its_sync_needs(
    k8s_cluster: str, tmp_path: Path
) -> None:
    admin = kube()
    sfx = unique("")
    agent_ns, serving, kai_ns, other = f"na-{sfx}", f"srv-{sfx}", f"kai-{sfx}", f"oth-{sfx}"
    made = [agent_ns, serving, kai_ns, other]
    release = f"n{sfx}"
    values = tmp_path / "v.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "rbac": {"namespaces": [serving]},
                "nodeAgent": {
                    "enabled": True,
                    "namespace": agent_ns,
                    "kaiReservationNamespace": kai_ns,
                },
            }
        )
    )
    out = helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        "gps",
        "-f",
        str(ci("default")),
        "-f",
        str(values),
        "--kube-version",
        "1.20.2",
    ).stdout
    kinds = {"Namespace", "ServiceAccount", "ClusterRole", "RoleBinding"}
    docs = [
        d
        for d in yaml.safe_load_all(out)
        if d
        and d["kind"] in kinds
        and (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "node-agent"
    ]
    for ns in (serving, kai_ns, other):
        admin.call(
            admin.core.create_namespace, {"metadata": {"name": ns}}, what="ns", mutating=True
        )
    (ns_doc,) = [d for d in docs if d["kind"] == "Namespace"]
    admin.call(
        admin.core.create_namespace, ns_doc, what="agent ns", mutating=True
    )  # first, as helm does
    manifest = tmp_path / "agent.yaml"
    manifest.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] != "Namespace"]))
    done = subprocess.run(
        [binary("kubectl"), "--kubeconfig", k8s_cluster, "apply", "-f", str(manifest)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    try:
        sa = next(d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount")
        user = f"system:serviceaccount:{agent_ns}:{sa}"
        spaces = ["*", agent_ns, serving, kai_ns, other, "kube-system"]
        universe = [
            (ns, "", r, v)
            for ns in spaces
            for r in ("pods", "pods/exec", "secrets", "configmaps")
            for v in ("get", "list", "watch", "create", "update", "patch", "delete")
        ]
        universe += [("*", "", "nodes", v) for v in ("get", "list", "patch")]
        seen = {c for c in universe if allowed(admin, user, c)}
        assert seen == {(ns, "", "pods", v) for ns in (serving, kai_ns) for v in ("list", "patch")}

        # the agent's own sync, as that identity: works in scope, refused cluster-wide
        node = f"gpu-{sfx}"
        pod = {
            "metadata": {"name": "m-0"},
            "spec": {
                "nodeName": node,
                "automountServiceAccountToken": False,
                "containers": [{"name": "server", "image": "x"}],
            },
        }
        rbac.service_account_token(
            admin, serving, account="default"
        )  # 1.20 refuses pods until the namespace's token exists
        admin.call(admin.core.create_namespaced_pod, serving, pod, what="pod", mutating=True)
        config = yaml.safe_load(Path(k8s_cluster).read_text())["clusters"][0]["cluster"]
        me = rbac.as_identity(
            config["server"],
            config["certificate-authority"],
            rbac.service_account_token(admin, agent_ns, account=sa),
        )
        source = Static({(serving, "m-0"): {"server": ("GPU-1",)}})
        assert nodeagent.publish(me, node, source, namespaces=[serving, kai_ns]) == 1
        got = admin.call(admin.core.read_namespaced_pod, "m-0", serving, what="read")
        assert got["metadata"]["annotations"][names.agent_device_annotation("server")] == "GPU-1"
        with pytest.raises(Permanent, match="forbidden"):
            nodeagent.publish(me, node, source)  # every namespace: not its scope
    finally:
        rbac_api = client.RbacAuthorizationV1Api(admin.api_client)
        for d in docs:
            if d["kind"] == "ClusterRole":
                with contextlib.suppress(CoreError):
                    admin.call(
                        rbac_api.delete_cluster_role,
                        d["metadata"]["name"],
                        what="rm",
                        mutating=True,
                    )
        for ns in made:
            with contextlib.suppress(CoreError):
                admin.call(admin.core.delete_namespace, ns, what="rm ns", mutating=True)
