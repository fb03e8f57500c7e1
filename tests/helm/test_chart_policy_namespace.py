"""``rbac.policyNamespace`` end to end (issue 18 item 13): from the chart's values to the
ConfigMap the adapter reads the GPS scheduling policy from, on the control plane.

The chain: values → the env ConfigMap (``GPS_POLICY_NAMESPACE``) every product process loads →
``runtime.settings_from_env`` → ``runtime.build_runtime`` → ``build_core(policy_namespace=…)`` →
the reservation-bound start renders its pod template from
``<policyNamespace>/gps-dagster-scheduling-policy``. Each link was tested on its own; this test
runs them as one, so dropping any of them fails it.
"""

from __future__ import annotations

from typing import Any

from gps_dagster.backends.k8s import names
from gps_dagster.domain.render import kai
from gps_dagster.ports import DeployState
from gps_dagster.runtime import build_runtime, settings_from_env
from gps_dagster.testing.k8s.pools import KAI_SCHEDULER
from tests.helm.helm_support import ci, objects, one, template
from tests.k8s.test_adapter_on_cluster import Pool, bound_pair
from tests.k8s.test_verdicts import read_deployment


def test_item13_a_non_default_policy_namespace_reaches_the_adapters_policy_read_on_the_cluster(
    k8s_cluster: str, sqlite_url: str
) -> None:
    """The chart is rendered with ``rbac.policyNamespace`` = this pool's own system namespace
    (never ``gps-dagster-system``) whose policy ConfigMap carries a queue template nobody else
    uses; the product, built only from the rendered env (plus the kubeconfig and database a pod
    would get), starts an exclusive reservation-bound deploy, and the template it writes carries
    that queue and scheduler.

    Mutations caught: the env ConfigMap without ``GPS_POLICY_NAMESPACE``, ``settings_from_env``
    dropping it, ``runtime._kubernetes_core`` not passing ``policy_namespace`` (the adapter then
    reads ``gps-dagster-system``: ``scheduling_policy_missing``, or another install's policy and
    not this queue), or the chart granting the policy read in another namespace."""
    p = Pool(bound_pair(), sqlite_url)
    runtime = None
    try:
        system = p.cluster.layout.system
        assert system != names.POLICY_NAMESPACE
        p.admin.merge_patch(
            p.admin.core.patch_namespaced_config_map,
            names.POLICY_CONFIGMAP,
            system,
            body={"data": {"queue_template": "ops-{project}"}},
            what="policy",
        )
        scope = "{" + ",".join(p.cluster.namespaces) + "}"
        docs = template([ci("default")], {"rbac.policyNamespace": system, "rbac.namespaces": scope})
        env = dict(one(docs, "ConfigMap", "env")["data"])
        assert env["GPS_POLICY_NAMESPACE"] == system
        assert env["GPS_NAMESPACES"] == ",".join(p.cluster.namespaces)
        grants = [
            r
            for r in objects(docs, "Role").values()
            if r["metadata"].get("namespace") == system
            and any("configmaps" in rule.get("resources", []) for rule in r.get("rules", []))
        ]
        assert grants, "no Role reading ConfigMaps in the policy namespace"

        settings = settings_from_env(
            {**env, "GPS_DB_URL": sqlite_url, "GPS_KUBECONFIG": k8s_cluster}
        )
        assert settings.policy_namespace == system
        runtime = build_runtime(settings, clock=p.clock)
        core = runtime.core
        op = core.start("x", etag=core.get_deploy("x").etag, idempotency_key="k")
        assert op.deploy_id == "x"
        _, ns, name = p.workload("x")
        written: dict[str, Any] = read_deployment(p, ns, name)["spec"]["template"]
        labels = written["metadata"]["labels"]
        assert written["spec"]["schedulerName"] == KAI_SCHEDULER
        assert str(labels.get(kai.QUEUE_LABEL, "")).startswith("ops-"), labels
        p.cluster.settle()
        assert core.get_deploy("x").state in (DeployState.STARTING, DeployState.READY)
    finally:
        if runtime is not None:
            runtime.close()
        p.close()
