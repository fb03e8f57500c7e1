"""Prometheus metrics of the engine (SPEC R-PASS-11), read from the store.

Reading them from durable state at scrape time means every engine replica,
the Dagster daemon and the CLI report the same figures, and nothing is lost
when a process restarts.

A Prometheus counter must never go down (``rate()`` reads a decrease as a
restart and counts the whole new value again). Counters are running totals
(``store/metric_totals.py``), added to in the same transaction that finishes
a step or opens a transition — never recomputed from rows, so a scrape reads a
few rows whatever the history (decision "Counters are running totals"), and retention (``db prune``) deletes
old rows without any counter dropping. Steps still moving are a gauge, read
through the partial index on in-flight steps.
"""

# Decisions embodied here (docs/decisions.md):
# * “Metrics are computed from the store at scrape time”
# * “Counters count facts that never change”
# * “Counters are running totals”

from __future__ import annotations

from collections.abc import Iterator

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.engine import Connection

from gps_dagster.store import metric_totals
from gps_dagster.store import tables as t
from gps_dagster.store.metric_totals import LAG_BUCKETS
from gps_dagster.store.repository import Store
from gps_dagster.store.scale_tables import IN_FLIGHT_STATES

Family = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily


SERVING = "deployschedule_target_serving"
SERVING_HELP = "1 when the target was last observed READY"


class StoreCollector(Collector):
    def __init__(self, store: Store, *, serving: bool = True) -> None:
        self.store, self.serving = store, serving

    def collect(self) -> Iterator[Family]:
        with self.store.engine.connect() as conn:
            totals = metric_totals.read(conn)
            if self.serving:
                yield self._serving(conn)
            yield self._finished(totals)
            yield self._moving(conn)
        yield self._lag(totals)

    @staticmethod
    def _serving(conn: Connection) -> GaugeMetricFamily:
        serving = GaugeMetricFamily(SERVING, SERVING_HELP, labels=["schedule", "target", "phase"])
        for schedule, target, phase, ready in serving_rows(conn):
            serving.add_metric([schedule, target, phase], 1.0 if ready else 0.0)
        return serving

    @staticmethod
    def _finished(totals: dict[str, dict[tuple[str, ...], float]]) -> CounterMetricFamily:
        finished = CounterMetricFamily(
            "deployschedule_actions",
            "Transition steps finished, by step, terminal state and reason",
            labels=["step", "state", "reason"],
        )
        for labels, n in sorted(totals.get(metric_totals.ACTIONS, {}).items()):
            finished.add_metric(list(labels), n)
        return finished

    @staticmethod
    def _moving(conn: Connection) -> GaugeMetricFamily:
        moving = GaugeMetricFamily(
            "deployschedule_actions_in_flight",
            "Transition steps not finished yet, by step and current state",
            labels=["step", "state"],
        )
        a = t.actions
        rows = conn.execute(
            sa.select(a.c.step, a.c.state, sa.func.count())
            .where(a.c.state.in_(IN_FLIGHT_STATES))
            .group_by(a.c.step, a.c.state)
            .order_by(a.c.step, a.c.state)
        )
        for step, state, n in rows:
            moving.add_metric([step, state], float(n))
        return moving

    @staticmethod
    def _lag(totals: dict[str, dict[tuple[str, ...], float]]) -> HistogramMetricFamily:
        counts = totals.get(metric_totals.LAG_BUCKET, {})
        buckets = [(str(b), counts.get((str(b),), 0.0)) for b in LAG_BUCKETS]
        buckets.append(("+Inf", totals.get(metric_totals.LAG_COUNT, {}).get((), 0.0)))
        return HistogramMetricFamily(
            "deployschedule_boundary_lag_seconds",
            "Boundary to transition opened",
            buckets=buckets,
            sum_value=totals.get(metric_totals.LAG_SUM, {}).get((), 0.0),
        )


def serving_rows(conn: Connection) -> Iterator[tuple[str, str, str, bool]]:
    """(schedule, target, phase, last observed READY) of every target, in order."""
    ts = t.target_status
    observed = ts.c.detail["observed_state"].as_string()
    rows = conn.execute(
        sa.select(ts.c.schedule_name, ts.c.deploy_id, ts.c.phase, observed).order_by(
            ts.c.schedule_name, ts.c.deploy_id
        )
    )
    for schedule, target, phase, state in rows:
        yield schedule, target, phase, state == "READY"


def render(store: Store) -> str:
    """The Prometheus text exposition of the engine metrics.

    The per-target gauge (two lines per schedule) is written here directly, in the exposition
    format ``prometheus_client`` writes (labels sorted, values ``1.0``/``0.0``): building one
    sample object per target was most of a scrape's time at 10,000 schedules.
    """
    with store.engine.connect() as conn:
        lines = [f"# HELP {SERVING} {SERVING_HELP}", f"# TYPE {SERVING} gauge"]
        lines += [
            f'{SERVING}{{phase="{_esc(phase)}",schedule="{_esc(schedule)}",'
            f'target="{_esc(target)}"}} {"1.0" if ready else "0.0"}'
            for schedule, target, phase, ready in serving_rows(conn)
        ]
    registry = CollectorRegistry()
    registry.register(StoreCollector(store, serving=False))
    return "\n".join(lines) + "\n" + generate_latest(registry).decode()


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
