"""The health port: ``/healthz`` (liveness), ``/readyz`` (readiness) and ``/version``, served on the event loop.

- ``/healthz`` answers 200 whenever the event loop runs the handler: a
  process whose loop is blocked or gone fails it and is restarted;
- ``/readyz`` answers 200 once ``ready()`` says so (the controller: its cache
  has synced), 503 before. A standby with a synced cache is ready too: it
  serves the admission webhooks and takes over at once;
- ``/version`` answers this process's version as JSON
  (``{"version": "0.1.0", "python": "3.11.7"}``), which ``multikueue
  version`` reads (through the apiserver's pod proxy for a deployed
  controller): the health port is the one every install already exposes and
  probes, so it needs no extra Service or credentials, and it tells what runs
  rather than what a manifest asked for (an image tag may be ``latest``).

A small aiohttp server (aiohttp comes with kopf) rather than kopf's
``liveness_endpoint``, which serves one path only and only once kopf's
start-up handlers are done.
"""

from __future__ import annotations

import platform
from collections.abc import Callable

import structlog
from aiohttp import web

from multikueue import __version__

log = structlog.get_logger(__name__)


class ProbeServer:
    def __init__(self, port: int, ready: Callable[[], bool], *, host: str = "0.0.0.0") -> None:
        self.port = port
        self.host = host
        self._ready = ready
        self._runner: web.AppRunner | None = None

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="cache not synced yet")

    async def _version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": __version__, "python": platform.python_version()})

    async def start(self) -> None:
        app = web.Application()
        app.add_routes(
            [web.get("/healthz", self._healthz), web.get("/readyz", self._readyz), web.get("/version", self._version)]
        )
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port).start()
        self._runner = runner
        log.info("probes served", port=self.port, paths=["/healthz", "/readyz", "/version"])

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
