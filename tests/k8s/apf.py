"""API Priority and Fairness for one ServiceAccount: a priority level of 3 seats that rejects.

APF answers a request over its level's seats at once with 429 and ``Retry-After: 1`` when the
level's ``limitResponse`` is ``Reject`` (1.20 ``apiserver/pkg/server/filters/maxinflight.go::
tooManyRequests``). The 1.20 default levels hold 205 assured-concurrency shares of the server's
600 seats (400 read + 200 mutating in flight), so a level of one share gets ceil(600 / 206) = 3.
"""

from __future__ import annotations

import threading

from gps_dagster.backends.k8s.api import Kube

FLOWCONTROL = ("flowcontrol.apiserver.k8s.io", "v1beta1")


def limit_to_three_seats(admin: Kube, namespace: str, account: str) -> str:
    """Put ``namespace/account`` in a 1-share Reject level; returns the objects' name."""
    group, version = FLOWCONTROL
    name = f"gps-test-{namespace}-{account}"
    admin.call(
        admin.custom.create_cluster_custom_object,
        group,
        version,
        "prioritylevelconfigurations",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {"assuredConcurrencyShares": 1, "limitResponse": {"type": "Reject"}},
            },
        },
        what="priority level",
        mutating=True,
    )
    admin.call(
        admin.custom.create_cluster_custom_object,
        group,
        version,
        "flowschemas",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 500,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [
                            {
                                "kind": "ServiceAccount",
                                "serviceAccount": {"name": account, "namespace": namespace},
                            }
                        ],
                        "resourceRules": [
                            {
                                "verbs": ["*"],
                                "apiGroups": ["*"],
                                "resources": ["*"],
                                "namespaces": ["*"],
                                "clusterScope": True,
                            }
                        ],
                    }
                ],
            },
        },
        what="flow schema",
        mutating=True,
    )
    wait_in_force(admin, name)
    return name


def remove(admin: Kube, name: str) -> None:
    group, version = FLOWCONTROL
    for plural in ("flowschemas", "prioritylevelconfigurations"):
        admin.call(
            admin.custom.delete_cluster_custom_object,
            group,
            version,
            plural,
            name,
            what="apf cleanup",
            mutating=True,
        )


def wait_in_force(admin: Kube, name: str) -> None:
    """The APF config controller marks a FlowSchema ``Dangling=False`` once its level is known."""
    group, version = FLOWCONTROL
    pause = threading.Event()
    conditions: list[dict[str, str]] = []
    for _ in range(100):
        obj = admin.call(
            admin.custom.get_cluster_custom_object,
            group,
            version,
            "flowschemas",
            name,
            what="flow schema",
        )
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Dangling" and c.get("status") == "False" for c in conditions):
            return
        pause.wait(0.2)
    raise AssertionError(f"FlowSchema {name} never in force: {conditions}")


class Refusals:
    """Counts the 429s the server sends one client (wraps its REST transport)."""

    def __init__(self, client: Kube) -> None:
        import kubernetes

        self.count = 0
        self._lock = threading.Lock()
        rest = client.api_client.rest_client
        inner = rest.request

        def request(*args: object, **kwargs: object) -> object:
            try:
                return inner(*args, **kwargs)
            except kubernetes.client.ApiException as exc:
                if exc.status == 429:
                    with self._lock:
                        self.count += 1
                raise

        rest.request = request
