"""The pool file: nodes, deploys, projects of one GPU pool (YAML or JSON).

The same document feeds ``gps-dagster timeline --pool`` (capacity and GPUs per
deploy) and the embedded simulated pool (``gps_dagster.backends.sim``), which
also reads its timings, foreign workloads and faults.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import Field

from gps_dagster.domain.documents import build, parse_text
from gps_dagster.domain.errors import FieldError
from gps_dagster.domain.kinds import DeployKind
from gps_dagster.domain.models import Frozen

_UUID_NAMESPACE = uuid.UUID("6f1b7e2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b")


def gpu_uuid(pool: str, node: str, index: int) -> str:
    """A stable NVIDIA-style GPU UUID (``GPU-<uuid>``) for a GPU of a declared node."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{pool}/{node}/{index}')}"


class NodeSpec(Frozen):
    name: str = Field(min_length=1)
    gpus: int = Field(ge=1, description="Number of GPUs on the node.")
    flavor: str = Field(default="H100-80GB", description="GPU flavor; a replica fits only its flavor.")
    region: str = "default"
    gpu_memory_mib: int = Field(default=81559, ge=1, description="Memory of one GPU in MiB.")
    gpu_uuids: tuple[str, ...] | None = Field(
        default=None, description="Explicit GPU UUIDs; derived from pool/node/index when absent."
    )


class DeploySpec(Frozen):
    id: str = Field(min_length=1)
    kind: DeployKind = DeployKind.DGD
    project: str | None = Field(default=None, description="CMP project; None = admin (not CMP-managed).")
    gpus_per_replica: int = Field(ge=1, description="GPUs of one replica group (all its nodes).")
    nodes_per_replica: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1, description="Replicas the deploy runs with when started.")
    state: Literal["running", "stopped"] = "stopped"
    aliases: tuple[str, ...] = ()
    flavor: str | None = Field(default=None, description="Required GPU flavor; None = any.")
    endpoint: str | None = Field(default=None, description="CMP endpoint this deploy is a member of.")
    hpa: bool = False

    @property
    def gpus_per_node(self) -> int:
        return self.gpus_per_replica // self.nodes_per_replica


class ProjectSpec(Frozen):
    gpu_quota: int | None = Field(default=None, ge=0, description="GPUs the project may hold; None = unlimited.")
    billing: Literal["ok", "unpaid"] = "ok"


class PoolSpec(Frozen):
    name: str = Field(min_length=1)
    nodes: tuple[NodeSpec, ...] = Field(min_length=1)
    deploys: tuple[DeploySpec, ...] = ()
    projects: dict[str, ProjectSpec] = Field(default_factory=dict)
    sim: dict[str, Any] = Field(
        default_factory=dict,
        description="Simulator settings (timings, foreign workloads, faults); read by backends.sim.",
    )

    @property
    def capacity(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def deploy(self, deploy_id: str) -> DeploySpec | None:
        return next((d for d in self.deploys if d.id == deploy_id), None)

    def uuids(self, node: NodeSpec) -> tuple[str, ...]:
        if node.gpu_uuids is not None:
            return node.gpu_uuids
        return tuple(gpu_uuid(self.name, node.name, i) for i in range(node.gpus))


def _pool_checks(pool: PoolSpec) -> list[FieldError]:
    problems: list[FieldError] = []
    seen: dict[str, int] = {}
    for i, node in enumerate(pool.nodes):
        if node.name in seen:
            problems.append(FieldError(f"nodes[{i}].name", "duplicate_node", f"node '{node.name}' is also nodes[{seen[node.name]}]; use unique names"))
        seen.setdefault(node.name, i)
        if node.gpu_uuids is not None and len(node.gpu_uuids) != node.gpus:
            problems.append(FieldError(f"nodes[{i}].gpu_uuids", "uuid_count_mismatch", f"list exactly {node.gpus} UUIDs or drop the field"))
    ids: dict[str, int] = {}
    for i, dep in enumerate(pool.deploys):
        if dep.id in ids:
            problems.append(FieldError(f"deploys[{i}].id", "duplicate_deploy", f"deploy '{dep.id}' is also deploys[{ids[dep.id]}]; use unique ids"))
        ids.setdefault(dep.id, i)
        if dep.gpus_per_replica % dep.nodes_per_replica:
            problems.append(FieldError(f"deploys[{i}].gpus_per_replica", "uneven_group", f"use a multiple of nodes_per_replica ({dep.nodes_per_replica})"))
        if dep.project is not None and dep.project not in pool.projects:
            problems.append(FieldError(f"deploys[{i}].project", "unknown_project", f"declare project '{dep.project}' under projects"))
    return problems


def load_pool(data: Any, *, source: str = "<pool>") -> PoolSpec:
    """Validate a pool document (already parsed) into a ``PoolSpec``."""
    return build(PoolSpec, data, source=source, checks=_pool_checks)


def parse_pool(text: str, *, source: str = "<pool>") -> PoolSpec:
    """Parse and validate pool text (YAML or JSON)."""
    return load_pool(parse_text(text, source=source), source=source)
