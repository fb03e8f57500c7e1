"""Hold every API Priority and Fairness seat of one priority level, for as long as a test wants.

A request occupies its priority level's seat for its whole handler, admission included (1.20
``apiserver/pkg/server/filters/priority-and-fairness.go`` wraps the handler chain; webhooks run
inside it), and a level whose ``limitResponse`` is ``Reject`` answers every request beyond its
seats at once with 429 and ``Retry-After: 1`` (``filters/maxinflight.go::tooManyRequests``). So a
validating webhook that does not answer until released holds a seat per held request: a few
ConfigMap creates by the level's own identity, labelled for the webhook, take every seat, and
from then on each request of that identity is a real 429 from the API server — deterministically,
not by racing a storm. The webhook is ours (an HTTPS server in the test process, its certificate
signed by the control plane's CA); ``failurePolicy: Ignore`` and a label selector keep it away
from every other request of the cluster.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client

from gps_dagster.backends.k8s import Kube
from gps_dagster.ports import CoreError
from tests.k8s.cluster import unique

LABEL = "gps.dagster.io/seat-hold"


def _serving_cert(pki: Path, out: Path) -> tuple[Path, Path]:
    """A serving certificate for 127.0.0.1 signed by the control plane's CA (openssl)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "san.cnf").write_text(
        "[ext]\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    for cmd in (
        [
            "openssl",
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "hook.key",
            "-out",
            "hook.csr",
            "-subj",
            "/CN=seat-hold",
        ],
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            "hook.csr",
            "-CA",
            str(pki / "ca.crt"),
            "-CAkey",
            str(pki / "ca.key"),
            "-CAcreateserial",
            "-CAserial",
            str(out / "ca.srl"),
            "-out",
            "hook.crt",
            "-days",
            "1",
            "-extfile",
            "san.cnf",
            "-extensions",
            "ext",
        ],
    ):
        subprocess.run(cmd, cwd=out, check=True, capture_output=True)
    return out / "hook.crt", out / "hook.key"


class SeatHold:
    """The webhook, its registration, and the held requests (see the module docstring)."""

    def __init__(self, admin: Kube, pki: Path, workdir: Path) -> None:
        self.admin, self.id = admin, unique("hold")
        self.release_event = threading.Event()
        self.held = self.refused = 0
        self.lock = threading.Lock()
        cert, key = _serving_cert(pki, workdir / self.id)
        hold = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with hold.lock:
                    hold.held += 1
                hold.release_event.wait(25)  # under the webhook's 30 s timeout
                with hold.lock:
                    hold.held -= 1
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {"uid": review["request"]["uid"], "allowed": True},
                    }
                ).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    # the API server gave up on the call (its timeout): the seat is free anyway
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="seat-hold", daemon=True
        )
        self._thread.start()
        self._register(base64.b64encode((pki / "ca.crt").read_bytes()).decode())
        self._holders: list[threading.Thread] = []

    def _register(self, ca_bundle: str) -> None:
        api = client.AdmissionregistrationV1Api(self.admin.api_client)
        port = self.server.server_address[1]
        self.admin.call(
            api.create_validating_webhook_configuration,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": self.id},
                "webhooks": [
                    {
                        "name": f"{self.id}.seat-hold.gps.dagster.io",
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{port}/hold",
                            "caBundle": ca_bundle,
                        },
                        "rules": [
                            {
                                "operations": ["CREATE"],
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "resources": ["configmaps"],
                            }
                        ],
                        "objectSelector": {"matchLabels": {LABEL: self.id}},
                        "failurePolicy": "Ignore",
                        "sideEffects": "None",
                        "timeoutSeconds": 30,
                        "admissionReviewVersions": ["v1"],
                    }
                ],
            },
            what="seat-hold webhook",
            mutating=True,
        )

    def _create(self, who: Kube, namespace: str) -> None:
        """Held creates, one after another until released: the webhook's 30 s timeout ends each
        hold, and the next one takes the seat again."""
        body = {"metadata": {"generateName": "hold-", "labels": {LABEL: self.id}}}
        while not self.release_event.is_set():
            try:
                who.call(
                    who.core.create_namespaced_config_map,
                    namespace,
                    body,
                    what="held create",
                    mutating=True,
                )
            except CoreError as exc:
                if exc.reason == "api_throttled":
                    with self.lock:
                        self.refused += 1
                    return  # over the seats: this thread holds nothing

    def engage(self, who: Kube, namespace: str, *, timeout_s: float = 60) -> int:
        """Held creates as ``who`` (a client that does not retry a 429) until one is refused.

        A refusal with requests held means every seat of ``who``'s level is taken; returns how
        many are held. The API server registers the webhook from its own watch: until it does,
        a create passes straight through, so creates are sent one after another until then."""
        self.release_event.clear()
        self.refused = 0
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if self.refused and self.held:
                    return self.held
            if sum(t.is_alive() for t in self._holders) < 20:
                t = threading.Thread(target=self._create, args=(who, namespace), daemon=True)
                t.start()
                self._holders.append(t)
            time.sleep(0.2)
        raise AssertionError(f"{self.held} requests held, {self.refused} refused in {timeout_s} s")

    def release(self) -> None:
        self.release_event.set()
        for t in self._holders:
            t.join(timeout=30)
        self._holders.clear()

    def close(self) -> None:
        self.release()
        api = client.AdmissionregistrationV1Api(self.admin.api_client)
        try:
            self.admin.call(
                api.delete_validating_webhook_configuration,
                self.id,
                what="webhook cleanup",
                mutating=True,
            )
        finally:
            self.server.shutdown()
            self.server.server_close()
