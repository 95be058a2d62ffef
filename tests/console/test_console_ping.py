"""A tab that stops answering the WebSocket ping (its network went, the phone slept) was logged as
"console: rejected message from ...: No PONG received after 1.0 seconds" at WARNING and counted as a
rejected message; it is no message: said at INFO as a ping not answered and not counted. Real agent,
real aiohttp client that does not pong."""

from __future__ import annotations

import logging

import aiohttp
import pytest

from tests.conftest import free_port, wait_for
from tests.console.peers import console_agent

pytestmark = pytest.mark.timeout(60)


async def test_a_tab_that_does_not_answer_the_ping_is_closed_stopping_the_tank_and_no_rejection(caplog):
    port = free_port()
    caplog.set_level(logging.INFO, logger="agent.console")
    async with console_agent(port) as agent, aiohttp.ClientSession() as http:
        async with http.ws_connect(f"http://127.0.0.1:{port}/ws", autoping=False) as ws:   # never pongs
            assert (await ws.receive_json(timeout=5.0))["type"] == "hello"
            await ws.send_json({"type": "drive", "vx": 0.3, "omega": 0.0, "press": True})
            assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty[0] > 0.0, 5.0)
            while not ws.closed:                # the pings come as messages, unanswered (any message from
                msg = await ws.receive(timeout=10)  # the tab would count as alive: it sends none)
                if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    break
        assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty == [0.0, 0.0], 5.0)
        assert agent.adapters["console"].status()["rejected"] == 0
    lines = [r.getMessage() for r in caplog.records]
    assert any("did not answer the WebSocket ping" in line and "connection is closed" in line for line in lines), lines
    assert not any("rejected message" in line for line in lines), lines
