"""Cross-field rules of a schedule (R-MODEL-3…5), run after every field is valid.

Why separate from the pydantic models: these rules need the whole document
(targets named by windows, names across windows) and, for overlapping
occurrences and ambiguous priorities, where occurrences of windows fall.

The verdict never depends on the day the check runs: one-shot windows are
checked over their whole span, recurring windows over the fixed span of
``patterns`` (28 years, every day pattern a cron can have, DST included).
Equal-priority pairs are at most ``MAX_WINDOWS²/2``; each costs a few
big-integer operations per day shift (``patterns._by_shifts``).
"""

# Decisions embodied here (docs/decisions.md):
# * “Touching occurrences are not overlapping”
# * “Evaluation cost is bounded by a work budget, not by how often a window fires”
# * “Calendars never make a schedule valid”
# * “The ambiguity check counts ready-by leads at their cap”

from __future__ import annotations

from datetime import timedelta

from gps_dagster.domain.crons import local_time
from gps_dagster.domain.errors import FieldError
from gps_dagster.domain.occurrences import (
    WORK_BUDGET,
    CompiledSchedule,
    CompiledWindow,
    compile_schedule,
    cost,
)
from gps_dagster.domain.patterns import Recurrence, first_overlap, min_gap, one_shot_meets
from gps_dagster.domain.spec import (
    DesiredState,
    OneShotWindow,
    RecurringWindow,
    Schedule,
    format_duration,
)

LEAD_CAP_S = 1800
"""Worst-case ready-by lead the write-time checks count (R-NEXT-1): the default of the engine's
``ready_by_cap_s``. A lead is learned at run time, so validation counts its bound
(docs/decisions.md, "The ambiguity check counts ready-by leads at their cap")."""


def _iso(ts: int, c: CompiledSchedule) -> str:
    return local_time(ts, c.tz).isoformat()


def structure_checks(s: Schedule) -> list[FieldError]:
    """Names and references: duplicate targets/windows, unknown or repeated targets, empty
    one-shots."""
    problems: list[FieldError] = []
    targets: dict[str, int] = {}
    for i, t in enumerate(s.targets):
        if t.model_deploy_id in targets:
            problems.append(
                FieldError(
                    f"targets[{i}].model_deploy_id",
                    "duplicate_target",
                    f"'{t.model_deploy_id}' is also targets[{targets[t.model_deploy_id]}]; "
                    "declare each deploy once",
                )
            )
        targets.setdefault(t.model_deploy_id, i)
    names: dict[str, int] = {}
    for i, w in enumerate(s.windows):
        if w.name in names:
            problems.append(
                FieldError(
                    f"windows[{i}].name",
                    "duplicate_window",
                    f"'{w.name}' is also windows[{names[w.name]}]; give every window a unique name",
                )
            )
        names.setdefault(w.name, i)
        seen: dict[str, int] = {}
        for j, st in enumerate(w.states):
            path = f"windows[{i}].states[{j}].model_deploy_id"
            if st.model_deploy_id not in targets:
                problems.append(
                    FieldError(
                        path,
                        "unknown_target",
                        f"'{st.model_deploy_id}' is not a target; add it under targets or fix the "
                        "id",
                    )
                )
            if st.model_deploy_id in seen:
                problems.append(
                    FieldError(
                        path,
                        "duplicate_state",
                        f"'{st.model_deploy_id}' is also states[{seen[st.model_deploy_id]}]; name "
                        "each target once per window",
                    )
                )
            seen.setdefault(st.model_deploy_id, j)
        if isinstance(w, OneShotWindow) and w.active_from >= w.active_until:
            problems.append(
                FieldError(
                    f"windows[{i}].active_until",
                    "empty_window",
                    "active_until must be after active_from",
                )
            )
    return problems


