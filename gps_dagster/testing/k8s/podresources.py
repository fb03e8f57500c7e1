"""A fake of the kubelet's PodResources v1 ``List`` for the fake nodes (``nodesim``).

On a real node the kubelet's device manager records which device ids it gave each container,
and the node agent (``backends.k8s.nodeagent``) reads that record over the PodResources socket
and publishes it on the pods. The fake nodes have no kubelet, so this class answers ``List``
from what the fake device plugin handed out (``NodeSimulator.tracks``), with the kubelet's
rules: only containers that *requested* ``nvidia.com/gpu`` appear (a fractional KAI pod asks
for none, so it is absent, as on a real node), and a pod appears from its admission until the
kubelet forgets it. ``nodesim`` then runs the agent's own write path (``nodeagent.annotate``)
with it: the witness reaches the adapter exactly as on a real cluster, never through a shortcut.
"""

# Decisions embodied here (docs/decisions.md):
# * “The fake nodes publish the witness through the node agent's own write path”

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gps_dagster.backends.k8s.nodeagent import PODRESOURCES, Devices


class Allocation(Protocol):
    """What the fake kubelet recorded for one pod (``nodesim.Track``)."""

    node: str
    namespace: str
    name: str
    container: str
    uuids: tuple[str, ...]
    holds: bool


class FakePodResources:
    """``nodeagent.Source`` of one fake node: the fake kubelet's device record."""

    name = PODRESOURCES  # what the agent writes as its source

    def __init__(self, tracks: Mapping[str, Allocation], node: str) -> None:
        self.tracks, self.node = tracks, node

    def devices(self) -> Devices:
        out: Devices = {}
        for track in self.tracks.values():
            if track.node == self.node and track.holds and track.uuids and track.container:
                out[(track.namespace, track.name)] = {track.container: track.uuids}
        return out
