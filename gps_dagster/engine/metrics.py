"""Prometheus metrics of the engine (SPEC R-PASS-11), read from the store.

Reading them from durable state at scrape time means every engine replica,
the Dagster daemon and the CLI report the same figures, and nothing is lost
when a process restarts.

A Prometheus counter must never go down (``rate()`` reads a decrease as a
restart and counts the whole new value again). Counters are running totals
(``store/metric_totals.py``), added to in the same transaction that finishes
a step or opens a transition — never recomputed from rows, so a scrape reads a
few rows whatever the history (decision "Counters are running totals"), and retention (``db prune``)
deletes old rows without any counter dropping. Steps still moving are a gauge, read
through the partial index on in-flight steps.
"""

# Decisions embodied here (docs/decisions.md):
# * “Metrics are computed from the store at scrape time”
# * “Counters count facts that never change”
# * “Counters are running totals”

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from gps_dagster.engine.store_ports import MetricsSource
from gps_dagster.store import metric_totals
from gps_dagster.store.metric_totals import LAG_BUCKETS
from gps_dagster.store.readings import MetricReadings, Totals

Family = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily


SERVING = "deployschedule_target_serving"
SERVING_HELP = "1 when the target was last observed READY"


class StoreCollector(Collector):
    def __init__(self, store: MetricsSource, *, serving: bool = True) -> None:
        self.store, self.serving = store, serving

    def collect(self) -> Iterator[Family]:
        readings = self.store.metric_readings(serving=self.serving)
        if self.serving:
            yield self._serving(readings)
        yield self._finished(readings.totals)
        yield self._moving(readings)
        yield self._lag(readings.totals)

    @staticmethod
    def _serving(readings: MetricReadings) -> GaugeMetricFamily:
        serving = GaugeMetricFamily(SERVING, SERVING_HELP, labels=["schedule", "target", "phase"])
        for schedule, target, phase, ready in readings.serving:
            serving.add_metric([schedule, target, phase], 1.0 if ready else 0.0)
        return serving

    @staticmethod
    def _finished(totals: Totals) -> CounterMetricFamily:
        finished = CounterMetricFamily(
            "deployschedule_actions",
            "Transition steps finished, by step, terminal state and reason",
            labels=["step", "state", "reason"],
        )
        for labels, n in sorted(totals.get(metric_totals.ACTIONS, {}).items()):
            finished.add_metric(list(labels), n)
        return finished

    @staticmethod
    def _moving(readings: MetricReadings) -> GaugeMetricFamily:
        moving = GaugeMetricFamily(
            "deployschedule_actions_in_flight",
            "Transition steps not finished yet, by step and current state",
            labels=["step", "state"],
        )
        for step, state, n in readings.in_flight:
            moving.add_metric([step, state], float(n))
        return moving

    @staticmethod
    def _lag(totals: Totals) -> HistogramMetricFamily:
        counts = totals.get(metric_totals.LAG_BUCKET, {})
        buckets = [(str(b), counts.get((str(b),), 0.0)) for b in LAG_BUCKETS]
        buckets.append(("+Inf", totals.get(metric_totals.LAG_COUNT, {}).get((), 0.0)))
        return HistogramMetricFamily(
            "deployschedule_boundary_lag_seconds",
            "Boundary to transition opened",
            buckets=buckets,
            sum_value=totals.get(metric_totals.LAG_SUM, {}).get((), 0.0),
        )


def render(store: MetricsSource) -> str:
    """The Prometheus text exposition of the engine metrics.

    The per-target gauge (two lines per schedule) is written here directly, in the exposition
    format ``prometheus_client`` writes (labels sorted, values ``1.0``/``0.0``): building one
    sample object per target was most of a scrape's time at 10,000 schedules. One reading of
    the store serves the whole scrape.
    """
    readings = store.metric_readings(serving=True)
    lines = [f"# HELP {SERVING} {SERVING_HELP}", f"# TYPE {SERVING} gauge"]
    lines += [
        f'{SERVING}{{phase="{_esc(phase)}",schedule="{_esc(schedule)}",'
        f'target="{_esc(target)}"}} {"1.0" if ready else "0.0"}'
        for schedule, target, phase, ready in readings.serving
    ]
    registry = CollectorRegistry()
    registry.register(StoreCollector(_Taken(readings), serving=False))
    return "\n".join(lines) + "\n" + generate_latest(registry).decode()


class _Taken:
    """Readings already taken, as a source (the gauge above is written by hand)."""

    def __init__(self, readings: MetricReadings) -> None:
        self.readings = readings

    def metric_readings(self, *, serving: bool = True) -> MetricReadings:
        return self.readings


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
