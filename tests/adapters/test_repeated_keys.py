"""A JSON object that gives a key twice (``{"vx": 0, "vx": 0.9}``) is refused by the ARTEX and
Sim2Bot adapters, never read as its last value (agent/support/jsonkeys.py): counted as rejected,
logged naming the key, nothing moves, the link stays up, and a valid command drives afterwards.
ARTEX obeys a stop in such a command (stop always wins, docs/artex.md); Sim2Bot refuses a malformed
stop as it refuses any malformed message (docs/sim2bot.md). Real peers on loopback: the python-socketio
hub (agent/testing/artex_hub.py) sending the raw packet, the real sim2bot bridge with a raw socket."""

from __future__ import annotations

import contextlib
import json
import logging
import time

import pytest
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from agent.commands import BaseVelocity
from agent.support.jsonkeys import RepeatedKey, first_keys, unique_keys
from agent.testing.artex_hub import agent_on, distance
from agent.testing.running_agent import running_agent, wait_for
from agent.testing.ports import free_port
from agent.testing.sim2bot_bridge import agent_params

pytestmark = pytest.mark.timeout(90)

#: another source drives for 5 s unless stopped: only the ARTEX stop can end it in time
OTHER = {"control": {"sources": {"robot_msg": {"priority": 30, "timeout_s": 5.0}}}}


async def _ticks(agent, n: int = 3) -> bool:
    """Wait for ``n`` more control ticks (a command submitted before is then acted on)."""
    seq = agent.control.snapshot().seq
    return await wait_for(lambda: agent.control.snapshot().seq >= seq + n, 3)


def test_unique_keys_names_the_key_and_its_object_and_first_keys_is_the_other_reading():
    text = '{"drive": {"vx": 0, "vx": 0.9, "omega": 0}}'
    with pytest.raises(RepeatedKey) as err:
        json.loads(text, object_pairs_hook=unique_keys)
    assert err.value.key == "vx"
    assert str(err.value) == ("key 'vx' given twice in one message (in the object with keys vx, vx, omega); "
                              "each key once")
    assert json.loads(text, object_pairs_hook=first_keys) == {"drive": {"vx": 0, "omega": 0}}
    assert json.loads('{"a": {"b": 1}, "c": [1, {"d": 2}]}', object_pairs_hook=unique_keys) == \
        {"a": {"b": 1}, "c": [1, {"d": 2}]}
    forged = '{"x\\nERROR forged": 1, "x\\nERROR forged": 2}'
    with pytest.raises(RepeatedKey) as err:
        json.loads(forged, object_pairs_hook=unique_keys)
    assert "\n" not in str(err.value)                       # escaped: one log line


# ---------------------------------------------------------------- ARTEX

REPEATED = {
    "vx twice in drive": '2/robot,["command",{"author":"x","payload":{"drive":{"vx":0,"vx":0.9,"omega":0}}}]',
    "payload twice": '2/robot,["command",{"author":"x","payload":{"com":"back"},"payload":{"com":"forward"}}]',
    "type twice in payload": '2/robot,["command",{"payload":{"tracks":{"left":0.9,"right":0.9},"tracks":{}}}]',
}


@pytest.mark.parametrize("packet", list(REPEATED.values()), ids=list(REPEATED))
async def test_artex_a_repeated_key_is_refused_counted_logged_and_nothing_moves(hub, caplog, packet):
    key = "vx" if "vx" in packet else "payload" if "payload\":{\"com\":\"back" in packet else "tracks"
    async with agent_on(hub) as agent:
        adapter = agent.adapters["artex"]
        with caplog.at_level(logging.WARNING, logger="agent.adapters"):
            await hub.send_packet(packet)
            assert await wait_for(lambda: adapter.status().counters.get("fault_repeated_key", 0) == 1, 5), \
                adapter.status().counters
        assert adapter.status()["rejected"] == 1 and adapter.status().counters.get("accepted", 0) == 0
        assert await _ticks(agent)
        snap = agent.control.snapshot()
        assert agent.physics.duty == [0.0, 0.0] and distance(agent) == 0.0
        assert snap.active_source != "artex" and not snap.stopped
        line = next(r.getMessage() for r in caplog.records if "given twice" in r.getMessage())
        assert f"key {key!r} given twice in one message" in line and "repeated_key" in line, line
        assert "Traceback" not in caplog.text
        assert adapter.status()["connected"] and hub.connected
        await hub.command({"drive": {"vx": 0.3, "omega": 0.0}})        # the link still drives
        assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
        assert agent.control.snapshot().active_source == "artex"


STOPS = {
    "author twice": '2/robot,["command",{"author":"a","author":"b","payload":{"com":"stop"}}]',
    "stop first, forward last": '2/robot,["command",{"author":"x","payload":{"com":"stop","com":"forward"}}]',
    "forward first, stop last": '2/robot,["command",{"payload":{"com":"forward"},"payload":{"com":"stop"}}]',
}


