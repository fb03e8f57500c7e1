"""``gps-dagster node-agent``: the witness node agent of a GPU node (a DaemonSet pod).

Reads the kubelet's PodResources API (hostPath ``/var/lib/kubelet/pod-resources``) or a
dcgm-exporter page and annotates this node's GPU pods with their device ids
(``backends/k8s/nodeagent.py``). With neither source it exits 1 with ``witness_unavailable``.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

import click


@click.command("node-agent")
@click.option(
    "--node",
    envvar="NODE_NAME",
    required=True,
    help="This node's name (downward API spec.nodeName).",
)
@click.option(
    "--pod-resources-socket",
    envvar="GPS_POD_RESOURCES_SOCKET",
    default=None,
    help="The kubelet's PodResources socket (usually /var/lib/kubelet/pod-resources/kubelet.sock).",
)
@click.option(
    "--dcgm-url",
    envvar="GPS_DCGM_URL",
    default=None,
    help="A dcgm-exporter metrics URL, used when no PodResources socket is given.",
)
@click.option(
    "--interval",
    "interval_s",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds between syncs.",
)
@click.option(
    "--kubeconfig",
    envvar="GPS_KUBECONFIG",
    default=None,
    help="Else the in-cluster service account.",
)
@click.option(
    "--namespaces",
    envvar="GPS_NAMESPACES",
    default="",
    help="Comma-separated namespaces whose pods it annotates (its role's scope); empty = all.",
)
def node_agent(
    node: str,
    pod_resources_socket: str | None,
    dcgm_url: str | None,
    interval_s: float,
    kubeconfig: str | None,
    namespaces: str,
) -> None:
    """Publish the device ids the kubelet gave each GPU pod of NODE, for the placement witness."""
    from gps_dagster.backends.k8s import (  # the kubernetes client: only here
        Kube,
        connect,
        nodeagent,
    )

    try:
        source = nodeagent.source_from(pod_resources_socket=pod_resources_socket, dcgm_url=dcgm_url)
    except nodeagent.WitnessUnavailable as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()

    def _stop(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    from gps_dagster.runtime import clock_from_env

    clock = clock_from_env()  # the heartbeat stamp's clock: the wall clock, or GPS_CLOCK
    kube = Kube(connect(kubeconfig, None))
    scope = tuple(n.strip() for n in namespaces.split(",") if n.strip())
    nodeagent.run(
        kube,
        node,
        source,
        interval_s=interval_s,
        stop=stop,
        log=logging.getLogger("gps.nodeagent"),
        clock=clock,
        namespaces=scope,
    )
