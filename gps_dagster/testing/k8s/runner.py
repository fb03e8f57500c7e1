"""The fake kubelet's container runtime for Job pods: it really runs them, as local processes.

A pod owned by a Job whose image is one of the ``LocalImage`` s given (this package, already
installed) is executed: ``containers.resolve`` turns its first container into a local process
(volumes, env, service-account kubeconfig), the process starts in its own session with its
output in a log file, and the pod's status follows it like a kubelet reports it:

* started → ``Running`` and ``Ready`` (a Job pod has no readiness probe), the container
  ``running``;
* exited → ``Succeeded`` (exit code 0) or ``Failed``, the container ``terminated`` with its
  exit code and ``Completed``/``Error`` — the Job controller counts the pod from that phase;
* a Secret/ConfigMap/key missing → ``Pending``, the container waiting in
  ``CreateContainerConfigError`` (retried at every sync, as a kubelet does); a volume kind that
  cannot exist here → ``Failed`` with the reason;
* the pod deleted → SIGTERM to the process group, SIGKILL when the grace period ends.

Every other pod (Deployments' pods, images not given) is left to ``NodeSimulator``'s plain
Running/Ready emulation. Pod logs stay in local files (``PodRun.log_path``): no kubelet serves
``pods/log`` here.
"""

# Decisions embodied here (docs/decisions.md):
# * “The fake kubelet executes Job pods of the local image”

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.testing.k8s.containers import (
    Cluster,
    ConfigPending,
    LocalImage,
    ProcessSpec,
    UnsupportedVolume,
    resolve,
)

__all__ = ["Cluster", "ConfigPending", "LocalImage", "PodRun", "PodRunner", "UnsupportedVolume"]


@dataclass
class PodRun:
    """One executed pod: its process, its log and (once it ended) its exit code."""

    uid: str
    namespace: str
    name: str
    container: str
    image: str
    spec: ProcessSpec
    log_path: Path
    started_at: str
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    exit_code: int | None = None
    finished_at: str | None = None

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


class PodRunner:
    """Runs the Job pods of local images; ``NodeSimulator(runner=...)`` drives it."""

    def __init__(
        self, kube: Kube, images: Mapping[str, LocalImage], *, root: Path, cluster: Cluster
    ) -> None:
        self.kube, self.images, self.root, self.cluster = kube, dict(images), root, cluster
        self.runs: dict[str, PodRun] = {}
        """pod uid → its run (kept after the pod is gone: tests read the logs)."""
        self.pending: dict[str, str] = {}
        """pod uid → why its container cannot start yet (CreateContainerConfigError)."""

    def wants(self, pod: Obj) -> bool:
        owners = pod["metadata"].get("ownerReferences") or []
        containers = (pod.get("spec") or {}).get("containers") or []
        return (
            any(o.get("kind") == "Job" for o in owners)
            and bool(containers)
            and containers[0].get("image") in self.images
        )

    def start(self, pod: Obj, *, at: str) -> PodRun:
        """Resolve and start the pod's process (``ConfigPending``/``UnsupportedVolume`` if not)."""
        meta, container = pod["metadata"], pod["spec"]["containers"][0]
        root = self.root / f"{meta['namespace']}-{meta['name']}-{meta['uid'][:8]}"
        root.mkdir(parents=True, exist_ok=True)
        spec = resolve(
            self.kube, pod, self.images[container["image"]], root=root, cluster=self.cluster
        )
        log_path = root / "container.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                list(spec.argv),
                env=spec.env,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: signals reach its children
            )
        run = PodRun(
            meta["uid"],
            meta["namespace"],
            meta["name"],
            container["name"],
            container["image"],
            spec,
            log_path,
            at,
            proc,
        )
        self.runs[run.uid] = run
        return run

    # -- what NodeSimulator asks: the status to report, at admission and at every sync ---------

    def admit(self, pod: Obj, *, at: str) -> Obj:
        """Start the pod's process; the status a kubelet would report for it now."""
        uid = pod["metadata"]["uid"]
        try:
            run = self.start(pod, at=at)
        except ConfigPending as exc:
            self.pending[uid] = str(exc)
            return waiting_status(pod, "CreateContainerConfigError", str(exc), at)
        except UnsupportedVolume as exc:
            return failed_status("UnsupportedByFakeKubelet", str(exc))
        self.pending.pop(uid, None)
        return running_status(run)

    def follow(self, pod: Obj, *, at: str) -> Obj | None:
        """A status change since the last call (the process ended, a config appeared), or None."""
        uid = pod["metadata"]["uid"]
        if uid in self.pending:
            before = self.pending[uid]
            status = self.admit(pod, at=at)
            return None if self.pending.get(uid) == before else status
        run = self.runs.get(uid)
        if run is None or run.exit_code is not None:
            return None
        return terminated_status(run) if self.poll(run, at=at) is not None else None

    def deleting(self, uid: str) -> None:
        """The pod got a deletionTimestamp: SIGTERM, as a kubelet sends at the grace start."""
        if uid in self.runs:
            self.signal(self.runs[uid], signal.SIGTERM)

    def deleted(self, uid: str) -> None:
        """The grace period is over: SIGKILL whatever is left."""
        self.pending.pop(uid, None)
        if uid in self.runs:
            self.kill(self.runs[uid])

    def poll(self, run: PodRun, *, at: str) -> int | None:
        """The exit code once the process has ended (recorded once), else None."""
        if run.exit_code is None and run.proc is not None:
            code = run.proc.poll()
            if code is not None:
                run.exit_code, run.finished_at = code, at
        return run.exit_code

    def signal(self, run: PodRun, sig: signal.Signals) -> None:
        if run.proc is not None and run.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.proc.pid, sig)

    def kill(self, run: PodRun) -> None:
        self.signal(run, signal.SIGKILL)
        if run.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.proc.wait(timeout=10)

    def close(self) -> None:
        """Kill every process still running (test teardown: nothing is left behind)."""
        for run in self.runs.values():
            self.kill(run)


