"""The log-level policy (docs/architecture.md "Log levels"): ERROR means a person must act, so
the expected states of a working robot never log it. The real agent on the simulated tank, an
ARTEX hub streaming drive commands and a console tab: the console stops the tank (the hub's
commands are then refused), the motor controller is unplugged and comes back, and the agent is
restarted; not one ERROR line, and `status` right after the restart reports starting, not lost."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
import pytest

from agent.errors import CommandDeclined
from agent.ops import status
from agent.commands import BaseVelocity
from agent.testing.artex_hub import ArtexHub, artex_params, driving
from tests.conftest import deep_merge, free_port, running_agent, wait_for

pytestmark = pytest.mark.timeout(120)


def _health(agent, name: str) -> str:
    return {h.name: h.state for h in agent.hardware.health()}[name]


def _errors(agent, name: str) -> int:
    return {h.name: h.errors for h in agent.hardware.health()}[name]


async def test_console_stop_lost_motor_and_restart_log_no_error(caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    port = free_port()
    async with ArtexHub() as hub:
        params = deep_merge(artex_params(hub), {"console": {"enabled": True, "port": port}})
        async with running_agent(params) as agent:
            assert await wait_for(lambda: hub.heartbeats, 10), "no heartbeat answer"
            await asyncio.wait_for(agent.adapters["console"].ready.wait(), 10.0)
            physics, emu = agent.physics, agent.sim.motor_emulator
            async with aiohttp.ClientSession() as http, http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                async with driving(hub, {"com": "forward"}):
                    assert await wait_for(lambda: physics.duty[0] > 0.0, 5), "the hub never drove"
                    await ws.send_json({"type": "stop"})                 # the console stops the tank...
                    assert await wait_for(lambda: physics.duty == [0.0, 0.0], 5)
                    rejected = agent.adapters["artex"].counters["rejected"]
                    assert await wait_for(lambda: agent.adapters["artex"].counters["rejected"] > rejected + 2, 5)
                    assert physics.duty == [0.0, 0.0]                    # ...and the hub's commands are refused
            emu.unplug()                                                  # a lost motor controller
            for _ in range(40):
                with contextlib.suppress(CommandDeclined):   # refused once the failed write latched it out
                    agent.control.submit("robot_msg", BaseVelocity(0.3, 0.0))
                if _health(agent, "motor") == "lost":
                    break
                await asyncio.sleep(0.05)
            assert _health(agent, "motor") == "lost"
            errors = _errors(agent, "motor")                              # writes fail while it is lost
            assert await wait_for(lambda: _errors(agent, "motor") >= errors + 3, 5)
            emu.replug()
            assert await wait_for(lambda: _health(agent, "motor") == "ok", 10)
        # the restart: right after start, devices not opened yet are starting, and status exits 0
        async with running_agent(params) as again:
            health = status.gather(again)
            assert all(d["state"] in ("starting", "ok") for d in health["devices"]), health["devices"]
            assert health["state"] != "degraded" or not all(l["connected"] for l in health["links"].values()), health
            assert await wait_for(lambda: _health(again, "motor") == "ok", 10)
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], errors
    messages = [r.getMessage() for r in caplog.records]
    assert any("refused by the robot" in m for m in messages)                    # said, at INFO
    assert any(m.startswith("motor: ") and "-> lost" in m for m in messages)
