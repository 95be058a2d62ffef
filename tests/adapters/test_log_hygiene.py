"""Log hygiene (issue 12): untrusted text from a peer (a Sim2Bot message ``type``, an ARTEX settings
key, an author) cannot forge log lines, and a flood of varied junk costs one line per (source,
reason), not one per message. Real ARTEX hub and real sim2bot bridge on loopback."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from websockets.sync.client import connect as ws_connect

from agent.testing.artex_hub import agent_on
from agent.testing.running_agent import running_agent, wait_for
from agent.testing.sim2bot_bridge import Bridge, agent_params

pytestmark = [pytest.mark.timeout(90),
              pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")]

FORGED = "x\nCRITICAL agent.control: motors lost\r"


def _agent_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("agent")]


async def test_artex_junk_is_escaped_and_logged_once_per_reason(hub, caplog):
    async with agent_on(hub) as agent:
        adapter = agent.adapters["artex"]
        with caplog.at_level(logging.DEBUG, logger="agent"):
            await hub.command({"web_settings": {FORGED: 1}}, author=FORGED)
            await hub.command({"com": FORGED}, author=FORGED)
            await hub.command({"com": "stop"}, author=FORGED)
            await hub.send_raw(FORGED, {})
            for i in range(300):                             # varied junk: every message differs
                await hub.command({"drive": {"vx": f"fast{i}"}})
            assert await wait_for(lambda: adapter.status().get("rejected", 0) >= 303, 10)
        lines = _agent_lines(caplog)
        assert all("\n" not in line and "\r" not in line for line in lines), lines
        assert any("\\nCRITICAL" in line for line in lines)  # the junk is shown, escaped
        rejected = [line for line in lines if "ARTEX: rejected" in line]
        assert len(rejected) <= 3, rejected                  # command / web_settings / event: one line each


async def test_sim2bot_message_type_is_escaped_and_floods_are_rate_limited(caplog):
    with Bridge() as bridge:
        async with running_agent(agent_params(bridge)) as agent:
            adapter = agent.adapters["sim2bot"]
            assert await wait_for(lambda: adapter.status()["connected"], 10)
            with caplog.at_level(logging.DEBUG, logger="agent"), ws_connect(bridge.url) as ws:
                ws.send(json.dumps({"type": "hello", "role": "controller"}))
                ws.send(json.dumps({"type": "stop", "robot": FORGED}))
                for i in range(200):
                    ws.send(json.dumps({"type": "base_velocity", "vx": f"v{i}"}))
                assert await wait_for(lambda: adapter.status().counters["rejected"] >= 201, 10), \
                    adapter.status().counters
                await asyncio.sleep(0.2)
        lines = _agent_lines(caplog)
        assert all("\n" not in line and "\r" not in line for line in lines), lines
        rejected = [line for line in lines if "sim2bot: rejected" in line]
        assert 1 <= len(rejected) <= 2, rejected             # one per (source, reason, known type)
