"""Bare relays for scripts/bench_pi.py, interleaved with the agent's trials, each receiver in its own process.

For each protocol a bare receiver runs in a child process of its own, as the agent does, and
gets the same message over the same transport from the same sender in the parent:

- ARTEX: a python-socketio client on ``/robot`` of the same hub (it connects with the auth
  ``{"relay": true}``; the hub's ``command`` goes to that sid), printing the receipt time of each
  ``command``;
- Sim2Bot: a bare simulator socket on the same ``sim2bot bridge``, room ``relay`` (the agent's room
  is left alone), printing the receipt time of each ``base_velocity``; the parent's controller
  of that room sends it;
- robot_msg: a ZeroMQ SUB of a PUB in the parent, printing the receipt time of each message.

Times are ``time.monotonic()`` (CLOCK_MONOTONIC: one clock for every process of the machine).
A trial is matched to the next line its receiver prints within 2 s (a receiver's stale lines
are dropped before each trial).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time

import zmq
from sim2bot import Robot

ARTEX_RX = '''
import asyncio, sys, time, socketio
async def main():
    c = socketio.AsyncClient()
    @c.on("command", namespace="/robot")
    async def _command(data):
        print(time.monotonic(), flush=True)
    @c.on("heartbeat", namespace="/robot")
    async def _heartbeat(*args):
        return {}
    await c.connect(sys.argv[1], namespaces=["/robot"], auth={"relay": True})
    print("ready", flush=True)
    await c.wait()
asyncio.run(main())
'''

SIM2BOT_RX = '''
import json, sys, time
from websockets.sync.client import connect
with connect(sys.argv[1]) as ws:
    ws.send(json.dumps({"type": "hello", "role": "simulator", "robots": [{"index": 0, "dof": 0}],
                        "cameras": [], "devices": []}))
    print("ready", flush=True)
    for raw in ws:
        if isinstance(raw, str) and '"base_velocity"' in raw and json.loads(raw).get("type") == "base_velocity":
            print(time.monotonic(), flush=True)
'''

ZMQ_RX = '''
import sys, time, zmq
sub = zmq.Context().socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(sys.argv[1])
print("ready", flush=True)
while True:
    sub.recv()
    print(time.monotonic(), flush=True)
'''

RELAY_ROOM = "relay"


class Receiver:
    """One receiver process and the receipt times it prints."""

    def __init__(self, name: str, code: str, arg: str) -> None:
        self.name, self.code, self.arg = name, code, arg
        self.times: asyncio.Queue[float] = asyncio.Queue()
        self.proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(sys.executable, "-c", self.code, self.arg,
                                                         stdout=asyncio.subprocess.PIPE)
        line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        if b"ready" not in line:
            raise RuntimeError(f"relay receiver {self.name} did not start: {line!r}")
        self._task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while line := await self.proc.stdout.readline():
            with contextlib.suppress(ValueError):
                self.times.put_nowait(float(line))

    def clear(self) -> None:
        while not self.times.empty():
            self.times.get_nowait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()


class Relays:
    """The three bare relays (see the module docstring); :meth:`trial` runs one."""

    async def start(self, hub, bridge, ctx) -> None:
        self.hub = hub
        self.rx = {"artex": Receiver("artex", ARTEX_RX, f"http://127.0.0.1:{hub.port}"),
                   "sim2bot": Receiver("sim2bot", SIM2BOT_RX, f"{bridge.url}?room={RELAY_ROOM}"),
                   "robot_msg": None}
        self.pub = ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.rx["robot_msg"] = Receiver("robot_msg", ZMQ_RX, f"tcp://127.0.0.1:{port}")
        for rx in self.rx.values():
            await rx.start()
        await asyncio.wait_for(self.pub.recv(), 30)          # the receiver's subscription is live
        deadline = time.monotonic() + 30
        while self.relay_sid is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.robot = Robot(url=bridge.url, room=RELAY_ROOM)
        await asyncio.to_thread(self.robot.connect)

    @property
    def relay_sid(self) -> str | None:
        return next((sid for sid, auth in self.hub.passports.items()
                     if auth == {"relay": True} and sid in self.hub.connected), None)

    @property
    def agent_sid(self) -> str | None:
        return next((sid for sid in reversed(self.hub.connected) if sid != self.relay_sid), None)

    async def trial(self, proto: str, payload_u_rt: bytes) -> float | None:
        """One message through the bare relay of ``proto``: send -> the receiver's receipt, s (None: lost)."""
        rx = self.rx[proto]
        rx.clear()
        t0 = time.monotonic()
        if proto == "artex":
            await self.hub.command({"drive": {"vx": 0.3, "omega": 0.0}}, sid=self.relay_sid)
        elif proto == "sim2bot":
            await asyncio.to_thread(self.robot.base_velocity, vx=0.3)
        else:
            await self.pub.send(payload_u_rt)
        try:
            return await asyncio.wait_for(rx.times.get(), 2.0) - t0
        except TimeoutError:
            return None

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.robot.close)
        for rx in self.rx.values():
            await rx.stop()
        self.pub.close(0)
