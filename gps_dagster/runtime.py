"""The composition root: settings read once at the edge, then store + core + clock + engine.

The CLI, the Dagster code location and the demo all build their runtime here, so they see
the same database, the same backend and the same clock. This is the only module that names
concrete adapters (the simulated pool, the Kubernetes backend, the wall clock); everything it
returns is typed by the ports (``Core``, ``Clock``).

Settings (``settings_from_env``; CLI options and Dagster resource fields override them):

* ``GPS_BACKEND`` — ``sim`` (default: the embedded simulated pool, stored in the product
  database) or ``kubernetes`` (``gps_dagster.backends.k8s``, imported only then);
* ``GPS_DB_URL`` — the product database (default ``sqlite:///var/gps.sqlite``);
* ``GPS_POOL_FILE`` — the simulated pool's file (sim only; default the seed's 10-GPU pool);
* ``GPS_KUBECONFIG``, else ``KUBECONFIG``, else the in-cluster config when
  ``KUBERNETES_SERVICE_HOST`` is set; ``GPS_KUBE_CONTEXT``; ``GPS_NAMESPACES`` (comma list,
  empty = every namespace), ``GPS_POLICY_NAMESPACE`` (the GPS scheduling-policy ConfigMap's
  namespace, default ``gps-dagster-system``) — kubernetes only;
* ``GPS_CLOCK`` — ``wall`` (default) or an RFC 3339 instant with its offset, e.g.
  ``2026-10-19T08:00:05+07:00``: every process built from these settings then reads a virtual
  clock frozen at that instant instead of the wall clock. Tests use it to run the CLI (in
  process or as a subprocess) and Dagster's processes at a chosen instant; an operator can
  use it for a what-if. It is never meant for a live deployment: a frozen clock reaches no
  boundary, so ``engine run`` refuses to loop on it.

A bad value is a ``SettingsInvalid`` listing every problem (setting, reason, fix), raised
before anything is opened.
"""

# Decisions embodied here (docs/decisions.md):
# * “Settings are read once, at the edge, by the composition root”
# * “`GPS_CLOCK`: `wall` or a frozen virtual instant”
# * “Identifier patterns end with `\Z`, not `$`”
# * “The wheel ships the seed example; the default pool is the packaged copy”
# * “`GPS_WITNESS_SOURCE` (`node_agent` | `none`), refused before anything moves”
# * “The Dagster layer asks the engine by intent”

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from gps_dagster.backends.sim import SimPool
from gps_dagster.clocks import VirtualClock, WallClock
from gps_dagster.domain.errors import FieldError, GpsError, SpecInvalid
from gps_dagster.domain.pool import PoolSpec, parse_pool
from gps_dagster.engine.config import EngineConfig
from gps_dagster.engine.engine import Engine
from gps_dagster.engine.gps_hooks import hooks
from gps_dagster.engine.intents import Intents
from gps_dagster.ports import Clock, Core
from gps_dagster.store.launches import LaunchClaims
from gps_dagster.store.repository import Store
from gps_dagster.store.reservations import ReservationRepository

