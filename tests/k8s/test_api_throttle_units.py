"""The adapter's client paces itself and waits out the API server's Retry-After, on a virtual clock.

``Kube`` follows client-go 1.20's ``rest.Request``: a 429 (or, for a read, a 5xx) carrying
``Retry-After`` is waited out and retried, at most ``MAX_RETRIES`` times and within the call's
``retry_budget_s``; past that the call is ``Transient`` (``api_throttled``) for the next pass. A
token bucket (``qps``/``burst``) paces every request. No wall time passes in these tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gps_dagster.backends.k8s.api import MAX_RETRIES, Kube, Throttle
from gps_dagster.ports import Permanent, Transient
from gps_dagster.runtime import K8S_BURST, K8S_QPS, SettingsInvalid, settings_from_env


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


class Answer:
    def __init__(self, data: bytes = b'{"ok": true}') -> None:
        self.data = data


def throttled(status: int = 429, retry_after: str | None = "2") -> ApiException:
    exc = ApiException(status=status, reason="Too Many Requests")
    exc.headers = {"Retry-After": retry_after} if retry_after is not None else {}
    exc.body = b'{"message": "too many requests, please try again later"}'
    return exc


class Server:
    """Answers with the queued errors first, then 200."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Answer:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return Answer()


def kube(clock: Clock, **throttle: Any) -> Kube:
    return Kube(None, throttle=Throttle(sleep=clock.sleep, monotonic=clock.monotonic, **throttle))  # type: ignore[arg-type]


def test_a_429_is_waited_out_for_its_retry_after_then_the_same_request_succeeds() -> None:
    clock, server = Clock(), Server(throttled(retry_after="2"), throttled(retry_after="1"))
    assert kube(clock).call(server, what="list pods") == {"ok": True}
    assert server.calls == 3
    assert clock.slept == [2.0, 1.0]


def test_a_write_refused_with_429_is_retried_because_apf_refuses_before_any_handler() -> None:
    clock, server = Clock(), Server(throttled(retry_after="1"))
    assert kube(clock).call(server, what="patch deployment", mutating=True) == {"ok": True}
    assert server.calls == 2 and clock.slept == [1.0]


def test_a_5xx_with_retry_after_is_retried_for_a_read_but_not_for_a_write() -> None:
    clock, read = Clock(), Server(throttled(503, "1"))
    assert kube(clock).call(read, what="list pods") == {"ok": True}
    assert read.calls == 2
    write = Server(throttled(503, "1"))
    with pytest.raises(Transient) as caught:
        kube(clock).call(write, what="patch deployment", mutating=True)
    assert write.calls == 1  # the write may have been applied: the lost-answer path owns it
    assert caught.value.reason == "api_unavailable"


def test_a_429_without_retry_after_is_transient_at_once() -> None:
    clock, server = Clock(), Server(throttled(retry_after=None))
    with pytest.raises(Transient) as caught:
        kube(clock).call(server, what="list pods")
    assert server.calls == 1 and clock.slept == []
    assert caught.value.reason == "api_unavailable"


def test_waits_past_the_budget_end_the_call_as_api_throttled_with_the_fix() -> None:
    clock = Clock()
    server = Server(*[throttled(retry_after="4") for _ in range(5)])
    with pytest.raises(Transient) as caught:
        kube(clock, retry_budget_s=10.0).call(server, what="list pods")
    assert caught.value.reason == "api_throttled"
    assert clock.slept == [4.0, 4.0]  # a third wait would pass the 10 s budget
    assert server.calls == 3
    assert "Retry-After 4 s" in str(caught.value) and "GPS_K8S_QPS" in str(caught.value)


def test_at_most_client_gos_ten_retries() -> None:
    clock = Clock()
    server = Server(*[throttled(retry_after="0") for _ in range(MAX_RETRIES + 5)])
    with pytest.raises(Transient) as caught:
        kube(clock).call(server, what="list pods")
    assert server.calls == MAX_RETRIES + 1
    assert caught.value.reason == "api_throttled"


