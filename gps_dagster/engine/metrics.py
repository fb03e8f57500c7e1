"""Prometheus metrics of the engine (SPEC R-PASS-11), computed from the store.

Computing them from durable state at scrape time means every engine replica,
the Dagster daemon and the CLI report the same figures, and nothing is lost
when a process restarts.

A Prometheus counter must never go down (``rate()`` reads a decrease as a
restart and counts the whole new value again), so counters are derived only
from facts that never change once written: a step in a terminal state stays
there, and a transition's boundary lag is written once, when it opens. Steps
still moving are a gauge of their own. Limitation: the counters count rows, so
a future retention job that deletes finished steps or transitions must first
fold what it deletes into totals that these counters add.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from gps_dagster.store.plans import FINISHED  # terminal: a step never leaves one
from gps_dagster.store.repository import Store

LAG_BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)

Family = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily


class StoreCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Family]:
        yield self._serving()
        yield from self._actions()
        yield self._lag()

    def _serving(self) -> GaugeMetricFamily:
        serving = GaugeMetricFamily(
            "deployschedule_target_serving",
            "1 when the target was last observed READY",
            labels=["schedule", "target", "phase"],
        )
        for s in self.store.list_status():
            observed = (s.detail or {}).get("observed_state")
            serving.add_metric([s.schedule, s.deploy_id, s.phase], 1.0 if observed == "READY" else 0.0)
        return serving

    def _actions(self) -> Iterator[Family]:
        finished = CounterMetricFamily(
            "deployschedule_actions",
            "Transition steps finished, by step, terminal state and reason",
            labels=["step", "state", "reason"],
        )
        moving = GaugeMetricFamily(
            "deployschedule_actions_in_flight",
            "Transition steps not finished yet, by step and current state",
            labels=["step", "state"],
        )
        done: Counter[tuple[str, str, str]] = Counter()
        open_: Counter[tuple[str, str]] = Counter()
        for a in self.store.list_actions():
            if a.state in FINISHED:
                done[(a.step, a.state, a.reason or "")] += 1
            else:
                open_[(a.step, a.state)] += 1
        for labels, n in sorted(done.items()):
            finished.add_metric(list(labels), float(n))
        for pair, n in sorted(open_.items()):
            moving.add_metric(list(pair), float(n))
        yield finished
        yield moving

    def _lag(self) -> HistogramMetricFamily:
        transitions = self.store.list_transitions()
        lags = sorted(tr.lag_seconds for tr in transitions if tr.lag_seconds is not None)
        buckets = [(str(b), float(sum(1 for x in lags if x <= b))) for b in LAG_BUCKETS]
        buckets.append(("+Inf", float(len(lags))))
        return HistogramMetricFamily(
            "deployschedule_boundary_lag_seconds",
            "Boundary to transition opened",
            buckets=buckets,
            sum_value=sum(lags),
        )


def render(store: Store) -> str:
    """The Prometheus text exposition of the engine metrics."""
    registry = CollectorRegistry()
    registry.register(StoreCollector(store))
    return generate_latest(registry).decode()
