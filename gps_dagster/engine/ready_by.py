"""Ready-by's settings and the learned start and stop times it plans with (R-NEXT-1).

The rule itself (which targets start early, and the lead) is pure, in
``domain/readyby.py``; this holds the engine's settings for it
(``EngineConfig.ready_by_*``) and reads the learned durations from the store's
finished steps (``HistoryStore.start_durations`` / ``stop_durations``).
"""

# Decisions embodied here (docs/decisions.md):
# * “Ready-by: the lead is learned from finished steps, one lead per boundary”

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gps_dagster.domain.readyby import Lead, Timing, early_targets, learned, next_early
from gps_dagster.domain.spec import Schedule
from gps_dagster.domain.timeline_doc import ReadyByTimings
from gps_dagster.engine.store_ports import HistoryStore


@dataclass(frozen=True)
class ReadyBy:
    """Ready-by's settings (``EngineConfig.ready_by_*``) and the reads of learned durations."""

    default_start_s: float = 300.0
    default_stop_s: float = 60.0
    cap_s: float = 1800.0
    history: int = 20

    def timings(
        self, store: HistoryStore, spec: Schedule
    ) -> tuple[dict[str, Timing], dict[str, Timing]]:
        """Learned start and stop times of the schedule's targets (p90 of the last N, or the
        default)."""
        ids = list(spec.target_ids)
        starts = store.start_durations(ids, self.history)
        stops = store.stop_durations(ids, self.history)
        return (
            {t: learned(starts[t], self.default_start_s) for t in ids},
            {t: learned(stops[t], self.default_stop_s) for t in ids},
        )

    def for_timeline(self, store: HistoryStore, spec: Schedule) -> ReadyByTimings:
        """The learned figures as the timeline and dry-run show them."""
        starts, stops = self.timings(store, spec)
        return ReadyByTimings(starts, stops, self.cap_s)

    def early(
        self, store: HistoryStore, spec: Schedule, now: datetime
    ) -> tuple[dict[str, datetime], Lead | None]:
        """Targets to plan as of their boundary now, and the lead (nothing without ready_by)."""
        if not any(spec.is_ready_by(t) for t in spec.target_ids):
            return {}, None
        starts, stops = self.timings(store, spec)
        return early_targets(spec, now, start_times=starts, stop_times=stops, cap_s=self.cap_s)

    def next_early(self, store: HistoryStore, spec: Schedule, after: datetime) -> datetime | None:
        """The next early start after ``after`` (the due index wakes the schedule then)."""
        if not any(spec.is_ready_by(t) for t in spec.target_ids):
            return None
        starts, stops = self.timings(store, spec)
        return next_early(spec, after, start_times=starts, stop_times=stops, cap_s=self.cap_s)


__all__ = ["ReadyBy"]
