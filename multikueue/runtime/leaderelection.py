"""Leader election on a ``coordination.k8s.io/v1`` Lease: the loop that reads and writes it.

:class:`LeaderElector` is client-go's elector over :class:`AsyncKube` (the
decisions are :mod:`multikueue.core.leaderelection`):

- a standby reads the Lease every retry period (2 s), or right when it
  expires, and takes it over once it is free or expired (an update carrying
  the resourceVersion it read: of two replicas racing, one gets 409 and
  stays standby);
- once it holds the Lease it runs ``lead(stopped)``, the caller's coroutine
  that acts, and renews every retry period. When a renewal has not succeeded
  within the renew deadline (10 s), or another replica holds the Lease,
  ``stopped`` is set and the elector waits for ``lead`` to return (it stops
  everything that acts) before trying again as a standby; the Lease expires
  for the others only 15 s after the last renewal;
- when ``stop`` is set (SIGTERM), it stops ``lead`` the same way, then
  releases the Lease (empty holder, duration 1 s, client-go's
  ReleaseOnCancel), so a standby takes over at its next try instead of after
  the lease duration.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import structlog
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from multikueue.api.meta import utcnow
from multikueue.api.resources import LEASES
from multikueue.core.leaderelection import (
    LeaseRecord,
    Timing,
    Verdict,
    decide,
    must_step_down,
    next_spec,
    next_try_in,
    release_spec,
)
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.tasks import cancel_and_wait

log = structlog.get_logger(__name__)

#: Seconds a release may take at shutdown before the process exits without it (the Lease then expires).
RELEASE_TIMEOUT_SECONDS = 5.0
#: Failures of the API that a try survives (the next try, or the renew deadline, settles it).
TRANSIENT = (ApiException, HTTPError, OSError, TimeoutError)


def default_identity() -> str:
    """This replica's name in the Lease: its Pod's name (``POD_NAME``, else the host name) and a random suffix.

    The host name is the Pod's name in a cluster, but not for a container on
    the host's network (the test harness runs the image so): the install
    manifests set ``POD_NAME`` from the downward API, as many controllers do.
    """
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


class Stopped:
    """Set when the one who leads must stop acting; ``reason`` says why.

    Tested for truth (``while not stopped``) and awaited (``await
    stopped.wait(seconds)``), as the code that acts uses it.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None

    def __bool__(self) -> bool:
        return self._event.is_set()

    def set(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until set, or ``timeout`` seconds; whether it is set."""
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError:
            pass
        return self._event.is_set()


#: The caller's coroutine that acts until ``stopped`` is set, and has stopped acting when it returns.
Lead = Callable[[Stopped], Awaitable[None]]


async def _wait_any(stop: asyncio.Event, task: asyncio.Future[None] | None, timeout: float | None) -> None:
    """Return after ``timeout`` seconds (None: no limit), or sooner once ``stop`` is set or ``task`` has ended."""
    waiter = asyncio.ensure_future(stop.wait())
    waits: set[asyncio.Future[Any]] = {waiter}
    if task is not None:
        waits.add(task)
    try:
        await asyncio.wait(waits, timeout=None if timeout is None else max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def _end(task: asyncio.Task[None], stopped: Stopped, reason: str) -> None:
    """Have ``lead`` stop (``stopped``) and wait until it has, even if this wait is cancelled meanwhile."""
    stopped.set(reason)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():  # this wait was cancelled: still let ``lead`` finish stopping
            await asyncio.wait({task})
            raise
        if not task.cancelled():
            raise
    except Exception:  # noqa: BLE001 - reported below; the elector goes on
        pass
    if not task.cancelled() and task.exception() is not None:
        log.error("leading ended with an error", error=repr(task.exception())[:300])


async def lead_alone(lead: Lead, stop: asyncio.Event, *, restart_after: float = 2.0) -> None:
    """Without leader election: act from now until ``stop`` (a single replica); ``lead`` is started again if it fails."""
    while not stop.is_set():
        stopped = Stopped()
        task = asyncio.create_task(lead(stopped), name="lead")
        await _wait_any(stop, task, None)
        await _end(task, stopped, "shutdown" if stop.is_set() else "lead ended")
        if not stop.is_set():
            await _wait_any(stop, None, restart_after)


class LeaderElector:
    """One replica's part in the election over the Lease ``namespace/name``."""

    def __init__(
        self,
        kube: AsyncKube,
        *,
        namespace: str,
        name: str,
        identity: str,
        lead: Lead,
        timing: Timing | None = None,
        wall: Callable[[], datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing or Timing()
        self._lead = lead
        self._wall = wall
        self._monotonic = monotonic
        #: The Lease as last read or written by this replica.
        self.observed: LeaseRecord | None = None
        #: True while ``lead`` runs (from the taking of the Lease until ``lead`` has returned).
        self.leading = False

    # -- the loop ----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Stand by, lead, stand by again... until ``stop``; then stop leading and release the Lease."""
        log.info("leader election: standing by", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        try:
            while not stop.is_set():
                verdict = await self._try_within(stop, self.timing.renew_deadline)
                if verdict is _TIMED_OUT:
                    log.warning("leader election: no answer from the API server", lease=f"{self.namespace}/{self.name}")
                if verdict in (Verdict.CREATE, Verdict.ACQUIRE, Verdict.RENEW):
                    await self._lead_while_renewing(stop)
                    continue
                await _wait_any(stop, None, self._next_try_in())
        finally:
            await self._release()

    def _next_try_in(self) -> float:
        return next_try_in(self.observed, identity=self.identity, now=self._wall(), timing=self.timing)

    async def _lead_while_renewing(self, stop: asyncio.Event) -> None:
        renewed = self._sent  # when the write that took the Lease was sent
        self.leading = True
        log.info(
            "leader election: Lease taken, leading",
            lease=f"{self.namespace}/{self.name}",
            identity=self.identity,
            transitions=self.observed.transitions if self.observed else None,
        )
        stopped = Stopped()
        task = asyncio.create_task(self._lead(stopped), name="lead")
        reason = "shutdown"
        try:
            tried = self._monotonic()
            while True:
                await _wait_any(stop, task, tried + self.timing.retry_period - self._monotonic())
                if stop.is_set():
                    break
                if task.done():
                    reason = "lead ended"
                    break
                tried = self._monotonic()
                remaining = renewed + self.timing.renew_deadline - tried
                if must_step_down(renewed, tried, self.timing):
                    reason = "renew deadline passed"
                    break
                verdict = await self._try_within(stop, remaining)
                if stop.is_set():
                    break
                if verdict is _TIMED_OUT:
                    reason = "renew deadline passed"
                    break
                if verdict in (Verdict.RENEW, Verdict.ACQUIRE, Verdict.CREATE):  # the last two: deleted or released meanwhile
                    renewed = self._sent
                elif verdict is Verdict.LOST:
                    reason = f"Lease taken by {self.observed.holder if self.observed else '?'}"
                    break
                # None: this renewal failed; the next one is due in a retry period, the deadline still counts.
        finally:
            level = log.info if reason == "shutdown" else log.warning
            level("leader election: stopping leading", lease=f"{self.namespace}/{self.name}", reason=reason)
            await _end(task, stopped, reason)
            self.leading = False
        if reason == "lead ended":
            await _wait_any(stop, None, self.timing.retry_period)  # no busy loop if ``lead`` fails at once

    # -- one try -----------------------------------------------------------------------

    _sent: float = 0.0

    async def _try_within(self, stop: asyncio.Event, timeout: float) -> "Verdict | None | _TimedOut":
        """:meth:`_try`, given up after ``timeout`` seconds (``_TIMED_OUT``) or once ``stop`` is set (None).

        A request that hangs (an API server that stopped answering) must
        neither keep a leader acting past its renew deadline nor hold up a
        shutdown.
        """
        attempt = asyncio.ensure_future(self._try())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            done, _ = await asyncio.wait({attempt, stopping}, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if attempt in done:
            return attempt.result()
        await cancel_and_wait(attempt)
        return None if stop.is_set() else _TIMED_OUT

    async def _try(self) -> Verdict | None:
        """Read the Lease and write it when the decision says so; None when the write failed."""
        for _ in range(2):  # a conflict is read again once at once: it may be this replica's own late write
            self._sent = self._monotonic()
            try:
                body = await self.kube.get_or_none(LEASES, self.namespace, self.name)
            except TRANSIENT as exc:
                log.warning("leader election: Lease not read", lease=f"{self.namespace}/{self.name}", error=_short(exc))
                return None
            lease = LeaseRecord.from_lease(body) if body is not None else None
            self.observed = lease
            now = self._wall()
            verdict = decide(lease, identity=self.identity, now=now, leading=self.leading)
            if verdict in (Verdict.STAND_BY, Verdict.LOST):
                return verdict
            spec = next_spec(lease, verdict, identity=self.identity, now=now, duration=self.timing.lease_duration)
            try:
                if verdict is Verdict.CREATE:
                    written = await self.kube.create(
                        LEASES,
                        self.namespace,
                        {
                            "apiVersion": LEASES.api_version,
                            "kind": "Lease",
                            "metadata": {"name": self.name, "namespace": self.namespace},
                            "spec": spec,
                        },
                    )
                else:
                    assert lease is not None
                    written = await self.kube.patch(
                        LEASES, self.namespace, self.name, {"metadata": {"resourceVersion": lease.resource_version}, "spec": spec}
                    )
            except ApiException as exc:
                if exc.status == 409:
                    continue  # another replica wrote first (or created it): read again
                log.warning("leader election: Lease not written", lease=f"{self.namespace}/{self.name}", error=_short(exc))
                return None
            except TRANSIENT as exc:
                log.warning("leader election: Lease not written", lease=f"{self.namespace}/{self.name}", error=_short(exc))
                return None
            self.observed = LeaseRecord.from_lease(written)
            return verdict
        return None

    async def _release(self) -> None:
        """Hand the Lease over at once, if this replica holds it (shutdown)."""
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT_SECONDS):
                for _ in range(2):
                    lease = self.observed
                    if lease is None or lease.holder != self.identity:
                        return
                    patch = {
                        "metadata": {"resourceVersion": lease.resource_version},
                        "spec": release_spec(lease, now=self._wall()),
                    }
                    try:
                        written = await self.kube.patch(LEASES, self.namespace, self.name, patch)
                    except ApiException as exc:
                        if exc.status != 409:
                            raise
                        body = await self.kube.get_or_none(LEASES, self.namespace, self.name)
                        self.observed = LeaseRecord.from_lease(body) if body is not None else None
                        continue
                    self.observed = LeaseRecord.from_lease(written)
                    log.info("leader election: Lease released", lease=f"{self.namespace}/{self.name}", identity=self.identity)
                    return
        except TRANSIENT as exc:
            log.warning(
                "leader election: Lease not released; the others take over once it expires",
                lease=f"{self.namespace}/{self.name}",
                error=_short(exc),
            )


class _TimedOut:
    """A try that got no answer in time."""


_TIMED_OUT = _TimedOut()


def _short(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return text or type(exc).__name__