@pytest.mark.parametrize("packet", list(STOPS.values()), ids=list(STOPS))
async def test_artex_a_stop_with_a_repeated_key_is_still_a_stop(hub, caplog, packet):
    hub.auto_ready = False
    async with agent_on(hub, ready=False, **OTHER) as agent:       # before Ready: the stop comes first
        adapter = agent.adapters["artex"]
        agent.control.submit("robot_msg", BaseVelocity(0.4, 0.0))
        assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
        with caplog.at_level(logging.WARNING, logger="agent.adapters"):
            await hub.send_packet(packet)
            assert await wait_for(lambda: agent.physics.duty == [0.0, 0.0], 3), "the stop was lost"
        assert await wait_for(lambda: agent.control.snapshot().stopped, 2)
        assert agent.control.snapshot().active_source != "artex"       # no forward ran
        assert adapter.status().counters.get("accepted", 0) == 1
        assert any("given twice" in r.getMessage() and "the stop in it is obeyed" in r.getMessage()
                   for r in caplog.records), caplog.text
        assert adapter.status()["connected"]


#: stops sent as a binary event (type 5): the header, then its one attachment (a real hub's raw frames)
BINARY_STOPS = {
    "binary, stop first, forward last":
        '51-/robot,["command",{"author":"x","payload":{"com":"stop","com":"forward"},"blob":{"_placeholder":true,"num":0}}]',
    "binary, forward first, stop last":
        '51-/robot,["command",{"payload":{"com":"forward"},"payload":{"com":"stop"},"blob":{"_placeholder":true,"num":0}}]',
    "binary, author twice":
        '51-/robot,["command",{"author":"a","author":"b","payload":{"com":"stop"},"blob":{"_placeholder":true,"num":0}}]',
}


@pytest.mark.parametrize("packet", list(BINARY_STOPS.values()), ids=list(BINARY_STOPS))
async def test_artex_a_binary_stop_with_a_repeated_key_is_obeyed_as_the_text_one(hub, caplog, packet):
    hub.auto_ready = False
    async with agent_on(hub, ready=False, **OTHER) as agent:       # before Ready: the stop comes first
        adapter = agent.adapters["artex"]
        agent.control.submit("robot_msg", BaseVelocity(0.4, 0.0))
        assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
        with caplog.at_level(logging.WARNING, logger="agent.adapters"):
            t0 = time.perf_counter()
            await hub.send_packet(packet)
            await hub.send_packet(b"\x00\x01 attachment")
            assert await wait_for(lambda: agent.physics.duty == [0.0, 0.0], 3, period_s=0.002), "the stop was lost"
            took = time.perf_counter() - t0
        print(f"\n{packet[:60]!r}: stop at the motor driver {took * 1000:.1f} ms after the hub sent it")
        assert await wait_for(lambda: agent.control.snapshot().stopped, 2)
        assert agent.control.snapshot().active_source != "artex"       # no forward ran
        counters = adapter.status().counters
        assert counters.get("accepted", 0) == 1 and not any(k.startswith("fault_") for k in counters), counters
        assert any("given twice" in r.getMessage() and "the stop in it is obeyed" in r.getMessage()
                   for r in caplog.records), caplog.text
        assert adapter.status()["connected"]


async def test_artex_a_binary_stop_is_obeyed_only_once_its_attachment_came(hub):
    """As any binary event: the header alone is no stop; a text message in the attachment's place
    discards it (counted), and that text is handled as itself."""
    async with agent_on(hub) as agent:
        adapter = agent.adapters["artex"]
        await hub.command({"drive": {"vx": 0.3, "omega": 0.0}})
        assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
        await hub.send_packet(BINARY_STOPS["binary, stop first, forward last"])
        await hub.send_packet('2/robot,["heartbeat",["d_meta"]]')
        assert await wait_for(lambda: adapter.status().counters.get("fault_incomplete_binary", 0) == 1, 5)
        assert not agent.control.snapshot().stopped


async def test_artex_a_binary_event_with_a_repeated_key_that_is_no_stop_is_refused(hub):
    async with agent_on(hub) as agent:
        adapter = agent.adapters["artex"]
        await hub.send_packet('51-/robot,["command",{"payload":{"drive":{"vx":0,"vx":0.9,"omega":0}},'
                              '"blob":{"_placeholder":true,"num":0}}]')
        await hub.send_packet(b"\x00 attachment")         # nobody waits for it: counted apart
        assert await wait_for(lambda: adapter.status().counters.get("fault_stray_attachment", 0) == 1, 5)
        assert adapter.status().counters.get("fault_repeated_key", 0) == 1
        assert adapter.status().counters.get("accepted", 0) == 0
        assert await _ticks(agent)
        assert agent.physics.duty == [0.0, 0.0] and distance(agent) == 0.0 and adapter.status()["connected"]


