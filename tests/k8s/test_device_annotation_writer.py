"""The standing rule of the placement witness (issue 18/19): the per-container GPU device
annotation is written by ONE path, the node agent's (``nodeagent.annotations_for`` inside
``nodeagent.annotate``), which reads the kubelet's PodResources API (or dcgm-exporter). No NVIDIA
component writes GPU UUIDs onto a Pod (decision 150), so a fake that wrote the annotation itself
would make the witness true only in our fakes. The fake nodes publish through the agent's own
``annotate`` (``testing/k8s/nodesim.py``) with a fake PodResources source.

A source scan, not a behaviour test: it catches the mutation "a fake (or the adapter) patches the
device annotation directly", which no cluster test would notice because the value would be right.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gps_dagster"
KEY_NAMES = {"AGENT_DEVICE_ANNOTATION", "agent_device_annotation"}
# Who may name the key: its definition, the agent that writes it, the reader that parses it.
ALLOWED = {
    "backends/k8s/names.py": "defines the key",
    "backends/k8s/nodeagent.py": "the one writer (annotations_for/annotate)",
    "backends/k8s/pods.py": "reads it (annotation_uuids)",
}


def _names_the_key(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in KEY_NAMES:
            return True
        if isinstance(node, ast.Attribute) and node.attr in KEY_NAMES:
            return True
        if isinstance(node, ast.alias) and node.name in KEY_NAMES:
            return True
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "gpus.devices" in node.value
            and not _is_docstring_like(node.value)
        ):
            return True
    return False


def _is_docstring_like(text: str) -> bool:
    return " " in text.strip()  # prose mentions the key; a key literal has no spaces


def test_only_the_node_agent_writes_the_device_annotation() -> None:
    naming = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if _names_the_key(ast.parse(p.read_text(), str(p)))
    )
    assert set(naming) <= set(ALLOWED), f"modules naming the device annotation: {naming}"
    assert "backends/k8s/nodeagent.py" in naming  # the scan sees the writer (it is not vacuous)


def test_the_fake_nodes_publish_through_the_agents_write_path() -> None:
    tree = ast.parse((PACKAGE / "testing/k8s/nodesim.py").read_text())
    calls = {
        f"{n.func.value.id}.{n.func.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
    }
    assert "nodeagent.annotate" in calls