def overlap_checks(s: Schedule, c: CompiledSchedule) -> dict[int, FieldError]:
    """R-MODEL-3: occurrences of one recurring window never overlap (duration <= shortest gap).

    Keyed by window index.
    """
    problems: dict[int, FieldError] = {}
    for w, raw in zip(c.windows, s.windows, strict=True):
        if w.cron is None or not isinstance(raw, RecurringWindow):
            continue
        gap = min_gap(w.cron, c.tz.key)
        if gap is not None and w.duration > gap[0]:
            problems[w.index] = FieldError(
                f"windows[{w.index}].duration",
                "overlapping_occurrences",
                f"duration {format_duration(raw.duration)} is longer than the shortest gap between "
                f"two fires of '{raw.cron}' ({format_duration(timedelta(seconds=gap[0]))} = "
                f"{gap[0] // 60} min, from {_iso(gap[1], c)}); shorten the duration "
                "to at most that gap or fire less often",
            )
    return problems


def _disagree(a: CompiledWindow, b: CompiledWindow) -> list[str]:
    return [t for t in a.states if t in b.states and a.states[t] != b.states[t]]


def both_active(a: CompiledWindow, b: CompiledWindow, key: str) -> int | None:
    """The first instant ``a`` and ``b`` are both active.

    One-shots over their own span, recurring windows over the fixed span of ``patterns``.
    """
    if a.cron is None and b.cron is None:
        lo = max(a.start, b.start)
        return lo if lo < min(a.end, b.end) else None
    if a.cron is None or b.cron is None:
        shot, rec = (a, b) if a.cron is None else (b, a)
        assert rec.cron is not None
        return one_shot_meets(Recurrence(rec.cron, rec.duration), key, shot.start, shot.end)
    return first_overlap(Recurrence(a.cron, a.duration), Recurrence(b.cron, b.duration), key)


def lead_bounds(s: Schedule, c: CompiledSchedule, cap_s: int = LEAD_CAP_S) -> dict[int, int]:
    """Window index -> seconds its start may act early: ``cap_s`` where it runs a ready-by
    target."""
    return {
        w.index: cap_s
        for w in c.windows
        if any(k[0] is DesiredState.RUNNING and s.is_ready_by(t) for t, k in w.states.items())
    }


def _widened(w: CompiledWindow, extra: int, key: str) -> Recurrence:
    """``w`` with ``extra`` seconds added to its duration, kept within its shortest gap
    (R-MODEL-3)."""
    assert w.cron is not None
    duration = w.duration + extra
    gap = min_gap(w.cron, key) if extra else None
    return Recurrence(w.cron, min(duration, gap[0]) if gap is not None else duration)


def active_with_leads(
    a: CompiledWindow, b: CompiledWindow, key: str, la: int, lb: int
) -> int | None:
    """The first instant ``a`` and ``b`` are both acting, each start reached back by its lead.

    ``[fa - la, fa + da)`` meets ``[fb - lb, fb + db)`` iff ``[fa, fa + da + lb)`` meets
    ``[fb, fb + db + la)``: recurring windows are compared with the other's lead added to their
    duration (an instant of that frame); one-shots with their span widened.
    """
    if a.cron is None and b.cron is None:
        lo = max(a.start - la, b.start - lb)
        return lo if lo < min(a.end, b.end) else None
    if a.cron is None or b.cron is None:
        (shot, ls), (rec, lr) = ((a, la), (b, lb)) if a.cron is None else ((b, lb), (a, la))
        assert rec.cron is not None
        return one_shot_meets(
            Recurrence(rec.cron, rec.duration), key, shot.start - ls, shot.end + lr
        )
    return first_overlap(_widened(a, lb, key), _widened(b, la, key), key)


