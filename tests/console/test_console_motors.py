"""The console's state message carries each track's duty and measured speed (the page's motors
row): zero at rest, the duty sent while another source drives the simulated tank."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from agent.commands import BaseVelocity
from tests.conftest import free_port
from tests.console.peers import console_agent


async def _state(ws: aiohttp.ClientWebSocketResponse) -> dict:
    while True:
        msg = await ws.receive(timeout=5.0)
        if msg.type == aiohttp.WSMsgType.TEXT and json.loads(msg.data)["type"] == "state":
            return json.loads(msg.data)


async def test_the_state_shows_the_duty_and_speed_of_each_track() -> None:
    port = free_port()
    async with console_agent(port) as agent, aiohttp.ClientSession() as http, \
            http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
        rest = (await _state(ws))["tracks"]
        assert rest["duty_left"] == 0.0 and rest["duty_right"] == 0.0 and "left_mps" in rest
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while loop.time() < deadline:
            agent.control.submit("robot_msg", BaseVelocity(0.4, 0.0))
            tracks = (await _state(ws))["tracks"]
            if tracks["duty_left"] > 0.0 and tracks["left_mps"] > 0.05:
                break
        assert tracks["duty_left"] > 0.0 and tracks["duty_right"] > 0.0 and tracks["left_mps"] > 0.05, tracks
