"""The console server on the real agent (simulated tank, emulators behind real drivers),
talked to over loopback with a real aiohttp client: the token rule, the origin check,
rejected messages, and the release when a tab closes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import aiohttp
import pytest

from tests.conftest import free_port, running_agent, wait_for
from tests.console.peers import console_agent, console_params

TOKEN = "kV3q9ZtR0bWm-Lx7Yp2Hc_Ue5Na8Jd4G"


def still(agent) -> bool:
    snap = agent.control.snapshot()
    return agent.sim.motor_emulator.motor_duty == [0.0, 0.0] and snap.odom.distance_m == 0.0


async def hello(ws: aiohttp.ClientWebSocketResponse) -> dict:
    msg = await ws.receive_json(timeout=5.0)
    assert msg["type"] == "hello"
    return msg


async def next_json(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict:
    """The next text message of ``kind`` (frames and other messages skipped)."""
    while True:
        msg = await ws.receive(timeout=5.0)
        if msg.type == aiohttp.WSMsgType.TEXT and json.loads(msg.data)["type"] == kind:
            return json.loads(msg.data)
        assert msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), msg


async def test_non_loopback_requires_the_token() -> None:
    port = free_port()
    async with console_agent(port, host="0.0.0.0", token=TOKEN) as agent:
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            for path in ("/", "/static/console.js", "/?token=wrong-token-1", "/ws"):
                async with http.get(base + path, allow_redirects=False) as r:
                    assert r.status == 401, path
            with pytest.raises(aiohttp.WSServerHandshakeError) as err:
                await http.ws_connect(base + "/ws")
            assert err.value.status == 401
            await asyncio.sleep(0.1)  # real time held on purpose: ~5 ticks in which a request let through would drive
            assert still(agent) and agent.control.snapshot().active_source == ""
            assert agent.adapters["console"].status()["auth_refused"] == 5
            async with http.get(base + f"/?token={TOKEN}", allow_redirects=False) as r:
                assert r.status == 302 and r.headers["Location"] == "/"
                assert "HttpOnly" in r.headers["Set-Cookie"]
            async with http.get(base + "/") as r:          # the cookie alone now
                assert r.status == 200 and "console.js" in await r.text()
            async with http.ws_connect(base + "/ws") as ws:
                await hello(ws)
                for i in range(5):
                    await ws.send_json({"type": "drive", "vx": 0.4, "omega": 0.0, "press": i == 0})
                    await asyncio.sleep(0.05)
                assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty[0] > 0.0, 5.0)
                await ws.send_json({"type": "stop"})
                assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty == [0.0, 0.0], 5.0)


async def test_non_loopback_without_token_is_not_started(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    caplog.set_level(logging.WARNING, logger="agent.console")
    async with running_agent(console_params(port, host="0.0.0.0")) as agent:
        assert "console" not in agent.adapters
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("NOT started" in m and f"http://0.0.0.0:{port}/?token=<console.token>" in m for m in warned), warned


async def test_foreign_origin_websocket_is_refused() -> None:
    port = free_port()
    async with console_agent(port) as agent, aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(f"http://127.0.0.1:{port}/ws", headers={"Origin": "http://evil.example"})
        assert err.value.status == 403
        async with http.ws_connect(f"http://127.0.0.1:{port}/ws",
                                   headers={"Origin": f"http://127.0.0.1:{port}"}) as ws:
            await hello(ws)
        assert still(agent)


async def test_dns_rebinding_host_is_refused_without_a_token() -> None:
    """A page on evil.example that rebinds its name to 127.0.0.1 sends Host and Origin both
    evil.example: same-origin, but not a loopback name, so no tab and no motion."""
    port = free_port()
    async with console_agent(port) as agent, aiohttp.ClientSession() as http:
        rebound = {"Host": f"rebind.evil.example:{port}", "Origin": f"http://rebind.evil.example:{port}"}
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(f"http://127.0.0.1:{port}/ws", headers=rebound)
        assert err.value.status == 421
        async with http.get(f"http://127.0.0.1:{port}/", headers={"Host": f"rebind.evil.example:{port}"}) as page:
            assert page.status == 421
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
            async with http.get(f"http://127.0.0.1:{port}/", headers={"Host": host}) as page:
                assert page.status == 200, host
        assert agent.adapters["console"].status()["auth_refused"] == 2
        assert still(agent)


BAD = [
    "not json", "[1]", json.dumps({"type": "fly"}), json.dumps({"type": "drive", "vx": 0.3}),
    json.dumps({"type": "drive", "vx": "0.3", "omega": 0}), '{"type": "drive", "vx": NaN, "omega": 0}',
    json.dumps({"type": "drive", "vx": 50.0, "omega": 0}), json.dumps({"type": "stop", "extra": 1}),
    json.dumps({"type": "drive", "vx": 0.3, "omega": 0, "pad": "x" * 2000}),
    '{"type": "release_estop", "type": "estop"}', '{"type": "drive", "vx": 0.3, "omega": 0, "vx": 0.5}',
]


async def test_bad_messages_are_rejected_counted_and_move_nothing(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    caplog.set_level(logging.WARNING, logger="agent.console")
    async with console_agent(port) as agent, aiohttp.ClientSession() as http:
        async with http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
            await hello(ws)
            for raw in BAD:
                await ws.send_str(raw)
                error = await next_json(ws, "error")
                assert error["message"].startswith("rejected: "), error
                if raw.count('"type"') == 2 or raw.count('"vx"') == 2:
                    assert "given twice in one message" in error["message"], error
            await ws.send_bytes(b"\x00\x01")
            assert (await next_json(ws, "error"))["message"].startswith("rejected: ")
            await asyncio.sleep(0.1)  # real time held on purpose: ~5 ticks in which an accepted message would drive
            status = agent.adapters["console"].status()
            assert status["rejected"] == len(BAD) + 1 and status["executed"] == 0
            assert still(agent) and agent.control.snapshot().active_source == ""
            assert agent.control.snapshot().safety.estop is None       # the duplicate "type" set nothing
            for _ in range(3):                 # the page sees the count (a state built before may be in flight)
                state = await next_json(ws, "state")
                if state["console"]["rejected"] == len(BAD) + 1:
                    break
            assert state["console"]["rejected"] == len(BAD) + 1
            await ws.send_json({"type": "drive", "vx": 0.3, "omega": 0.0, "press": True})   # the socket still works
            assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty[0] > 0.0, 5.0)
    assert any("console: rejected message from 127.0.0.1" in r.getMessage() for r in caplog.records)


async def test_a_message_over_64_kib_closes_the_tab_counted_logged_and_the_tank_stops(caplog) -> None:
    """docs/console.md: aiohttp cannot skip a frame over its 64 KiB limit; the tab ends with 1009, the
    rejection is counted and logged, and the tab's source is released."""
    port = free_port()
    caplog.set_level(logging.WARNING, logger="agent.console")
    async with console_agent(port) as agent, aiohttp.ClientSession() as http:
        async with http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
            await hello(ws)
            await ws.send_json({"type": "drive", "vx": 0.3, "omega": 0.0, "press": True})
            assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty[0] > 0.0, 5.0)
            await ws.send_str(json.dumps({"type": "stop", "pad": "x" * (1 << 20)}))
            while (await ws.receive(timeout=10)).type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                pass
            assert ws.close_code == 1009
        assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty == [0.0, 0.0], 2.0)
        assert agent.adapters["console"].status()["rejected"] == 1
    assert any("console: rejected message from 127.0.0.1" in r.getMessage() and "connection is closed" in r.getMessage()
               for r in caplog.records)


