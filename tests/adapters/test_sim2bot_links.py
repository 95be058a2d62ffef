"""The Sim2Bot link on a dead network (issue 9): with the path to the real ``sim2bot bridge``
black-holed (loopback TcpProxy: sockets open, nothing delivered) the agent declares the link dead
within ping_interval_s + ping_timeout_s + 0.5 s, releases its source (the tank stops) and is
connected again soon after the path returns. Bounds are loose; scripts/bench_links.py prints figures."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from agent.commands import BaseVelocity
from agent.testing.proxy import TcpProxy
from agent.testing.running_agent import running_agent, wait_for
from agent.testing.sim2bot_bridge import Bridge, agent_params, controller

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")]

PING_S, PONG_S = 1.0, 2.0
BOUND_S = PING_S + PONG_S + 0.5


@pytest.fixture(scope="module")
def bridge():
    with Bridge() as b:
        yield b


async def test_a_black_holed_bridge_is_declared_dead_the_source_released_and_the_link_back(bridge):
    async with TcpProxy("127.0.0.1", bridge.port) as proxy:
        params = agent_params(bridge, url=f"ws://127.0.0.1:{proxy.port}/ws", ping_interval_s=PING_S,
                              ping_timeout_s=PONG_S, reconnect_delay_s=0.1, reconnect_delay_max_s=0.3)
        params["control"] = {"sources": {"sim2bot": {"priority": 20, "timeout_s": 5.0}}}
        async with running_agent(params) as agent:
            adapter = agent.adapters["sim2bot"]
            assert await wait_for(lambda: adapter.status()["connected"], 10)
            agent.control.submit("sim2bot", BaseVelocity(0.4, 0.0))  # 5 s: only the release stops it sooner
            assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
            proxy.blackhole = True
            t0 = time.monotonic()
            assert await wait_for(lambda: not adapter.status()["connected"], BOUND_S + 5)
            dead_s = time.monotonic() - t0
            assert await wait_for(lambda: agent.physics.duty == [0.0, 0.0], 1), "source not released"
            tried = proxy.connections
            assert await wait_for(lambda: proxy.connections > tried, 5)    # a reconnect into the dead path
            proxy.blackhole = False
            t1 = time.monotonic()
            assert await wait_for(lambda: adapter.status()["connected"], 10)
            back_s = time.monotonic() - t1
            print(f"\nsim2bot black-hole declared dead after {dead_s:.2f} s (bound {BOUND_S:.1f} s); "
                  f"connected {back_s:.2f} s after the path returned")
            assert dead_s < BOUND_S + 3.0 and back_s < 3.0
            await asyncio.sleep(0.2)  # real time held on purpose: ~10 ticks in which a replayed command would drive
            assert agent.physics.duty == [0.0, 0.0]


class RoomGate:
    """A loopback TCP gate in front of the bridge: a connection whose upgrade request names a room
    in ``closed`` (``?room=``) is cut before the handshake; the others are forwarded."""

    def __init__(self, target_port: int) -> None:
        self.target_port, self.port = target_port, 0
        self.closed: set[str] = set()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def __aenter__(self) -> "RoomGate":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request = head.split(b"\r\n", 1)[0].decode()
            if any(f"room={room} " in request or f"room={room}&" in request for room in self.closed):
                return
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            up_writer.write(head)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(asyncio.current_task())

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


async def test_a_room_whose_link_fails_leaves_the_other_rooms_serving(bridge):
    async with RoomGate(bridge.port) as gate:
        gate.closed.add("ctl-b")
        params = agent_params(bridge, url=f"ws://127.0.0.1:{gate.port}/ws", rooms=["ctl-a", "ctl-b"])
        async with running_agent(params) as agent:
            adapter = agent.adapters["sim2bot"]

            def rooms() -> dict:
                return adapter.status().detail["rooms"]

            assert await wait_for(lambda: rooms()["ctl-a"]["connected"] and rooms()["ctl-b"]["last_error"], 10)
            async with controller(bridge, "ctl-a") as a:       # ctl-a serves while ctl-b's attempts fail
                stream = a.camera("model:0", fps=10, width=64, height=48)
                frame = await asyncio.to_thread(stream.read, 5.0)
                assert frame is not None and (frame.width, frame.height) == (64, 48)
                a.base_velocity(vx=0.4)
                assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 2)
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(stream.close)
            status = adapter.status()
            assert (status["state"], status["connected"], rooms()["ctl-b"]["state"]) == ("down", False, "down")
            assert status["last_error"].startswith("room ctl-b:") and rooms()["ctl-a"]["connects"] == 1
            gate.closed.clear()                                # the path to ctl-b returns
            assert await wait_for(lambda: adapter.status()["connected"], 10)
            assert rooms()["ctl-a"]["connects"] == 1 and rooms()["ctl-b"]["connects"] == 1
