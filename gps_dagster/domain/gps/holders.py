"""When the holder pod must exist (R-GPS-6).

KAI deletes a shared GPU's reservation pod once its last fractional pod goes,
and the GPU is then free for anyone. So a time-sliced, ACTIVE reservation
keeps a minimal holder (``kai.render_holder_pod``) whenever no member will be
running. The question is asked *before* a release step, with the members that
step stops: during a swap the holder is created before the last member stops,
and removed only once a member runs again, so the GPU group is never empty.
"""

from __future__ import annotations

from collections.abc import Collection

from gps_dagster.domain.gps.reservations import Reservation, ReservationState, SharingMode


def holder_wanted(reservation: Reservation, *, running: Collection[str], stopping: Collection[str] = ()) -> bool:
    """True when no member of ``reservation`` runs once ``stopping`` have stopped."""
    if reservation.mode is not SharingMode.TIME_SLICED or reservation.state is not ReservationState.ACTIVE:
        return False
    return not (set(running) - set(stopping))
