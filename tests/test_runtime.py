"""The composition root: settings read once (bad values → every problem, with setting, reason and
fix), one clock for everything, and port-typed objects for both backends."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock, WallClock
from gps_dagster.runtime import (
    DEFAULT_POOL,
    Settings,
    SettingsInvalid,
    build_clock,
    build_runtime,
    clock_from_env,
    settings_from_env,
)
from tests.fake_k8s_backend import MODULE, FakeK8sBackend

ROOT = Path(__file__).resolve().parents[1]
POOL16 = str(ROOT / "examples" / "seed-pool-16.yaml")
AT = datetime(2026, 10, 20, 3, 0, tzinfo=UTC)


def problems(exc: pytest.ExceptionInfo[SettingsInvalid]) -> list[tuple[str, str]]:
    return [(e.path, e.reason) for e in exc.value.errors]


def test_defaults_are_the_sim_backend_on_the_wall_clock() -> None:
    s = settings_from_env({})
    assert s == Settings(
        backend="sim",
        db_url=None,
        pool_file=DEFAULT_POOL,
        kubeconfig=None,
        kube_context=None,
        namespaces=(),
        clock=None,
    )
    assert isinstance(build_clock(s), WallClock)


def test_every_variable_is_read() -> None:
    env = {
        "GPS_BACKEND": "sim",
        "GPS_DB_URL": "sqlite:///x.sqlite",
        "GPS_POOL_FILE": POOL16,
        "GPS_KUBE_CONTEXT": "ctx",
        "GPS_NAMESPACES": " team-a, team-b,,team-a ",
        "GPS_CLOCK": "2026-10-20T10:00:00+07:00",
    }
    s = settings_from_env(env)
    assert (s.db_url, s.pool_file, s.kube_context) == ("sqlite:///x.sqlite", Path(POOL16), "ctx")
    assert s.namespaces == ("team-a", "team-b")  # trimmed, empty items and repeats dropped
    assert s.clock == AT
    clock = build_clock(s)
    assert isinstance(clock, VirtualClock) and clock.now() == AT


def test_overrides_win_over_the_environment_and_none_means_not_given() -> None:
    env = {
        "GPS_DB_URL": "sqlite:///env.sqlite",
        "GPS_POOL_FILE": str(DEFAULT_POOL),
        "GPS_CLOCK": "wall",
    }
    s = settings_from_env(
        env,
        db_url="sqlite:///cli.sqlite",
        pool_file=POOL16,
        backend=None,
        clock="2026-10-20T03:00:00Z",
    )
    assert (s.db_url, s.pool_file, s.backend, s.clock) == (
        "sqlite:///cli.sqlite",
        Path(POOL16),
        "sim",
        AT,
    )
    with pytest.raises(TypeError, match="unknown settings"):
        settings_from_env({}, database="x")


def test_every_bad_value_is_reported_at_once_with_its_setting() -> None:
    env = {
        "GPS_BACKEND": "k8s",
        "GPS_DB_URL": "not a url",
        "GPS_POOL_FILE": "/nonexistent/pool.yaml",
        "GPS_NAMESPACES": "team-a,Team_B",
        "GPS_CLOCK": "tomorrow",
    }
    with pytest.raises(SettingsInvalid) as exc:
        settings_from_env(env)
    assert problems(exc) == [
        ("GPS_BACKEND", "invalid_backend"),
        ("GPS_DB_URL", "invalid_db_url"),
        ("GPS_POOL_FILE", "pool_file_not_found"),
        ("GPS_NAMESPACES", "invalid_namespace"),
        ("GPS_CLOCK", "invalid_clock"),
    ]
    assert exc.value.source == "settings"
    text = str(exc.value)
    assert "'k8s' is not a backend: use one of sim, kubernetes" in text
    assert "'Team_B' is not a namespace name" in text


@pytest.mark.parametrize(
    ("clock", "reason"),
    [
        ("2026-10-20T10:00:00", "naive_datetime"),
        ("10:00", "invalid_clock"),
        ("now", "invalid_clock"),
        ("2026-10-20T10:00:00+07:00\nrm -rf /", "invalid_clock"),
    ],
)
def test_a_clock_is_wall_or_an_instant_with_its_offset(clock: str, reason: str) -> None:
    with pytest.raises(SettingsInvalid) as exc:
        clock_from_env({"GPS_CLOCK": clock})
    assert problems(exc) == [("GPS_CLOCK", reason)]
    assert "\n" not in exc.value.errors[0].fix  # a user value never breaks the one-line format


def test_the_clock_alone_ignores_unrelated_settings() -> None:
    assert clock_from_env({"GPS_BACKEND": "bogus", "GPS_CLOCK": "2026-10-20T03:00:00Z"}).now() == AT
    assert isinstance(clock_from_env({}), WallClock)


def test_kubernetes_needs_a_kubeconfig_or_a_cluster(kubeconfig: str) -> None:
    with pytest.raises(SettingsInvalid) as exc:
        settings_from_env({"GPS_BACKEND": "kubernetes"})
    assert problems(exc) == [("GPS_KUBECONFIG", "kubeconfig_missing")]
    with pytest.raises(SettingsInvalid) as missing:
        settings_from_env({"GPS_BACKEND": "kubernetes", "KUBECONFIG": "/nonexistent/config"})
    assert problems(missing) == [("KUBECONFIG", "kubeconfig_not_found")]
    in_cluster = settings_from_env(
        {"GPS_BACKEND": "kubernetes", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    )
    assert (in_cluster.kubeconfig, in_cluster.pool_file) == (None, None)
    chosen = settings_from_env(
        {"GPS_BACKEND": "kubernetes", "KUBECONFIG": "/ignored", "GPS_KUBECONFIG": kubeconfig}
    )
    assert chosen.kubeconfig == kubeconfig  # GPS_KUBECONFIG before KUBECONFIG


def test_a_pool_file_is_for_the_sim_only(kubeconfig: str) -> None:
    env = {"GPS_BACKEND": "kubernetes", "GPS_KUBECONFIG": kubeconfig, "GPS_POOL_FILE": POOL16}
    assert settings_from_env(env).pool_file is None  # a leftover variable is not used
    with pytest.raises(SettingsInvalid) as exc:
        settings_from_env(env, pool_file=POOL16)  # asked for explicitly: a mistake
    assert problems(exc) == [("pool_file", "pool_file_not_for_backend")]


def test_the_sim_runtime_shares_one_clock_and_exposes_its_pool(sqlite_url: str) -> None:
    rt = build_runtime(
        settings_from_env(
            {"GPS_CLOCK": "2026-10-20T03:00:00Z"}, db_url=sqlite_url, pool_file=POOL16
        )
    )
    try:
        assert rt.clock.now() == AT
        assert rt.engine.clock is rt.clock and rt.engine.core is rt.core
        assert isinstance(rt.core, SimPool) and rt.core.clock is rt.clock
        assert rt.pool is not None and rt.pool.name == "gpu-pool-h100-16" and rt.pool.capacity == 16
        assert rt.settings.db_url == sqlite_url
    finally:
        rt.close()


def test_an_unreadable_pool_file_is_a_settings_problem(sqlite_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "pool.yaml"
    folder.mkdir()
    with pytest.raises(SettingsInvalid) as exc:
        build_runtime(Settings(db_url=sqlite_url, pool_file=folder))
    assert problems(exc) == [("GPS_POOL_FILE", "unreadable_file")]


def test_kubernetes_builds_its_core_through_the_backend_module(
    sqlite_url: str, kubeconfig: str, fake_k8s: FakeK8sBackend
) -> None:
    env = {
        "GPS_BACKEND": "kubernetes",
        "GPS_KUBECONFIG": kubeconfig,
        "GPS_KUBE_CONTEXT": "kind-gpu",
        "GPS_NAMESPACES": "team-a,team-b",
        "GPS_POLICY_NAMESPACE": "gpu-ops",
        "GPS_WITNESS_SOURCE": "none",
        "GPS_K8S_QPS": "12.5",
        "GPS_K8S_BURST": "25",
        "GPS_K8S_CACHE": "off",
        "GPS_CLOCK": "2026-10-20T03:00:00Z",
    }
    rt = build_runtime(settings_from_env(env, db_url=sqlite_url))
    try:
        (call,) = fake_k8s.calls
        ledger = call.pop("ledger")  # the store's reservation repository, on the runtime's store
        assert ledger.engine is rt.store.engine
        assert call == {
            "clock": rt.clock,
            "kubeconfig": kubeconfig,
            "context": "kind-gpu",
            "namespaces": ("team-a", "team-b"),
            "policy_namespace": "gpu-ops",
            "witness_source": "none",
            "qps": 12.5,
            "burst": 25,
            "cache": False,
        }
        assert rt.core is fake_k8s.cores[0] and rt.engine.core is rt.core
        assert rt.pool is None  # no pool file on kubernetes
        assert rt.clock.now() == AT
    finally:
        rt.close()


def test_the_watch_cache_is_on_by_default_and_a_bad_switch_is_a_settings_problem() -> None:
    """Decision "The Kubernetes adapter reads a pass from one watch cache per process"."""
    assert settings_from_env({}).k8s_cache is True
    assert settings_from_env({"GPS_K8S_CACHE": "Off"}).k8s_cache is False
    with pytest.raises(SettingsInvalid) as exc:
        settings_from_env({"GPS_K8S_CACHE": "maybe"})
    assert problems(exc) == [("GPS_K8S_CACHE", "invalid_k8s_cache")]


def test_a_missing_kubernetes_backend_is_a_clear_error(
    sqlite_url: str, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, MODULE, None)  # what an install without the package sees
    settings = settings_from_env(
        {"GPS_BACKEND": "kubernetes", "GPS_KUBECONFIG": kubeconfig}, db_url=sqlite_url
    )
    with pytest.raises(SettingsInvalid) as exc:
        build_runtime(settings)
    assert problems(exc) == [("GPS_BACKEND", "backend_unavailable")]
    assert "or set GPS_BACKEND=sim" in exc.value.errors[0].fix
    assert isinstance(exc.value.__cause__, ImportError)


def test_a_kubernetes_backend_that_fails_to_start_is_a_clear_error(
    sqlite_url: str, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = FakeK8sBackend(fail_with=ConnectionRefusedError("127.0.0.1:6443 refused"))
    monkeypatch.setitem(sys.modules, MODULE, broken)
    settings = settings_from_env(
        {"GPS_BACKEND": "kubernetes", "GPS_KUBECONFIG": kubeconfig}, db_url=sqlite_url
    )
    with pytest.raises(SettingsInvalid) as exc:
        build_runtime(settings)
    assert problems(exc) == [("GPS_KUBECONFIG", "backend_start_failed")]
    assert (
        "ConnectionRefusedError" in exc.value.errors[0].fix
        and "127.0.0.1:6443" in exc.value.errors[0].fix
    )


def test_the_policy_namespace_is_read_and_checked() -> None:
    """Issue 18 item 13: ``rbac.policyNamespace`` reaches the adapter through
    GPS_POLICY_NAMESPACE."""
    s = settings_from_env({"GPS_POLICY_NAMESPACE": " gpu-ops "})
    assert s.policy_namespace == "gpu-ops"
    assert settings_from_env({}).policy_namespace is None
    with pytest.raises(SettingsInvalid) as err:
        settings_from_env({"GPS_POLICY_NAMESPACE": "GPU_Ops"})
    assert problems(err) == [("GPS_POLICY_NAMESPACE", "invalid_namespace")]


def test_an_unknown_witness_source_is_a_settings_error_naming_the_variable() -> None:
    with pytest.raises(SettingsInvalid) as exc:
        settings_from_env({"GPS_WITNESS_SOURCE": "guess"})
    assert problems(exc) == [("GPS_WITNESS_SOURCE", "invalid_witness_source")]
    assert settings_from_env({}).witness_source == "node_agent"
