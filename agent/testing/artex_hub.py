"""ARTEX test hub: the minimal server from the ARTEX protocol page, extended (library part).

python-socketio ``AsyncServer`` + aiohttp, namespace ``/robot``. :class:`ArtexHub`
records each robot's passport, calls ``heartbeat ["d_meta", "Ready"]`` on connect
and records the answer, telemetry, video frame sizes and ``file`` answers; it
emits commands and raw events on demand. :func:`parse_line` turns one console
line into a hub action (the console itself is scripts/artex_hub.py).

Used by tests/adapters/test_artex*.py, scripts/bench_artex.py and the
scripts/artex_hub.py command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Self

import socketio
from aiohttp import web

from agent.compat.socketio import AckHookServer
from agent.testing.running_agent import ROOT, running_agent, sim_config, wait_for

NAMESPACE = "/robot"
MOTION_TYPES = ("com", "drive", "tracks")


def clip(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters with a marker."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def compact(obj: Any, limit: int = 300) -> str:
    """One-line JSON of ``obj``, clipped; bytes shown as their length."""
    return clip(json.dumps(obj, separators=(",", ":"), default=lambda b: f"<{len(b)} bytes>"), limit)


class _HubServer(AckHookServer):
    """python-socketio's server, except that ``video`` goes unacknowledged when the hub says so
    (the normal Node socket.io hub: a handler that ignores the ack callback)."""

    def __init__(self, hub: ArtexHub, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hub = hub

    def ack_wanted(self, data: Any) -> bool:
        return self._hub.ack_video or not (data and data[0] == "video")


class ArtexHub:
    """An ARTEX hub on ``host:port`` recording what robots send.

    Args:
        host, port: where to listen (port 0: a free port, see :attr:`port` after start).
        auto_ready: call ``heartbeat ["d_meta", "Ready"]`` ``ready_delay_s`` after each connect.
        on_event: ``callback(kind, sid, data)`` for every record (the CLI prints with it).
        history: how many telem / video / heartbeat records are kept (oldest dropped).
        max_http_buffer_size: python-socketio's message limit, bytes (its default is 1,000,000;
            a bigger message closes the link).
        refuse: when set, every robot's namespace connect is rejected with this message (auth refused).
        kick_after_s: when set, every robot is disconnected by the hub this long after it connected (kicked).
        ack_video: acknowledge ``video`` events that ask for it (python-socketio does for every handled
            event); False behaves as a Node socket.io hub whose ``video`` handler takes no callback.

    Attributes:
        passports: sid -> auth passport of every robot connected so far.
        connected: sids connected now, oldest first.
        heartbeats: (t_mono_s, sid, answer) of every heartbeat call.
        telem: (t_mono_s, payload) of every ``telem`` event.
        video: (t_mono_s, {camera: byte count}); ``last_video`` is the newest payload itself.
        files: (t_mono_s, payload) of every ``file`` event. other: (event, data) of any other event.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, auto_ready: bool = True,
                 ready_delay_s: float = 0.1, on_event: Callable[[str, str, Any], None] | None = None,
                 history: int = 10_000, max_http_buffer_size: int = 16 << 20, refuse: str | None = None,
                 kick_after_s: float | None = None, ack_video: bool = True) -> None:
        self.host, self.port = host, port
        self.ack_video = ack_video
        self.max_http_buffer_size = max_http_buffer_size
        self.auto_ready = auto_ready
        self.refuse = refuse
        self.kick_after_s = kick_after_s
        self.ready_delay_s = ready_delay_s
        self.on_event = on_event
        self.passports: dict[str, Any] = {}
        self.connected: list[str] = []
        self.heartbeats: deque[tuple[float, str, Any]] = deque(maxlen=history)
        self.telem: deque[tuple[float, Any]] = deque(maxlen=history)
        self.video: deque[tuple[float, dict[str, int]]] = deque(maxlen=history)
        self.last_video: dict[str, Any] = {}
        self.files: deque[tuple[float, Any]] = deque(maxlen=history)
        self.other: deque[tuple[str, Any]] = deque(maxlen=history)
        self.disconnects = 0
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task] = set()
        self.sio: _HubServer | None = None

    # ------------------------------------------------------------------ lifecycle
    def _build(self) -> web.Application:
        sio = _HubServer(self, async_mode="aiohttp", max_http_buffer_size=self.max_http_buffer_size)
        app = web.Application()
        sio.attach(app)
        sio.on("connect", self._connect, namespace=NAMESPACE)
        sio.on("disconnect", self._disconnect, namespace=NAMESPACE)
        sio.on("telem", self._telem, namespace=NAMESPACE)
        sio.on("video", self._video, namespace=NAMESPACE)
        sio.on("file", self._file, namespace=NAMESPACE)
        sio.on("*", self._other, namespace=NAMESPACE)
        self.sio = sio
        return app

    async def start(self) -> int:
        """Listen; returns the port (the same one again after :meth:`stop` when restarted)."""
        self._runner = web.AppRunner(self._build(), handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self.port

    async def stop(self, graceful: bool = True) -> None:
        """Stop listening. Idempotent.

        Args:
            graceful: first disconnect every robot from ``/robot`` (a Socket.IO disconnect
                packet); False drops the connections without a word, as a crashed hub would.
        """
        for task in list(self._tasks):
            task.cancel()
        sio, self.sio = self.sio, None
        if sio is not None:
            if graceful:
                for sid in list(self.connected):
                    await sio.disconnect(sid, namespace=NAMESPACE)
            await sio.shutdown()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        self.connected.clear()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _record(self, kind: str, sid: str, data: Any) -> None:
        if self.on_event is not None:
            self.on_event(kind, sid, data)

    # ------------------------------------------------------------------ server events
    async def _connect(self, sid: str, environ: dict, auth: Any = None) -> None:
        if self.refuse is not None:
            self._record("refused", sid, auth)
            raise socketio.exceptions.ConnectionRefusedError(self.refuse)
        self.passports[sid] = auth
        self.connected.append(sid)
        self._record("connect", sid, auth)
        if self.auto_ready:
            self._spawn(self._handshake(sid))
        if self.kick_after_s is not None:
            self._spawn(self._kick(sid, self.kick_after_s))

    async def _kick(self, sid: str, after_s: float) -> None:
        await asyncio.sleep(after_s)
        if self.sio is not None:
            await self.sio.disconnect(sid, namespace=NAMESPACE)

    async def _handshake(self, sid: str) -> None:
        await asyncio.sleep(self.ready_delay_s)
        try:
            await self.heartbeat(("d_meta", "Ready"), sid=sid)
        except (TimeoutError, socketio.exceptions.SocketIOError) as err:
            self._record("error", sid, f"heartbeat failed: {err!r}")

    async def _disconnect(self, sid: str, reason: Any = None) -> None:
        if sid in self.connected:
            self.connected.remove(sid)
        self.disconnects += 1
        self._record("disconnect", sid, reason)

    async def _telem(self, sid: str, data: Any) -> None:
        payload = data.get("payload") if isinstance(data, dict) else data
        self.telem.append((time.monotonic(), payload))
        self._record("telem", sid, payload)

    async def _video(self, sid: str, data: Any) -> None:
        payload = data.get("payload") if isinstance(data, dict) else None
        payload = payload if isinstance(payload, dict) else {}
        sizes = {cam: len(frame) if isinstance(frame, (bytes, bytearray, str, list)) else -1
                 for cam, frame in payload.items()}
        self.video.append((time.monotonic(), sizes))
        self.last_video = payload
        self._record("video", sid, sizes)

    async def _file(self, sid: str, data: Any) -> None:
        payload = data.get("payload") if isinstance(data, dict) else data
        self.files.append((time.monotonic(), payload))
        self._record("file", sid, payload)

    async def _other(self, event: str, sid: str, data: Any = None) -> None:
        self.other.append((event, data))
        self._record(event, sid, data)

    # ------------------------------------------------------------------ hub -> robot
    def _target(self, sid: str | None) -> str:
        if self.sio is None:
            raise ConnectionError("hub stopped")
        if sid is not None:
            return sid
        if not self.connected:
            raise ConnectionError("no robot connected")
        return self.connected[-1]

    async def heartbeat(self, requests=("d_meta", "Ready"), sid: str | None = None, timeout_s: float = 5.0) -> Any:
        """Call ``heartbeat`` with ``requests`` (a list; other data is sent as is) on the robot; returns the ack."""
        sid = self._target(sid)
        data = list(requests) if isinstance(requests, tuple) else requests
        answer = await self.sio.call("heartbeat", data, to=sid, namespace=NAMESPACE, timeout=timeout_s)
        self.heartbeats.append((time.monotonic(), sid, answer))
        self._record("heartbeat", sid, answer)
        return answer

    async def token_ask(self, sid: str | None = None, timeout_s: float = 5.0) -> Any:
        """Call ``token_ask``; returns the robot's answer (its sid)."""
        sid = self._target(sid)
        answer = await self.sio.call("token_ask", {}, to=sid, namespace=NAMESPACE, timeout=timeout_s)
        self._record("token", sid, answer)
        return answer

    async def command(self, payload: Any, author: str = "hub", sid: str | None = None) -> None:
        """Emit ``command`` ``{"author", "payload"}`` to one robot (default: the newest)."""
        await self.send_raw("command", {"author": author, "payload": payload}, sid)

    async def send_raw(self, event: str, data: Any, sid: str | None = None) -> None:
        """Emit any event with any data (for malformed-input tests)."""
        sid = self._target(sid)
        await self.sio.emit(event, data, to=sid, namespace=NAMESPACE)

    async def send_packet(self, text: str | bytes, sid: str | None = None) -> None:
        """Send one raw Engine.IO message (a Socket.IO packet as text, or a binary attachment), as a
        broken or hostile hub would: ``await hub.send_packet('51-/robot,["command",{}]')``."""
        sid = self._target(sid)
        await self.sio.send_raw(sid, NAMESPACE, text)




# ---------------------------------------------------------------------- command line
def parse_line(line: str) -> tuple[str, Any]:
    """One stdin line -> (action, argument): ``command``, ``heartbeat``, ``token``, ``quit`` or ``error``."""
    line = line.strip()
    if not line:
        return "none", None
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            return "error", f"bad JSON: {err}"
        return ("raw", obj) if isinstance(obj, dict) and "payload" in obj else ("command", obj)
    word, *args = line.split()
    try:
        if word == "drive":
            return "command", {"drive": {"vx": float(args[0]), "omega": float(args[1]) if len(args) > 1 else 0.0}}
        if word == "tracks":
            return "command", {"tracks": {"left": float(args[0]), "right": float(args[1])}}
    except (IndexError, ValueError):
        return "error", f"usage: {word} NUMBER NUMBER"
    if word in ("log", "error", "clear"):
        return "command", {"file": word}
    if word == "hb":
        return "heartbeat", args or ["d_meta", "Ready"]
    if word == "token":
        return "token", None
    if word in ("quit", "exit"):
        return "quit", None
    return "command", {"com": word}


def is_motion(payload: Any) -> bool:
    """A payload the robot's watchdog needs repeated (not ``stop``)."""
    if not isinstance(payload, dict) or len(payload) != 1:
        return False
    (kind, value), = payload.items()
    return kind in MOTION_TYPES and not (kind == "com" and value == "stop")


# ---------------------------------------------------------------------- an agent on a hub
def artex_params(hub, **overrides) -> dict:
    """The simulated tank with ARTEX pointed at ``hub``; fast reconnects for the tests."""
    over = {"server": "http://127.0.0.1", "port": hub.port,
            "artex": {"reconnect_delay_s": 0.2, "reconnect_delay_max_s": 0.5}}
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(over.get(key), dict):
            over[key] = {**over[key], **value}
        else:
            over[key] = value
    return sim_config(**over)


@contextlib.asynccontextmanager
async def agent_on(hub, *, ready=True, **overrides):
    """A running agent connected to ``hub`` (and past Ready when ``ready``)."""
    async with running_agent(artex_params(hub, **overrides)) as agent:
        assert await wait_for(lambda: hub.connected, 10), "agent never connected"
        if ready:
            assert await wait_for(lambda: hub.heartbeats, 10), "no heartbeat answer"
        yield agent


async def drive(hub, payload, seconds, period_s=0.1) -> int:
    """Repeat a motion command as an operator UI must (the watchdog needs it); returns how many were sent."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    sent = 0
    while loop.time() < end:
        await hub.command(payload)
        sent += 1
        await asyncio.sleep(period_s)
    return sent


@contextlib.asynccontextmanager
async def driving(hub, payload, period_s=0.1):
    """Keep repeating a motion command in the background while the block runs."""
    async def repeat() -> None:
        while True:
            with contextlib.suppress(ConnectionError):
                await hub.command(payload)
            await asyncio.sleep(period_s)

    task = asyncio.ensure_future(repeat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def distance(agent) -> float:
    return agent.control.snapshot().odom.distance_m


@contextlib.asynccontextmanager
async def hub_script(port: int, *args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[str]]]:
    """``scripts/artex_hub.py`` on 127.0.0.1:``port`` with ``args`` as a process, once it listens.

    Yields (process, its stdout lines so far, kept up to date); on exit types ``quit`` and waits
    up to 10 s before killing it.
    """
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "scripts" / "artex_hub.py"), "--host", "127.0.0.1", "--port", str(port),
        *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    lines: list[str] = []

    async def read() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            lines.append(line.decode(errors="replace"))

    reader = asyncio.ensure_future(read())
    try:
        assert await wait_for(lambda: any("ARTEX test hub on" in x for x in lines), 15)
        yield proc, lines
    finally:
        assert proc.stdin is not None
        proc.stdin.write(b"quit\n")
        with contextlib.suppress(ConnectionError):
            await proc.stdin.drain()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        reader.cancel()
