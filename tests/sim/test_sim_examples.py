"""The seed pools load into the simulator and ``pool show`` prints them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from gps_dagster.backends.sim import SimPool, snapshot
from gps_dagster.backends.sim import schema as t
from gps_dagster.cli.pool_cmd import pool_group
from gps_dagster.clocks import VirtualClock
from gps_dagster.domain.pool import parse_pool
from gps_dagster.ports import DeployState
from gps_dagster.store.db import create_db_engine
from gps_dagster.store.reservations import ReservationRepository

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MONDAY = datetime(2026, 10, 18, 17, 0, tzinfo=UTC)  # Mon 2026-10-19 00:00 +07
POOLS = sorted(EXAMPLES.glob("*pool*.yaml"))


def test_there_are_example_pools() -> None:
    assert {p.name for p in POOLS} >= {"seed-pool-10.yaml", "seed-pool-16.yaml"}


@pytest.mark.parametrize("path", POOLS, ids=lambda p: p.name)
def test_every_example_pool_loads(path: Path, db_url: str) -> None:
    spec = parse_pool(path.read_text(), source=str(path))
    engine = create_db_engine(db_url)
    ledger = ReservationRepository.migrated(engine)  # some examples declare reservations
    sim = SimPool.create(engine, spec, VirtualClock(MONDAY), ledger=ledger)
    snap = snapshot(sim)
    assert snap.capacity == spec.capacity and len(snap.gpus) == spec.capacity
    assert all(g.uuid.startswith("GPU-") for g in snap.gpus)
    running = {d.id for d in spec.deploys if d.state == "running"}
    assert {d.id for d in snap.deploys if d.state is DeployState.READY} == running


def test_the_seed_pool_is_in_its_monday_midnight_state(sqlite_url: str) -> None:
    spec = parse_pool((EXAMPLES / "seed-pool-10.yaml").read_text())
    snap = snapshot(SimPool.create(create_db_engine(sqlite_url), spec, VirtualClock(MONDAY)))
    holders = {g.uuid: g.holder for g in snap.gpus}
    by_node = {(g.node, g.holder) for g in snap.gpus}
    assert ("hgx-02", "md-bge-embed") in by_node and ("hgx-01", "md-qwen32b") in by_node
    assert sum(1 for h in holders.values() if h is None) == 2
    states = {d.id: d.state for d in snap.deploys}
    assert states == {
        "md-llama70b": DeployState.STOPPED,
        "md-qwen32b": DeployState.READY,
        "md-bge-embed": DeployState.READY,
    }


def test_loading_the_same_pool_twice_does_not_duplicate(db_url: str) -> None:
    engine = create_db_engine(db_url)
    spec = parse_pool((EXAMPLES / "seed-pool-10.yaml").read_text())
    first = SimPool.create(engine, spec, VirtualClock(MONDAY))
    b = first.get_deploy("md-qwen32b")
    first.stop("md-qwen32b", etag=b.etag, allow_aliased_downtime=False, idempotency_key="k")
    again = SimPool.create(engine, spec, VirtualClock(MONDAY))
    assert again.get_deploy("md-qwen32b").state is DeployState.STOPPED  # opened, not reloaded
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(t.gpus)).scalar_one() == 10
        assert conn.execute(sa.select(sa.func.count()).select_from(t.pools)).scalar_one() == 1
    fresh = SimPool.create(engine, spec, VirtualClock(MONDAY), replace=True)
    assert fresh.get_deploy("md-qwen32b").state is DeployState.READY


def test_pool_show_prints_a_pool_file_as_a_table() -> None:
    result = CliRunner().invoke(pool_group, ["show", "--pool", str(EXAMPLES / "seed-pool-10.yaml")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "pool gpu-pool-h100-shared: 10 GPUs on 2 node(s), 8 held" in out
    assert out.count("GPU-") == 10 and "md-bge-embed" in out and "chat-prod" in out
    for line in out.splitlines():
        if line.startswith("hgx-02 "):
            assert line.split()[-1] == "0"  # no free GPU on hgx-02


def test_pool_show_json() -> None:
    result = CliRunner().invoke(
        pool_group, ["show", "--pool", str(EXAMPLES / "seed-pool-16.yaml"), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["capacity"] == 16 and len(data["gpus"]) == 16
    assert {g["holder"] for g in data["gpus"]} == {"md-llama70b", "md-qwen-8gpu"}
    assert [d["state"] for d in data["deploys"]] == ["READY", "READY"]


def test_pool_show_reads_the_configured_store(sqlite_url: str) -> None:
    spec = parse_pool((EXAMPLES / "seed-pool-16.yaml").read_text())
    SimPool.create(create_db_engine(sqlite_url), spec, VirtualClock(MONDAY))
    result = CliRunner().invoke(pool_group, ["show", "--db", sqlite_url, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["name"] == "gpu-pool-h100-16"
    result = CliRunner(env={"GPS_DB_URL": sqlite_url}).invoke(pool_group, ["show"])
    assert result.exit_code == 0 and "gpu-pool-h100-16" in result.output


def test_pool_show_reports_a_bad_pool_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnodes: [{name: n, gpus: 0}]\n")
    result = CliRunner().invoke(pool_group, ["show", "--pool", str(bad)])
    assert (
        result.exit_code != 0
        and "nodes[0].gpus" in result.output
        and "Traceback" not in result.output
    )


def test_a_pool_declaring_reservations_needs_the_ledger_handed_over(sqlite_url: str) -> None:
    """The simulator never reaches into the store for the ledger: without the port it refuses
    a pool file whose reservations it could not record, rather than load them nowhere."""
    spec = parse_pool((EXAMPLES / "gpu42-pool.yaml").read_text())
    assert spec.reservations
    with pytest.raises(ValueError, match="give it a reservation ledger"):
        SimPool.create(create_db_engine(sqlite_url), spec, VirtualClock(MONDAY))
