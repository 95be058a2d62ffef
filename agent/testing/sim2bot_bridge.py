"""The real ``sim2bot bridge`` as a subprocess on free loopback ports, and its controller client.

:class:`Bridge` starts the bridge (restartable on the same ports); ``agent_params``
points the simulated tank's sim2bot adapter at it; ``controller`` is a connected
``sim2bot.Robot`` (the controller side) that has seen the announced tank.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Self

from sim2bot import Robot

from agent.testing.ports import free_ports
from agent.testing.running_agent import sim_config, wait_for

__all__ = ["SIM2BOT", "Bridge", "HungBridge", "agent_params", "controller"]

#: the ``sim2bot`` command installed next to this interpreter
SIM2BOT = str(Path(sys.executable).with_name("sim2bot"))


class Bridge:
    """``sim2bot bridge`` on free loopback ports, as a subprocess; restartable on the same ports."""

    def __init__(self, host: str = "127.0.0.1", token: str | None = None) -> None:
        self.host, self.token = host, token
        self.port, self.tcp_port, self.udp_port = free_ports(3)   # distinct: held together while picked
        self.url = f"ws://{host}:{self.port}/ws"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 20.0) -> None:
        self.proc = subprocess.Popen(
            [SIM2BOT, "bridge", "--host", self.host, "--port", str(self.port), "--tcp-port",
             str(self.tcp_port), "--udp-port", str(self.udp_port), "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "SIM2BOT_BRIDGE_TOKEN": self.token or ""})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sim2bot bridge exited with {self.proc.returncode}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"http://{self.host}:{self.port}/health", timeout=0.5) as r:
                if json.loads(r.read()) == {"status": "ok"}:
                    return
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"sim2bot bridge not healthy on port {self.port} within {timeout_s} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def agent_params(bridge: Bridge, **sim2bot) -> dict:
    """The simulated tank with the sim2bot adapter on ``bridge`` (fast reconnects for tests)."""
    section = {"enabled": True, "url": bridge.url, "reconnect_delay_s": 0.1, "reconnect_delay_max_s": 0.5}
    return sim_config(sim2bot={**section, **sim2bot})


@contextlib.asynccontextmanager
async def controller(bridge: Bridge, room: str | None = None):
    """A connected ``sim2bot.Robot`` that has seen the announced tank."""
    robot = Robot(url=bridge.url, room=room, connect_timeout=5.0)
    await asyncio.to_thread(robot.connect)
    try:
        await asyncio.to_thread(robot.wait_for_sim, 10.0, 0.1)
        assert await wait_for(lambda: robot.state() is not None, 5), "no telemetry"
        yield robot
    finally:
        await asyncio.to_thread(robot.close)


class HungBridge:
    """A "bridge" that accepts the WebSocket upgrade and then never reads or answers again (a hung
    process, a stuck proxy): pings, the closing handshake and every message go unanswered.

    ``url`` is its control-socket URL once started; ``connections`` counts accepted upgrades.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host, self.port = host, free_ports(1)[0]
        self.url = f"ws://{host}:{self.port}/ws"
        self.connections = 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import base64
        import hashlib
        head = await reader.readuntil(b"\r\n\r\n")
        key = next((line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
                    if line.lower().startswith(b"sec-websocket-key:")), b"")
        accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        await writer.drain()
        self.connections += 1
        self._writers.append(writer)              # held open, never read again

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
