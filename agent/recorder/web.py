"""The recorder's HTTP routes, served by the console's server (behind its loopback default and token):

- ``GET /metrics``: Prometheus text format (agent.recorder.metrics);
- ``GET /incidents``: the incidents page (list + timeline; agent/recorder/static/);
- ``GET /api/incidents``: the latest incidents, newest first, as JSON;
- ``GET /api/incidents/{id}.mcap``: the incident's window as one MCAP file (a download);
- ``GET /api/incidents/{id}/timeline``: that file read back as the timeline the page draws.

Exports read files: they run on a worker thread (``asyncio.to_thread``), never on the event loop.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from aiohttp import web

from agent.recorder import export as exporter
from agent.recorder.incidents import Incident, IncidentLog
from agent.recorder.metrics import CONTENT_TYPE, registry_for, render

STATIC = Path(__file__).resolve().parent / "static"
ID_RE = re.compile(r"^[0-9A-Za-z_.:-]{1,80}$")


class RecorderRoutes:
    """Routes for one agent (see the module docstring); :meth:`routes` for ``app.add_routes``."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.registry = registry_for(agent)

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/metrics", self.metrics), web.get("/incidents", self.page),
                web.get("/incidents.js", self.script), web.get("/api/incidents", self.list),
                web.get("/api/incidents/{id}.mcap", self.download),
                web.get("/api/incidents/{id}/timeline", self.timeline)]

    async def metrics(self, request: web.Request) -> web.Response:
        body = render(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "incidents.html", headers={"Cache-Control": "no-store"})

    async def script(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "incidents.js", headers={"Cache-Control": "no-store"})

    def _recorder(self) -> Any:
        return getattr(self.agent, "recorder", None)

    def _incidents(self) -> list[Incident]:
        rec = self._recorder()
        if rec is None:
            return []
        if rec.directory is not None:
            return IncidentLog(rec.directory).read()
        return list(rec.incidents)

    async def list(self, request: web.Request) -> web.Response:
        incidents = await asyncio.to_thread(self._incidents)
        rec = self._recorder()
        return web.json_response({"incidents": [i.as_dict() for i in reversed(incidents[-100:])],
                                  "recorder": rec.status() if rec is not None else None})

    async def _export(self, request: web.Request) -> tuple[Incident, bytes]:
        wanted = request.match_info["id"]
        if not ID_RE.match(wanted):
            raise web.HTTPBadRequest(text=f"bad incident id {wanted[:80]!r}\n")
        rec = self._recorder()
        if rec is None or rec.directory is None:
            raise web.HTTPNotFound(text="the recorder is not recording (recorder.dir)\n")
        found = next((i for i in await asyncio.to_thread(self._incidents) if i.id == wanted), None)
        if found is None:
            raise web.HTTPNotFound(text=f"no incident {wanted!r}\n")
        rc = rec.settings

        def work() -> bytes:
            rec.flush(2.0)
            return exporter.export(rec.directory, found, rc.incident_before_s, rc.incident_after_s)
        return found, await asyncio.to_thread(work)

    async def download(self, request: web.Request) -> web.Response:
        incident, data = await self._export(request)
        return web.Response(body=data, content_type="application/octet-stream", headers={
            "Content-Disposition": f'attachment; filename="incident-{incident.id}.mcap"'})

    async def timeline(self, request: web.Request) -> web.Response:
        incident, data = await self._export(request)
        line = await asyncio.to_thread(exporter.timeline, data, incident)
        return web.json_response({"incident": incident.as_dict(), **line})
