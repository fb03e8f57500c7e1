"""Prometheus counters of the engine only go up (issue 9 §2.7).

``deployschedule_actions`` was declared a counter but counted steps by their
*current* state: a step moving from ``pending`` to ``accepted`` made the
``pending`` series go down, which Prometheus reads as a restart.
"""

from __future__ import annotations

from itertools import pairwise

from prometheus_client.parser import text_string_to_metric_families

from gps_dagster.engine.metrics import render
from tests.engine.harness import A, B, local, make_world

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(text: str) -> tuple[Series, Series]:
    """(counter and histogram samples, gauge samples) of one exposition."""
    monotonic: Series = {}
    gauges: Series = {}
    for family in text_string_to_metric_families(text):
        into = monotonic if family.type in ("counter", "histogram") else gauges
        for s in family.samples:
            into[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return monotonic, gauges


def test_deployschedule_actions_counter_never_decreases_across_a_swap(sqlite_url: str) -> None:
    w = make_world(sqlite_url, start=local("2026-10-19T07:59:00"))
    scrapes = []
    while w.clock.now() < local("2026-10-19T08:10"):  # the 08:00 swap: B stops, A starts
        w.tick(15)
        scrapes.append(_scrape(render(w.store)))
    assert w.status(A).phase == "converged" and w.status(B).phase == "converged"
    for (before, _), (after, _) in pairwise(scrapes):
        went_down = {k: (v, after.get(k, 0.0)) for k, v in before.items() if after.get(k, 0.0) < v}
        assert not went_down, f"counter samples went down: {went_down}"
    final, _ = scrapes[-1]
    finished = {
        dict(k[1])["step"]: v for k, v in final.items() if k[0] == "deployschedule_actions_total"
    }
    assert finished == {"start": 1.0, "stop": 1.0}  # B's stop and A's start, both converged
    in_flight = [
        g for _, g in scrapes if any(k[0] == "deployschedule_actions_in_flight" for k in g)
    ]
    assert in_flight, "steps on their way are reported as a gauge"
    assert not [k for k in scrapes[-1][1] if k[0] == "deployschedule_actions_in_flight"]


def test_the_serving_gauge_written_by_hand_is_what_prometheus_client_writes(
    sqlite_url: str,
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from gps_dagster.engine.metrics import StoreCollector, render
    from tests.engine.harness import a_running_pool, local, make_world, run_for

    w = make_world(sqlite_url, pool=a_running_pool(), start=local("2026-10-19T17:59:30"))
    run_for(w, 300)
    registry = CollectorRegistry()
    registry.register(StoreCollector(w.store))
    reference = generate_latest(registry).decode().splitlines()
    fast = render(w.store).splitlines()
    assert sorted(fast) == sorted(reference)
    assert any(line.endswith(" 1.0") and "target_serving{" in line for line in fast)
