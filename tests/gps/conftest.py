"""Fixtures of the GPS tests: the gpu42 reservation of the seed, at fixed times."""

from __future__ import annotations

import pytest
from gps_fixtures import gpu42_reservation

from gps_dagster.domain.gps.reservations import Reservation


@pytest.fixture
def gpu42() -> Reservation:
    return gpu42_reservation()
