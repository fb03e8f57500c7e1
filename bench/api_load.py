"""Benchmark: the schedule API under load on loopback (SQLite, the seed pool).

Starts ``gps-dagster serve`` as a subprocess on 127.0.0.1 over a fresh SQLite store with the seed
schedule and 9 more, then runs ``--clients`` concurrent clients (default 50) for ``--seconds``
(default 60), each looping over: list schedules, read a status, dry-run an instant. Prints
requests/s and p50/p99 per kind, against a baseline measured in the same run: ``GET /healthz`` (no
database) under the same concurrency, so the ratio survives a noisy machine, and the server's CPU
time per request (from /proc: what a request costs, whatever the load). Two loads: *saturating*
(every client loops without pause: the throughput; its latency is queueing, 50 clients / throughput
by Little's law) and *paced* (every client sends one request every ``--pace`` seconds, default 0.5
s: 100 requests/s offered by 50 clients, the latency an SLO is stated at; the clients are spread
over the period). The clients are raw asyncio keep-alive connections (~0.1 ms of CPU a request,
where httpx took ~3 ms, more than the server). Then an apply-now burst under contention: every
answer must be 200, 409 ``busy`` or 429, never a 5xx. Bounded in count and time; it stops by itself
and kills its server.

Goal (issue 14): p99 ≤ 100 ms for the reads on SQLite, no error.

    .venv/bin/python bench/api_load.py [--seconds 60] [--clients 50]
"""

# Decisions embodied here (docs/decisions.md):
# * “The API's latency goal is read at an offered load, throughput at saturation”

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
SEED = json.loads((ROOT / "examples" / "seed-schedule.json").read_text())
POOL = ROOT / "examples" / "seed-pool-10.yaml"
GPS = ROOT / ".venv" / "bin" / "gps-dagster"
MAX_REQUESTS = 2_000_000
"""Hard bound on requests per phase, whatever --seconds says."""


def requests_for(name: str) -> list[tuple[str, str, str, dict | None]]:
    """(kind, method, path, body) of one client loop."""
    one = f"/admin/deploy-schedules/{name}"
    return [
        ("list", "GET", "/admin/deploy-schedules?limit=20", None),
        ("status", "GET", f"{one}/status", None),
        ("dry-run", "POST", f"{one}:dry-run", {"at": "2026-10-21T14:00:00+07:00"}),
    ]


