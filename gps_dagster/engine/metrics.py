"""Prometheus metrics of the engine (SPEC R-PASS-11), computed from the store.

Computing them from durable state at scrape time means every engine replica,
the Dagster daemon and the CLI report the same figures, and nothing is lost
when a process restarts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from gps_dagster.store.repository import Store

LAG_BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)


class StoreCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        serving = GaugeMetricFamily(
            "deployschedule_target_serving", "1 when the target was last observed READY", labels=["schedule", "target", "phase"]
        )
        for s in self.store.list_status():
            observed = (s.detail or {}).get("observed_state")
            serving.add_metric([s.schedule, s.deploy_id, s.phase], 1.0 if observed == "READY" else 0.0)
        yield serving

        actions = CounterMetricFamily(
            "deployschedule_actions", "Transition steps by step, state and reason", labels=["step", "state", "reason"]
        )
        counts = Counter((a.step, a.state, a.reason or "") for a in self.store.list_actions())
        for (step, state, reason), n in sorted(counts.items()):
            actions.add_metric([step, state, reason], float(n))
        yield actions

        lags = sorted(tr.lag_seconds for tr in self.store.list_transitions() if tr.lag_seconds is not None)
        buckets = [(str(b), float(sum(1 for x in lags if x <= b))) for b in LAG_BUCKETS]
        buckets.append(("+Inf", float(len(lags))))
        hist = HistogramMetricFamily(
            "deployschedule_boundary_lag_seconds", "Boundary to transition opened", buckets=buckets, sum_value=sum(lags)
        )
        yield hist


def render(store: Store) -> str:
    """The Prometheus text exposition of the engine metrics."""
    registry = CollectorRegistry()
    registry.register(StoreCollector(store))
    return generate_latest(registry).decode()
