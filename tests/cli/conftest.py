"""Every CLI test runs at a fixed instant: ``GPS_CLOCK`` (the composition root's virtual clock).

The CLI reads "now" only from its runtime, so a test that does not choose its own instant
still never depends on the wall clock; settings leaking from the caller's environment
(backend, kubeconfig, namespaces) are cleared too.
"""

from __future__ import annotations

import pytest

from tests.cli.cli_support import MONDAY_1900


@pytest.fixture(autouse=True)
def cli_clock(monkeypatch: pytest.MonkeyPatch) -> str:
    for name in (
        "GPS_BACKEND",
        "GPS_KUBECONFIG",
        "KUBECONFIG",
        "GPS_KUBE_CONTEXT",
        "GPS_NAMESPACES",
        "KUBERNETES_SERVICE_HOST",
        "GPS_DAGSTER_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPS_CLOCK", MONDAY_1900)
    monkeypatch.setenv("GPS_CLOCK_WRITES", "1")  # asked explicitly: act at the instant (issue 25)
    return MONDAY_1900
