"""The simulate picture: target states over time and GPUs in use against capacity."""

from __future__ import annotations

from datetime import datetime

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt

from gps_dagster.simulation import SimulationReport


def draw(path: str, report: SimulationReport) -> None:
    tz = report.start.tzinfo
    fig, (ax_states, ax_gpu) = plt.subplots(
        2, 1, figsize=(14, 6), sharex=True, gridspec_kw={"height_ratios": [1, 2]}
    )
    holders = sorted({h for p in report.gpu_usage for h in p["by_holder"]})
    for row, holder in enumerate(holders):
        spans = _spans(report, holder)
        ax_states.broken_barh(spans, (row - 0.4, 0.8), color="tab:green")
    ax_states.set_yticks(range(len(holders)), holders)
    ax_states.set_title(f"simulate {report.schedule} on {report.pool}: GPUs held per deploy")
    xs = [p["at"] for p in report.gpu_usage] + [report.end]
    ys = [p["in_use"] for p in report.gpu_usage]
    if ys:
        ys.append(ys[-1])
        ax_gpu.step(xs, ys, where="post", label="GPUs in use", color="tab:blue")
    ax_gpu.axhline(report.capacity, color="red", label=f"capacity {report.capacity}")
    ax_gpu.set_ylim(0, report.capacity + 2)
    ax_gpu.set_ylabel("GPUs")
    ax_gpu.legend(loc="upper right")
    ax_gpu.xaxis.set_major_locator(mdates.DayLocator(tz=tz))  # type: ignore[no-untyped-call]
    ax_gpu.xaxis.set_major_formatter(mdates.DateFormatter("%a %d %H:%M", tz=tz))  # type: ignore[no-untyped-call]
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _spans(report: SimulationReport, holder: str) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    points = report.gpu_usage
    for here, nxt in zip(points, [*points[1:], None], strict=True):
        if here["by_holder"].get(holder, 0) <= 0:
            continue
        start: datetime = here["at"]
        stop: datetime = nxt["at"] if nxt is not None else report.end
        lo, hi = mdates.date2num(start), mdates.date2num(stop)  # type: ignore[no-untyped-call]
        out.append((lo, hi - lo))
    return out
