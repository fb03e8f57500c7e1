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


def holder_wanted(
    reservation: Reservation, *, running: Collection[str], stopping: Collection[str] = ()
) -> bool:
    """True when no member of ``reservation`` runs once ``stopping`` have stopped."""
    if (
        reservation.mode is not SharingMode.TIME_SLICED
        or reservation.state is not ReservationState.ACTIVE
    ):
        return False
    return not (set(running) - set(stopping))


def exclusive_holder_wanted(reservation: Reservation, *, wanting: Collection[str]) -> bool:
    """True when an exclusive reservation's GPUs need a holder: it is ACTIVE and no deploy bound
    to it wants replicas (``wanting``: the bound deploys whose spec asks for replicas > 0).

    The scheduler and the device plugin know nothing of reservations, so without a pod that
    requests the reserved GPUs on their node an outside workload could take them (R-GPS-2: "no
    outside workload can take them"). The holder requests them whole and goes when a bound
    deploy starts (the hand-over: ``backends.k8s.gps.Reservations.hand_over``)."""
    if reservation.mode is not SharingMode.EXCLUSIVE:
        return False
    return reservation.state is ReservationState.ACTIVE and not wanting
