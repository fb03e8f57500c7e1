"""The API app on a real uvicorn socket (loopback, a free port), in a thread of the test process.

Browsers need a socket; the app is the same ``create_app`` over a virtual clock. ``stop``
asks uvicorn to exit and joins the thread, so nothing is left running.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 until the block ends; yields the base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
    )
    thread = threading.Thread(target=server.run, name="gps-api-test-server", daemon=True)
    thread.start()
    started = threading.Event()
    for _ in range(200):
        if server.started:
            started.set()
            break
        thread.join(timeout=0.05)
    if not started.is_set():
        server.should_exit = True
        raise RuntimeError("uvicorn did not start within 10 s")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        assert not thread.is_alive(), "uvicorn did not stop"