async def test_a_message_of_exactly_the_64_kib_limit_is_read_and_one_byte_more_closes_saying_so(caplog) -> None:
    """aiohttp refuses a message of exactly its ``max_msg_size`` ("Message size 65536 exceeds limit
    65536"): the console gives it one more, so ``console.max_message_bytes`` 65536 means what it says,
    and its own line names the size and the agent's limit."""
    port = free_port()
    caplog.set_level(logging.WARNING, logger="agent.console")
    async with console_agent(port, max_message_bytes=65536) as agent, aiohttp.ClientSession() as http:
        async with http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
            await hello(ws)
            await ws.send_json({"type": "drive", "vx": 0.3, "omega": 0.0, "press": True})
            assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty[0] > 0.0, 5.0)
            stop = '{"type": "stop"' + " " * (65536 - 16) + "}"
            assert len(stop.encode()) == 65536
            await ws.send_str(stop)                                 # at the limit: read and obeyed
            assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty == [0.0, 0.0], 5.0)
            assert agent.adapters["console"].status()["rejected"] == 0 and not ws.closed
            await ws.send_str(stop + " ")                           # one byte more: 1009
            while (await ws.receive(timeout=10)).type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                pass
            assert ws.close_code == 1009
        assert agent.adapters["console"].status()["rejected"] == 1
    line = next(r.getMessage() for r in caplog.records if "connection is closed" in r.getMessage())
    assert "message of 65537 bytes, over the 65536-byte limit (1009)" in line, line


