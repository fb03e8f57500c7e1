"""The step decisions every lane takes, written once and pure (docs/spec.md, "Where the step rules
live").

A step moves through one executor (``engine/steps.py``: N steps, a step alone is a batch of
one) and the store's writers (``store/status.py`` the CAS, ``store/bulk.py`` the fence and the
step writes). The safety rules they share live here, on plain values (no I/O, no engine or
store types), so that the executor only reads, asks, and writes:

* ``may_move`` — may this step move yet? (the prerequisite of the plan's second half);
* ``fence_refusal`` — the fence's re-checks (R-PASS-7): version, enabled, gate, claim;
* ``forward_ok`` — time only moves forward (R-PASS-14) for a status write;
* ``alias_refusal`` — the alias guard's refusal text (R-PASS-8);
* ``capacity_call`` — an acquire's capacity wait (R-PASS-9): go, enter or stay in the wait,
  or time out;
* ``recheck_culprit`` / ``recheck_text`` — the release-time preflight re-check (R-PASS-6):
  which acquiring step's refusal stops the release, and how it is told;
* ``fence_outcome`` — what a fence's answer makes of the step (R-PASS-7).
"""

# Decisions embodied here (docs/decisions.md):
# * “What "release first" waits for”
# * “The step rules are pure functions in the domain”
# * “The capacity wait, the release-time re-check and the fence outcome are pure step rules”

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from gps_dagster.domain.planner import Order
from gps_dagster.domain.step_state import BROKEN, FINAL, SUBMITTED, UNSUBMITTED, Gate, StepState

UNFENCED = UNSUBMITTED
"""The states a fence moves to ``submitting``."""


@dataclass(frozen=True, slots=True)
class Move:
    """``go``: the step may move; ``wait``: its first half is still running; ``broken``: a
    first-half step (``before[index]``) failed or was cancelled, so this one is cancelled."""

    verdict: Literal["go", "wait", "broken"]
    index: int | None = None


def may_move(order: str, first: str, before: Sequence[str]) -> Move:
    """May a step of ``order`` move, in a plan whose ``first`` half has ``before`` states?"""
    if order == first:
        return Move("go")
    broken = [i for i, state in enumerate(before) if state in BROKEN]
    if broken:
        return Move("broken", broken[0])
    ready = SUBMITTED if first == Order.RELEASE else FINAL
    return Move("go") if all(state in ready for state in before) else Move("wait")


def fence_refusal(
    *,
    schedule: str,
    version: int,
    stored_version: int | None,
    enabled: bool,
    gate: str | None,
    owner: str | None,
) -> str | None:
    """Why the fence refuses a step of ``schedule`` v``version`` (None: it passes).

    ``stored_version`` None: the schedule is gone; ``owner``: the schedule claiming the deploy.
    """
    if stored_version is None:
        return "schedule_deleted"
    if stored_version != version:
        return "schedule_version_changed"
    if not enabled:
        return "schedule_disabled"
    if gate != Gate.ENFORCE:
        return "gate_not_enforce"
    if owner != schedule:
        return "claim_lost"
    return None


def forward_ok(
    *,
    stored_version: int,
    stored_start: datetime | None,
    version: int | None,
    start: datetime | None,
) -> bool:
    """R-PASS-14 for a status write of (``version``, ``start``) over the row as stored: the
    schedule version never decreases, and for one version the interval start never moves back
    (None: the write does not set it)."""
    if version is not None and stored_version > version:
        return False
    if start is None or stored_start is None:
        return True
    same = version is None or stored_version == version
    return not same or stored_start <= start


def alias_refusal(deploy_id: str, aliases: Sequence[str]) -> tuple[str, str, dict[str, Any]]:
    """The alias guard's refusal of a stop without ``allow_downtime``: reason, text, detail."""
    text = (
        f"{deploy_id} serves alias(es) {', '.join(aliases)} and the intent stops it "
        "without allow_downtime"
    )
    return "alias_without_consent", text, {"aliases": list(aliases)}


Capacity = Literal["fits", "enter", "wait", "timeout"]


def capacity_call(*, fits: bool, now: datetime, deadline: datetime, state: str) -> Capacity:
    """An acquire's capacity verdict (R-PASS-9): ``fits`` (it may be fenced), ``timeout`` (the
    wait is over: ``capacity_unavailable``), ``enter`` (it moves into ``capacity_wait``: a
    write) or ``wait`` (it is waiting already: nothing to write)."""
    if fits:
        return "fits"
    if now >= deadline:
        return "timeout"
    return "wait" if state == StepState.CAPACITY_WAIT else "enter"


def recheck_culprit(
    release: str, acquiring: Collection[str], refusals: Mapping[str, object]
) -> str | None:
    """The acquiring deploy whose preflight refusal stops the release of ``release`` now
    (R-PASS-6): the first by name among the plan's still unsubmitted acquires (None: none)."""
    refused = sorted(d for d in refusals if d != release and d in acquiring)
    return refused[0] if refused else None


def recheck_text(release: str, culprit: str, reason: str | None, fix: str) -> str:
    """The phase text of a release stopped by ``culprit``'s refusal (``reason``, ``fix``)."""
    return (
        f"{culprit} failed preflight ({reason}) when the release was due; {release} left "
        f"as it is — {fix}"
    )


Fence = Literal["submit", "stay", "superseded"]


def fence_outcome(refusal: str | None) -> Fence:
    """What the fence's answer makes of the step (R-PASS-7): ``submit`` (it passed),
    ``stay`` (the gate is off, or another writer moved first: asked again later, unchanged) or
    ``superseded`` (an edit, a delete or a lost claim: the new plan decides again)."""
    if refusal is None:
        return "submit"
    return "stay" if refusal in ("gate_not_enforce", "lost_race") else "superseded"
