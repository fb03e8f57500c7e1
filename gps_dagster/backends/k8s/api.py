"""The official Kubernetes client, narrowed to what the adapter calls, with typed errors.

Every call goes through ``Kube.call``: it asks the generated API for the raw response
(``_preload_content=False``; the client's model deserialisation costs more than the API server
on a 200-deploy list), parses the JSON into plain dicts and turns every failure into the port's
errors, split by whether retrying helps (STYLE: one error root, permanent vs temporary):

* 404 → ``NotFound``; 409 → ``EtagMismatch`` (a stale resourceVersion precondition);
* 429, 5xx, no answer → ``Transient`` (``response_lost`` when a mutation was sent and its answer
  never came: it may have been applied, so the caller resubmits with the same idempotency key);
* 400, 401, 403, 422 and anything else → ``Permanent``, with the API's own message.

``connect`` builds the client from a kubeconfig (path + context) or the in-cluster service
account; a missing or broken config is a ``Permanent`` error that says what to fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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


def connect(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """An ``ApiClient`` for the kubeconfig (and context), else the in-cluster service account."""
    try:
        if kubeconfig is None:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        where = kubeconfig or "the in-cluster service account"
        raise Permanent(
            f"cannot load Kubernetes credentials from {where}: {exc}; set GPS_KUBECONFIG (or "
            "--kubeconfig) to a readable kubeconfig, or run in a pod with a service account",
            reason="kubeconfig_invalid",
        ) from exc


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


class Kube:
    """Typed API groups of one ``ApiClient`` and a call wrapper that returns plain JSON."""

    def __init__(self, api_client: client.ApiClient, *, timeout_s: float = 15.0) -> None:
        self.api_client = api_client
        self.timeout = (5.0, timeout_s)
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
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
            data = resp.data
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, what, mutating=mutating) from exc
        if not data:
            return {}
        parsed = json.loads(data)
        return parsed if isinstance(parsed, dict) else {"items": parsed}

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
            self.api_client.call_api(
                path,
                "GET",
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise translate(exc, "LeaderWorkerSet discovery") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise translate(exc, "LeaderWorkerSet discovery") from exc
        return True
