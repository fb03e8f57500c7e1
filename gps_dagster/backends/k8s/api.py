"""The official Kubernetes client, narrowed to what the adapter calls, with typed errors.

Every call goes through ``Kube.call``: it asks the generated API for the raw response
(``_preload_content=False``; the client's model deserialisation costs more than the API server
on a 200-deploy list), parses the JSON into plain dicts and turns every failure into the port's
errors, split by whether retrying helps (STYLE: one error root, permanent vs temporary):

* 404 → ``NotFound``; 409 → ``EtagMismatch`` (a stale resourceVersion precondition);
* 429, 5xx, no answer → ``Transient`` (``response_lost`` when a mutation was sent and its answer
  never came: it may have been applied, so the caller resubmits with the same idempotency key);
* 400, 401, 403, 422 and anything else → ``Permanent``, with the API's own message.

Throttling is honoured the way client-go's ``rest.Request`` does it (1.20
``staging/src/k8s.io/client-go/rest/request.go``: ``checkWait`` waits out a ``Retry-After`` on a
429 or any 5xx, up to ``maxRetries`` = 10): a 429 with ``Retry-After`` — API Priority and
Fairness and the max-in-flight filter answer it *before* the request reaches a handler, so a
refused write was not applied — is waited out and retried, reads and writes alike; a 5xx with
``Retry-After`` is retried for reads only (a write may have been applied: the caller's
lost-answer path owns it). The waits of one call are bounded by ``retry_budget_s``: past it the
call is ``Transient`` (``api_throttled``, with the server's Retry-After), and the engine's next
pass retries it. A client-side token bucket (``qps`` / ``burst``, client-go's
``flowcontrol.NewTokenBucketRateLimiter``) paces every request of the process's client.

``connect`` builds the client from a kubeconfig (path + context) or the in-cluster service
account; a missing or broken config is a ``Permanent`` error that says what to fix.
"""

# Decisions embodied here (docs/decisions.md):
# * “The Kubernetes client paces itself and waits out Retry-After as client-go does”
# * “The transport never waits on its own; an API-server restart is a second API server's”

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gps_dagster.backends.k8s import names
from gps_dagster.ports import CoreError, EtagMismatch, NotFound, Permanent, Transient

Obj = dict[str, Any]
RETRYABLE = frozenset({429, 500, 502, 503, 504})
MAX_RETRIES = 10
"""client-go's default ``maxRetries`` for Retry-After answers."""


TRANSPORT_RETRIES = urllib3.util.Retry(3, respect_retry_after_header=False)
"""urllib3's default (``Retry(3)``: refused connections and idempotent requests whose connection
dropped are retried at once) minus its ``Retry-After`` handling: by default urllib3 itself
sleeps out a 429/503's ``Retry-After`` up to three times for GET/PUT/DELETE, in wall time and
outside ``Kube._send``'s count and budget (measured: a 429 with ``Retry-After: 1`` took 3 s per
attempt). Status answers always come back to ``_send``, which owns the waiting."""


