"""One kind on one cluster, listed then watched, kept in a local store.

An :class:`Informer` is the single list + watch implementation of the project
(worker connections, external-framework watches and the Workload feed share it). It guarantees:

- **convergence**: the store is filled by a listing, then kept current by a
  watch started at the listing's resourceVersion. Whenever the watch cannot
  continue (410 Gone, a network error of any type, a watch ``ERROR`` event, a
  connection closed early with no event) it lists again, in pages of 500
  (one snapshot), and hands the handler ``ADDED``/``MODIFIED`` for each
  listed object as its page arrives, then ``DELETED`` for objects that
  disappeared, so a consumer that missed events still ends up with the
  server's state, and a relist of many objects never holds them all at once.
  410 relists at once; other breaks after a backoff. A watch that simply
  reached its ``timeoutSeconds``, or that the server ended cleanly after
  delivering events (:func:`renew_after_close`), is renewed from the last
  resourceVersion seen (bookmarks included), without a relist. The store keeps the JSON
  dicts, without ``metadata.managedFields`` (nothing reads them, and they
  are about half of an object's memory), reachable by key or through named
  indexes, or only the keys (``keep_objects=False``, for a consumer that
  keeps its own parse);
- **cheap events**: each watch line is parsed once, by orjson (the
  client's own deserialisation dumps and re-parses every object, a fifth of
  the manager's CPU under load); bookmarks only move the resourceVersion on;
- **a free event loop**: the blocking client runs in a thread per watch and in
  the ``AsyncKube`` pool for listings; the store is only touched, and the
  handler only called, on the event loop, so neither needs a lock;
- **one deep object breaks nothing**: Python's ``json`` gives up (``RecursionError``)
  on JSON nested about a thousand levels deep, which the API server accepts
  (up to 10,000) in kinds that keep unknown fields. Such a listing or watch
  line is parsed again without recursion (:func:`loads`), so the other
  objects of the kind, often other tenants', are still delivered; the deep
  object is delivered too, whole, for its consumer to refuse and report
  (the external-framework reconciler posts an Event on it);
- **prompt, quiet stops**: :meth:`Informer.stop` shuts the watch socket down
  (requests also carry ``timeoutSeconds``, and the thread checks a flag
  between events), and nothing is delivered once ``stop`` was called;
- **visible health**: ``state``, ``synced`` (set after the first listing),
  ``last_error`` and ``last_status`` (HTTP status of the last failure) plus an
  ``on_health`` callback, so a worker connection can tell "this kind is not
  usable yet" (403/404/429 while a CRD or RBAC is set up: ``NOT_USABLE``)
  from "the cluster is down". A failed listing or watch request makes the
  state ``FAILED`` (``UNSERVED``); a watch that breaks once established only
  relists, so a flaky connection does not flap the health. Failures are
  retried with exponential backoff and jitter (tenacity), never given up on.

Just over 600 lines: listing, watching, relisting and the health they report
are one loop whose states are only understood together.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
import tenacity
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from multikueue.api.resources import ResourceRef
from multikueue.runtime.kube import LIST_PAGE_SIZE, AsyncKube, decode_json
from multikueue.runtime.tasks import cancel_and_wait

log = structlog.get_logger(__name__)

ObjectKey = tuple[str, str]
Obj = dict[str, Any]
#: obj -> index values (e.g. the prebuilt-Workload name it names).
IndexFunc = Callable[[Obj], Iterable[str]]
#: (event type, object): ``ADDED``, ``MODIFIED`` or ``DELETED``.
Handler = Callable[[str, Obj], None]
#: Server-side timeout of one watch request; the watch is then renewed from the last version.
WATCH_SECONDS = 60
#: Statuses meaning "this kind is not usable yet" (CRD being set up, missing RBAC, 429 while installing).
NOT_USABLE = frozenset({403, 404, 429})
#: How long stop() waits for a watch thread stuck in a connect before leaving it (a daemon) behind.
STOP_SECONDS = 5.0
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def renew_after_close(lasted: float, events: int, watch_seconds: float) -> bool:
    """Whether a watch the API server ended cleanly is renewed from the last version seen (True) or
    counted as broken, which relists after a backoff (False).

    Renewed when it ran for at least half its ``timeoutSeconds``, or when it
    delivered events: a stream that ends cleanly loses nothing, and the API
    server ends a watcher early when it reads too slowly (the watch cache's
    buffer for it filled up). Relisting then cost the manager of a
    10,000-Job run a listing of 7,000 Workloads, 128 MiB and 90 s of stalled
    dispatch. A watch closed early with no event at all is broken, as in
    client-go, so a server that ends every watch at once is not asked again
    in a tight loop. If the version has expired meanwhile, the renewal gets
    410 and relists.
    """
    return lasted >= watch_seconds / 2 or events > 0


class InformerState(str, enum.Enum):
    PENDING = "Pending"  #: no listing yet
    SYNCED = "Synced"  #: listed; watching
    UNSERVED = "Unserved"  #: listing answered a NOT_USABLE status (only with ``not_usable``); retried
    FAILED = "Failed"  #: listing or watch request failed; retried


def object_key(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def brief(exc: BaseException) -> str:
    """One line about ``exc``: ``403 Forbidden`` for API answers, the first line of the error otherwise."""
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


class Store:
    """Current objects by (namespace, name), plus named indexes; pure, no I/O.

    With ``keep_objects=False`` it holds only the keys: enough to tell a
    consumer which objects a relist no longer has, for a consumer that keeps
    its own parse of each object (the Workload feed: the cache holds every
    Workload already, a second copy here would double the memory). Its
    ``DELETED`` events then carry only ``metadata.namespace`` and ``name``.
    """

    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None, *, keep_objects: bool = True) -> None:
        if indexers and not keep_objects:
            raise ValueError("a store that keeps only keys has nothing to index")
        self.indexers = dict(indexers or {})
        self.keep_objects = keep_objects
        self.objects: dict[ObjectKey, Obj | None] = {}
        self._indices: dict[str, dict[str, set[ObjectKey]]] = {name: {} for name in self.indexers}

    def __len__(self) -> int:
        return len(self.objects)

    def __contains__(self, key: object) -> bool:
        return key in self.objects

    def get(self, key: ObjectKey) -> Obj | None:
        """The object at ``key`` (always None when the store keeps only keys)."""
        return self.objects.get(key)

    def keys_by_index(self, index: str, value: str) -> set[ObjectKey]:
        """Keys of the objects whose ``index`` function yields ``value`` (KeyError for an unknown index)."""
        return set(self._indices[index].get(value, ()))

    def by_index(self, index: str, value: str) -> list[Obj]:
        return [obj for k in sorted(self.keys_by_index(index, value)) if (obj := self.objects[k]) is not None]

    def apply(self, event_type: str, obj: Obj) -> None:
        """Apply one watch event."""
        if event_type == DELETED:
            self._remove(object_key(obj))
        else:
            self._put(obj)

    def replace(self, items: Iterable[Obj]) -> list[tuple[str, Obj]]:
        """Take a whole fresh listing; return the events that lead a consumer from the old content to it."""
        listed: set[ObjectKey] = set()
        events: list[tuple[str, Obj]] = []
        for obj in items:
            listed.add(object_key(obj))
            events.append((self.put_listed(obj), obj))
        return events + self.drop_unlisted(listed)

    def put_listed(self, obj: Obj) -> str:
        """Take one object of a listing; the event that brings a consumer to it (``ADDED`` or ``MODIFIED``)."""
        event = MODIFIED if object_key(obj) in self.objects else ADDED
        self._put(obj)
        return event

    def drop_unlisted(self, listed: Collection[ObjectKey]) -> list[tuple[str, Obj]]:
        """Remove what a finished listing did not have; its ``DELETED`` events (the last known state, or a stub)."""
        events: list[tuple[str, Obj]] = []
        for key in [key for key in self.objects if key not in listed]:
            old = self.objects.get(key)
            self._remove(key)
            events.append((DELETED, old if old is not None else _stub(key)))
        return events

    def _values(self, index: str, obj: Obj) -> set[str]:
        try:
            return set(self.indexers[index](obj))
        except Exception as exc:  # noqa: BLE001 - a faulty index must not stop the events
            log.error("index function failed: the object is left out of this index; fix the index function",
                      index=index, object="/".join(object_key(obj)), error=brief(exc))
            return set()

    def _put(self, obj: Obj) -> None:
        # The store keeps every object for as long as it exists: the field managers' records, about
        # half of a Workload and read by no consumer, are dropped from it (the object is the store's own parse).
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        key = object_key(obj)
        self._remove(key)
        self.objects[key] = obj if self.keep_objects else None
        for index, values in self._indices.items():
            for value in self._values(index, obj):
                values.setdefault(value, set()).add(key)

    def _remove(self, key: ObjectKey) -> None:
        old = self.objects.pop(key, None)
        if old is None:  # absent, or a store of keys only (no index to update)
            return
        for index, values in self._indices.items():
            for value in self._values(index, old):
                keys = values.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del values[value]


def _stub(key: ObjectKey) -> Obj:
    """What a store of keys only hands over for a deleted object: its namespace and name."""
    return {"metadata": {"namespace": key[0], "name": key[1]}}


@dataclass
class _End:
    """Why one watch thread ended: ``stopped``, ``gone`` (410) or ``failed``."""

    kind: str
    error: BaseException | None = None
    established: bool = True  #: False when the watch request itself failed
    events: int = 0  #: events (bookmarks included) received before the end


class Informer:
    """List + watch of ``ref`` on the cluster of ``kube``; see the module docstring."""

    def __init__(
        self,
        kube: AsyncKube,
        ref: ResourceRef,
        handler: Handler | None = None,
        *,
        label_selector: str = "",
        namespace: str | None = None,
        field_selector: str = "",
        indexers: Mapping[str, IndexFunc] | None = None,
        keep_objects: bool = True,
        on_health: Callable[["Informer"], None] | None = None,
        not_usable: Collection[int] = (),
        cluster: str = "",
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        watch_seconds: int = WATCH_SECONDS,
        list_page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        self.kube = kube
        self.ref = ref
        self.handler = handler
        self.label_selector = label_selector
        #: Only this namespace (None: all), only objects matching ``field_selector``.
        self.namespace = namespace
        self.field_selector = field_selector
        self.on_health = on_health
        self.not_usable = frozenset(not_usable)
        self.cluster = cluster
        self.watch_seconds = watch_seconds
        self.list_page_size = list_page_size
        self.store = Store(indexers, keep_objects=keep_objects)
        self.state = InformerState.PENDING
        #: Set after the first successful listing (and never cleared).
        self.synced = asyncio.Event()
        self.last_error: str | None = None
        self.last_status: int | None = None
        #: While a watch event is handled: when the watch thread read it (``time.monotonic()``), so a
        #: handler can tell how long the event waited for the loop; None outside (listings included).
        self.event_read_at: float | None = None
        self._wait = tenacity.wait_exponential(multiplier=backoff_initial, max=backoff_max) + tenacity.wait_random(0, min(1.0, backoff_initial))
        self._settled = asyncio.Event()
        self._stopped = False
        self._halt = threading.Event()
        self._epoch = 0
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._thread_done: asyncio.Future[_End] | None = None
        self._response: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def kind(self) -> str:
        return f"{self.ref.plural}.{self.ref.group or 'core'}/{self.ref.version}"

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.store.get((namespace, name))

    def by_index(self, index: str, value: str) -> list[Obj]:
        return self.store.by_index(index, value)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None and not self._stopped:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.create_task(self._run(), name=f"informer {self.cluster} {self.kind}")

    def halt(self) -> None:
        """Deliver nothing more, from now on (for callers that cannot await); ``stop`` also waits."""
        self._stopped = True
        self._halt.set()
        self._interrupt()

    async def stop(self) -> None:
        """End the task and the watch thread; nothing is delivered after this is called."""
        self.halt()
        await cancel_and_wait(self._task)
        done = self._thread_done
        if done is not None and not done.done():
            try:
                await asyncio.wait_for(asyncio.shield(done), STOP_SECONDS)
            except asyncio.TimeoutError:
                log.warning("watch thread still running after stop: it ends with its connect timeout", cluster=self.cluster, kind=self.kind)

    async def wait_settled(self) -> InformerState:
        """Wait for the first outcome (listed, or failed to) and return the state."""
        await self._settled.wait()
        return self.state

    # -- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        failures, last_gone = 0, False
        while not self._stopped:
            if failures:
                await asyncio.sleep(self._delay(failures))
            try:
                version = await self._list()
            except Exception as exc:  # noqa: BLE001 - network errors come in many types
                failures += 1
                self._list_failed(exc, failures)
                continue
            if self._stopped:
                return
            self.last_error, self.last_status = None, None
            self.synced.set()
            self._set_state(InformerState.SYNCED)
            end = await self._watch(version)
            self._epoch += 1  # events the ended watch still has queued are superseded by the relist
            if end.kind == "stopped" or self._stopped:
                return
            if end.kind == "gone":
                # Expired version: relist now; only back-to-back expiries with nothing between back off.
                failures = failures + 1 if last_gone and end.events == 0 else 0
                last_gone = True
                log.info("watch expired (410 Gone): relisting", cluster=self.cluster, kind=self.kind)
                continue
            last_gone = False
            failures = 1 if end.established and end.events else failures + 1
            if end.established:
                log.info("watch broken: relisting", cluster=self.cluster, kind=self.kind, error=brief(end.error or Exception()))
            else:
                self.last_error, self.last_status = brief(end.error or Exception()), getattr(end.error, "status", None)
                log.warning("watch request failed: retrying with backoff", cluster=self.cluster, kind=self.kind,
                            status=self.last_status, error=self.last_error, hint=_hint(self.last_status))
                self._set_state(InformerState.FAILED)

    async def _list(self) -> str:
        """List into the store page by page; the listing's resourceVersion, to watch from.

        Each object goes to the store and the handler as its page arrives,
        then ``DELETED`` for what the store had and the listing did not: a
        relist of thousands of objects holds one page at a time beyond what
        the store and the consumer keep, rather than the whole answer (the
        10,000-Workload run's one relist added 128 MiB to the manager's peak).
        A listing that fails halfway leaves the pages already taken: they
        are newer than what the store had, and the next listing takes the rest.
        """
        listed: set[ObjectKey] = set()
        version = ""
        pages = self.kube.list_pages(self.ref, self.label_selector, decode=loads, namespace=self.namespace,
                                     field_selector=self.field_selector, limit=self.list_page_size)
        async with contextlib.aclosing(pages):
            async for page in pages:
                if self._stopped:
                    return version
                for obj in page.get("items") or []:
                    listed.add(object_key(obj))
                    self._handle(self.store.put_listed(obj), obj)
                version = (page.get("metadata") or {}).get("resourceVersion") or version
        if not self._stopped:
            for event_type, obj in self.store.drop_unlisted(listed):
                self._handle(event_type, obj)
        return version

    def _delay(self, failures: int) -> float:
        state = tenacity.RetryCallState(None, None, (), {})  # type: ignore[arg-type]
        state.attempt_number = failures
        return float(self._wait(state))

    def _list_failed(self, exc: BaseException, failures: int) -> None:
        status = exc.status if isinstance(exc, ApiException) else None
        self.last_error, self.last_status = brief(exc), status
        unserved = status in self.not_usable
        if failures in (1, 5) or failures % 20 == 0:
            log.warning("listing failed: retrying with backoff", cluster=self.cluster, kind=self.kind,
                        status=status, error=self.last_error, attempt=failures, hint=_hint(status))
        self._set_state(InformerState.UNSERVED if unserved else InformerState.FAILED)

    def _set_state(self, state: InformerState) -> None:
        changed = state != self.state
        self.state = state
        self._settled.set()
        if changed and not self._stopped:
            if state is InformerState.SYNCED:
                log.info("informer synced", cluster=self.cluster, kind=self.kind, objects=len(self.store))
            if self.on_health is not None:
                try:
                    self.on_health(self)
                except Exception:  # noqa: BLE001 - the informer keeps going
                    log.exception("informer health callback failed", cluster=self.cluster, kind=self.kind)

    def _handle(self, event_type: str, obj: Obj) -> None:
        if self.handler is None:
            return
        try:
            self.handler(event_type, obj)
        except Exception:  # noqa: BLE001 - one bad event must not stop the informer
            log.exception("informer handler failed on an event: fix the handler", cluster=self.cluster,
                          kind=self.kind, event=event_type, object="/".join(object_key(obj)))

    def _deliver(self, epoch: int, event_type: str, obj: Obj, read_at: float) -> None:
        """An event from the watch thread, on the loop; dropped after stop or a relist."""
        if self._stopped or epoch != self._epoch:
            return
        self.store.apply(event_type, obj)
        self.event_read_at = read_at
        try:
            self._handle(event_type, obj)
        finally:
            self.event_read_at = None

    # -- the watch thread ---------------------------------------------------------------------

    async def _watch(self, version: str) -> _End:
        assert self._loop is not None
        done: asyncio.Future[_End] = self._loop.create_future()
        self._thread_done = done
        self._thread = threading.Thread(target=self._watch_thread, args=(self._epoch, version, done),
                                        name=f"watch {self.cluster} {self.ref.plural}", daemon=True)
        self._thread.start()
        return await asyncio.shield(done)

    def _watch_thread(self, epoch: int, version: str, done: asyncio.Future[_End]) -> None:
        try:
            end = self._stream(epoch, version)
        except BaseException as exc:  # noqa: BLE001 - reported to the loop
            end = _End("failed", exc)
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(_resolve, done, end)
        except RuntimeError:  # the loop is closed: nobody is waiting
            pass

    def _open(self, version: str) -> Any:
        return self.kube.open_watch(
            self.ref,
            resource_version=version,
            label_selector=self.label_selector,
            timeout_seconds=self.watch_seconds,
            namespace=self.namespace,
            field_selector=self.field_selector,
        )

    def _stream(self, epoch: int, version: str) -> _End:
        """Watch from ``version``, renewing quiet watches, until stopped or broken (thread)."""
        assert self._loop is not None
        events = 0
        while not self._halt.is_set():
            started, segment_start = time.monotonic(), events
            try:
                response = self._open(version)
            except Exception as exc:  # noqa: BLE001 - any failure to start the watch
                if isinstance(exc, ApiException) and exc.status == 410:
                    return _End("gone", exc, events=events)
                return _End("stopped") if self._halt.is_set() else _End("failed", exc, established=False, events=events)
            self._response = response  # before the check below: stop() either sees it or is seen
            try:
                if self._halt.is_set():
                    return _End("stopped")
                for line in iter_resp_lines(response):
                    if self._halt.is_set():
                        return _End("stopped")
                    if not line.strip():
                        continue
                    event = loads(line)  # the one parse of this object
                    event_type, obj = event.get("type"), event.get("object") or {}
                    if event_type == "ERROR":
                        if obj.get("code") == 410:
                            return _End("gone", events=events)
                        return _End("failed", RuntimeError(f"watch ERROR event: {obj.get('code')} {obj.get('reason')}: {obj.get('message')}"), events=events)
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    events += 1
                    if event_type in (ADDED, MODIFIED, DELETED):
                        self._loop.call_soon_threadsafe(self._deliver, epoch, event_type, obj, time.monotonic())
            except Exception as exc:  # noqa: BLE001 - any break of the stream
                return _End("stopped") if self._halt.is_set() else _End("failed", exc, events=events)
            finally:
                self._response = None
                response.close()
                response.release_conn()
            if self._halt.is_set():
                return _End("stopped")
            lasted = time.monotonic() - started
            if not renew_after_close(lasted, events - segment_start, self.watch_seconds):
                return _End("failed", ConnectionError(f"the API server closed the watch after {lasted:.1f}s with no event"), events=events)
            if lasted < self.watch_seconds / 2:
                log.debug("the API server closed the watch early: watching on from the last version", cluster=self.cluster,
                          kind=self.kind, lasted=round(lasted, 1), version=version)
        return _End("stopped")

    def _interrupt(self) -> None:
        """Unblock the watch thread's read by shutting its socket down (called from the loop)."""
        response = self._response
        if response is None:
            return
        try:
            response.shutdown()
        except Exception:  # noqa: BLE001 - older urllib3, or the connection is already gone
            sock = getattr(getattr(response, "connection", None), "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


# -- JSON of any depth ------------------------------------------------------------------

_TOKEN = re.compile(r'[ \t\r\n]*(?:(")|([{}\[\],:])|(-?[0-9]+)([.eE][-+.eE0-9]*)?|(true|false|null))')
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}


