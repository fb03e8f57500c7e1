"""The ports a test asks for together are distinct (a chart's Service exposes them all)."""

from __future__ import annotations

import socket
from typing import Any, ClassVar

import pytest

from gps_dagster.demo.devserver import free_ports


class ReusingSocket:
    """A socket whose ``bind(port 0)`` gets the lowest port no open socket holds: the kernel's
    freedom to hand a just-closed port out again, made certain."""

    held: ClassVar[set[int]] = set()

    def __init__(self, *args: Any) -> None:
        self.port = 0

    def __enter__(self) -> ReusingSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        ReusingSocket.held.discard(self.port)

    def bind(self, address: tuple[str, int]) -> None:
        self.port = min(set(range(40000, 40010)) - ReusingSocket.held)
        ReusingSocket.held.add(self.port)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def test_ports_picked_together_are_distinct_even_where_closed_ports_are_reused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutation caught: each port picked on a socket closed before the next is picked (a CI
    run's chart Service got metrics == grpc: "Duplicate value" on its ports)."""
    monkeypatch.setattr(socket, "socket", ReusingSocket)
    assert len(set(free_ports(3))) == 3


def test_the_ports_are_free_once_returned() -> None:
    ports = free_ports(2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))