__all__ = [
    "BACKENDS",
    "DEFAULT_POOL",
    "K8S_BURST",
    "K8S_QPS",
    "Runtime",
    "Settings",
    "SettingsInvalid",
    "build_clock",
    "build_runtime",
    "clock_from_env",
    "db_url",
    "load_pool_spec",
    "open_store",
    "settings_from_env",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POOL = Path(__file__).resolve().parent / "examples" / "seed-pool-10.yaml"
"""The seed pool shipped in the package (``gps_dagster/examples``), never a path into a source
tree: an installed wheel finds it (decision "The wheel ships the seed example")."""
BACKENDS = ("sim", "kubernetes")
WITNESS_SOURCES = ("node_agent", "none")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_ENV = {
    "backend": "GPS_BACKEND",
    "db_url": "GPS_DB_URL",
    "pool_file": "GPS_POOL_FILE",
    "kubeconfig": "GPS_KUBECONFIG",
    "kube_context": "GPS_KUBE_CONTEXT",
    "namespaces": "GPS_NAMESPACES",
    "policy_namespace": "GPS_POLICY_NAMESPACE",
    "witness_source": "GPS_WITNESS_SOURCE",
    "k8s_qps": "GPS_K8S_QPS",
    "k8s_burst": "GPS_K8S_BURST",
    "k8s_cache": "GPS_K8S_CACHE",
    "clock": "GPS_CLOCK",
}
K8S_QPS, K8S_BURST = 50.0, 100
"""The Kubernetes client's pace: requests a second and the burst saved. client-go's own default
(5/10) suits a command-line tool; kube-controller-manager runs at 20/30. The engine's pass is a
few reads and one write per moving target, so 50/100 leaves a 1,000-swap boundary unthrottled
for its first 100 writes and holds a runaway loop to 50 requests a second (0 = no limit)."""


class SettingsInvalid(SpecInvalid):
    """A setting (environment variable, CLI option or resource field) is unusable."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__(errors, source="settings")


@dataclass(frozen=True)
class Settings:
    """Where the product runs: read once at the edge, then handed down (never re-read)."""

    backend: str = "sim"
    """``sim`` or ``kubernetes``."""
    db_url: str | None = None
    """Product database URL; None = the store's default (SQLite under ``var/``)."""
    pool_file: Path | None = DEFAULT_POOL
    """The simulated pool's file (sim); None on kubernetes."""
    kubeconfig: str | None = None
    """Kubeconfig path (kubernetes); None = the in-cluster service account."""
    kube_context: str | None = None
    """Kubeconfig context (kubernetes); None = the kubeconfig's current context."""
    namespaces: tuple[str, ...] = ()
    """Namespaces the kubernetes backend may act in; empty = every namespace."""
    policy_namespace: str | None = None
    """Namespace of the GPS scheduling-policy ConfigMap (kubernetes); None = the backend's
    default, ``gps-dagster-system``."""
    witness_source: str = "node_agent"
    """Placement witness of reservation-bound deploys (kubernetes): ``node_agent`` (the chart's
    node-agent DaemonSet publishes the kubelet's device record) or ``none`` (bound deploys are
    refused with ``witness_unavailable``)."""
    k8s_qps: float = K8S_QPS
    """Client-side requests per second to the Kubernetes API (kubernetes); 0 = unlimited."""
    k8s_burst: int = K8S_BURST
    """Requests the client may send at once above its pace (kubernetes)."""
    k8s_cache: bool = True
    """One watch cache per process serves the adapter's reads (kubernetes; ``GPS_K8S_CACHE``
    ``on``/``off``): decision "The Kubernetes adapter reads a pass from one watch cache per
    process"; off, every read is a LIST."""
    clock: datetime | None = None
    """None = the wall clock; an instant = a virtual clock frozen at it (``GPS_CLOCK``)."""


def settings_from_env(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from ``env`` (default ``os.environ``); a non-None override wins over its variable.

    Override names are the ``Settings`` field names. Raises ``SettingsInvalid`` with every
    problem found.
    """
    env = os.environ if env is None else env
    unknown = set(overrides) - {f.name for f in fields(Settings)}
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    given = {k: v for k, v in overrides.items() if v is not None and v != ""}
    reader = _Reader(env, given)
    backend = reader.backend()
    settings = Settings(
        backend=backend,
        db_url=reader.db_url(),
        pool_file=reader.pool_file(backend),
        kubeconfig=reader.kubeconfig(backend),
        kube_context=reader.text("kube_context"),
        namespaces=reader.namespaces(),
        policy_namespace=reader.policy_namespace(),
        witness_source=reader.witness_source(),
        k8s_qps=reader.number("k8s_qps", K8S_QPS, integer=False),
        k8s_burst=int(reader.number("k8s_burst", K8S_BURST, integer=True, least=1)),
        k8s_cache=reader.switch("k8s_cache", True),
        clock=reader.clock(),
    )
    if reader.problems:
        raise SettingsInvalid(reader.problems)
    return settings


class _Reader:
    """Reads each setting from its override or its variable, collecting every problem."""

    def __init__(self, env: Mapping[str, str], given: Mapping[str, Any]) -> None:
        self.env, self.given = env, given
        self.problems: list[FieldError] = []

    def raw(self, name: str) -> tuple[str, Any]:
        """(where it came from, value) of one setting; value None when unset."""
        if name in self.given:
            return name, self.given[name]
        value = self.env.get(_ENV[name], "").strip()
        return _ENV[name], value or None

    def fail(self, where: str, reason: str, fix: str) -> None:
        self.problems.append(FieldError(where, reason, fix))

    def text(self, name: str) -> str | None:
        return _opt_str(self.raw(name)[1])

    def backend(self) -> str:
        where, value = self.raw("backend")
        if value is None:
            return "sim"
        if value not in BACKENDS:
            self.fail(
                where,
                "invalid_backend",
                f"{_show(value)} is not a backend: use one of {', '.join(BACKENDS)}",
            )
            return "sim"
        return str(value)

    def db_url(self) -> str | None:
        where, value = self.raw("db_url")
        if value is None:
            return None
        try:
            sa.engine.make_url(str(value))
        except sa.exc.ArgumentError:
            self.fail(
                where,
                "invalid_db_url",
                f"{_show(value)} is not a database URL: use e.g. "
                "sqlite:///var/gps.sqlite or postgresql+psycopg2://user@host/db",
            )
        return str(value)

    def pool_file(self, backend: str) -> Path | None:
        where, value = self.raw("pool_file")
        if backend != "sim":
            if where == "pool_file":  # given explicitly: a mistake, not a leftover variable
                self.fail(
                    where,
                    "pool_file_not_for_backend",
                    f"a pool file describes the simulated pool only: drop it for {backend}",
                )
            return None
        path = Path(str(value)) if value is not None else DEFAULT_POOL
        if not path.is_file():
            self.fail(
                where,
                "pool_file_not_found",
                f"no pool file at {_show(str(path))}: give an existing file",
            )
        return path

    def kubeconfig(self, backend: str) -> str | None:
        where, value = self.raw("kubeconfig")
        if value is None and "kubeconfig" not in self.given:
            value = self.env.get("KUBECONFIG", "").strip() or None
            where = "KUBECONFIG" if value else where
        if backend != "kubernetes":
            return _opt_str(value)
        if value is None:
            if not self.env.get("KUBERNETES_SERVICE_HOST"):
                self.fail(
                    where,
                    "kubeconfig_missing",
                    "no kubeconfig and not in a cluster: set GPS_KUBECONFIG "
                    "(or --kubeconfig) to a kubeconfig file",
                )
            return None
        missing = [p for p in str(value).split(os.pathsep) if p and not Path(p).is_file()]
        if missing:
            self.fail(
                where,
                "kubeconfig_not_found",
                f"no kubeconfig file at {_show(missing[0])}: give an existing file",
            )
        return str(value)

    def namespaces(self) -> tuple[str, ...]:
        where, value = self.raw("namespaces")
        if value is None:
            return ()
        items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
        out: list[str] = []
        for item in (i.strip() for i in items):
            if item and not _NAMESPACE.match(item):
                self.fail(
                    where,
                    "invalid_namespace",
                    f"{_show(item)} is not a namespace name: lower-case letters, digits "
                    "and '-', at most 63 characters",
                )
            elif item and item not in out:
                out.append(item)
        return tuple(out)

    def witness_source(self) -> str:
        where, value = self.raw("witness_source")
        if value is None:
            return "node_agent"
        if value not in WITNESS_SOURCES:
            self.fail(
                where,
                "invalid_witness_source",
                f"{_show(value)} is not a witness source: use one of {', '.join(WITNESS_SOURCES)}",
            )
            return "node_agent"
        return str(value)

    def switch(self, name: str, default: bool) -> bool:
        """``on``/``off`` (also true/false, 1/0, yes/no); ``default`` when unset."""
        where, value = self.raw(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("on", "true", "1", "yes"):
            return True
        if text in ("off", "false", "0", "no"):
            return False
        self.fail(where, f"invalid_{name}", f"{_show(value)} is not on or off: e.g. on")
        return default

    def number(self, name: str, default: float, *, integer: bool, least: float = 0) -> float:
        """A finite number ≥ ``least`` (an integer when ``integer``); ``default`` when unset."""
        where, value = self.raw(name)
        if value is None:
            return default
        try:
            number = int(str(value)) if integer else float(str(value))
        except ValueError:
            number = None
        if number is None or not math.isfinite(number) or number < least:
            kind = "a whole number" if integer else "a number"
            self.fail(
                where,
                f"invalid_{name}",
                f"{_show(value)} is not {kind} ≥ {least:g}: e.g. {default:g}",
            )
            return default
        return number

    def policy_namespace(self) -> str | None:
        where, value = self.raw("policy_namespace")
        text = str(value).strip() if value is not None else ""
        if text and not _NAMESPACE.match(text):
            self.fail(
                where,
                "invalid_namespace",
                f"{_show(text)} is not a namespace name: lower-case letters, digits and '-', "
                "at most 63 characters",
            )
            return None
        return text or None

    def clock(self) -> datetime | None:
        where, value = self.raw("clock")
        if value is None or value == "wall":
            return None
        if isinstance(value, datetime):
            instant = value
        else:
            try:
                instant = datetime.fromisoformat(str(value))
            except ValueError:
                self.fail(
                    where,
                    "invalid_clock",
                    f"{_show(value)} is neither 'wall' nor an "
                    "RFC 3339 instant: use e.g. 2026-10-19T08:00:00+07:00",
                )
                return None
        if instant.tzinfo is None or instant.utcoffset() is None:
            self.fail(
                where,
                "naive_datetime",
                f"{_show(str(value))} has no UTC offset: add one, e.g. +07:00 or Z",
            )
            return None
        return instant


def clock_from_env(env: Mapping[str, str] | None = None, clock: Any = None) -> Clock:
    """Only the clock of the settings (``GPS_CLOCK``, or the ``clock`` override): for the
    commands that need "now" but no store or backend, so that an unrelated bad setting does
    not stop them."""
    given = {} if clock in (None, "") else {"clock": clock}
    reader = _Reader(os.environ if env is None else env, given)
    instant = reader.clock()
    if reader.problems:
        raise SettingsInvalid(reader.problems)
    return build_clock(Settings(clock=instant))


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _show(value: Any) -> str:
    """A user value quoted on one line (a fix text never spans lines), at most 80 characters."""
    text = repr(str(value))
    return text if len(text) <= 80 else text[:77] + "..."


def build_clock(settings: Settings) -> Clock:
    """The clock these settings name: the wall clock, or a virtual one frozen at GPS_CLOCK."""
    return VirtualClock(settings.clock) if settings.clock is not None else WallClock()


@dataclass
class Runtime:
    """What every edge works with; the core is typed by the port, never by an adapter."""

    settings: Settings
    store: Store
    core: Core
    engine: Engine
    clock: Clock
    pool: PoolSpec | None = None
    """The simulated pool's spec (capacity, GPUs per deploy); None on kubernetes."""

    @property
    def intents(self) -> Intents:
        """The engine's answers to an orchestrator (what the Dagster layer asks by intent)."""
        return Intents(self.engine, self.store, self.launches)

    @property
    def launches(self) -> LaunchClaims:
        """The orchestrator's launch claims (one origin launches a plan run) in the store."""
        return LaunchClaims(self.store.engine)

    def close(self) -> None:
        """Release the database connections (and the core's watches, when it has any)."""
        close = getattr(self.core, "close", None)
        if callable(close):
            close()
        self.store.engine.dispose()


def build_runtime(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    config: EngineConfig | None = None,
    reload_pool: bool = False,
) -> Runtime:
    """Open the store (migrating it), the backend's core and the engine, all on one clock.

    ``settings`` defaults to ``settings_from_env()``; ``clock`` (tests) overrides the settings'
    clock; ``reload_pool`` replaces the simulated pool in the store by the pool file's.
    """
    settings = settings if settings is not None else settings_from_env()
    clock = clock if clock is not None else build_clock(settings)
    store = open_store(settings)
    try:
        core, pool = _core(settings, store, clock, reload_pool=reload_pool)
    except BaseException:
        store.engine.dispose()
        raise
    engine = Engine(store, core, clock, config or EngineConfig(), **hooks(store, core))
    return Runtime(settings, store, core, engine, clock, pool)


def open_store(settings: Settings, *, upgrade: bool = True) -> Store:
    """The product store these settings name (migrated unless ``upgrade`` is False)."""
    return Store.open(db_url(settings), upgrade=upgrade)


def db_url(settings: Settings) -> str:
    """The database URL: ``settings.db_url``, else a SQLite file under ``./var/`` (created)."""
    if settings.db_url:
        return settings.db_url
    var = Path.cwd() / "var"
    var.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(var / 'gps.sqlite').resolve()}"


def _core(
    settings: Settings, store: Store, clock: Clock, *, reload_pool: bool
) -> tuple[Core, PoolSpec | None]:
    if settings.backend == "kubernetes":
        return _kubernetes_core(settings, store, clock), None
    spec = load_pool_spec(settings)
    ledger = ReservationRepository(store.engine)
    return SimPool.create(store.engine, spec, clock, replace=reload_pool, ledger=ledger), spec


def load_pool_spec(settings: Settings) -> PoolSpec:
    """The sim backend's pool spec (an unreadable file is a settings problem, not a traceback)."""
    path = settings.pool_file or DEFAULT_POOL
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fix = f"cannot read {_show(str(path))} ({type(exc).__name__}): give a readable pool file"
        raise _invalid("GPS_POOL_FILE", "unreadable_file", fix) from exc
    return parse_pool(text, source=str(path))


def _kubernetes_core(settings: Settings, store: Store, clock: Clock) -> Core:
    """The Kubernetes backend, imported only when chosen (it is the only kubernetes importer)."""
    try:
        from gps_dagster.backends.k8s import build_core
    except ImportError as exc:
        fix = (
            f"the kubernetes backend cannot be loaded ({_show(exc)}): install gps_dagster with "
            "its kubernetes backend and the kubernetes client, or set GPS_BACKEND=sim"
        )
        raise _invalid("GPS_BACKEND", "backend_unavailable", fix) from exc
    try:
        core: Core = build_core(
            ledger=ReservationRepository(store.engine),
            clock=clock,
            kubeconfig=settings.kubeconfig,
            context=settings.kube_context,
            namespaces=settings.namespaces,
            policy_namespace=settings.policy_namespace,
            witness_source=settings.witness_source,
            qps=settings.k8s_qps,
            burst=settings.k8s_burst,
            cache=settings.k8s_cache,
        )
    except GpsError:
        raise  # already carries its reason and fix
    except Exception as exc:  # the composition root owns backend start-up failures
        fix = (
            f"the kubernetes backend did not start ({type(exc).__name__}: {_show(exc)}): check "
            "the kubeconfig (--kubeconfig), the context (--context) and that the API server is up"
        )
        raise _invalid("GPS_KUBECONFIG", "backend_start_failed", fix) from exc
    return core


def _invalid(where: str, reason: str, fix: str) -> SettingsInvalid:
    return SettingsInvalid([FieldError(where, reason, fix)])
