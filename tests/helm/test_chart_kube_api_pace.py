"""The chart hands the Kubernetes client's pace to every product process (GPS_K8S_QPS/BURST).

``gps.kubeApiQps`` / ``gps.kubeApiBurst`` reach the env ConfigMap as text the composition root
reads back to the same numbers: a values-file float stays a float, a large burst stays an integer
(Helm reads YAML numbers as float64, and ``quote`` of 1000000 would print ``1e+06``, which
``int()`` refuses), and the schema refuses what the runtime would refuse.
"""

from __future__ import annotations

from pathlib import Path

from gps_dagster.runtime import K8S_BURST, K8S_QPS, settings_from_env
from tests.helm.helm_support import ci, one, template


def env(docs: list[dict]) -> dict[str, str]:
    return dict(one(docs, "ConfigMap", "env")["data"])


def paced(data: dict[str, str]) -> tuple[float, int]:
    settings = settings_from_env(
        {"GPS_K8S_QPS": data["GPS_K8S_QPS"], "GPS_K8S_BURST": data["GPS_K8S_BURST"]}
    )
    return settings.k8s_qps, settings.k8s_burst


def test_the_default_pace_is_the_runtimes_default() -> None:
    assert paced(env(template([ci("default")]))) == (K8S_QPS, K8S_BURST)


def test_a_values_file_pace_reaches_the_runtime_unchanged(tmp_path: Path) -> None:
    values = tmp_path / "pace.yaml"
    values.write_text("gps:\n  kubeApiQps: 7.5\n  kubeApiBurst: 1000000\n", encoding="utf-8")
    data = env(template([ci("default"), values]))
    assert (data["GPS_K8S_QPS"], data["GPS_K8S_BURST"]) == ("7.5", "1000000")
    assert paced(data) == (7.5, 1_000_000)


def test_the_schema_refuses_a_pace_the_runtime_would_refuse() -> None:
    for sets in ({"gps.kubeApiQps": "-1"}, {"gps.kubeApiQps": "fast"}, {"gps.kubeApiBurst": "0"}):
        assert template([ci("default")], sets, check=False) == [], sets
