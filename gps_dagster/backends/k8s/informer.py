"""One kind's informer: a paginated LIST, then a WATCH from its resourceVersion, on a thread.

The pattern is the one the API documents ("Efficient detection of changes",
kubernetes.io/docs/reference/using-api/api-concepts/): a consistent LIST gives the collection and
its ``metadata.resourceVersion``; a WATCH from that version streams every later change as
``ADDED`` / ``MODIFIED`` / ``DELETED``; ``allowWatchBookmarks=true`` asks for ``BOOKMARK`` events
that carry only a newer resourceVersion (KEP-956 "Watch bookmark": a watch restarted from a
bookmark does not replay the events it was not interested in). Three rules of that page are
relied on here:

* "a given Kubernetes server will only preserve a historical record of changes for a limited
  time" (etcd3: 5 minutes by default); a WATCH or a ``continue`` token older than that answers
  **410 Gone** (for a watch, as an ``ERROR`` event whose object is a Status with ``code: 410``),
  and the client must clear its cache, LIST again and watch from the new version: ``Gone``;
* a resourceVersion is opaque: clients "must not assume resource versions are numeric or
  collatable" and may only compare them for equality — so events are applied in the order of
  the stream (the server sends them in resourceVersion order) and a relist replaces the
  collection wholesale; an event carrying the version already stored is a replay (no-op);
* LIST pages (``limit`` / ``continue``) of one LIST are a consistent snapshot at the first page's
  resourceVersion.

The pure part is ``ObjectStore`` (the collection, its indices, ``apply``); ``Informer`` drives it
from a thread through the adapter's ``Kube`` (its token bucket and Retry-After handling pace the
LIST pages and the watch openings too). Time for freshness and backoff is injected
(``InformerLimits.monotonic`` / ``sleep``): nothing here decides on the wall clock.
"""

# Decisions embodied here (docs/decisions.md):
# * “The Kubernetes adapter reads a pass from one watch cache per process”

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.ports import CoreError, NotFound

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, name) of an object ("" namespace for cluster-scoped kinds)."""
IndexFn = Callable[[Obj], Iterable[str]]
GONE = 410


class Gone(Exception):
    """410: the resourceVersion (or continue token) is older than the server's history."""


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def version_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class ObjectStore:
    """A collection keyed by (namespace, name), with secondary indices kept on every change.

    Not thread-safe by itself: ``Informer`` holds its lock around every call."""

    def __init__(self, indexers: Mapping[str, IndexFn] | None = None) -> None:
        self.indexers = dict(indexers or {})
        self.objects: dict[Key, Obj] = {}
        self.indices: dict[str, dict[str, set[Key]]] = {n: {} for n in self.indexers}
        self.resource_version = ""

    def replace(self, items: Iterable[Obj], resource_version: str) -> None:
        """A relist: the collection is exactly ``items`` at ``resource_version``."""
        self.objects = {}
        self.indices = {n: {} for n in self.indexers}
        for obj in items:
            self._put(key_of(obj), obj)
        self.resource_version = resource_version

    def apply(self, kind: str, obj: Obj) -> Obj | None:
        """One watch event; returns the object it changed (its last state for DELETED), None for
        a bookmark or a replay. Moves the store's resourceVersion to the event's."""
        version = version_of(obj)
        if kind == "BOOKMARK":
            self.resource_version = version or self.resource_version
            return None
        key = key_of(obj)
        old = self.objects.get(key)
        if version:
            self.resource_version = version
        if kind == "DELETED":
            if old is None:
                return None
            self._drop(key, old)
            return obj
        if old is not None and version and version_of(old) == version:
            return None  # a replay of what is stored (equality is the only comparison allowed)
        if old is not None:
            self._drop(key, old)
        self._put(key, obj)
        return obj

    def _put(self, key: Key, obj: Obj) -> None:
        self.objects[key] = obj
        for name, fn in self.indexers.items():
            for value in fn(obj):
                self.indices[name].setdefault(value, set()).add(key)

    def _drop(self, key: Key, obj: Obj) -> None:
        self.objects.pop(key, None)
        for name, fn in self.indexers.items():
            for value in fn(obj):
                keys = self.indices[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self.indices[name][value]

    def by_index(self, index: str, value: str) -> list[Obj]:
        keys = self.indices[index].get(value, set())
        return [self.objects[k] for k in sorted(keys)]

    def all(self) -> list[Obj]:
        return [self.objects[k] for k in sorted(self.objects)]


@dataclass(frozen=True, slots=True)
class InformerLimits:
    """How an informer pages, watches, backs off and when its collection is too old to trust.

    ``broken_limit_s``: a watch broken (failing to reopen) longer than this makes reads go to the
    API server directly until it is healthy again. ``monotonic`` / ``sleep`` are injected."""

    page_size: int = 500
    watch_timeout_s: int = 60
    """The server ends each watch after this (``timeoutSeconds``); it is reopened from the last
    version at once (not a LIST), which also proves the collection fresh at least that often."""
    broken_limit_s: float = 60.0
    max_age_s: float = 120.0
    """A collection with no LIST, event, bookmark or watch reopened for this long is not trusted
    (a connection that died without an error: its read times out only after
    ``watch_timeout_s`` + 15 s)."""
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], object] | None = None
    """Waits out a backoff (None: waits on the informer's stop event, so ``stop()`` ends it)."""


@dataclass
class InformerState:
    """What the informer reports: freshness, the mode reads are in, and its request counts."""

    kind: str
    synced: bool = False
    resource_version: str = ""
    last_seen_at: float | None = None
    """``monotonic()`` of the last LIST, event, bookmark or watch (re)opened."""
    broken_since: float | None = None
    relists: int = 0
    watches: int = 0
    errors: list[str] = field(default_factory=list)