async def test_artex_the_keys_of_repeated_key_packets_held_back_are_named_in_the_next_line(hub, caplog, monkeypatch):
    """One line per kind per interval (here 0.3 s instead of 10 s): the next line names the keys of those
    held back, so every key the hub repeated shows in the log."""
    monkeypatch.setattr("agent.adapters.artex.LOG_REPEAT_S", 0.3)
    keys = ("vx", "omega", "left\\nERROR forged")       # JSON's \n: a newline in the key

    def packet(key: str) -> str:
        return '2/robot,["command",{"payload":{"drive":{"%s":0,"%s":1}}}]' % (key, key)

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "given twice" in r.getMessage()]

    async with agent_on(hub) as agent:
        adapter = agent.adapters["artex"]
        with caplog.at_level(logging.WARNING, logger="agent.adapters"):
            for key in keys:
                await hub.send_packet(packet(key))
            assert await wait_for(lambda: adapter.status().counters.get("fault_repeated_key", 0) == 3, 5)
            for _ in range(50):                     # the interval ends: the next one is logged with the summary
                await hub.send_packet(packet("right"))
                if await wait_for(lambda: any("more like it" in line for line in lines()), 0.2):
                    break
        text = " ".join(lines())
        assert "more like it since the last report: key " in text, lines()
        for shown in ("'vx'", "'omega'", "'left\\nERROR forged'"):             # escaped, on one line
            assert f"key {shown}" in text, (shown, lines())
        assert all("\n" not in line for line in lines())
        assert adapter.status()["connected"] and distance(agent) == 0.0


async def test_artex_a_repeated_key_in_another_event_never_reaches_its_handler(hub, caplog):
    async with agent_on(hub) as agent:
        adapter = agent.adapters["artex"]
        with caplog.at_level(logging.WARNING, logger="agent.adapters"):
            await hub.send_packet('2/robot,["heartbeat",{"a":1,"a":2}]')
            assert await wait_for(lambda: adapter.status().counters.get("fault_repeated_key", 0) == 1, 5)
        assert adapter.status()["rejected"] == 1 and adapter.status()["connected"]
        assert "key 'a' given twice" in caplog.text and "rejected heartbeat" not in caplog.text


# ---------------------------------------------------------------- Sim2Bot
# The sim2bot bridge parses what a controller sends and relays it re-encoded (its json keeps the last
# value), so through it a repeated key arrives resolved; the agent refuses the frames it receives with
# one: from a bridge that relays text as it came, or any other peer on its socket. TextBridge is that
# peer: a WebSocket server on loopback that sends the agent's control socket the exact text given.


class TextBridge:
    """A WebSocket server on loopback in the bridge's place (``url``: its control socket); :meth:`send`
    puts one text frame, unchanged, on the agent's control socket."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}/ws"
        self.control: list = []
        self.hellos: list[str] = []

    async def _serve(self, conn) -> None:
        if conn.request.path.startswith("/ws"):
            self.control.append(conn)
        with contextlib.suppress(ConnectionClosed):     # the agent's close at shutdown
            async for message in conn:
                if isinstance(message, str) and '"hello"' in message:
                    self.hellos.append(message)

    async def send(self, text: str) -> None:
        await self.control[-1].send(text)

    async def __aenter__(self) -> TextBridge:
        self._server = await serve(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()


SIM_REPEATED = {
    "vx twice": '{"type":"base_velocity","vx":0,"vx":0.9,"omega":0,"robot":0}',
    "type twice": '{"type":"stop","type":"base_velocity","vx":0.9}',
    "a stop with room twice (refused as any malformed stop)": '{"type":"stop","room":"default","room":"default"}',
}


async def test_sim2bot_a_repeated_key_is_refused_counted_logged_and_nothing_moves(caplog):
    caplog.set_level(logging.WARNING, logger="agent.adapters.sim2bot")
    async with TextBridge() as bridge, running_agent(agent_params(bridge)) as agent:
        adapter = agent.adapters["sim2bot"]
        emu = agent.sim.motor_emulator
        assert await wait_for(lambda: adapter.status()["connected"] and bridge.hellos, 5)
        for n, text in enumerate(SIM_REPEATED.values(), 1):
            await bridge.send(text)
            assert await wait_for(lambda n=n: adapter.status()["rejected"] == n, 5), (text, adapter.status())
        # one line per reason per 10 s (docs/sim2bot.md): the first names its key, the others are counted
        line = next(r.getMessage() for r in caplog.records if "given twice" in r.getMessage())
        assert line.startswith("sim2bot: rejected message: key 'vx' given twice in one message (in the object "
                               "with keys type, vx, vx, omega, robot)"), line
        assert await _ticks(agent)
        snap = agent.control.snapshot()
        assert emu.motor_duty == [0.0, 0.0] and distance(agent) == 0.0
        assert snap.active_source == "" and not snap.stopped
        assert adapter.status()["executed"] == 0 and adapter.status()["connected"]
        assert len(bridge.control) == 1                                   # the link stayed up
        await bridge.send('{"type":"base_velocity","vx":0.3,"omega":0,"robot":0}')   # and still drives
        assert await wait_for(lambda: emu.motor_duty[0] > 0.0, 5)
        assert adapter.status()["executed"] == 1
