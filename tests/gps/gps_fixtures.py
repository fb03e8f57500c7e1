"""Shared constants and helpers of the GPS tests (imported by name; conftest holds the fixtures)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gps_dagster.domain.gps.reservations import Reservation, parse_reservation_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gpu42-reservation.yaml"
GOLDEN = Path(__file__).resolve().parent / "golden"
GPU42_UUID = "GPU-6b167f5c-6cc2-532d-abb5-84dd1e9ffaa0"
T0 = datetime(2026, 10, 19, 1, 0, tzinfo=UTC)


def uuid_n(n: int) -> str:
    """A distinct, valid GPU UUID per integer."""
    return f"GPU-{n:08x}-0000-4000-8000-{n:012x}"


def gpu42_reservation() -> Reservation:
    """``rsv-gpu42-shared`` as created at T0 from the example file."""
    spec = parse_reservation_spec(EXAMPLE.read_text(), source=str(EXAMPLE))
    return Reservation.from_spec(spec, at=T0)
