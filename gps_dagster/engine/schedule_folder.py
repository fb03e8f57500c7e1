"""A folder of deploy schedule files, read all or nothing: every file is validated before any
is applied, so one invalid file writes nothing (the Dagster Component's ``schedule_dir``)."""

# Decisions embodied here (docs/decisions.md):
# * “The Component applies its schedule folder at load”
# * “The ops' and ticks' remaining rules are the engine's; one factory per kind of op”

from __future__ import annotations

from pathlib import Path

from gps_dagster.domain.errors import SpecInvalid
from gps_dagster.domain.schedules import parse_schedule
from gps_dagster.domain.spec import Schedule

SUFFIXES = (".json", ".yaml", ".yml")


class FolderInvalid(ValueError):
    """A folder that is not one, or a file in it that is not a valid schedule."""


def schedule_files(folder: Path) -> list[Path]:
    """The deploy schedule files of ``folder``, sorted."""
    if not folder.is_dir():
        raise FolderInvalid(
            f"schedule_dir {folder} is not a folder: create it or fix the path in defs.yaml"
        )
    return sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES)


def parse_folder(folder: Path) -> list[tuple[Path, Schedule]]:
    """Every schedule of ``folder`` with its file, or ``FolderInvalid`` naming the first bad one."""
    out = []
    for path in schedule_files(folder):
        try:
            out.append((path, parse_schedule(path.read_text(), source=str(path))))
        except SpecInvalid as exc:
            raise FolderInvalid(f"schedule_dir: {exc}") from None
    return out
