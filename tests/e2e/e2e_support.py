"""Names shared by the end-to-end tests and their fixture."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from gps_dagster.demo.devserver import DagsterDev

SCHEDULE = "e2e-swap"
A, B = "md-llama70b", "md-qwen32b"


@dataclass
class Server:
    dev: DagsterDev
    db_url: str
    transition_id: str
    artifacts: Path


def schedule_file(path: Path, now: datetime) -> Path:
    doc = {
        "name": SCHEDULE,
        "timezone": "UTC",
        "targets": [
            {"model_deploy_id": A, "default_state": "stopped", "default_allow_downtime": True},
            {"model_deploy_id": B, "default_state": "running"},
        ],
        "windows": [
            {
                "name": "e2e-now",
                "kind": "one_shot",
                "priority": 10,
                "active_from": (now - timedelta(minutes=10)).isoformat(),
                "active_until": (now + timedelta(hours=2)).isoformat(),
                "states": [
                    {"model_deploy_id": A, "desired_state": "running"},
                    {"model_deploy_id": B, "desired_state": "stopped"},
                ],
            }
        ],
    }
    path.write_text(json.dumps(doc))
    return path
