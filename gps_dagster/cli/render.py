"""Rendering timelines and validation results as JSON (a contract) and text tables.

The JSON shape of ``timeline --format json`` is read by other tools: keep the
keys stable. It is built in ``domain.timeline_doc`` (shared with the API) and
re-exported here. Timestamps are RFC 3339 with the offset of the schedule's zone.
"""

from __future__ import annotations

from typing import Any

from gps_dagster.domain.errors import FieldError
from gps_dagster.domain.timeline_doc import gpu_json, interval_json, iso, timeline_json

__all__ = [
    "errors_json",
    "errors_text",
    "gpu_json",
    "interval_json",
    "iso",
    "table",
    "timeline_json",
    "timeline_table",
]


def table(headers: list[str], body: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
    return "\n".join(lines)


def timeline_table(doc: dict[str, Any]) -> str:
    """Human view of the timeline contract."""
    out = [f"schedule {doc['schedule']} ({doc['timezone']})  {doc['from']} → {doc['to']}"]
    for target, rows in doc["targets"].items():
        body = [
            [
                r["start"],
                r["end"],
                r["desired_state"],
                "-" if r["replicas"] is None else str(r["replicas"]),
                "yes" if r["allow_downtime"] else "no",
                r["source"],
            ]
            for r in rows
        ]
        out += [
            "",
            f"target {target}",
            table(["start", "end", "state", "replicas", "downtime", "source"], body),
        ]
    if "gpu" in doc:
        body = [
            [
                g["start"],
                g["end"],
                str(g["desired_gpus"]),
                str(g["capacity"]),
                "OVERCOMMIT" if g.get("overcommit") else "",
            ]
            for g in doc["gpu"]
        ]
        out += ["", "desired GPUs", table(["start", "end", "desired", "capacity", ""], body)]
    if doc.get("ready_by"):
        body = [
            [r["boundary"], r["early_start"], f"{r['lead_s']:.0f}", r["reason"]]
            for r in doc["ready_by"]
        ]
        out += ["", "ready-by leads", table(["boundary", "early start", "lead s", "why"], body)]
    if doc.get("skipped"):
        body = [
            [k["window"], k["start"], k["reason"], k["decided_by"] or "-"] for k in doc["skipped"]
        ]
        out += [
            "",
            "skipped occurrences",
            table(["window", "would start", "why", "decided by"], body),
        ]
    return "\n".join(out)


def errors_text(source: str, errors: tuple[FieldError, ...]) -> str:
    head = f"{source}: {len(errors)} problem(s)"
    return "\n".join([head, *(f"  {e}" for e in errors)])


def errors_json(source: str, errors: tuple[FieldError, ...]) -> dict[str, Any]:
    return {"source": source, "valid": not errors, "errors": [e.as_dict() for e in errors]}