def connect(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """An ``ApiClient`` for the kubeconfig (and context), else the in-cluster service account."""
    cfg = client.Configuration()
    try:
        if kubeconfig is None:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        where = kubeconfig or "the in-cluster service account"
        raise Permanent(
            f"cannot load Kubernetes credentials from {where}: {exc}; set GPS_KUBECONFIG (or "
            "--kubeconfig) to a readable kubeconfig, or run in a pod with a service account",
            reason="kubeconfig_invalid",
        ) from exc
    cfg.retries = TRANSPORT_RETRIES
    return client.ApiClient(cfg)


def api_message(exc: ApiException) -> str:
    """The API server's own message (``Status.message``), else the HTTP reason."""
    try:
        body = json.loads(exc.body or b"{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or f"HTTP {exc.status}")


def translate(exc: BaseException, what: str, *, mutating: bool = False) -> CoreError:
    """The port's error for a failed API call (``what`` names the call for the message)."""
    if isinstance(exc, CoreError):
        return exc
    if isinstance(exc, ApiException):
        message = f"{what}: {api_message(exc)}"
        status = int(exc.status or 0)
        if status == 404:
            return NotFound(message, reason="not_found")
        if status == 409:
            return EtagMismatch(message, reason="conflict")
        if status in RETRYABLE or status == 0:
            return Transient(message, reason="api_unavailable")
        reasons = {401: "unauthorized", 403: "forbidden", 400: "invalid", 422: "invalid"}
        err = Permanent(message, reason=reasons.get(status, "api_refused"))
        err.http_status = status
        return err
    if mutating and isinstance(
        exc, (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError)
    ):
        return Transient(
            f"{what}: the answer was lost ({exc}); it may have been applied", reason="response_lost"
        )
    return Transient(f"{what}: API server unreachable ({exc})", reason="api_unreachable")


@dataclass(frozen=True, slots=True)
class Throttle:
    """How one process's client paces itself and waits out the server's Retry-After.

    ``qps`` ≤ 0 means no client-side limit. ``sleep`` and ``monotonic`` are injected (tests pass a
    virtual pair; nothing here reads the wall clock for a decision)."""

    qps: float = 0.0
    burst: int = 1
    retry_budget_s: float = 30.0
    max_retries: int = MAX_RETRIES
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved (client-go's token bucket limiter)."""

    def __init__(self, throttle: Throttle) -> None:
        self._t = throttle
        self._tokens = float(max(1, throttle.burst))
        self._at = throttle.monotonic()
        self._lock = threading.Lock()

    def take(self) -> float:
        """Wait for one token; returns the seconds waited."""
        if self._t.qps <= 0:
            return 0.0
        with self._lock:
            now = self._t.monotonic()
            cap = float(max(1, self._t.burst))
            self._tokens = min(cap, self._tokens + (now - self._at) * self._t.qps)
            self._at = now
            self._tokens -= 1.0
            wait = -self._tokens / self._t.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._t.sleep(wait)
        return wait


def retry_after(exc: BaseException, *, mutating: bool) -> float | None:
    """Seconds the server asked to wait before the same request, when retrying it is safe."""
    if not isinstance(exc, ApiException):
        return None
    status = int(exc.status or 0)
    if status != 429 and (status < 500 or mutating):
        return None
    headers = exc.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        seconds = float(str(value).strip()) if value is not None else None
    except ValueError:
        return None  # an HTTP-date: client-go ignores it too (retryAfterSeconds: Atoi only)
    return max(0.0, seconds) if seconds is not None else None


class Kube:
    """Typed API groups of one ``ApiClient`` and a call wrapper that returns plain JSON."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        timeout_s: float = 15.0,
        throttle: Throttle | None = None,
    ) -> None:
        self.api_client = api_client
        self.timeout = (5.0, timeout_s)
        self.throttle = throttle or Throttle()
        self.bucket = TokenBucket(self.throttle)
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.autoscaling = client.AutoscalingV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)

    def call(
        self, fn: Callable[..., Any], *args: Any, what: str, mutating: bool = False, **kwargs: Any
    ) -> Obj:
        """Call a generated API method; the parsed JSON body, or a port error."""
        data = self._send(
            lambda: fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs).data,
            what,
            mutating=mutating,
        )
        if not data:
            return {}
        parsed = json.loads(data)
        return parsed if isinstance(parsed, dict) else {"items": parsed}

    def _send(self, request: Callable[[], Any], what: str, *, mutating: bool) -> Any:
        """One request, paced by the bucket; a Retry-After answer waited out within the budget."""
        waited, retries = 0.0, 0
        while True:
            self.bucket.take()
            try:
                return request()
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                wait = retry_after(exc, mutating=mutating)
                if wait is None:
                    raise translate(exc, what, mutating=mutating) from exc
                if (
                    retries >= self.throttle.max_retries
                    or waited + wait > self.throttle.retry_budget_s
                ):
                    raise Transient(
                        f"{what}: the API server is throttling this client (HTTP "
                        f"{getattr(exc, 'status', '?')}, Retry-After {wait:g} s, {retries} "
                        f"retries, {waited:g} s waited); the next pass retries it: raise the "
                        "product's priority level (API Priority and Fairness) or lower GPS_K8S_QPS",
                        reason="api_throttled",
                    ) from exc
                self.throttle.sleep(wait)
                waited, retries = waited + wait, retries + 1

    def stream(self, fn: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> Any:
        """Open a streaming GET (a WATCH): the raw response, paced and its errors typed as
        ``call``'s; the caller reads its lines and closes it."""
        timeout = kwargs.pop("_request_timeout", self.timeout)
        return self._send(
            lambda: fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs),
            what,
            mutating=False,
        )

    def items(self, fn: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> list[Obj]:
        return list(self.call(fn, *args, what=what, **kwargs).get("items") or [])

    def merge_patch(self, fn: Callable[..., Any], *args: Any, body: Obj, what: str) -> Obj:
        return self.call(
            fn, *args, body, what=what, mutating=True, _content_type="application/merge-patch+json"
        )

    def has_lws(self) -> bool:
        """Whether the LeaderWorkerSet API is served (CRD installed); discovery needs no RBAC."""
        path = f"/apis/{names.LWS_GROUP}/{names.LWS_VERSION}"
        try:
            self._send(
                lambda: self.api_client.call_api(
                    path,
                    "GET",
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=self.timeout,
                ),
                "LeaderWorkerSet discovery",
                mutating=False,
            )
        except NotFound:
            return False
        return True
