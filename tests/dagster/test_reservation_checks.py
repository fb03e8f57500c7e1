"""Reservation check verdicts carry their reservation's partition (issue 20 §3).

With several reservations, the sensor's check evaluations had no partition: the UI kept only
the last one, so one reservation's verdict overwrote another's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dagster as dg
import yaml
from dagster_support import EXAMPLES, Runtime

from gps_dagster.dagster_defs import names
from gps_dagster.dagster_defs.assets import reservation_events


def _create(rt: Runtime, rid: str, uuid: str) -> None:
    from gps_dagster.domain.gps.reservations import ReservationSpec
    from gps_dagster.store.reservations import ReservationRepository, ensure_tables

    doc = yaml.safe_load((EXAMPLES / "gpu42-reservation.yaml").read_text())
    spec = ReservationSpec.model_validate({**doc, "id": rid, "gpu_uuids": [uuid]})
    ensure_tables(rt.store.engine)
    ReservationRepository(rt.store.engine).create(
        spec, at=datetime(2026, 10, 19, tzinfo=UTC), actor="test"
    )


def test_two_reservations_get_one_verdict_each_on_their_own_partition(rt: Runtime) -> None:
    _create(rt, "rsv-a", "GPU-00000000-0000-0000-0000-00000000000a")
    _create(rt, "rsv-b", "GPU-00000000-0000-0000-0000-00000000000b")
    events = reservation_events(rt, ["rsv-a", "rsv-b"], {})
    checks = [e for e in events if isinstance(e, dg.AssetCheckEvaluation)]
    by_check: dict[str, set[str | None]] = {}
    for e in checks:
        by_check.setdefault(e.check_name, set()).add(e.partition)
        assert e.description and e.description.startswith(f"{e.partition}: ")
    assert by_check == {
        names.CHECK_PLACEMENT: {"rsv-a", "rsv-b"},
        names.CHECK_OVERCOMMIT: {"rsv-a", "rsv-b"},
    }


def test_every_reservation_tick_says_what_it_did(
    defs: dg.Definitions, rt: Runtime, instance: dg.DagsterInstance
) -> None:
    """Ticks that recorded events used to carry no text ("Sensor function returned an empty
    result" in the UI)."""
    from gps_dagster.dagster_defs.resources import as_resource

    def tick(cursor: str | None) -> Any:
        sensor = defs.resolve_sensor_def(names.RESERVATION_SENSOR)
        ctx = dg.build_sensor_context(
            instance=instance, cursor=cursor, resources={"gps": as_resource(rt)}
        )
        return sensor.evaluate_tick(ctx)

    _create(rt, "rsv-a", "GPU-00000000-0000-0000-0000-00000000000a")
    added = tick(None)
    assert "partition(s) added: rsv-a" in (added.skip_message or "")
    instance.add_dynamic_partitions(names.RESERVATION_PARTITIONS, ["rsv-a"])
    recorded = tick(added.cursor)
    assert recorded.asset_events
    assert "recorded: rsv-a" in (recorded.skip_message or "")
    for event in recorded.asset_events:  # the instance takes the partitioned verdicts
        instance.report_runless_asset_event(event)
    quiet = tick(recorded.cursor)
    assert not quiet.asset_events
    assert "up to date" in (quiet.skip_message or "")
