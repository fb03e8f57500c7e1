"""The chart, rendered offline: lint, Kubernetes schemas, dagster.yaml, RBAC, modes, probes.

``helm lint --strict`` and ``helm template`` run over every ``helm/gps-dagster/ci/*-values.yaml``
(defaults, existing-Dagster mode, engine disabled, ServiceMonitor on, API with a scoped
adapter); every object passes ``kubernetes-validate --strict`` (1.31). The assertions read what
an operator would check: the instance's storage and run launcher (validated by Dagster's own
config schema), that the adapter's roles are rbac.yaml's rules and the run launcher's exactly
the listed verbs, which ServiceAccount each pod runs as, and what each mode installs.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config
from dagster_k8s import K8sRunLauncher
from dagster_k8s.container_context import K8sContainerContext

from gps_dagster.backends.k8s import rbac
from gps_dagster.clocks import VirtualClock
from gps_dagster.store import Store
from gps_dagster.store.tokens import TokenRepository
from tests.helm.helm_support import (
    CHART,
    CI_VALUES,
    FULLNAME,
    KUBE_VERSION,
    NAMESPACE,
    RUN_LAUNCHER_RULES,
    ci,
    container,
    dagster_yaml,
    env_of,
    helm,
    objects,
    one,
    template,
    validate,
)

SECRET = "gps-dagster-postgresql"
LAUNCHER_SA = f"{FULLNAME}-run-launcher"
ENGINE_SA, LOCATION_SA = f"{FULLNAME}-engine", f"{FULLNAME}-code-location"
API_SA, RUNS_SA = f"{FULLNAME}-api", f"{FULLNAME}-runs"


@pytest.fixture(scope="module")
def default_docs() -> list[dict]:
    return template([ci("default")])


def test_every_ci_values_file_is_covered() -> None:
    names = {p.name.removesuffix("-values.yaml") for p in CI_VALUES}
    assert names == {
        "default",
        "existing-dagster",
        "engine-disabled",
        "servicemonitor",
        "api",
        "node-agent",
    }


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_lint_strict_and_every_object_valid_for_kubernetes(values: Path) -> None:
    lint = helm("lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), "-f", str(values))
    assert "0 chart(s) failed" in lint.stdout
    docs = template([values])
    assert validate(docs) == []
    assert len(docs) >= 10


def test_validation_catches_a_broken_object() -> None:
    """The validator is not a rubber stamp: an unknown field of a Deployment fails strict mode."""
    docs = template([ci("default")])
    engine = one(docs, "Deployment", "engine")
    engine["spec"]["template"]["spec"]["containers"][0]["probes"] = {}
    assert any("probes" in e for e in validate([engine]))


def test_dagster_yaml_is_postgres_storage_and_the_k8s_run_launcher(
    default_docs: list[dict], tmp_path: Path
) -> None:
    instance = dagster_yaml(default_docs)
    assert instance["storage"] == {"postgres": {"postgres_url": {"env": "DAGSTER_PG_URL"}}}
    launcher = instance["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")
    config = launcher["config"]
    assert config["job_namespace"] == NAMESPACE
    assert config["job_image"] == "gps-dagster:0.1.0"
    assert config["service_account_name"] == RUNS_SA
    assert config["instance_config_map"] == f"{FULLNAME}-instance"
    assert config["env_config_maps"] == [f"{FULLNAME}-env"]
    env = {e["name"]: e["value_from"] for e in config["run_k8s_config"]["container_config"]["env"]}
    ref = {"secret_key_ref": {"name": SECRET, "key": "postgresql-url"}}
    assert env == {"DAGSTER_PG_URL": ref, "GPS_DB_URL": ref}
    assert config["run_k8s_config"]["job_spec_config"]["ttl_seconds_after_finished"] == 3600
    assert instance["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert instance["concurrency"]["runs"]["max_concurrent_runs"] == 4
    # Dagster's own schemas accept it: the launcher's fields and the whole instance file
    result = process_config(K8sRunLauncher.config_type(), config)
    assert result.success, result.errors
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(instance))
    os.environ.setdefault("DAGSTER_PG_URL", "postgresql+psycopg2://u@h/db")
    loaded, _ = dagster_instance_config(str(tmp_path))
    assert loaded["run_launcher"]["class"] == "K8sRunLauncher"


def test_the_launcher_config_schema_catches_a_camel_case_typo() -> None:
    """What the check above would catch: a field spelled like a Helm value is refused."""
    result = process_config(
        K8sRunLauncher.config_type(),
        {
            "jobNamespace": "x",
            "service_account_name": "a",
            "instance_config_map": "i",
            "dagster_home": "/d",
        },
    )
    assert not result.success


def _rules_by_role(docs: list[dict]) -> dict[str, list[dict]]:
    out = {}
    for kind in ("ClusterRole", "Role"):
        for name, obj in objects(docs, kind).items():
            out[name.removeprefix(FULLNAME + "-")] = obj["rules"]
    return out


def test_adapter_roles_are_rbac_yaml_rules_and_run_launcher_exactly_the_listed_verbs(
    default_docs: list[dict],
) -> None:
    roles = _rules_by_role(default_docs)
    source = rbac.rules()  # gps_dagster/backends/k8s/rbac.yaml
    for role in ("capacity", "deploys-read", "deploys-write", "policy"):
        assert roles[role] == source[f"gps-dagster-{role}"], role
    assert roles["run-launcher"] == RUN_LAUNCHER_RULES
    # no reservation namespace: no role that creates or deletes pods at all
    assert set(roles) == {"capacity", "deploys-read", "deploys-write", "policy", "run-launcher"}
    policy = one(default_docs, "Role", "policy")
    assert policy["metadata"]["namespace"] == "gps-dagster-system"
    gps = template([ci("default")], {"rbac.reservationNamespaces[0]": "serving"})
    roles = _rules_by_role(gps)
    assert roles["holders"] == source["gps-dagster-holders"]
    assert roles["holder-cleanup"] == source["gps-dagster-holder-cleanup"]


def _subjects(binding: dict) -> list[tuple[str, str]]:
    return sorted((s["name"], s["namespace"]) for s in binding["subjects"])


def _bound(docs: list[dict]) -> set[tuple[str, str | None, str, str]]:
    """(binding kind, namespace, role, ServiceAccount) of every binding of the chart."""
    return {
        (
            d["kind"],
            d["metadata"].get("namespace"),
            d["roleRef"]["name"].removeprefix(FULLNAME + "-"),
            s["name"].removeprefix(FULLNAME + "-"),
        )
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for s in d["subjects"]
    }


WRITERS = ("engine", "api", "runs")
READERS = ("engine", "api", "runs", "code-location")


def test_the_default_install_binds_each_identity_only_in_the_listed_namespaces() -> None:
    """Issue 18 item 1: rbac.namespaces=[] used to bind pod create/delete and Deployment patch
    cluster-wide (a ClusterRoleBinding) to one identity shared by every component."""
    docs = template([ci("default")], {"rbac.reservationNamespaces[0]": "serving"})
    crb = {(n, r, sa) for k, n, r, sa in _bound(docs) if k == "ClusterRoleBinding"}
    assert crb == {(None, "capacity", sa) for sa in READERS}  # nodes, pods: list; namespaces: get
    expected = {
        *(("serving", "deploys-read", sa) for sa in READERS),
        *(("serving", "deploys-write", sa) for sa in WRITERS),
        *(("serving", "holders", sa) for sa in WRITERS),
        ("serving", "holder-cleanup", "code-location"),
        *(("gps-dagster-system", "policy", sa) for sa in WRITERS),
        (NAMESPACE, "run-launcher", "run-launcher"),
    }
    assert {(n, r, sa) for k, n, r, sa in _bound(docs) if k == "RoleBinding"} == expected
    assert one(docs, "ConfigMap", "env")["data"]["GPS_NAMESPACES"] == "serving"
    assert one(docs, "ConfigMap", "env")["data"]["GPS_POLICY_NAMESPACE"] == "gps-dagster-system"
    accounts = {n.removeprefix(FULLNAME + "-") for n in objects(docs, "ServiceAccount")}
    assert accounts == {"engine", "code-location", "api", "runs", "run-launcher"}


def test_cluster_wide_rights_only_by_the_explicit_value_and_pods_never_cluster_wide() -> None:
    docs = template([ci("default")], {"rbac.namespaces": "null", "rbac.clusterWide": "true"})
    crb = {(r, sa) for k, _n, r, sa in _bound(docs) if k == "ClusterRoleBinding"}
    assert crb == {
        *(("capacity", sa) for sa in READERS),
        *(("deploys-read", sa) for sa in READERS),
        *(("deploys-write", sa) for sa in WRITERS),
    }
    assert not {r for _k, _n, r, _sa in _bound(docs)} & {"holders", "holder-cleanup"}
    assert one(docs, "ConfigMap", "env")["data"]["GPS_NAMESPACES"] == ""


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"rbac.namespaces": "null"}, "rbac.namespaces is required"),
        ({"rbac.clusterWide": "true"}, "exclude each other"),
        ({"rbac.reservationNamespaces[0]": "gpu"}, "rbac.reservationNamespaces: gpu is not in"),
    ],
)
def test_the_namespace_list_is_required_unless_cluster_wide_is_explicit(
    sets: dict[str, str], message: str
) -> None:
    args = ["template", "r", str(CHART), "-f", str(ci("default"))]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    done = helm(*args, check=False)
    assert done.returncode != 0
    assert message in done.stderr


def test_a_scoped_adapter_gets_one_rolebinding_per_namespace_and_the_same_scope() -> None:
    docs = template([ci("api")])
    assert f"{FULLNAME}-deploys-read" not in objects(docs, "ClusterRoleBinding")
    deploys = [
        d
        for d in docs
        if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == f"{FULLNAME}-deploys-write"
    ]
    assert sorted(rb["metadata"]["namespace"] for rb in deploys) == ["cmp-team", "serving"]
    assert all(rb["roleRef"]["kind"] == "ClusterRole" for rb in deploys)
    assert one(docs, "ConfigMap", "env")["data"]["GPS_NAMESPACES"] == "serving,cmp-team"


def test_each_pod_runs_as_the_identity_its_work_needs(default_docs: list[dict]) -> None:
    deployments = objects(default_docs, "Deployment")
    accounts = {
        name.removeprefix(FULLNAME + "-"): d["spec"]["template"]["spec"]["serviceAccountName"]
        for name, d in deployments.items()
    }
    assert accounts == {
        "webserver": LAUNCHER_SA,
        "daemon": LAUNCHER_SA,
        "code-location": LOCATION_SA,
        "engine": ENGINE_SA,
        "api": API_SA,
    }
    assert dagster_yaml(default_docs)["run_launcher"]["config"]["service_account_name"] == RUNS_SA
    for job in objects(default_docs, "Job").values():  # hooks: the database only, no token
        assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_every_product_container_reads_the_url_from_the_secret_and_the_env_configmap(
    default_docs: list[dict],
) -> None:
    ref = {"secretKeyRef": {"name": SECRET, "key": "postgresql-url"}}
    for component in ("code-location", "engine", "api"):
        c = container(one(default_docs, "Deployment", component))
        env = env_of(c)
        assert env["GPS_DB_URL"] == ref and env["DAGSTER_PG_URL"] == ref, component
        assert c["envFrom"] == [{"configMapRef": {"name": f"{FULLNAME}-env"}}]
    assert one(default_docs, "ConfigMap", "env")["data"]["GPS_BACKEND"] == "kubernetes"
    for component in ("webserver", "daemon"):
        env = env_of(container(one(default_docs, "Deployment", component)))
        assert env["DAGSTER_PG_URL"] == ref
        assert env["DAGSTER_HOME"] == "/opt/dagster/dagster_home"


def test_commands_of_each_component(default_docs: list[dict]) -> None:
    cmd = {
        n.removeprefix(FULLNAME + "-"): container(d)["command"]
        for n, d in objects(default_docs, "Deployment").items()
    }
    assert cmd["code-location"][:3] == ["dagster", "api", "grpc"]
    assert cmd["code-location"][cmd["code-location"].index("--python-file") + 1] == (
        "/opt/gps/definitions.py"
    )
    assert cmd["engine"] == [
        "gps-dagster",
        "engine",
        "run",
        "--interval",
        "30",
        "--metrics-host",
        "0.0.0.0",
        "--metrics-port",
        "9090",
    ]
    assert cmd["api"][:2] == ["gps-dagster", "serve"]
    assert cmd["daemon"][:2] == ["dagster-daemon", "run"]
    assert cmd["webserver"][0] == "dagster-webserver"
    engine = one(default_docs, "Deployment", "engine")
    assert engine["spec"]["replicas"] == 3
    workspace = yaml.safe_load(
        one(default_docs, "ConfigMap", "workspace")["data"]["workspace.yaml"]
    )
    server = workspace["load_from"][0]["grpc_server"]
    assert server == {
        "host": f"{FULLNAME}-code-location",
        "port": 3030,
        "location_name": "gps_dagster",
    }
    assert f"{FULLNAME}-code-location" in objects(default_docs, "Service")


def test_pods_are_non_root_read_only_with_probes_resources_and_a_webserver_pdb(
    default_docs: list[dict],
) -> None:
    for name, d in objects(default_docs, "Deployment").items():
        spec = d["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        c = spec["containers"][0]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True, name
        assert c["securityContext"]["allowPrivilegeEscalation"] is False, name
        assert c["resources"]["requests"] and c["resources"]["limits"], name
        assert "livenessProbe" in c, name
    probes = {
        n.removeprefix(FULLNAME + "-"): container(d)
        for n, d in objects(default_docs, "Deployment").items()
    }
    assert probes["code-location"]["readinessProbe"]["exec"]["command"] == [
        "dagster",
        "api",
        "grpc-health-check",
        "-p",
        "3030",
    ]
    assert probes["engine"]["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert probes["api"]["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert probes["webserver"]["readinessProbe"]["httpGet"]["path"] == "/server_info"
    assert probes["daemon"]["livenessProbe"]["exec"]["command"] == [
        "dagster-daemon",
        "liveness-check",
    ]
    pdb = one(default_docs, "PodDisruptionBudget", "webserver")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == 1
    web = one(default_docs, "Deployment", "webserver")
    assert pdb["spec"]["selector"]["matchLabels"] == web["spec"]["selector"]["matchLabels"]


def test_the_pdb_falls_back_to_policy_v1beta1_on_kubernetes_1_20() -> None:
    done = helm(
        "template",
        "r",
        str(CHART),
        "-f",
        str(ci("default")),
        "--kube-version",
        "1.20.2",
        "--show-only",
        "templates/pdb-webserver.yaml",
    )
    assert yaml.safe_load(done.stdout)["apiVersion"] == "policy/v1beta1"


def test_existing_dagster_mode_installs_only_the_code_location_engine_and_api() -> None:
    docs = template([ci("existing-dagster")])
    deployments = {n.removeprefix(FULLNAME + "-") for n in objects(docs, "Deployment")}
    assert deployments == {"code-location", "engine", "api"}
    configmaps = {n.removeprefix(FULLNAME + "-") for n in objects(docs, "ConfigMap")}
    assert configmaps == {"env"}  # the existing release owns dagster.yaml and its workspace
    assert "run-launcher" not in _rules_by_role(docs)
    assert set(objects(docs, "ServiceAccount")) == {ENGINE_SA, LOCATION_SA, API_SA, RUNS_SA}
    env = env_of(container(one(docs, "Deployment", "code-location")))
    assert env["DAGSTER_PG_PASSWORD"] == {
        "secretKeyRef": {"name": "dagster-postgresql-secret", "key": "postgresql-password"}
    }
    context = json.loads(env["DAGSTER_CONTAINER_CONTEXT"])
    parsed = K8sContainerContext.create_from_config(context)  # dagster-k8s accepts it
    assert parsed.run_k8s_config.pod_spec_config["service_account_name"] == RUNS_SA
    run_env = {e["name"] for e in parsed.run_k8s_config.container_config["env"]}
    assert {"DAGSTER_PG_URL", "GPS_DB_URL"} <= run_env
    assert parsed.run_k8s_config.job_spec_config["ttl_seconds_after_finished"] == 3600
    full = env_of(container(one(template([ci("default")]), "Deployment", "code-location")))
    assert "DAGSTER_CONTAINER_CONTEXT" not in full  # full mode: the run launcher carries it


def test_engine_disabled_removes_the_engine_and_its_metrics_service() -> None:
    docs = template([ci("engine-disabled")])
    assert f"{FULLNAME}-engine" not in objects(docs, "Deployment")
    assert f"{FULLNAME}-engine" not in objects(docs, "Service")
    assert f"{FULLNAME}-code-location" in objects(docs, "Deployment")


def test_the_servicemonitor_selects_exactly_the_metrics_ports(default_docs: list[dict]) -> None:
    docs = template([ci("servicemonitor")])
    monitor = one(docs, "ServiceMonitor", "")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = {
        n: s
        for n, s in objects(docs, "Service").items()
        if selector.items() <= s["metadata"]["labels"].items()
    }
    assert set(selected) == {f"{FULLNAME}-engine", f"{FULLNAME}-code-location"}
    [endpoint] = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")
    deployments = objects(docs, "Deployment")
    for name, service in selected.items():
        [port] = [p for p in service["spec"]["ports"] if p["name"] == "metrics"]
        pod = deployments[name]["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        named = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
        assert named[port["targetPort"]] == 9090
    assert env_of(container(deployments[f"{FULLNAME}-code-location"]))["GPS_METRICS_PORT"] == "9090"
    assert "ServiceMonitor" not in {d["kind"] for d in default_docs}


def test_the_api_has_a_service_and_a_valid_generated_admin_token(
    default_docs: list[dict], tmp_path: Path
) -> None:
    api = one(default_docs, "Service", "api")
    assert api["spec"]["ports"][0]["targetPort"] == "http"
    env = env_of(container(one(default_docs, "Deployment", "api")))
    assert env["GPS_DAGSTER_URL"] == f"http://{FULLNAME}-webserver:80"
    generated = template(
        [ci("default")], {"api.adminToken.existingSecret": "", "api.adminToken.create": "true"}
    )
    secret = one(generated, "Secret", "api-token")
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert re.fullmatch(r"gpsd_[0-9a-f]{12}_[A-Za-z0-9]{43}", token)
    store = Store.open(f"sqlite:///{tmp_path / 'gps.sqlite'}")
    now = VirtualClock(datetime(2026, 10, 19, 8, tzinfo=UTC)).now()
    repo = TokenRepository(store.engine)
    record, stored = repo.adopt(token, "helm-admin", "admin", now=now, actor="test")
    assert stored and repo.verify(token, now=now) == record
    hook = one(generated, "Job", "api-token")
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    docs = template([ci("api")])
    assert "Secret" not in {d["kind"] for d in docs}  # an existing Secret is used instead
    ref = env_of(container(one(docs, "Job", "api-token")))["GPS_API_TOKEN"]
    assert ref == {"secretKeyRef": {"name": "gps-api-admin-token", "key": "token"}}


def test_a_missing_database_secret_is_a_clear_error() -> None:
    done = helm("template", "r", str(CHART), "--set", "rbac.namespaces[0]=serving", check=False)
    assert done.returncode != 0
    assert "postgresql.existingSecret is required" in done.stderr


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"engine.replicaCount": "-1"}, "engine.replicaCount: Must be greater than or equal to 0"),
        ({"enigne.replicaCount": "1"}, "Additional property enigne is not allowed"),
        ({"rbac.namespaces[0]": "Serving"}, "rbac.namespaces.0: Does not match pattern"),
        ({"metrics.port": "99999"}, "metrics.port: Must be less than or equal to 65535"),
    ],
)
def test_the_values_schema_refuses_bad_values_naming_the_field(
    sets: dict[str, str], message: str
) -> None:
    args = ["lint", str(CHART), "-f", str(ci("default"))]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    done = helm(*args, check=False)
    assert done.returncode != 0
    assert message in done.stdout + done.stderr


def _migrate_script(docs: list[dict]) -> str:
    job = one(docs, "Job", "migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    command = container(job)["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    return str(command[2])


@pytest.mark.parametrize(
    "url", ["postgresql://u@db/gps", "postgres://u@db/gps", "sqlite:////tmp/x.sqlite", ""]
)
def test_the_migration_hook_refuses_a_url_without_psycopg2(
    default_docs: list[dict], tmp_path: Path, url: str
) -> None:
    stub = tmp_path / "gps-dagster"
    stub.write_text('#!/bin/sh\necho ran "$@"\n')
    stub.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "GPS_DB_URL": url}
    done = subprocess.run(
        ["/bin/sh", "-c", _migrate_script(default_docs)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "invalid_db_url" in done.stderr and SECRET in done.stderr
    assert "ran" not in done.stdout


def test_the_migration_hook_runs_db_upgrade_for_a_psycopg2_url(
    default_docs: list[dict], tmp_path: Path
) -> None:
    for name in ("gps-dagster", "dagster"):
        stub = tmp_path / name
        stub.write_text(f'#!/bin/sh\necho {name} "$@"\n')
        stub.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "GPS_DB_URL": "postgresql+psycopg2://u@db/gps"}
    done = subprocess.run(
        ["/bin/sh", "-c", _migrate_script(default_docs)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout.split("\n")[:2]) == (
        0,
        ["gps-dagster db upgrade", "dagster instance migrate"],
    )  # issue 18: Dagster's schema too
    # a failed product migration stops the hook before Dagster's
    (tmp_path / "gps-dagster").write_text("#!/bin/sh\nexit 3\n")
    done = subprocess.run(
        ["/bin/sh", "-c", _migrate_script(default_docs)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (3, "")


def test_the_admin_token_is_an_existing_secret_unless_generation_is_explicit() -> None:
    """Issue 18 item 14: the default generated a new token at every `helm template` / Argo CD
    render (no `lookup` there): the default now names an existing Secret, and none is an error."""
    docs = template([ci("default")])
    assert "Secret" not in {d["kind"] for d in docs}
    ref = env_of(container(one(docs, "Job", "api-token")))["GPS_API_TOKEN"]
    assert ref == {"secretKeyRef": {"name": "gps-api-admin-token", "key": "token"}}
    first = template(
        [ci("default")], {"api.adminToken.existingSecret": "", "api.adminToken.create": "true"}
    )
    again = template(
        [ci("default")], {"api.adminToken.existingSecret": "", "api.adminToken.create": "true"}
    )
    assert one(first, "Secret", "api-token") != one(again, "Secret", "api-token")  # why not default
    done = helm(
        "template",
        "r",
        str(CHART),
        "-f",
        str(ci("default")),
        "--set",
        "api.adminToken.existingSecret=",
        check=False,
    )
    assert done.returncode != 0 and "api.adminToken.existingSecret is required" in done.stderr
    off = template([ci("default")], {"api.adminToken.existingSecret": "", "api.enabled": "false"})
    assert "api-token" not in {d["metadata"]["name"].removeprefix(FULLNAME + "-") for d in off}


def test_a_job_namespace_other_than_the_release_namespace_is_refused() -> None:
    """Issue 18 item 15: runs in another namespace found no ServiceAccount, ConfigMaps or
    database Secret there and every run failed; the chart now refuses it by name."""
    key = "runLauncher.config.k8sRunLauncher.jobNamespace"
    done = helm(
        "template",
        "r",
        str(CHART),
        "-n",
        NAMESPACE,
        "-f",
        str(ci("default")),
        "--set",
        f"{key}=runs",
        check=False,
    )
    assert done.returncode != 0
    assert f"{key}: runs is not the release namespace" in done.stderr
    same = template([ci("default")], {key: NAMESPACE})
    assert dagster_yaml(same)["run_launcher"]["config"]["job_namespace"] == NAMESPACE


def test_a_long_release_name_gives_distinct_names_that_fit_a_dns_label() -> None:
    """Issue 18 item 16: the whole name was cut at 63, so <base>-code-location and <base>-code-…
    of a long release collided."""
    release = "r" * 53  # Helm's own maximum release name
    done = helm(
        "template",
        release,
        str(CHART),
        "-n",
        NAMESPACE,
        "-f",
        str(ci("default")),
        "--kube-version",
        KUBE_VERSION,
    )
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    for kind in ("Deployment", "Service", "ServiceAccount", "ConfigMap", "Job"):
        names = [d["metadata"]["name"] for d in docs if d["kind"] == kind]
        assert len(names) == len(set(names)), (kind, names)
        assert all(len(n) <= 63 for n in names), (kind, names)
    lint = helm(
        "lint",
        str(CHART),
        "-f",
        str(ci("default")),
        "--set",
        f"fullnameOverride={'x' * 50}",
        check=False,
    )
    assert lint.returncode != 0 and "fullnameOverride" in lint.stdout + lint.stderr


def test_image_by_digest_pdb_only_with_two_webservers_engine_startup_and_spread() -> None:
    digest = "sha256:" + "a" * 64
    docs = template([ci("default")], {"image.digest": digest})
    assert container(one(docs, "Deployment", "engine"))["image"] == f"gps-dagster@{digest}"
    assert dagster_yaml(docs)["run_launcher"]["config"]["job_image"] == f"gps-dagster@{digest}"
    one_web = template([ci("default")], {"dagsterWebserver.replicaCount": "1"})
    assert "PodDisruptionBudget" not in {d["kind"] for d in one_web}  # it would block drains
    engine = one(docs, "Deployment", "engine")["spec"]["template"]["spec"]
    [spread] = engine["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "engine"
    assert engine["containers"][0]["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert "priorityClassName" not in engine
    named = template([ci("default")], {"engine.priorityClassName": "gpu-platform"})
    assert (
        one(named, "Deployment", "engine")["spec"]["template"]["spec"]["priorityClassName"]
        == "gpu-platform"
    )


def test_host_network_reaches_every_chart_pod_and_every_run_pod_only_when_set(
    default_docs: list[dict],
) -> None:
    """``hostNetwork`` (off by default: it breaks Pod Security baseline) puts every pod of the
    chart and the run pods on the node's network, with DNS still resolving Service names."""

    def pod_specs(docs: list[dict]) -> dict[str, dict]:
        return {
            f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["spec"]
            for d in docs
            if d["kind"] in ("Deployment", "Job")
        }

    assert all("hostNetwork" not in s for s in pod_specs(default_docs).values())
    assert (
        "host_network"
        not in dagster_yaml(default_docs)["run_launcher"]["config"]["run_k8s_config"][
            "pod_spec_config"
        ]
    )
    on = template([ci("default")], {"hostNetwork": "true"})
    specs = pod_specs(on)
    assert {k.split("/")[0] for k in specs} == {"Deployment", "Job"}  # the hooks too
    assert len(specs) == len(pod_specs(default_docs))
    for name, spec in specs.items():
        assert (spec.get("hostNetwork"), spec.get("dnsPolicy")) == (
            True,
            "ClusterFirstWithHostNet",
        ), name
    pod_spec = dagster_yaml(on)["run_launcher"]["config"]["run_k8s_config"]["pod_spec_config"]
    assert (pod_spec["host_network"], pod_spec["dns_policy"]) == (True, "ClusterFirstWithHostNet")
    parsed = K8sContainerContext.create_from_config(
        {"k8s": {"run_k8s_config": {"pod_spec_config": pod_spec}}}
    )
    assert parsed.run_k8s_config.pod_spec_config["host_network"] is True  # dagster-k8s accepts it
    assert validate(on) == []
    apart = template([ci("default")], {"hostNetwork": "true", "metrics.codeLocationPort": "9191"})
    location = container(one(apart, "Deployment", "code-location"))
    assert env_of(location)["GPS_METRICS_PORT"] == "9191"
    assert [p["containerPort"] for p in location["ports"] if p["name"] == "metrics"] == [9191]
    assert (
        "9090" in container(one(apart, "Deployment", "engine"))["command"]
    )  # the engine keeps its own
    assert (
        env_of(container(one(default_docs, "Deployment", "code-location")))["GPS_METRICS_PORT"]
        == "9090"
    )
