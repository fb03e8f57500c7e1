"""The replicas row of ``bench/k8s_storm.py``: 3 engine replicas vs 1 behind 20 ms per request.

Each engine replica is its own process (``spawn``) with its own client, watch cache and
``EngineLoop`` (woken by its cache's events), sharing one PostgreSQL store (``GPS_TEST_PG_URL``,
as ``tools/with_postgres.py`` exports it): the due schedules are split between them by the
store's due claims (chunks of 50). Every replica reaches the API server through ``DelayProxy``,
a TCP proxy on loopback that forwards each chunk a client sends ``GPS_BENCH_LATENCY_MS``
(default 20) after it arrived — one request costs its round trip plus 20 ms, as against a remote
managed control plane; TLS passes through untouched.

The storm is ``bench/k8s_swaps.py``'s (``n`` pairs, one boundary): 1 replica at 22:00 (the
``a`` deploys release, the ``b`` acquire), then 3 replicas at 04:00 (the window's end: the same
number of swaps back). Measured by the bench's own watches (``k8s_swaps.Witness``, not
proxied): the boundary → every release accepted, and → every acquire accepted.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

from gps_dagster.backends.k8s import ClusterCache, K8sCore, Kube, connect
from gps_dagster.clocks import WallClock
from gps_dagster.domain.pool import load_pool
from gps_dagster.domain.schedules import load_schedule
from gps_dagster.engine import Engine, EngineConfig
from gps_dagster.engine.loop import EngineLoop
from gps_dagster.engine.wakeup import Wakeup
from gps_dagster.store import Store
from gps_dagster.testing.k8s.pools import ClusterPool

LATENCY_S = float(os.environ.get("GPS_BENCH_LATENCY_MS", "20")) / 1000


class DelayProxy:
    """Loopback TCP proxy to ``host:port``: client → server bytes wait ``delay_s`` (in order)."""

    def __init__(self, host: str, port: int, delay_s: float) -> None:
        self.host, self.port, self.delay_s = host, port, delay_s
        self.loop = asyncio.new_event_loop()
        self.listen_port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="delay-proxy", daemon=True)

    def start(self) -> DelayProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._pipe, "127.0.0.1", 0))
        self.listen_port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()

    async def _pipe(self, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(self.host, self.port)
        except OSError:
            down_w.close()
            return
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def read_client() -> None:
            while data := await down_r.read(65536):
                await queue.put((loop.time() + self.delay_s, data))
            await queue.put(None)

        async def send_up() -> None:
            while (item := await queue.get()) is not None:
                at, data = item
                if at > loop.time():
                    await asyncio.sleep(at - loop.time())
                up_w.write(data)
                await up_w.drain()
            up_w.close()

        async def send_down() -> None:
            while data := await up_r.read(65536):
                down_w.write(data)
                await down_w.drain()
            down_w.close()

        try:
            await asyncio.gather(read_client(), send_up(), send_down())
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (up_w, down_w):
                w.close()


def proxied_kubeconfig(kubeconfig: str, port: int, tmp: Path) -> str:
    """The kubeconfig with every cluster's server on the proxy's port (same host: the API
    server's certificate names 127.0.0.1, not a port)."""
    doc = yaml.safe_load(Path(kubeconfig).read_text())
    for c in doc.get("clusters") or []:
        server = c["cluster"]["server"]
        c["cluster"]["server"] = f"{server.rsplit(':', 1)[0]}:{port}"
    out = tmp / "proxied.kubeconfig"
    out.write_text(yaml.safe_dump(doc))
    return str(out)


def api_address(kubeconfig: str) -> tuple[str, int]:
    server = yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    host, _, port = server.split("://", 1)[1].rpartition(":")
    return host, int(port)


def replica(
    kubeconfig: str,
    url: str,
    namespaces: list[str],
    holder: str,
    at: str,
    anchor: Any,
    go: Any,
    done: Any,
    out: Any,
) -> None:
    """One engine replica: synced cache, then (on ``go``) its loop until ``done``."""
    boundary = datetime.fromisoformat(at).timestamp()
    clock = WallClock(lambda: boundary + time.time() - anchor.value)
    api = Kube(connect(kubeconfig, None))
    cache = ClusterCache(api, namespaces, lws=api.has_lws()).start()
    if not cache.wait_synced(180):
        out.put((holder, -1, 0.0))
        return
    core = K8sCore(api, clock=clock, namespaces=namespaces, cache=cache)
    store = Store.open(url, upgrade=False)
    out.put((holder, 0, 0.0))  # ready
    go.wait()  # the clock reads the anchor from here on
    engine = Engine(store, core, clock, EngineConfig(page_size=1000, holder=holder))
    wakeup = Wakeup()
    cache.subscribe(wakeup.notify)
    loop = EngineLoop(engine, clock=clock, interval_s=30.0, wakeup=wakeup)
    runner = threading.Thread(target=loop.run, name=f"{holder}-loop", daemon=True)
    runner.start()
    done.wait()
    loop.stop()
    runner.join(timeout=120)
    cache.stop()
    store.engine.dispose()
    out.put((holder, loop.passes, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def phase(
    count: int,
    kubeconfig: str,
    url: str,
    cluster: ClusterPool,
    clock: Any,
    witness: Any,
    at: datetime,
    pairs: list[tuple[str, str]],
    wait_for: Any,
) -> dict[str, float]:
    """``count`` replicas from the boundary ``at`` until every pair's acquire is accepted."""
    ctx = multiprocessing.get_context("spawn")
    anchor, go, done, out = ctx.Value("d", 0.0), ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(
            target=replica,
            args=(
                kubeconfig,
                url,
                list(cluster.namespaces),
                f"replica-{k}",
                at.isoformat(),
                anchor,
                go,
                done,
                out,
            ),
        )
        for k in range(count)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        if out.get(timeout=300)[1] < 0:
            raise TimeoutError("a replica's cache did not sync")
    witness.reset()
    clock.jump(at)
    began = time.perf_counter()
    anchor.value = time.time()
    go.set()
    try:
        wait_for("every acquire", lambda: all(a in witness.scaled_up for _, a in pairs), 600)
    finally:
        done.set()
        passes = [out.get(timeout=180)[1] for _ in procs]
        for p in procs:
            p.join(timeout=60)
    release = max(witness.scaled_down[r] for r, _ in pairs) - began
    acquire = max(witness.scaled_up[a] for _, a in pairs) - began
    return {"release": release, "acquire": acquire, "passes": float(sum(passes))}


def fresh_database(server: str, name: str) -> str:
    engine = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    base, _, query = server.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def replica_rows(kubeconfig: str, admin: Kube, tmp: Path, n: int, nodes: int) -> list[str]:
    import k8s_swaps  # bench/k8s_swaps.py: the storm's pool, schedules and witness

    server = os.environ.get("GPS_TEST_PG_URL") or os.environ.get("GPS_BENCH_PG_URL")
    if not server:
        return ["replicas row: not measured (no PostgreSQL: run under tools/with_postgres.py)"]
    url = fresh_database(server.replace("postgresql://", "postgresql+psycopg2://", 1), "k8s_reps")
    clock = k8s_swaps.ShiftedClock(k8s_swaps.BEFORE)
    began = time.perf_counter()
    cluster = ClusterPool(
        admin, clock, load_pool(k8s_swaps.pool_doc(n, nodes)), prefix="reps"
    ).create(settle_timeout_s=None)
    driver = cluster.drive()
    proxy = DelayProxy(*api_address(kubeconfig), LATENCY_S).start()
    witness = None
    try:
        k8s_swaps.wait_for(
            "every running deploy's pod Ready",
            lambda: k8s_swaps.ready_pods(admin, cluster) >= n + 1,
            1200,
        )
        print(
            f"  replicas pool: {nodes} + 1 nodes, {2 * n + 2} Deployments laid out in "
            f"{time.perf_counter() - began:.0f} s",
            flush=True,
        )
        witness = k8s_swaps.Witness(Kube(connect(kubeconfig, None)), cluster.namespaces).start()
        store = Store.open(url)
        for i in range(n):
            doc = k8s_swaps.schedule_doc(f"s{i:04d}", f"d{i}-a", f"d{i}-b", "0 22 * * *")
            store.apply_schedule(load_schedule(doc), now=clock.now())
        store.set_gate("enforce", now=clock.now())
        api = Kube(connect(kubeconfig, None))
        cache = ClusterCache(api, cluster.namespaces, lws=api.has_lws()).start()
        cache.wait_synced(120)
        core = K8sCore(api, clock=clock, namespaces=cluster.namespaces, cache=cache)
        Engine(store, core, clock, EngineConfig(page_size=1000, holder="setup")).run_pass()
        cache.stop()
        store.engine.dispose()
        via = proxied_kubeconfig(kubeconfig, proxy.listen_port, tmp)
        night = [(f"d{i}-a", f"d{i}-b") for i in range(n)]
        one = phase(
            1, via, url, cluster, clock, witness, k8s_swaps.STORM_AT, night, k8s_swaps.wait_for
        )
        print(f"  1 replica: {one}", flush=True)
        k8s_swaps.wait_for(
            "every acquired pod Ready", lambda: k8s_swaps.ready_pods(admin, cluster) >= n, 600
        )
        morning = k8s_swaps.STORM_AT + timedelta(hours=6)
        back = [(b, a) for a, b in night]
        three = phase(3, via, url, cluster, clock, witness, morning, back, k8s_swaps.wait_for)
        print(f"  3 replicas: {three}", flush=True)
    finally:
        if witness is not None:
            witness.stop()
        proxy.stop()
        driver.stop()
        cluster.close()
    ratio = one["acquire"] / three["acquire"]
    return [
        f"with {LATENCY_S * 1000:.0f} ms added per API request (a delay proxy on loopback), "
        f"{n} swaps: 3 engine replicas vs 1, boundary -> every acquire accepted "
        f"{three['acquire']:.1f} s vs {one['acquire']:.1f} s: {ratio:.2f}x (goal >= 2.5x); "
        f"-> every release accepted {three['release']:.1f} s vs {one['release']:.1f} s "
        f"({one['release'] / three['release']:.2f}x); passes {three['passes']:.0f} vs "
        f"{one['passes']:.0f}; {os.cpu_count()} cores"
    ]