class Conn:
    """One keep-alive HTTP/1.1 connection on raw asyncio streams: the load generator must cost
    less than the server it measures (httpx spends ~3 ms of CPU a request here, more than the
    server does, on the same two cores)."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Authorization: Bearer {token}\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: dict | None) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        data = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n".encode() + self.auth
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n".encode()
        self.writer.write(head + b"\r\n" + data)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
            elif name.lower() == b"transfer-encoding":
                raise ConnectionError("chunked response: not expected from this API")
        await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def load(
    base: str,
    token: str,
    *,
    names: list[str],
    clients: int,
    seconds: float,
    max_requests: int = MAX_REQUESTS,
    baseline: bool = False,
    pace: float = 0.0,
) -> dict[str, list[float]]:
    """Run ``clients`` loops for ``seconds`` (or ``max_requests``); latencies per kind, errors under
    'error'."""
    out: dict[str, list[float]] = defaultdict(list)
    deadline = time.monotonic() + seconds
    sent = 0
    host, port = base.removeprefix("http://").split(":")

    async def one(i: int) -> None:
        nonlocal sent
        plan = (
            [("healthz", "GET", "/healthz", None)]
            if baseline
            else requests_for(names[i % len(names)])
        )
        conn = Conn(host, int(port), token)
        if pace:  # clients spread over the period, as independent callers are, not in lockstep
            await asyncio.sleep(pace * i / clients)
        try:
            while time.monotonic() < deadline and sent < max_requests:
                for kind, method, path, body in plan:
                    sent += 1
                    t0 = time.perf_counter()
                    try:
                        code = await asyncio.wait_for(conn.request(method, path, body), 30)
                        outcome = kind if code == 200 else f"error {kind} {code}"
                    except (TimeoutError, OSError, ValueError, IndexError) as exc:
                        outcome = f"error {kind} {type(exc).__name__}"
                        conn.close()
                        conn = Conn(host, int(port), token)
                    out[outcome].append(time.perf_counter() - t0)
                    if pace:  # the next request at the next slot of this client
                        await asyncio.sleep(max(0.0, pace - (time.perf_counter() - t0)))
        finally:
            conn.close()

    await asyncio.gather(*(one(i) for i in range(clients)))
    return out


async def contention(base: str, token: str, name: str, n: int = 40) -> dict[int, int]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
        answers = await asyncio.gather(
            *(client.post(f"/admin/deploy-schedules/{name}-{i % 10}:apply-now") for i in range(n))
        )
    codes: dict[int, int] = defaultdict(int)
    for a in answers:
        codes[a.status_code] += 1
    return dict(codes)


def pct(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] * 1000
        if len(values) > 1
        else 0.0
    )


def report(title: str, lat: dict[str, list[float]], seconds: float) -> None:
    total = sum(len(v) for v in lat.values())
    errors = sum(len(v) for k, v in lat.items() if k.startswith("error"))
    print(f"{title}: {total / seconds:,.0f} requests/s, {errors} error(s)")
    for kind, values in sorted(lat.items()):
        print(
            f"  {kind:8} n={len(values):7,}  p50 {pct(values, 50):7.1f} ms  p99 "
            f"{pct(values, 99):7.1f} ms"
        )


def errors_of(lat: dict[str, list[float]]) -> int:
    return sum(len(v) for k, v in lat.items() if k.startswith("error"))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(proc: subprocess.Popen[bytes], run: Any) -> tuple[dict[str, list[float]], float]:
    """The latencies of ``run()`` and the server's CPU milliseconds per request during it."""
    before, mine = cpu_seconds(proc.pid), time.process_time()
    lat = run()
    n = max(1, sum(len(v) for v in lat.values()))
    client = (time.process_time() - mine) * 1000 / n
    print(
        f"  (load generator CPU {client:.2f} ms per request; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    return lat, (cpu_seconds(proc.pid) - before) * 1000 / n


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(tmp: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    url = f"sqlite:///{tmp / 'bench.sqlite'}"
    env = {**os.environ, "GPS_DB_URL": url, "GPS_POOL_FILE": str(POOL)}
    token = subprocess.run(
        [str(GPS), "tokens", "create", "--name", "bench", "--scope", "admin"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    port = free_port()
    log = open(tmp / "serve.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [str(GPS), "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return proc, base, token
        except httpx.HTTPError:
            time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit(f"server did not start: see {tmp / 'serve.log'}")


def seed_schedules(base: str, token: str) -> list[str]:
    names = []
    headers = {"Authorization": f"Bearer {token}"}
    for i in range(10):
        doc = {**SEED, "name": f"bench-{i}"}
        if i:  # one owner per deploy: the others name deploys the pool does not have (ineligible)
            doc["targets"] = [
                {**t, "model_deploy_id": f"{t['model_deploy_id']}-{i}"} for t in SEED["targets"]
            ]
            doc["windows"] = [
                {
                    **w,
                    "states": [
                        {**s, "model_deploy_id": f"{s['model_deploy_id']}-{i}"} for s in w["states"]
                    ],
                }
                for w in SEED["windows"]
            ]
        r = httpx.post(f"{base}/admin/deploy-schedules", json=doc, headers=headers, timeout=30)
        r.raise_for_status()
        names.append(doc["name"])
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument(
        "--pace", type=float, default=0.5, help="seconds between a client's requests"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gps-api-bench-") as tmp:
        proc, base, token = start_server(Path(tmp))
        try:
            names = seed_schedules(base, token)
            base_s = min(10.0, args.seconds)
            kw = {"names": names, "clients": args.clients}
            baseline, cpu_h = measured(
                proc, lambda: asyncio.run(load(base, token, seconds=base_s, baseline=True, **kw))
            )
            report(
                f"baseline GET /healthz, {args.clients} clients, {base_s:.0f} s", baseline, base_s
            )
            print(f"  server CPU {cpu_h:.2f} ms per request")
            lat, cpu_r = measured(
                proc, lambda: asyncio.run(load(base, token, seconds=args.seconds, **kw))
            )
            report(
                f"saturating load: list + status + dry-run, {args.clients} clients, "
                f"{args.seconds:.0f} s",
                lat,
                args.seconds,
            )
            print(
                f"  server CPU {cpu_r:.2f} ms per request ({cpu_r / max(cpu_h, 1e-6):.1f}x "
                "/healthz)"
            )
            reads = lat["list"] + lat["status"]
            ratio = pct(reads, 99) / max(pct(baseline["healthz"], 99), 1e-6)
            print(
                f"  reads p99 {pct(reads, 99):.1f} ms = {ratio:.1f}x the /healthz p99 (queueing: "
                f"{args.clients} clients with no pause)"
            )
            paced, _ = measured(
                proc,
                lambda: asyncio.run(load(base, token, seconds=args.seconds, pace=args.pace, **kw)),
            )
            offered = args.clients / args.pace
            report(
                f"paced load: {args.clients} clients, one request every {args.pace:g} s each "
                f"({offered:,.0f} requests/s offered), {args.seconds:.0f} s",
                paced,
                args.seconds,
            )
            preads = paced["list"] + paced["status"]
            print(f"  reads p99 {pct(preads, 99):.1f} ms (goal ≤ 100 ms)")
            lat = {**lat, **{f"{k} paced": v for k, v in paced.items()}}
            codes = asyncio.run(contention(base, token, "bench"))
            print(f"apply-now burst of 40 under contention: {codes}")
            bad = (
                sum(n for c, n in codes.items() if c >= 500) + errors_of(lat) + errors_of(baseline)
            )
            if bad:
                log = (Path(tmp) / "serve.log").read_text(errors="replace").splitlines()
                print(
                    "server log, errors:",
                    *[line for line in log if "ERROR" in line or "Error" in line][-20:],
                    sep="\n  ",
                )
            return 1 if bad else 0
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


if __name__ == "__main__":
    sys.exit(main())