def test_a_permanent_refusal_is_never_retried() -> None:
    clock = Clock()
    forbidden = ApiException(status=403, reason="Forbidden")
    forbidden.headers = {"Retry-After": "1"}
    server = Server(forbidden)
    with pytest.raises(Permanent):
        kube(clock).call(server, what="list pods")
    assert server.calls == 1 and clock.slept == []


def test_the_token_bucket_lets_a_burst_through_then_paces_at_qps() -> None:
    clock, server = Clock(), Server()
    client = kube(clock, qps=10.0, burst=5)
    for _ in range(5):
        client.call(server, what="get")
    assert clock.slept == []  # the burst
    for _ in range(10):
        client.call(server, what="get")
    assert sum(clock.slept) == pytest.approx(1.0)  # 10 more at 10 a second
    clock.now += 60  # idle: the bucket refills to the burst, never beyond
    clock.slept.clear()
    for _ in range(6):
        client.call(server, what="get")
    assert sum(clock.slept) == pytest.approx(0.1)


def test_no_client_side_limit_when_qps_is_zero() -> None:
    clock, server = Clock(), Server()
    client = kube(clock, qps=0.0)
    for _ in range(1000):
        client.call(server, what="get")
    assert clock.slept == []


def test_the_pace_is_a_setting_with_a_clear_error() -> None:
    default = settings_from_env({})
    assert (default.k8s_qps, default.k8s_burst) == (K8S_QPS, K8S_BURST)
    given = settings_from_env({"GPS_K8S_QPS": "7.5", "GPS_K8S_BURST": "12"})
    assert (given.k8s_qps, given.k8s_burst) == (7.5, 12)
    with pytest.raises(SettingsInvalid) as caught:
        settings_from_env({"GPS_K8S_QPS": "fast", "GPS_K8S_BURST": "0"})
    problems = {(e.path, e.reason) for e in caught.value.errors}
    assert problems == {("GPS_K8S_QPS", "invalid_k8s_qps"), ("GPS_K8S_BURST", "invalid_k8s_burst")}


def test_build_core_paces_its_client_as_the_settings_say(tmp_path: Any) -> None:
    import json

    from gps_dagster.backends.k8s import K8sCore, build_core
    from gps_dagster.clocks import VirtualClock
    from tests.k8s.cluster import T0_K8S

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    core = build_core(
        ledger=None,
        clock=VirtualClock(T0_K8S),
        kubeconfig=str(path),
        context=None,
        namespaces=(),
        qps=7.0,
        burst=3,
    )
    assert isinstance(core, K8sCore)
    assert (core.kube.throttle.qps, core.kube.throttle.burst) == (7.0, 3)
    assert core.cache is not None and core.cache.kube is core.kube  # the cache paces with it
    core.close()


def test_the_transport_hands_every_retry_after_to_the_client_instead_of_sleeping_it_out(
    tmp_path: Any,
) -> None:
    """Through ``connect``'s real HTTP stack (kubernetes → urllib3 → a socket): a server that
    answers every GET with 429 + ``Retry-After: 1`` sees exactly 1 + ``max_retries`` requests,
    and every wait is the client's own (virtual) sleep. With urllib3's default ``Retry(3)`` it
    saw four requests per attempt and each attempt took 3 s of wall time that ``_send`` neither
    counted nor bounded."""
    import http.server
    import threading

    from gps_dagster.backends.k8s.api import connect

    seen: list[str] = []

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = b'{"kind": "Status", "code": 429, "reason": "TooManyRequests"}'
            self.send_response(429)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = tmp_path / "kubeconfig"
        config.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            f"clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{server.server_address[1]}\n"
            "users:\n- name: u\n  user:\n    token: t\n"
            "contexts:\n- name: c\n  context: {cluster: c, user: u}\n"
        )
        clock = Clock()
        client = Kube(
            connect(str(config), None),
            throttle=Throttle(sleep=clock.sleep, monotonic=clock.monotonic, max_retries=3),
        )
        with pytest.raises(Transient) as caught:
            client.call(client.core.list_namespace, what="namespaces")
    finally:
        server.shutdown()
        server.server_close()
    assert caught.value.reason == "api_throttled"
    assert len(seen) == 4 and clock.slept == [1.0, 1.0, 1.0]
