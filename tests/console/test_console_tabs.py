"""Console tabs on the real agent (simulated tank) over loopback with a real aiohttp client:
one tab drives at a time, taking control moves it, a stop from any tab makes the driving tab
press again, the e-stop from a watching tab holds until released, and a press re-engages the
console with an explicit zero (the control loop refuses a stream that ran into the e-stop)."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from tests.conftest import free_port, wait_for
from tests.console.peers import console_agent

DRIVE = {"type": "drive", "vx": 0.4, "omega": 0.0}


async def hello(ws: aiohttp.ClientWebSocketResponse) -> dict:
    msg = await ws.receive_json(timeout=5.0)
    assert msg["type"] == "hello"
    return msg


async def next_json(ws: aiohttp.ClientWebSocketResponse, kind: str, where=lambda m: True) -> dict:
    """The next text message of ``kind`` for which ``where`` holds (others skipped)."""
    while True:
        msg = await ws.receive(timeout=5.0)
        assert msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), msg
        if msg.type == aiohttp.WSMsgType.TEXT:
            data = json.loads(msg.data)
            if data["type"] == kind and where(data):
                return data


def duty(agent) -> list[float]:
    return list(agent.sim.motor_emulator.motor_duty)


async def test_only_the_tab_in_control_drives_and_taking_control_moves_it() -> None:
    port = free_port()
    async with console_agent(port) as agent, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{port}/ws"
        async with http.ws_connect(url) as one, http.ws_connect(url) as two:
            c1, c2 = (await hello(one))["control"], (await hello(two))["control"]
            assert c1["you"] and c1["holder"] == c1["tab"] and not c2["you"] and c2["holder"] == c1["tab"]
            await two.send_json({**DRIVE, "press": True})
            refused = await next_json(two, "error")
            assert refused["message"].startswith(f"refused: this tab watches; tab {c1['tab']} (127.0.0.1) drives since ")
            assert "take control to drive" in refused["message"]
            await asyncio.sleep(0.2)
            assert duty(agent) == [0.0, 0.0]

            await one.send_json({**DRIVE, "press": True})
            assert await wait_for(lambda: duty(agent)[0] > 0.0, 5.0)
            await two.send_json({"type": "take"})              # from a tab that drives: it stops at once
            told = await next_json(one, "error")
            assert f"tab {c2['tab']} (127.0.0.1) took control at " in told["message"]
            assert not (await next_json(one, "control"))["you"]
            assert await wait_for(lambda: duty(agent) == [0.0, 0.0], 2.0)
            state = await next_json(one, "state", lambda m: m["control"]["holder"] == c2["tab"])
            assert not state["control"]["you"] and state["control"]["since"]
            await one.send_json({**DRIVE, "press": True})
            assert "this tab watches" in (await next_json(one, "error"))["message"]

            await two.send_json(DRIVE)                          # a held key from before the take
            assert "this tab just took control: let go and press again" in (await next_json(two, "error"))["message"]
            await two.send_json({**DRIVE, "press": True})
            assert await wait_for(lambda: duty(agent)[0] > 0.0, 5.0)
            assert agent.control.snapshot().active_source == "console"
            await one.close()                                   # a watching tab closing: nothing changes
            await two.send_json(DRIVE)
            assert await wait_for(lambda: agent.adapters["console"].status()["open"] == 1, 5.0)
            await two.send_json(DRIVE)
            assert await wait_for(lambda: duty(agent)[0] > 0.0, 2.0)
        assert await wait_for(lambda: duty(agent) == [0.0, 0.0], 2.0)      # the holder closed: released
        status = agent.adapters["console"].status()
        assert status["refused"] == 3 and status["rejected"] == 0


async def test_a_stop_from_a_watching_tab_needs_a_new_press_from_the_driver() -> None:
    port = free_port()
    # a short console timeout: the press below comes after it, so only the console's own rule
    # (not the control loop's stop latch, docs/safety.md) can refuse the held key's repeat
    short = {"control": {"sources": {"console": {"priority": 40, "timeout_s": 0.2}}}}
    async with console_agent(port, short) as agent, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{port}/ws"
        async with http.ws_connect(url) as driver, http.ws_connect(url) as watcher:
            await hello(driver)
            watcher_tab = (await hello(watcher))["control"]["tab"]
            await driver.send_json({**DRIVE, "press": True})
            assert await wait_for(lambda: duty(agent)[0] > 0.0, 5.0)
            await watcher.send_json({"type": "stop"})             # anyone may stop
            assert await wait_for(lambda: duty(agent) == [0.0, 0.0], 2.0)
            await driver.send_json(DRIVE)                         # the held key's repeat
            refused = await next_json(driver, "error")
            assert f"stop from tab {watcher_tab} (127.0.0.1) at " in refused["message"]
            assert refused["message"].endswith("let go and press again to drive")
            await asyncio.sleep(0.1)  # real time held on purpose: ~5 ticks in which the refused repeat would drive
            assert duty(agent) == [0.0, 0.0]
            await driver.send_json({**DRIVE, "press": True})      # a new key-down
            assert await wait_for(lambda: duty(agent)[0] > 0.0, 5.0)
            await watcher.send_json({"type": "stop"})
            assert await wait_for(lambda: duty(agent) == [0.0, 0.0], 2.0)
            await driver.send_json(DRIVE)
            assert "let go and press again" in (await next_json(driver, "error"))["message"]
            await asyncio.sleep(0.3)  # real time held on purpose: past the console's 0.2 s timeout (see above)
            await driver.send_json({**DRIVE, "vx": 0.0})          # letting go re-engages too
            await driver.send_json(DRIVE)
            assert await wait_for(lambda: duty(agent)[0] > 0.0, 5.0)


async def test_estop_from_a_watching_tab_holds_until_released_and_a_press_reengages() -> None:
    port = free_port()
    async with console_agent(port) as agent, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{port}/ws"
        async with http.ws_connect(url) as driver, http.ws_connect(url) as watcher:
            await hello(driver)
            watcher_tab = (await hello(watcher))["control"]["tab"]
            await driver.send_json({**DRIVE, "press": True})
            assert await wait_for(lambda: duty(agent)[0] > 0.0, 5.0)
            await watcher.send_json({"type": "estop"})
            assert await wait_for(lambda: duty(agent) == [0.0, 0.0], 2.0)
            halt = agent.control.snapshot().safety.estop
            assert halt is not None and halt.by == "console" and f"console tab {watcher_tab}" in halt.reason
            state = await next_json(driver, "state", lambda m: m["safety"]["halts"])
            (shown,) = state["safety"]["halts"]
            assert shown["kind"] == "estop" and shown["by"] == "console" and shown["since_unix_s"] > 0
            assert f"STOP button on console tab {watcher_tab}" in shown["reason"]

            await driver.send_json({**DRIVE, "press": True})      # refused by the e-stop, even a press
            assert "emergency stop" in (await next_json(driver, "error"))["message"]
            await driver.send_json(DRIVE)                         # still streaming into the e-stop
            await next_json(driver, "error")
            await driver.send_json({"type": "release_estop"})
            assert await wait_for(lambda: agent.control.snapshot().safety.estop is None, 2.0)
            await driver.send_json(DRIVE)                         # release moves nothing
            assert "let go and press again" in (await next_json(driver, "error"))["message"]
            await asyncio.sleep(0.1)  # real time held on purpose: ~5 ticks in which the refused drive would move
            assert duty(agent) == [0.0, 0.0]
            # the press sends a zero first: the control loop takes it as the console re-engaging
            await driver.send_json({**DRIVE, "press": True})
            assert await wait_for(lambda: duty(agent)[0] > 0.0, 5.0)
            await driver.send_json({"type": "release_estop"})     # nothing to release
            assert (await next_json(driver, "error"))["message"].startswith("refused: ")
            assert duty(agent)[0] > 0.0
