"""The Sim2Bot link on a dead network (issue 9): with the path to the real ``sim2bot bridge``
black-holed (loopback TcpProxy: sockets open, nothing delivered) the agent declares the link dead
within ping_interval_s + ping_timeout_s + 0.5 s, releases its source (the tank stops) and is
connected again soon after the path returns. Bounds are loose; scripts/bench_links.py prints figures."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.model import BaseVelocity
from agent.testing.proxy import TcpProxy
from agent.testing.running_agent import running_agent, wait_for
from agent.testing.sim2bot_bridge import Bridge, agent_params

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
            await asyncio.sleep(0.5)
            proxy.blackhole = False
            t1 = time.monotonic()
            assert await wait_for(lambda: adapter.status()["connected"], 10)
            back_s = time.monotonic() - t1
            print(f"\nsim2bot black-hole declared dead after {dead_s:.2f} s (bound {BOUND_S:.1f} s); "
                  f"connected {back_s:.2f} s after the path returned")
            assert dead_s < BOUND_S + 3.0 and back_s < 3.0
            await asyncio.sleep(0.5)
            assert agent.physics.duty == [0.0, 0.0]
