"""One origin launches a plan: the claim on a plan run's key, and when a lost one is taken over.

An orchestrator deduplicates a repeated run key only per origin (a Dagster sensor or schedule),
while a plan's run is requested by whichever origin opened it and by the sweep that re-requests
open plans whose run it cannot see yet. So every plan request is first claimed in the store: the
first origin owns the launch (and may repeat its request); every other origin skips it, unless
the claim is older than ``CLAIM_TAKEOVER_S`` and the orchestrator has no run of that plan (the
owner's tick was lost), when the launch is taken over by compare-and-set on the holder.
"""

# Decisions embodied here (docs/decisions.md):
# * “One origin launches a plan”
# * “The Dagster layer translates; the engine decides what a tick launches and says”

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

CLAIM_TAKEOVER_S = 120.0
"""A plan claimed this long ago whose run the orchestrator still does not know was lost by its
claimer (a tick that crashed after claiming): another origin may take the launch over. The
daemon creates a requested run within seconds of the tick, so this is generous."""


class Claim(Protocol):
    @property
    def run_key(self) -> str: ...
    @property
    def origin(self) -> str: ...
    @property
    def claimed_at(self) -> datetime: ...
    @property
    def won(self) -> bool: ...


C = TypeVar("C", bound=Claim)


class LaunchClaimStore(Protocol[C]):
    """The store's launch claims (``store/launches.py``)."""

    def claim(self, run_key: str, *, transition_id: str, origin: str, now: datetime) -> C: ...
    def get(self, run_key: str) -> C | None: ...
    def take_over(self, held: C, *, origin: str, now: datetime) -> bool: ...


RunsOf = Callable[[str, str | None], bool]
"""Whether the orchestrator has a run of this plan (transition id), or of the batch (its id,
or None) its claimer launched it in."""


def batch_of(origin: str) -> str | None:
    """The batch a claim's origin launched its plan in (``<origin>#<batch id>``), if any."""
    return origin.split("#", 1)[1] if "#" in origin else None


def claim_plans(
    claims: LaunchClaimStore[Any],
    keys: Sequence[tuple[str, str]],
    *,
    origin: str,
    now: datetime,
    runs_of: RunsOf | None,
) -> tuple[set[str], list[str]]:
    """Claim each plan run key (``(run key, transition id)``) for ``origin``: the keys it may
    request, and a line per key it must skip. Without ``runs_of`` no claim is taken over."""
    won: set[str] = set()
    skipped: list[str] = []
    for run_key, tid in keys:
        claim = claims.claim(run_key, transition_id=tid, origin=origin, now=now)
        lost = not claim.won and _owner_lost(claim, tid, now, runs_of)
        if claim.won or (lost and claims.take_over(claim, origin=origin, now=now)):
            won.add(run_key)
        else:
            since = claim.claimed_at.isoformat()
            skipped.append(f"{run_key}: launched by {claim.origin} (claimed {since})")
    return won, skipped


def _owner_lost(claim: Claim, tid: str, now: datetime, runs_of: RunsOf | None) -> bool:
    """Whether the claim is older than ``CLAIM_TAKEOVER_S`` and no run of it exists."""
    if runs_of is None or now - claim.claimed_at < timedelta(seconds=CLAIM_TAKEOVER_S):
        return False
    return not runs_of(tid, batch_of(claim.origin))
