"""Cross-field rules of a schedule (R-MODEL-3…5), run after every field is valid.

Why separate from the pydantic models: these rules need the whole document
(targets named by windows, names across windows) and, for overlapping
occurrences and ambiguous priorities, the occurrences of windows over a
one-year horizon. The horizon start is a parameter because the domain never
reads the clock; the CLI passes "now", the store passes the write time.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime

from gps_dagster.domain.crons import local_time
from gps_dagster.domain.errors import FieldError
from gps_dagster.domain.occurrences import (
    CompiledSchedule,
    CompiledWindow,
    compile_schedule,
    floor_ts,
)
from gps_dagster.domain.spec import OneShotWindow, RecurringWindow, Schedule

HORIZON_SECONDS = 366 * 86_400
"""One year (R-MODEL-5), leap-safe."""


def _iso(ts: int, c: CompiledSchedule) -> str:
    return local_time(ts, c.tz).isoformat()


def structure_checks(s: Schedule) -> list[FieldError]:
    """Names and references: duplicate targets/windows, unknown or repeated targets, empty one-shots."""
    problems: list[FieldError] = []
    targets: dict[str, int] = {}
    for i, t in enumerate(s.targets):
        if t.model_deploy_id in targets:
            problems.append(FieldError(f"targets[{i}].model_deploy_id", "duplicate_target",
                                       f"'{t.model_deploy_id}' is also targets[{targets[t.model_deploy_id]}]; declare each deploy once"))
        targets.setdefault(t.model_deploy_id, i)
    names: dict[str, int] = {}
    for i, w in enumerate(s.windows):
        if w.name in names:
            problems.append(FieldError(f"windows[{i}].name", "duplicate_window",
                                       f"'{w.name}' is also windows[{names[w.name]}]; give every window a unique name"))
        names.setdefault(w.name, i)
        seen: dict[str, int] = {}
        for j, st in enumerate(w.states):
            path = f"windows[{i}].states[{j}].model_deploy_id"
            if st.model_deploy_id not in targets:
                problems.append(FieldError(path, "unknown_target",
                                           f"'{st.model_deploy_id}' is not a target; add it under targets or fix the id"))
            if st.model_deploy_id in seen:
                problems.append(FieldError(path, "duplicate_state",
                                           f"'{st.model_deploy_id}' is also states[{seen[st.model_deploy_id]}]; name each target once per window"))
            seen.setdefault(st.model_deploy_id, j)
        if isinstance(w, OneShotWindow) and w.active_from >= w.active_until:
            problems.append(FieldError(f"windows[{i}].active_until", "empty_window",
                                       "active_until must be after active_from"))
    return problems


def _min_gap(fires: list[int]) -> tuple[int, int] | None:
    """Shortest gap between consecutive fires and the fire that starts it."""
    best: tuple[int, int] | None = None
    for a, b in itertools.pairwise(fires):
        if best is None or b - a < best[0]:
            best = (b - a, a)
    return best


def overlap_checks(s: Schedule, c: CompiledSchedule, start: int) -> list[FieldError]:
    """R-MODEL-3: occurrences of one recurring window never overlap (duration <= shortest gap)."""
    problems: list[FieldError] = []
    for w, raw in zip(c.windows, s.windows, strict=True):
        if w.cron is None or not isinstance(raw, RecurringWindow):
            continue
        gap = _min_gap(w.cron.fire_epochs(c.tz, start, start + HORIZON_SECONDS))
        if gap is not None and w.duration > gap[0]:
            problems.append(FieldError(
                f"windows[{w.index}].duration", "overlapping_occurrences",
                f"duration {raw.duration} is longer than the shortest gap between two fires of "
                f"'{raw.cron}' ({gap[0] // 60} min, from {_iso(gap[1], c)}); shorten the duration "
                "to at most that gap or fire less often"))
    return problems


def _disagree(a: CompiledWindow, b: CompiledWindow) -> list[str]:
    return [t for t in a.states if t in b.states and a.states[t] != b.states[t]]


def _first_overlap(xs: list[tuple[int, int]], ys: list[tuple[int, int]]) -> int | None:
    i = j = 0
    while i < len(xs) and j < len(ys):
        lo, hi = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if lo < hi:
            return lo
        if xs[i][1] <= ys[j][1]:
            i += 1
        else:
            j += 1
    return None


def priority_checks(c: CompiledSchedule, start: int) -> list[FieldError]:
    """R-MODEL-5: equal-priority windows that disagree on a target must never be active together."""
    problems: list[FieldError] = []
    end = start + HORIZON_SECONDS
    cache: dict[int, list[tuple[int, int]]] = {}

    def occ(w: CompiledWindow) -> list[tuple[int, int]]:
        if w.index not in cache:
            cache[w.index] = w.occurrences(c.tz, start, end)
        return cache[w.index]

    for k, a in enumerate(c.windows):
        for b in c.windows[k + 1:]:
            if a.priority != b.priority:
                continue
            targets = _disagree(a, b)
            at = _first_overlap(occ(a), occ(b)) if targets else None
            if at is not None:
                when = _iso(max(at, start), c)
                problems.append(FieldError(
                    f"windows[{b.index}].priority", "ambiguous_priority",
                    f"windows '{a.name}' and '{b.name}' both have priority {a.priority}, are both active "
                    f"at {when} and disagree on {', '.join(targets)}; give one of them a higher priority"))
    return problems


def schedule_checks(horizon_start: datetime) -> Callable[[Schedule], list[FieldError]]:
    """All cross-field checks, for ``documents.build(..., checks=...)``."""
    start = floor_ts(horizon_start)

    def run(s: Schedule) -> list[FieldError]:
        problems = structure_checks(s)
        if problems:  # occurrence checks assume unique names and known targets
            return problems
        c = compile_schedule(s)
        return overlap_checks(s, c, start) + priority_checks(c, start)

    return run