class Informer:
    """LIST + WATCH of one kind on a daemon thread; ``snapshot()`` reads under its lock."""

    def __init__(
        self,
        kube: Kube,
        kind: str,
        list_fn: Callable[..., Any],
        *args: Any,
        indexers: Mapping[str, IndexFn] | None = None,
        limits: InformerLimits | None = None,
        on_event: Callable[[str, Obj], None] | None = None,
        **query: Any,
    ) -> None:
        self.kube, self.kind, self.list_fn, self.args, self.query = kube, kind, list_fn, args, query
        self.limits = limits or InformerLimits()
        self.on_event = on_event
        self.store = ObjectStore(indexers)
        self.state = InformerState(kind)
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread: threading.Thread | None = None
        self._need_list = True

    # -- reads -----------------------------------------------------------------------------------

    def age_s(self) -> float | None:
        seen = self.state.last_seen_at
        return None if seen is None else max(0.0, self.limits.monotonic() - seen)

    def usable(self) -> bool:
        """Synced, its watch not broken beyond ``broken_limit_s``, its age within ``max_age_s``."""
        with self._lock:
            if not self.state.synced or self.state.last_seen_at is None:
                return False
            since, seen = self.state.broken_since, self.state.last_seen_at
        now = self.limits.monotonic()
        if now - seen > self.limits.max_age_s:
            return False
        return since is None or now - since <= self.limits.broken_limit_s

    def read(self, fn: Callable[[ObjectStore], list[Obj]]) -> list[Obj]:
        with self._lock:
            return fn(self.store)

    # -- the thread --------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"gps-informer-{self.kind}", daemon=True
            )
            self._thread.start()

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            # the watch thread closes it too; this only ends a read blocked on the socket
            with contextlib.suppress(Exception):
                resp.shutdown() if hasattr(resp, "shutdown") else resp.close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        delay = self.limits.backoff_s
        while not self._stop.is_set():
            try:
                if self._need_list:
                    self.relist()
                self.watch_once()
                delay = self.limits.backoff_s
            except Gone:
                self._need_list = True  # relist at once: the server said our version is gone
            except NotFound as exc:  # the kind is not served (a CRD not installed): look again
                self._broken(exc, quiet=True)
                self._wait(self.limits.backoff_max_s)
            except Exception as exc:  # a broken watch: backoff, then the same version again
                if self._stop.is_set():
                    return  # stop() ended the watch under it
                self._broken(exc)
                self._wait(delay)
                delay = min(delay * 2, self.limits.backoff_max_s)

    def _wait(self, seconds: float) -> None:
        if self.limits.sleep is not None:
            self.limits.sleep(seconds)
        else:
            self._stop.wait(seconds)

    def _broken(self, exc: BaseException, *, quiet: bool = False) -> None:
        with self._lock:
            if self.state.broken_since is None:
                self.state.broken_since = self.limits.monotonic()
            self.state.errors = [*self.state.errors[-4:], f"{type(exc).__name__}: {exc}"]
        log.log(
            logging.DEBUG if quiet else logging.WARNING,
            "%s watch broken (%s); retrying",
            self.kind,
            exc,
        )

    def _seen(self) -> None:
        self.state.last_seen_at = self.limits.monotonic()
        self.state.broken_since = None

    def relist(self) -> None:
        """A paginated LIST (``limit`` / ``continue``); the store replaced at its version."""
        items: list[Obj] = []
        token: str | None = None
        version = ""
        while True:
            page_query = dict(self.query, limit=self.limits.page_size)
            if token:
                page_query["_continue"] = token
            try:
                page = self.kube.call(
                    self.list_fn, *self.args, what=f"list {self.kind} (cache)", **page_query
                )
            except CoreError as exc:
                if getattr(exc, "http_status", None) == GONE:
                    raise Gone(str(exc)) from exc  # the continue token expired: start over
                raise
            items += list(page.get("items") or [])
            meta = page.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or None
            if not token:
                break
        with self._lock:
            self.store.replace(items, version)
            self.state.synced = True
            self.state.relists += 1
            self.state.resource_version = version
            self._seen()
        self._need_list = False
        self._synced.set()
        if self.on_event is not None:
            for obj in items:
                self.on_event("SYNC", obj)

    def watch_once(self) -> None:
        """One WATCH from the stored version until the server ends it (``timeoutSeconds``)."""
        timeout = self.limits.watch_timeout_s
        try:
            resp = self.kube.stream(
                self.list_fn,
                *self.args,
                what=f"watch {self.kind}",
                watch=True,
                resource_version=self.store.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                _request_timeout=(5.0, timeout + 15.0),
                **self.query,
            )
        except CoreError as exc:
            if getattr(exc, "http_status", None) == GONE:
                raise Gone(str(exc)) from exc
            raise
        self._resp = resp
        with self._lock:
            self.state.watches += 1
            self._seen()
        try:
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    return
                if line:
                    self.handle(json.loads(line))
        finally:
            self._resp = None
            resp.close()
            resp.release_conn()

    def handle(self, event: Obj) -> None:
        """Apply one decoded watch event (``ERROR`` 410 → ``Gone``)."""
        kind, obj = str(event.get("type") or ""), event.get("object") or {}
        if kind == "ERROR":
            if int(obj.get("code") or 0) == GONE:
                raise Gone(str(obj.get("message") or "resourceVersion too old"))
            raise RuntimeError(f"watch {self.kind}: {obj.get('reason')}: {obj.get('message')}")
        with self._lock:
            changed = self.store.apply(kind, obj)
            self.state.resource_version = self.store.resource_version
            self._seen()
        if changed is not None and self.on_event is not None:
            self.on_event(kind, changed)
