"""The seed's timeline picture: windows, effective state per target, desired GPUs vs capacity.

matplotlib is imported here only, with the non-interactive Agg backend, so the
CLI stays fast when no picture is asked for and works on a headless machine.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from gps_dagster.domain.crons import local_time
from gps_dagster.domain.evaluator import IntentInterval, window_edges
from gps_dagster.domain.spec import DesiredState, Schedule
from gps_dagster.domain.timeline import GpuSegment
from gps_dagster.domain.timeline_doc import skipped_occurrences

_RUNNING, _STOPPED = "#2e8b57", "#c8c8c8"


def _num(value: datetime) -> float:
    """matplotlib's date number (its stubs leave date2num untyped)."""
    return float(mdates.date2num(value))  # type: ignore[no-untyped-call]


def _window_bars(
    schedule: Schedule, start: datetime, end: datetime
) -> dict[str, list[tuple[datetime, datetime]]]:
    """Occurrence spans per window, clipped to the range."""
    bars: dict[str, list[tuple[datetime, datetime]]] = {w.name: [] for w in schedule.windows}
    open_at: dict[str, datetime] = {}
    tz = schedule.tz
    for at, name, kind in window_edges(schedule, start, end):  # an end without start: began earlier
        if kind == "start":
            open_at[name] = at
        else:
            bars[name].append((open_at.pop(name, local_time(start, tz)), at))
    for name, at in open_at.items():
        bars[name].append((at, local_time(end, tz)))
    return bars


SKIPPED_COLOR = "#d2691e"
"""Hatched bars: occurrences a skip removed (a holiday or a listed date), labelled with why."""


def _mark_skipped(
    ax: Axes, schedule: Schedule, start: datetime, end: datetime, names: list[str]
) -> None:
    rows = skipped_occurrences(schedule, start, end)
    for row in rows:
        a, b = datetime.fromisoformat(row["start"]), datetime.fromisoformat(row["end"])
        y = names.index(row["window"])
        ax.barh(
            y,
            _num(min(b, end)) - _num(max(a, start)),
            left=_num(max(a, start)),
            fill=False,
            hatch="//",
            edgecolor=SKIPPED_COLOR,
        )
        ax.text(
            _num(max(a, start)),
            y,
            f" {row['reason'][:22]}",
            va="center",
            fontsize="x-small",
            color=SKIPPED_COLOR,
            clip_on=True,
        )
    if rows:
        ax.legend(
            handles=[
                Patch(fill=False, hatch="//", edgecolor=SKIPPED_COLOR, label="skipped (holiday)")
            ],
            loc="upper right",
            fontsize="small",
        )


LEAD_COLOR = "#6a3d9a"
"""Cross-hatched bars: a ready-by lead (the planned early start up to the boundary)."""


def _mark_leads(ax: Axes, leads: list[dict[str, Any]], targets: list[str]) -> None:
    for lead in leads:
        a, b = datetime.fromisoformat(lead["early_start"]), datetime.fromisoformat(lead["boundary"])
        for target in lead["acquiring"] + lead["releasing"]:
            ax.barh(
                targets.index(target),
                _num(b) - _num(a),
                left=_num(a),
                fill=False,
                hatch="xx",
                edgecolor=LEAD_COLOR,
            )


def draw(
    path: str,
    schedule: Schedule,
    start: datetime,
    end: datetime,
    rows: dict[str, list[IntentInterval]],
    gpu: list[GpuSegment] | None,
    leads: list[dict[str, Any]] | None = None,
) -> None:
    """Write the PNG to ``path``; ``leads``: the timeline's ``ready_by`` rows (early starts)."""
    tz = schedule.tz
    panels = 3 if gpu is not None else 2
    fig, axes = plt.subplots(
        panels,
        1,
        figsize=(14, 2.2 + 1.6 * panels),
        sharex=True,
        gridspec_kw={"height_ratios": [1, 1.2, 1.6][:panels]},
    )
    ax_w, ax_t = axes[0], axes[1]
    bars = _window_bars(schedule, start, end)
    for y, (_name, spans) in enumerate(bars.items()):
        for a, b in spans:
            ax_w.barh(y, _num(b) - _num(a), left=_num(a), color="#4682b4")
    _mark_skipped(ax_w, schedule, start, end, list(bars))
    ax_w.set_yticks(range(len(bars)), list(bars))
    ax_w.set_title(
        f"{schedule.name} — windows, effective state, desired GPUs ({schedule.timezone})"
    )
    for y, (_target, intervals) in enumerate(rows.items()):
        for r in intervals:
            stop = r.end or end
            color = _RUNNING if r.intent.desired_state is DesiredState.RUNNING else _STOPPED
            ax_t.barh(y, _num(stop) - _num(r.start), left=_num(r.start), color=color)
    _mark_leads(ax_t, leads or [], list(rows))
    ax_t.set_yticks(range(len(rows)), list(rows))
    handles = [Patch(color=_RUNNING, label="running"), Patch(color=_STOPPED, label="stopped")]
    if leads:
        handles.append(Patch(fill=False, hatch="xx", edgecolor=LEAD_COLOR, label="ready-by lead"))
    ax_t.legend(handles=handles, loc="upper right", fontsize="small")
    if gpu is not None:
        ax_g = axes[2]
        xs = [_num(s.start) for s in gpu] + [_num(gpu[-1].end)]
        ys = [s.desired_gpus for s in gpu] + [gpu[-1].desired_gpus]
        ax_g.step(xs, ys, where="post", label="desired GPUs", color="#1f3b73")
        ax_g.step(
            xs,
            [s.capacity for s in gpu] + [gpu[-1].capacity],
            where="post",
            color="red",
            label="capacity",
        )
        ax_g.set_ylim(0, max(max(ys), gpu[0].capacity) + 2)
        ax_g.set_ylabel("GPUs")
        ax_g.legend(loc="upper right", fontsize="small")
    locator = mdates.AutoDateLocator(tz=tz)  # type: ignore[no-untyped-call]
    axes[-1].xaxis.set_major_locator(locator)
    axes[-1].xaxis.set_major_formatter(mdates.DateFormatter("%a %d %H:%M", tz=tz))  # type: ignore[no-untyped-call]
    axes[-1].set_xlim(_num(start), _num(end))
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
