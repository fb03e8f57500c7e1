"""Issue 18's verdicts on plain objects (no cluster): the shapes real controllers write, and what
the capacity preview must model before it may say Fits."""

from __future__ import annotations

from typing import Any

import pytest

from gps_dagster.backends.k8s import names, views
from gps_dagster.backends.k8s.mutations import leader_template, start
from gps_dagster.backends.k8s.workloads import LWS, from_object


def lws(status: dict[str, Any], *, replicas: int = 2, generation: int = 4) -> Any:
    worker = {"spec": {"containers": [{"name": "w", "resources": {"limits": {names.GPU: "8"}}}]}}
    leader = {"spec": {"containers": [{"name": "l", "resources": {}}]}}
    return from_object(
        LWS,
        {
            "metadata": {"name": "big", "namespace": "ns", "uid": "u" * 16, "generation": generation,
                         "labels": {names.DEPLOY_ID: "big"}},
            "spec": {
                "replicas": replicas,
                "leaderWorkerTemplate": {"size": 2, "workerTemplate": worker, "leaderTemplate": leader},
            },
            "status": status,
        },
    )


V08_READY = {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
             "conditions": [{"type": "Available", "status": "True", "reason": "AllGroupsReady"}]}


def test_lws_v08_status_without_observed_generation_is_current_when_counts_match() -> None:
    assert views.observed_generation(lws(V08_READY)) == 4
    assert views.derive_state(lws(V08_READY), [], 2) is not views.DeployState.STARTING


@pytest.mark.parametrize(
    "status",
    [
        {**V08_READY, "replicas": 1, "updatedReplicas": 1},  # scaled up, not yet acted on
        {**V08_READY, "conditions": [{"type": "UpdateInProgress", "status": "True"}]},
    ],
)
def test_lws_v08_status_is_behind_until_the_controller_catches_up(status: dict[str, Any]) -> None:
    assert views.observed_generation(lws(status)) == 3


def test_lws_v09_status_observed_generation_wins_over_the_counts() -> None:
    assert views.observed_generation(lws({**V08_READY, "observedGeneration": 3})) == 3
    stamped = [{"type": "Available", "status": "True", "observedGeneration": 4}]
    assert views.observed_generation(lws({**V08_READY, "conditions": stamped})) == 4


def test_an_lws_start_renders_the_leader_template_too() -> None:
    w = lws({}, replicas=0)
    leader = leader_template(w)
    assert leader is not None
    rendered = {**leader, "spec": {**leader["spec"], "schedulerName": "kai-scheduler"}}
    worker = {**w.template, "spec": {**w.template["spec"], "schedulerName": "kai-scheduler"}}
    plan = start(w, template=worker, leader=rendered)
    lwt = plan.spec["leaderWorkerTemplate"]
    assert lwt["leaderTemplate"]["spec"]["schedulerName"] == "kai-scheduler"
    assert lwt["workerTemplate"]["spec"]["schedulerName"] == "kai-scheduler"