# -- the statuses a kubelet would report -----------------------------------------------------------


def _container_status(run: PodRun, state: Obj, *, ready: bool) -> Obj:
    return {
        "name": run.container,
        "image": run.image,
        "imageID": "",
        "containerID": f"fake://{run.proc.pid if run.proc else 0}",
        "ready": ready,
        "started": ready,
        "restartCount": 0,
        "state": state,
    }


def _conditions(at: str, *, ready: bool, reason: str | None = None) -> list[Obj]:
    out = []
    for kind, status in (
        ("PodScheduled", True),
        ("Initialized", True),
        ("ContainersReady", ready),
        ("Ready", ready),
    ):
        cond: Obj = {
            "type": kind,
            "status": "True" if status else "False",
            "lastTransitionTime": at,
        }
        if not status and reason:
            cond["reason"] = reason
        out.append(cond)
    return out


def running_status(run: PodRun) -> Obj:
    state = {"running": {"startedAt": run.started_at}}
    return {
        "phase": "Running",
        "conditions": _conditions(run.started_at, ready=True),
        "containerStatuses": [_container_status(run, state, ready=True)],
        "hostIP": "127.0.0.1",
        "podIP": "10.0.0.1",
        "startTime": run.started_at,
    }


def terminated_status(run: PodRun) -> Obj:
    code = int(run.exit_code or 0)
    at = run.finished_at or run.started_at
    state = {
        "terminated": {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": run.started_at,
            "finishedAt": at,
        }
    }
    return {
        "phase": "Succeeded" if code == 0 else "Failed",
        "conditions": _conditions(at, ready=False, reason="PodCompleted"),
        "containerStatuses": [_container_status(run, state, ready=False)],
    }


def waiting_status(pod: Obj, reason: str, message: str, at: str) -> Obj:
    container = pod["spec"]["containers"][0]
    state = {"waiting": {"reason": reason, "message": message}}
    status = {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": state,
    }
    return {
        "phase": "Pending",
        "conditions": _conditions(at, ready=False, reason="ContainersNotReady"),
        "containerStatuses": [status],
        "hostIP": "127.0.0.1",
        "startTime": at,
    }


def failed_status(reason: str, message: str) -> Obj:
    return {"phase": "Failed", "reason": reason, "message": message}