def loads(data: str | bytes) -> Any:
    """:func:`~multikueue.runtime.kube.decode_json`, falling back to :func:`loads_deep` when the document nests too deeply.

    The fallback is logged: it means an object nested about a thousand
    levels deep (see the module docstring).
    """
    try:
        return decode_json(data)
    except RecursionError:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        log.warning("JSON nested too deeply for the fast parser: parsed without recursion; "
                    "its consumer reports the deep object", size=len(text))
        return loads_deep(text)


def loads_deep(text: str) -> Any:
    """Parse one JSON document of any nesting depth, with an explicit stack instead of recursion.

    Slower than ``json.loads`` (a few MB/s), so used only when that fails;
    strings are decoded by ``json``'s own scanner. ``ValueError`` on input it
    cannot make sense of; it is lenient about misplaced commas and colons
    (its input comes from the API server, which writes valid JSON).
    """
    stack: list[list[Any]] = []  # frames: [container, pending key of a map]
    root: Any = None
    have_root = False
    pos, end = 0, len(text)

    def emit(value: Any) -> None:
        nonlocal root, have_root
        if not stack:
            if have_root:
                raise ValueError(f"extra data at {pos}")
            root, have_root = value, True
            return
        frame = stack[-1]
        container = frame[0]
        if type(container) is list:
            container.append(value)
        elif frame[1] is None:
            raise ValueError(f"a map key must be a string at {pos}")
        else:
            container[frame[1]] = value
            frame[1] = None

    while True:
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos:].strip():
                raise ValueError(f"invalid JSON at {pos}")
            break
        pos = match.end()
        if match.group(1):
            value, pos = json.decoder.scanstring(text, pos)  # type: ignore[attr-defined]
            if stack and type(stack[-1][0]) is dict and stack[-1][1] is None:
                stack[-1][1] = value
            else:
                emit(value)
        elif punct := match.group(2):
            if punct == "{":
                stack.append([{}, None])
            elif punct == "[":
                stack.append([[], None])
            elif punct in "}]":
                if not stack:
                    raise ValueError(f"unbalanced {punct!r} at {pos}")
                emit(stack.pop()[0])
        elif match.group(3) is not None:
            fraction = match.group(4)
            emit(float(match.group(3) + fraction) if fraction else int(match.group(3)))
        else:
            emit(_LITERALS[match.group(5)])
        if pos >= end:
            break
    if stack or not have_root:
        raise ValueError("the JSON document ends early")
    return root


def _hint(status: int | None) -> str:
    if status is None:
        return "check that the API server is reachable from here (address, certificates, network)"
    if status in (401, 403):
        return "check the credentials, and grant 'list' and 'watch' on this kind to the user"
    if status == 404:
        return "the API server does not serve this kind: install its CRD"
    return "see the API server's answer in 'error'"


def _resolve(future: asyncio.Future[_End], end: _End) -> None:
    if not future.done():
        future.set_result(end)
