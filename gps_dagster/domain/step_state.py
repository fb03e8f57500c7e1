"""The states a step and a plan move through, and the execution gate, as enums (R-PASS).

A step (an ``actions`` row) is ``pending`` when its plan opens, may wait for capacity
(``capacity_wait``), is fenced into ``submitting``, is ``accepted`` once the core took its
operation, and ends ``converged``, ``failed``, ``superseded`` (a newer plan decides) or
``cancelled`` (its plan's first half broke, or its schedule was deleted). A plan (a
``transitions`` row) is ``open`` while a step of it may move, then ``done``, ``failed``,
``superseded`` or ``cancelled``; a plan preflight refused is ``refused`` from the start.

The members are ``StrEnum``: each equals its column text, so a row read from the database is
converted once (``StepState(text)``) and a write stores the same text as before. The named
sets below are the groupings every lane asks about, written once.
"""

# Decisions embodied here (docs/decisions.md):
# * “Step states, plan states and the gate are enums on the rows; plans open from frozen records”

from __future__ import annotations

from enum import StrEnum


class StepState(StrEnum):
    """Where one step is (the ``actions.state`` column)."""

    PENDING = "pending"
    CAPACITY_WAIT = "capacity_wait"
    SUBMITTING = "submitting"
    ACCEPTED = "accepted"
    CONVERGED = "converged"
    FAILED = "failed"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"


FINISHED = frozenset(
    {StepState.CONVERGED, StepState.FAILED, StepState.SUPERSEDED, StepState.CANCELLED}
)
"""Step states that never move again."""
FINAL = frozenset({StepState.CONVERGED, StepState.SUPERSEDED})
"""Steps finished without a failure: an acquire-first plan's releases may go after them."""
SUBMITTED = frozenset({StepState.ACCEPTED, StepState.CONVERGED, StepState.SUPERSEDED})
"""Release steps the core has accepted: a release-first plan's acquires may go."""
BROKEN = (StepState.FAILED, StepState.CANCELLED)
"""Steps that broke: they end their plan's second half and fail their plan."""
UNSUBMITTED = (StepState.PENDING, StepState.CAPACITY_WAIT)
"""Step states that never reached the core: a fence moves them, a newer plan may drop them."""
REACHED_CORE = (StepState.SUBMITTING, StepState.ACCEPTED)
"""Step states that reached (or may have reached) the core."""
IN_FLIGHT = (*UNSUBMITTED, *REACHED_CORE)
"""Step states that may still move."""


class PlanState(StrEnum):
    """Where one transition plan is (the ``transitions.state`` column)."""

    OPEN = "open"
    DONE = "done"
    FAILED = "failed"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"
    REFUSED = "refused"


class Gate(StrEnum):
    """The execution gate (the ``control`` row ``execution``): ``off`` plans nothing,
    ``observe`` plans and reports without acting, ``enforce`` acts."""

    OFF = "off"
    OBSERVE = "observe"
    ENFORCE = "enforce"


__all__ = [
    "BROKEN",
    "FINAL",
    "FINISHED",
    "IN_FLIGHT",
    "REACHED_CORE",
    "SUBMITTED",
    "UNSUBMITTED",
    "Gate",
    "PlanState",
    "StepState",
]
