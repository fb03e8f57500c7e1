"""What a run's ops decide about a step, without Dagster (``engine/run_verdicts.py``): the
admit op's bounded watch, the outcomes that fail an op, and the lines the ops log."""

from __future__ import annotations

from datetime import UTC, datetime

from gps_dagster.clocks import VirtualClock
from gps_dagster.engine import run_verdicts as rv
from gps_dagster.engine.reports import StepOutcome

AT = datetime(2026, 10, 19, 8, tzinfo=UTC)


def _admit(states: list[str], watch_s: float) -> tuple[rv.Admission, int, list[float]]:
    clock, pauses = VirtualClock(AT), []
    seen = iter(states)
    calls = 0

    def preview() -> StepOutcome:
        nonlocal calls
        calls += 1
        return StepOutcome("s1", "a", next(seen), reason="cap")

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        clock.advance(seconds)

    return rv.admit("a", preview, clock, watch_s, pause), calls, pauses


def test_admit_watches_until_the_step_fits_then_hands_it_to_acquire() -> None:
    got, calls, pauses = _admit(["capacity_wait", "capacity_wait", "ready"], 10.0)
    assert (got.verdict, got.line, calls) == ("fits", "a: ready → acquire", 3)
    assert pauses == [rv.POLL_EVERY_S] * 2


def test_admit_hands_over_at_the_deadline_and_at_once_without_a_watch() -> None:
    got, calls, _ = _admit(["capacity_wait"] * 10, 1.0)
    assert (got.verdict, got.preview.reason, calls) == ("wait", "cap", 3)
    assert _admit(["capacity_wait"], 0.0)[0].verdict == "wait"


def test_a_pending_step_is_neither_acquired_nor_waiting() -> None:
    got = _admit(["pending"], 10.0)[0]
    assert got.verdict == "pending" and "left pending (cap)" in got.line


def test_a_broken_step_or_a_taken_capacity_fails_the_op() -> None:
    failed = StepOutcome("s", "a", "failed", reason="boom")
    assert rv.step_failure("release", "stop", "a", failed) == "release stop of a failed: boom"
    waiting = StepOutcome("s", "a", "capacity_wait")
    assert "acquire of a NOT submitted" in (rv.step_failure("acquire", "start", "a", waiting) or "")
    assert rv.step_failure("release", "stop", "a", waiting) is None
    assert rv.left_line("acquire", "a", StepOutcome("s", "a", "converged")) is None
    assert rv.left_line("release", "a", waiting) == "a: release left capacity_wait ()"


def test_the_deferred_line_and_the_batch_failure_name_what_an_operator_needs() -> None:
    assert rv.deferred_line("a", "", None).endswith(
        "(capacity not published yet); capacity_unavailable if it does not fit by its deadline"
    )
    assert (
        rv.batch_failure([("a", "converged", ""), ("b", "failed", "x")]) == "1 step(s) ended: b (x)"
    )
    assert rv.batch_failure([("a", "converged", "")]) is None
