"""Sim2Bot with the real bridge and other peers in the room (issue 20 items 3 and 7).

- a second simulator joins the agent's room (a simulator-role client announcing a Franka, dof 7, as a
  Sim2Bot browser tab does): the agent says so in its log, status, console state and telemetry, and
  announces the tank again once the other simulator left;
- robot-0 telemetry carries ``roomDevices``; ``robot`` index 1 on ``base_velocity`` drives the tank
  (the client documents the primary base); ``quality`` 1.5 is refused with its reason.
"""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
import pytest
import websockets
from websockets.sync.client import connect as ws_connect

from agent.ops.status import format_table, gather
from agent.testing.ports import free_port
from agent.testing.running_agent import deep_merge, running_agent, wait_for
from agent.testing.sim2bot_bridge import Bridge, agent_params, controller

LOG = "agent.adapters.sim2bot"
FRANKA = {"type": "hello", "role": "simulator",
          "robots": [{"id": "franka_primary", "name": "Franka", "dof": 7, "hasGripper": True}],
          "cameras": [], "devices": []}

pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")


@pytest.fixture(scope="module")
def bridge():
    with Bridge() as b:
        yield b


def describe(bridge: Bridge, room: str) -> dict:
    """The bridge's ``scene`` answer for ``room`` (a raw controller socket)."""
    with ws_connect(f"{bridge.url}?room={room}") as ws:
        ws.send(json.dumps({"type": "describe", "room": room}))
        while True:
            msg = json.loads(ws.recv(timeout=5))
            if msg.get("type") == "scene":
                return msg


def first_telemetry(bridge: Bridge, room: str) -> dict:
    """The first ``telemetry`` packet a raw controller socket in ``room`` receives, as sent."""
    with ws_connect(f"{bridge.url}?room={room}") as ws:
        ws.send(json.dumps({"type": "hello", "role": "controller", "room": room}))
        while True:
            packet = json.loads(ws.recv(timeout=5))
            if packet.get("type") == "telemetry":
                return packet


async def test_a_second_simulator_in_the_room_is_said_everywhere(bridge, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    room, port = "two-sims", free_port()
    params = deep_merge(agent_params(bridge, room=room), {"console": {"enabled": True, "port": port}})
    async with running_agent(params) as agent:
        adapter = agent.adapters["sim2bot"]
        rooms = lambda: adapter.status().detail["rooms"][room]  # noqa: E731
        assert await wait_for(lambda: rooms()["simulators"] == 1, 10)
        assert adapter.status().detail["warnings"] == []
        async with controller(bridge, room) as robot, \
                websockets.connect(f"{bridge.url}?room={room}") as franka:
            await franka.send(json.dumps({**FRANKA, "room": room}))
            assert await wait_for(lambda: rooms()["simulators"] == 2, 5), rooms()
            assert "2 simulators in bridge room two-sims" in caplog.text
            assert [r.levelname for r in caplog.records if "2 simulators" in r.getMessage()] == ["WARNING"]
            warnings = adapter.status().detail["warnings"]
            assert len(warnings) == 1 and "close it, or give the agent a room of its own" in warnings[0]
            assert rooms()["warning"]
            health = gather(agent)     # status.json / robot-agent status / systemd STATUS=
            assert health["state"] == "degraded" and health["links"]["sim2bot"]["warnings"] == warnings
            assert "sim2bot=up(WARNING)" in health["summary"] and "2 simulators" in format_table(health)
            # its telemetry, as a controller reads it
            control = lambda: next((s for s in robot.state().sensors if s.get("name") == "control"), {})  # noqa: E731
            assert await wait_for(lambda: "2 simulators" in control().get("bridge_warning", ""), 5)
            # the console's state message
            async with aiohttp.ClientSession() as http, http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                for _ in range(50):
                    msg = await asyncio.wait_for(ws.receive_json(), 5)
                    if msg.get("type") == "state":
                        break
                assert msg["warnings"] == warnings
            assert (await asyncio.to_thread(describe, bridge, room))["robots"][0]["name"] == "Franka"
        # the Franka left: the warning ends and the tank is the room's robot again
        assert await wait_for(lambda: rooms()["simulators"] == 1 and not rooms()["warning"], 5), rooms()
        tank = agent.cfg.sim2bot.robot_id
        for _ in range(60):      # re-announced with the next telemetry packet
            scene = await asyncio.to_thread(describe, bridge, room)
            if scene["robots"] and scene["robots"][0]["id"] == tank:
                break
            await asyncio.sleep(0.05)
        assert scene["robots"][0]["id"] == tank, scene
        assert adapter.status().detail["warnings"] == []


async def test_room_devices_robot_index_and_quality_follow_the_client(bridge, caplog):
    room = "details"
    async with running_agent(agent_params(bridge, room=room)) as agent:
        adapter = agent.adapters["sim2bot"]
        assert await wait_for(lambda: adapter.status()["connected"], 10)
        packet = await asyncio.to_thread(first_telemetry, bridge, room)
        assert packet["robot"] == 0 and packet["roomDevices"] == []
        async with controller(bridge, room) as robot:
            for _ in range(5):      # robot index 1: the browser drives the primary base, so does the agent
                await asyncio.to_thread(robot.base_velocity, vx=0.3, robot=1)
                await asyncio.sleep(0.1)
            assert await wait_for(lambda: agent.control.snapshot().active_source == "sim2bot", 3)
            await asyncio.to_thread(robot.stop, 2)
            assert await wait_for(lambda: agent.control.snapshot().stopped, 3)
            before = adapter.status().counters["rejected"]
            stream = await asyncio.to_thread(robot.camera, "model:0", 5, 160, 120, 1.5)
            try:
                assert await wait_for(lambda: adapter.status().counters["rejected"] > before, 5)
            finally:
                await asyncio.to_thread(stream.close)
            assert "quality 1.5 is neither a fraction 0..1" in caplog.text
