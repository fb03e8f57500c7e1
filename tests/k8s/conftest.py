"""Worlds on the shared control plane, each torn down (namespaces, pods, nodes) after its test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.k8s.world import K8sWorld, make_world


@pytest.fixture
def new_world(k8s_cluster: str, sqlite_url: str) -> Iterator[Callable[..., K8sWorld]]:
    made: list[K8sWorld] = []

    def build(**kwargs: Any) -> K8sWorld:
        world = make_world(sqlite_url, **kwargs)
        made.append(world)
        return world

    yield build
    for world in made:
        world.close()