def priority_checks(
    c: CompiledSchedule, skip: frozenset[int] = frozenset(), leads: dict[int, int] | None = None
) -> list[FieldError]:
    """R-MODEL-5: equal-priority windows that disagree on a target must never be active together.

    One error per window, naming the first earlier window it collides with;
    windows in ``skip`` (whose own occurrences overlap) are not compared. ``leads`` (window
    index -> seconds, ``lead_bounds``) reach ready-by starts back by their worst-case lead.
    """
    found: list[tuple[int, FieldError]] = []
    groups: dict[int, list[CompiledWindow]] = {}
    for w in c.windows:
        if w.index not in skip:
            groups.setdefault(w.priority, []).append(w)
    for group in groups.values():
        for j, b in enumerate(group):
            clash = _first_clash(c, group[:j], b, leads or {})
            if clash is not None:
                found.append((b.index, clash))
    return [e for _, e in sorted(found, key=lambda item: item[0])]


def _first_clash(
    c: CompiledSchedule, earlier: list[CompiledWindow], b: CompiledWindow, leads: dict[int, int]
) -> FieldError | None:
    for a in earlier:
        targets = _disagree(a, b)
        if not targets:
            continue
        at = both_active(a, b, c.tz.key)
        if at is not None:
            return FieldError(
                f"windows[{b.index}].priority",
                "ambiguous_priority",
                f"windows '{a.name}' and '{b.name}' both have priority {a.priority}, are both "
                f"active at {_iso(at, c)} and disagree on {', '.join(targets)}; give one of "
                "them a higher priority",
            )
        la, lb = leads.get(a.index, 0), leads.get(b.index, 0)
        at = active_with_leads(a, b, c.tz.key, la, lb) if la or lb else None
        if at is not None:
            early = " and ".join(w.name for w, n in ((a, la), (b, lb)) if n)
            return FieldError(
                f"windows[{b.index}].priority",
                "ambiguous_priority",
                f"windows '{a.name}' and '{b.name}' both have priority {a.priority} and disagree "
                f"on {', '.join(targets)}; counting the ready-by lead of '{early}' (up to "
                f"{max(la, lb) // 60} min early, the cap) they are both acting within the cap "
                f"of {_iso(at, c)}; "
                "give one of them a higher priority, leave at least the cap between them, or "
                "set ready_by: false on its targets",
            )
    return None


DENSITY_SHARE = 3
"""A timeline evaluates three times (intervals, desired GPUs, window bands): a third each."""
DENSITY_DAYS = 7
"""The timeline page shows a week: a week of every target must fit in its share."""


def density_checks(c: CompiledSchedule) -> list[FieldError]:
    """Refuse what one evaluation call cannot afford, at write time (``schedule_too_dense``).

    The cost of a day is counted in runs of occurrences (back-to-back ones count
    once) over every window of every target, plus one step per window and day:
    what ``occurrences.runs`` spends. A week (the timeline page) must fit in a
    third of ``WORK_BUDGET``; then so does a day searched back, one forward and
    the one-shot probes of ``current_interval``.
    """
    price = cost(c)
    limit = WORK_BUDGET // DENSITY_SHARE
    if price.of(DENSITY_DAYS) <= limit:
        return []
    return [
        FieldError(
            "windows",
            "schedule_too_dense",
            f"a week of this schedule costs {price.of(DENSITY_DAYS)} evaluation units (runs of "
            "occurrences of every window, for every target it names) and one evaluation may "
            f"spend at most {limit}; fire less often (e.g. '*/15 * * * *' rather than '*/2 * * * "
            "*'), let occurrences meet (a duration equal to the gap between fires makes them one "
            "run), merge windows into one cron list, or split the targets into several schedules",
        )
    ]


def schedule_checks(s: Schedule) -> list[FieldError]:
    """All cross-field checks, for ``documents.build(..., checks=...)``."""
    problems = structure_checks(s)
    if problems:  # occurrence checks assume unique names and known targets
        return problems
    c = compile_schedule(s)
    dense = density_checks(c)  # first: cheap, and it bounds what the pattern checks then cost
    if dense:
        return dense
    overlaps = overlap_checks(s, c)
    leads = lead_bounds(s, c)
    return [overlaps[i] for i in sorted(overlaps)] + priority_checks(c, frozenset(overlaps), leads)