async def test_closing_the_driving_tab_releases_the_source(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    caplog.set_level(logging.INFO)
    # a long console timeout: only the release (not the watchdog) can stop the tank within it
    extra = {"control": {"sources": {"console": {"priority": 40, "timeout_s": 4.0}}}}
    async with console_agent(port, extra) as agent, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{port}/ws"
        async with http.ws_connect(url) as viewer:
            assert (await hello(viewer))["control"]["you"]          # the first tab holds control
            async with http.ws_connect(url) as ws:
                assert not (await hello(ws))["control"]["you"]
                await ws.send_json({"type": "take"})
                await ws.send_json({"type": "drive", "vx": 0.5, "omega": 0.0, "press": True})
                assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty[0] > 0.2, 5.0)
                await viewer.close()                  # a tab that never drove: no release
                assert await wait_for(lambda: agent.adapters["console"].status()["open"] == 1, 5.0)
                assert agent.control.snapshot().active_source == "console"
            # the duty write precedes the tick's snapshot: wait for both
            assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty == [0.0, 0.0]
                                  and agent.control.snapshot().active_source == "", 2.0)
    assert any("console released (console tab 2 from 127.0.0.1 closed) while driving base" in r.getMessage()
               for r in caplog.records)


async def test_frames_wait_for_the_page() -> None:
    """Latest frame only: a tab that does not acknowledge gets one frame, then the newest on ``frame``."""
    port = free_port()
    async with console_agent(port) as agent, aiohttp.ClientSession() as http:
        async with http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
            await hello(ws)
            while (msg := await ws.receive(timeout=10.0)).type != aiohttp.WSMsgType.BINARY:
                pass                                        # the first frame needs no request
            assert msg.data[:2] == b"\xff\xd8"
            first_seq = agent.video.latest("front").seq
            extra = []
            end = asyncio.get_running_loop().time() + 1.5
            while (left := end - asyncio.get_running_loop().time()) > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    msg = await ws.receive(timeout=left)
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        extra.append(msg.data)
            assert agent.video.latest("front").seq > first_seq + 5   # the camera went on meanwhile
            assert extra == []                                      # no frame without a request: no backlog
            await ws.send_json({"type": "frame"})
            while (msg := await ws.receive(timeout=5.0)).type != aiohttp.WSMsgType.BINARY:
                pass
            assert msg.data[:2] == b"\xff\xd8"
            assert await wait_for(lambda: agent.adapters["console"].status()["frames_sent"] == 2, 2.0)


async def test_agent_shutdown_with_a_tab_driving_stops_and_closes_it() -> None:
    port = free_port()
    http = aiohttp.ClientSession()
    try:
        async with console_agent(port) as agent:
            ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws")
            await hello(ws)
            await ws.send_json({"type": "drive", "vx": 0.5, "omega": 0.0, "press": True})
            assert await wait_for(lambda: agent.sim.motor_emulator.motor_duty[0] > 0.0, 5.0)
            emu = agent.sim.motor_emulator
        assert emu.motor_duty == [0.0, 0.0]
        while (await ws.receive(timeout=5.0)).type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                                                            aiohttp.WSMsgType.CLOSING):
            pass
    finally:
        await http.close()


async def test_health_shows_the_console_link() -> None:
    from agent.ops.status import gather

    port = free_port()
    async with console_agent(port) as agent:
        assert await wait_for(lambda: gather(agent)["state"] == "ok", 10.0), gather(agent)
        health = gather(agent)
        assert health["links"]["console"] == {"connected": True} and "console=up" in health["summary"]
