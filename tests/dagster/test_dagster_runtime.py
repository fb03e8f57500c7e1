"""The Dagster layer builds its runtime through the composition root's settings, and the
timeline asset plans against the runtime's own pool (issue 9 §2.8), never ``GPS_POOL_FILE``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from dagster_support import EXAMPLES, MONDAY_0800, seed_schedule

from gps_dagster.clocks import VirtualClock
from gps_dagster.dagster_defs import GpsResource, resources
from gps_dagster.dagster_defs.assets import schedule_timeline, timeline_summary
from gps_dagster.dagster_defs.resources import as_resource
from gps_dagster.runtime import Runtime, build_runtime, settings_from_env
from tests.fake_k8s_backend import FakeK8sBackend

POOL10 = EXAMPLES / "seed-pool-10.yaml"
AT = "2026-10-20T10:00:00+07:00"
HOUR = "2026-10-19-01:00"
"""Monday 08:00-09:00 +07: A (8 GPUs) and C (2) desired."""
AFTER_THE_HOUR = datetime(2026, 10, 19, 3, tzinfo=UTC)
"""Dagster's "now" for in-process materialisations (the partition has ended by then)."""


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "_CACHE", {})
    for name in (
        "GPS_BACKEND",
        "GPS_KUBECONFIG",
        "KUBECONFIG",
        "GPS_KUBE_CONTEXT",
        "GPS_NAMESPACES",
    ):
        monkeypatch.delenv(name, raising=False)


def bigger_pool(tmp_path: Path) -> Path:
    """The seed pool plus an 8-GPU node: capacity 18, where GPS_POOL_FILE says 10."""
    text = POOL10.read_text().replace(
        "  - {name: hgx-02,",
        "  - {name: hgx-03, gpus: 8, flavor: H100-80GB, region: hcm-1}\n  - {name: hgx-02,",
    )
    path = tmp_path / "pool-18.yaml"
    path.write_text(text)
    return path


def materialise_timeline(rt: Runtime, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    with dg.partition_loading_context(effective_dt=AFTER_THE_HOUR):
        return dg.materialize(
            [schedule_timeline],
            partition_key=HOUR,
            instance=instance,
            resources={"gps": as_resource(rt)},
            raise_on_error=False,
        )


def test_the_resource_builds_its_runtime_from_the_settings(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPS_DB_URL", sqlite_url)
    monkeypatch.setenv("GPS_POOL_FILE", str(POOL10))
    monkeypatch.setenv("GPS_CLOCK", AT)
    rt = GpsResource().get_runtime()
    assert rt.settings == settings_from_env()
    assert rt.clock.now() == datetime.fromisoformat(AT)  # GPS_CLOCK reaches every Dagster process
    assert rt.engine.clock is rt.clock and rt.core.clock is rt.clock
    assert GpsResource().get_runtime() is rt  # once per process and settings
    other = GpsResource(
        pool_file=str(bigger_pool(tmp_path))
    ).get_runtime()  # a field overrides its variable
    assert other is not rt and other.pool.capacity == 18


def test_the_resource_serves_the_kubernetes_core(
    sqlite_url: str, kubeconfig: str, fake_k8s: FakeK8sBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPS_DB_URL", sqlite_url)
    rt = GpsResource(
        backend="kubernetes", kubeconfig=kubeconfig, kube_context="kind-gpu"
    ).get_runtime()
    (call,) = fake_k8s.calls
    assert (call["kubeconfig"], call["context"], call["ledger"].engine) == (
        kubeconfig,
        "kind-gpu",
        rt.store.engine,
    )
    assert rt.core is fake_k8s.cores[0] and rt.engine.core is rt.core and rt.pool is None


def test_the_timeline_asset_plans_against_the_runtime_pool_not_gps_pool_file(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPS_POOL_FILE", str(POOL10))  # another process's pool: must not be read
    settings = settings_from_env({}, db_url=sqlite_url, pool_file=str(bigger_pool(tmp_path)))
    rt = build_runtime(settings, clock=VirtualClock(MONDAY_0800), reload_pool=True)
    seed_schedule(rt)
    assert timeline_summary(rt, MONDAY_0800, AFTER_THE_HOUR)["capacity"] == 18
    with dg.instance_for_test() as instance:
        result = materialise_timeline(rt, instance)
        assert result.success
        (event,) = result.asset_materializations_for_node(schedule_timeline.op.name)
    assert event.metadata["capacity"].value == 18
    assert event.metadata["peak_desired_gpus"].value == 10  # A 8 + C 2 in business hours
    rt.close()


def test_the_timeline_asset_without_a_pool_fails_with_reason_and_fix(
    sqlite_url: str, kubeconfig: str, fake_k8s: FakeK8sBackend
) -> None:
    settings = settings_from_env(
        {"GPS_BACKEND": "kubernetes", "GPS_KUBECONFIG": kubeconfig}, db_url=sqlite_url
    )
    rt = build_runtime(settings, clock=VirtualClock(MONDAY_0800))
    with dg.instance_for_test() as instance:
        result = materialise_timeline(rt, instance)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = str(failure.event_specific_data.error.message)  # type: ignore[union-attr]
    assert "needs the pool's layout" in message and "kubernetes backend" in message
    assert "GPS_BACKEND=sim" in message
    rt.close()
