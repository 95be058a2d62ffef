"""ARTEX adapter end to end: the agent on the simulated tank against a real python-socketio hub.

The hub is :class:`agent.testing.artex_hub.ArtexHub` (python-socketio AsyncServer + aiohttp on a free
loopback port, in this process); the agent is agent.app.Agent with its real control loop, drivers and
emulators. Timing bounds are deliberately loose (shared CI machine); figures are in scripts/bench_artex.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time

import cv2
import numpy as np
import pytest

from agent.config import load
from agent.support.logtail import LogTail
from agent.commands import BaseVelocity
from agent.testing import artex_hub
from agent.testing.artex_hub import agent_on, artex_params, distance, drive, driving, hub_script
from agent.testing.ports import free_port
from agent.testing.running_agent import running_agent, sim_config, wait_for

pytestmark = pytest.mark.timeout(60)

ADAPTER_LOG = "agent.adapters.artex"
#: Motion commands sent before Ready in test_commands_before_ready_are_ignored.
BEFORE_READY = 5


# ---------------------------------------------------------------------- handshake


async def test_passport_heartbeat_and_token(hub):
    async with agent_on(hub) as agent:
        sid = hub.connected[-1]
        assert hub.passports[sid] == {"name": "tank-01", "type": "Robot", "telem_can": True, "video_can": True}
        _, hb_sid, answer = hub.heartbeats[-1]
        assert hb_sid == sid
        assert answer == {"d_meta": {"sid": sid, "ready": "ok", "telem_run": True, "video_run": True}, "Ready": "ok"}
        assert await hub.token_ask() == sid
        assert await hub.heartbeat(["d_meta"]) == {"d_meta": {"sid": sid, "ready": "ok", "telem_run": True,
                                                              "video_run": True}}
        status = agent.adapters["artex"].status()
        assert status["connected"] and status["sid"] == sid and status["ready"] == "ok"


async def test_heartbeat_oddities(hub, caplog):
    hub.auto_ready = False                  # "init" throughout, however long the heartbeats take
    async with agent_on(hub, ready=False):
        assert await hub.heartbeat(["d_meta"]) == {"d_meta": {"sid": hub.connected[-1], "ready": "init",
                                                              "telem_run": False, "video_run": False}}
        with caplog.at_level(logging.WARNING, logger=ADAPTER_LOG):
            assert await hub.heartbeat(["bogus", "d_meta"]) == {"d_meta": {
                "sid": hub.connected[-1], "ready": "init", "telem_run": False, "video_run": False}}
            assert await hub.heartbeat("d_meta") == {}
        assert "unknown heartbeat request str 'bogus'" in caplog.text
        assert "heartbeat: data must be a list of requests" in caplog.text
        assert hub.connected


async def test_commands_before_ready_are_ignored(hub, caplog):
    hub.auto_ready = False
    with caplog.at_level(logging.INFO, logger=ADAPTER_LOG):
        async with agent_on(hub, ready=False) as agent:
            # a fixed count, not a time window: a loaded machine may send only one or two in 0.5 s
            for _ in range(BEFORE_READY):
                await hub.command({"com": "forward"})
                await asyncio.sleep(0.1)                     # paced as an operator UI repeats them
            # every one arrived and was ignored (a count, not a sleep: a loaded machine delivers late)
            assert await wait_for(lambda: agent.adapters["artex"].status()["ignored"] >= BEFORE_READY, 5)
            # and the control loop ticked on after the last one without moving the tank
            seq = agent.control.snapshot().seq
            assert await wait_for(lambda: agent.control.snapshot().seq >= seq + 3, 5)
            assert distance(agent) == 0.0
            assert agent.adapters["artex"].status()["ignored"] == BEFORE_READY
            assert agent.adapters["artex"].status().get("accepted", 0) == 0
            assert caplog.text.count("command ignored: not ready") == 1  # logged once, not per command
            assert not hub.telem and not hub.video  # no streams before Ready
            await hub.heartbeat(["Ready"])
            async with driving(hub, {"com": "forward"}):     # repeated until the tank moved
                assert await wait_for(lambda: distance(agent) > 0.02, 5)


async def test_a_stop_before_ready_is_obeyed(hub):
    hub.auto_ready = False
    params = {"control": {"sources": {"robot_msg": {"priority": 30, "timeout_s": 5.0}}}}
    async with agent_on(hub, ready=False, **params) as agent:
        agent.control.submit("robot_msg", BaseVelocity(0.5, 0.0))  # another source drives (5 s timeout)
        assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
        await hub.command({"com": "stop"})                           # ARTEX has not sent Ready yet
        assert await wait_for(lambda: agent.control.snapshot().stopped, 3), "stop ignored before Ready"
        assert await wait_for(lambda: agent.physics.duty == [0.0, 0.0], 2)
        assert agent.adapters["artex"].status()["accepted"] == 1


# ---------------------------------------------------------------------- motion and safety


async def test_forward_moves_the_tank_and_the_watchdog_stops_it(hub):
    async with agent_on(hub) as agent:
        sending = asyncio.ensure_future(drive(hub, {"com": "forward"}, 1.5))
        # while the hub streams (on a loaded machine the loop may start driving late)
        assert await wait_for(lambda: (s := agent.control.snapshot()).odom.distance_m > 0.1
                              and s.active_source == "artex", 5)
        sent = await sending
        # every command delivered (a loaded machine may deliver late): from now on nothing new arrives
        assert await wait_for(lambda: agent.adapters["artex"].status().get("accepted", 0) >= sent, 5)
        assert agent.sim.physics.x_m > 0.1
        assert await wait_for(lambda: any((t[1]["speed"] or 0) > 0.2 for t in hub.telem), 5)
        assert await wait_for(lambda: hub.telem[-1][1]["odom"]["distance_m"] > 0.1, 5)
        # commands stop: the watchdog (0.5 s) zeroes the tracks without any stop command
        assert await wait_for(lambda: agent.control.snapshot().watchdog == "expired", 3)
        snap = agent.control.snapshot()
        assert (snap.tracks.duty_left, snap.tracks.duty_right) == (0.0, 0.0)
        assert await wait_for(lambda: abs(agent.sim.physics.vx_mps) < 0.01, 3)
        assert await wait_for(lambda: hub.telem[-1][1]["watchdog"] == "expired" and hub.telem[-1][1]["speed"] == 0, 5)


async def test_drive_tracks_and_stop(hub):
    async with agent_on(hub) as agent:
        async with driving(hub, {"drive": {"vx": 0.0, "omega": 1.0}}):
            assert await wait_for(lambda: agent.control.snapshot().odom.omega_radps > 0.3, 5)  # turning left
        async with driving(hub, {"tracks": {"left": 0.5, "right": 0.5}}):
            assert await wait_for(lambda: min(agent.control.snapshot().tracks.duty_left,
                                              agent.control.snapshot().tracks.duty_right) > 0.2, 5)
        await hub.command({"com": "stop"})
        assert await wait_for(lambda: agent.control.snapshot().stopped, 3)
        snap = agent.control.snapshot()
        assert (snap.tracks.duty_left, snap.tracks.duty_right) == (0.0, 0.0)


async def test_bad_input_is_logged_rejected_and_harmless(hub, caplog):
    bad = [
        ("command", {"author": "x", "payload": {"fly": 1}}, "unknown command type 'fly'"),
        ("command", {"author": "x", "payload": {"com": "jump"}}, "unknown command 'jump'"),
        ("command", {"author": "x", "payload": ["com", "forward"]}, "payload must be an object"),
        ("command", {"author": "x", "payload": "forward"}, "payload must be an object"),
        ("command", ["forward"], "command must be an object"),
        ("command", "forward", "command must be an object"),
        ("command", {"author": "x"}, "command has no payload"),
        ("command", {"author": "x", "payload": {"drive": {"vx": math.nan}}}, "payload.drive.vx must be finite"),
        ("command", {"author": "x", "payload": {"drive": {"vx": math.inf}}}, "payload.drive.vx must be finite"),
        ("command", {"author": "x", "payload": {"drive": [1, 0]}}, "payload.drive must be an object"),
        ("command", {"author": "x", "payload": {"tracks": {"left": 2, "right": 0}}}, "within -1..1"),
        ("command", {"author": "x", "payload": {"com": "f" * 200_000}}, "payload.com is 200000 characters long"),
        ("command", {"author": "a" * 200_000, "payload": {"com": "forward"}}, "author is 200000 characters long"),
        ("command", {"author": "x", "payload": {"file": "passwd"}}, "unknown request 'passwd'"),
        ("shutdown", {"now": True}, "unknown event str 'shutdown'"),
    ]
    async with agent_on(hub) as agent:
        adapter = agent.adapters["artex"]
        sid = hub.connected[-1]
        with caplog.at_level(logging.WARNING, logger=ADAPTER_LOG):
            for event, data, _ in bad:
                await hub.send_raw(event, data)
            assert await wait_for(lambda: adapter.status().get("rejected", 0) >= len(bad), 5)
        # logged once per (source, reason), not per text: the first of each reason, the rest counted
        lines = [r.getMessage() for r in caplog.records if r.name == ADAPTER_LOG]
        assert bad[0][2] in caplog.text and "payload.drive.vx must be finite" in caplog.text
        assert "unknown event str 'shutdown'" in caplog.text
        assert len(lines) == 3, lines  # reasons invalid, non_finite (commands) and invalid (event)
        with caplog.at_level(logging.WARNING, logger=ADAPTER_LOG):
            for _ in range(5):  # the same bad command again: counted, not logged again (rate limit)
                await hub.command({"fly": 1})
            assert await wait_for(lambda: adapter.status()["rejected"] >= len(bad) + 5, 5)
        assert caplog.text.count("unknown command type 'fly'") == 1
        assert max(len(r.getMessage()) for r in caplog.records) < 1000  # huge inputs are not echoed
        await hub.heartbeat(["d_meta"])           # answered: every command sent before it was handled
        await asyncio.sleep(0.1)  # real time held on purpose: ~5 ticks in which an accepted command would drive
        snap = agent.control.snapshot()
        assert snap.odom.distance_m == 0.0 and snap.active_source == "" and snap.tracks.duty_left == 0.0
        assert hub.connected == [sid] and adapter.status()["connected"]
        await drive(hub, {"com": "forward"}, 0.5)  # the link still works
        assert await wait_for(lambda: distance(agent) > 0.02, 5)


# ---------------------------------------------------------------------- link loss


@pytest.mark.parametrize("graceful", [True, False], ids=["hub-disconnects", "hub-crashes"])
async def test_hub_restart_reconnects_releases_and_waits_for_ready(hub, caplog, graceful):
    async with agent_on(hub) as agent:
        adapter = agent.adapters["artex"]
        async with driving(hub, {"com": "forward"}):
            assert await wait_for(lambda: agent.control.snapshot().active_source == "artex", 5)
            with caplog.at_level(logging.INFO):
                await hub.stop(graceful=graceful)
                assert await wait_for(lambda: not adapter.status()["connected"], 5)
        assert "artex released" in caplog.text
        if graceful:  # told at once: released while still driving (a crash is noticed later, maybe after the watchdog)
            assert "while driving base: stopped at once" in caplog.text
        assert adapter.status()["ready"] == "init" and not adapter.status()["telem_run"]
        assert await wait_for(lambda: agent.control.snapshot().active_source == "", 2)

        hub.auto_ready = False
        await hub.start()  # same port
        assert await wait_for(lambda: hub.connected, 10), "no reconnect"
        sid = hub.connected[-1]
        assert hub.passports[sid]["name"] == "tank-01"
        meta = await hub.heartbeat(["d_meta"])
        assert meta == {"d_meta": {"sid": sid, "ready": "init", "telem_run": False, "video_run": False}}
        n_telem, n_video = len(hub.telem), len(hub.video)
        await asyncio.sleep(0.3)  # real time held on purpose: 3 telem periods (max_send_freq 0.1 s) with no stream
        assert (len(hub.telem), len(hub.video)) == (n_telem, n_video)  # streams wait for Ready
        await hub.heartbeat(["Ready"])
        assert await wait_for(lambda: len(hub.telem) > n_telem and len(hub.video) > n_video, 5)
        assert adapter.status()["connects"] == 2


async def test_reconnects_while_the_hub_is_down_for_a_while(hub):
    port = hub.port
    await hub.stop()
    async with running_agent(artex_params(hub, port=port)) as agent:
        # a few failed attempts
        assert await wait_for(lambda: agent.adapters["artex"].status().get("connect_failures", 0) >= 2, 10)
        assert agent.adapters["artex"].status()["connect_failures"] >= 1
        await hub.start()
        assert await wait_for(lambda: hub.heartbeats, 10)


async def test_silent_hub_times_out_and_is_retried(hub):
    async def mute(reader, writer):  # accepts TCP, never answers (a hung hub)
        await reader.read()
        writer.close()

    server = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        params = artex_params(hub, port=port, artex={"connect_timeout_s": 0.3})
        async with running_agent(params) as agent:
            assert await wait_for(lambda: agent.adapters["artex"].status().get("connect_failures", 0) >= 2, 15)
            assert not agent.adapters["artex"].status()["connected"]
    finally:
        server.close()


# ---------------------------------------------------------------------- streams


async def test_telem_rate_limit_and_only_on_change(hub):
    async with agent_on(hub, max_send_freq=0.1) as agent:
        imu = agent.sim.chip("mpu6050").motion  # a real MPU-6050's noise at rest (~0.035 m/s^2 rms)
        imu.accel_noise_mps2, imu.gyro_noise_radps = 0.035, 0.001
        await drive(hub, {"drive": {"vx": 0.2, "omega": 0.5}}, 1.2)
        times = [t for t, _ in hub.telem]
        assert len(times) >= 4
        # at most one per max_send_freq (exact pacing: test_artex_telem.py, on a virtual clock);
        # counted over the whole drive, since receipt times jitter with the load
        assert len(times) <= 1.2 / 0.1 + 3, np.diff(times)
        # still robot: once the tracks have settled the dict stops changing; only the keepalive goes out
        assert await wait_for(lambda: agent.control.snapshot().watchdog == "expired", 3)
        # tracks coast to rest (~1.2 s) and the settled values go out: then no telem for 0.5 s (5 polls)
        assert await wait_for(lambda: abs(agent.physics.vx_mps) < 0.005
                              and time.monotonic() - hub.telem[-1][0] > 0.5, 5)
        n = len(hub.telem)
        await asyncio.sleep(3.0)  # real time held on purpose: the keepalive's rate (1 s) is the claim
        assert 2 <= len(hub.telem) - n <= 5, [p for _, p in list(hub.telem)[n:]]  # ~3 at 1 s keepalive
        ax = []
        for _ in range(5):
            ax.append(agent.control.snapshot().imu.accel_mps2[0])
            await asyncio.sleep(0.05)
        assert len(set(ax)) > 1  # the IMU really was noisy meanwhile
        assert agent.adapters["artex"].status()["telem_run"]


async def test_video_frames_decode_and_led_keys_go_raw(hub):
    cameras = sim_config()["drivers"]["cameras"] + [
        {"id": "rgb_strip", "source": "sim://pattern", "width": 32, "height": 16, "fps": 15}]
    async with agent_on(hub, drivers={"cameras": cameras}) as agent:
        assert await wait_for(lambda: len(hub.video) >= 3 and "rgb_strip" in hub.last_video
                              and "front" in hub.last_video, 10)
        jpeg = hub.last_video["front"]
        assert isinstance(jpeg, bytes) and jpeg[:2] == b"\xff\xd8"
        image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
        assert image is not None and image.shape == (480, 640, 3)
        raw = hub.last_video["rgb_strip"]  # sent as is (SDK: keys with led / rgb_strip), BGR rows
        assert isinstance(raw, bytes) and len(raw) == 16 * 32 * 3
        times = [t for t, _ in hub.video]
        assert np.diff(times).min() >= agent.cfg.max_send_freq - 0.03


async def test_telem_can_and_video_can_false(hub):
    async with agent_on(hub, telem_can=False, video_can=False) as agent:
        sid = hub.connected[-1]
        assert hub.passports[sid]["telem_can"] is False and hub.passports[sid]["video_can"] is False
        assert hub.heartbeats[-1][2]["d_meta"]["telem_run"] is False
        async with driving(hub, {"com": "forward"}):
            assert await wait_for(lambda: distance(agent) > 0.05, 5)
            await asyncio.sleep(0.2)  # real time held on purpose: 2 more telem periods of a changing state
        assert not hub.telem and not hub.video


# ---------------------------------------------------------------------- file


@pytest.fixture
def tail():
    """A LogTail on the root logger at INFO for the test (the agent's ``file`` answers read it)."""
    tail = LogTail(max_bytes=16 * 1024)
    root = logging.getLogger()
    root.addHandler(tail)
    old_level = root.level
    root.setLevel(logging.INFO)
    try:
        yield tail
    finally:
        root.removeHandler(tail)
        root.setLevel(old_level)


async def test_file_log_error_and_clear(hub, tail):
    async with running_agent(artex_params(hub), logs=tail):
        assert await wait_for(lambda: hub.heartbeats, 10)
        logging.getLogger("tests.artex").error("boom-4711")
        await hub.command({"file": "error"})
        await hub.command({"file": "log"})
        assert await wait_for(lambda: len(hub.files) >= 2, 5)
        (_, err), (_, full) = list(hub.files)[:2]
        assert err["type"] == "error" and "boom-4711" in err["content"] and "ARTEX: connected" not in err["content"]
        assert full["type"] == "log" and "ARTEX: connected" in full["content"] and "boom-4711" in full["content"]
        await hub.command({"file": "clear"})
        await hub.command({"file": "error"})
        assert await wait_for(lambda: len(hub.files) >= 3, 5)
        assert len(hub.files) == 3 and hub.files[2][1]["type"] == "error"  # clear answered nothing (in order)
        assert "boom-4711" not in hub.files[-1][1]["content"]


async def test_a_command_the_robot_declines_is_in_the_file_log_not_the_error_file(hub, tail):
    """docs/artex.md: a declined command (here: e-stopped) is an INFO line, fetched with ``{"file": "log"}``;
    ``{"file": "error"}`` holds only what needs a person."""
    async with running_agent(artex_params(hub), logs=tail) as agent:
        assert await wait_for(lambda: hub.heartbeats, 10)
        agent.control.estop("cli", "test")
        await hub.command({"drive": {"vx": 0.3, "omega": 0.0}})
        assert await wait_for(lambda: "refused by the robot" in tail.log_text(), 5)
        await hub.command({"file": "log"})
        await hub.command({"file": "error"})
        assert await wait_for(lambda: len(hub.files) >= 2, 5)
        (_, full), (_, err) = list(hub.files)[:2]
        assert full["type"] == "log" and "ARTEX: rejected command: payload.drive: refused by the robot" in full["content"]
        assert err["type"] == "error" and "refused by the robot" not in err["content"]
        assert agent.physics.duty == [0.0, 0.0]


# ---------------------------------------------------------------------- web_settings


async def test_web_settings_applied_persisted_and_rejected(hub, tmp_path, caplog):
    params = artex_params(hub, max_send_freq=0.05)
    path = tmp_path / "params.json"
    path.write_text(json.dumps(params, indent=2))
    async with running_agent(params, config_path=str(path)) as agent:
        adapter = agent.adapters["artex"]
        assert await wait_for(lambda: hub.heartbeats, 10)
        await hub.command({"web_settings": {"max_send_freq": 0.25, "jpeg_quality": 40, "max_speed_mps": 0.5}})
        assert await wait_for(lambda: adapter.cfg.max_send_freq == 0.25, 5)
        saved = json.loads(path.read_text())
        assert saved["max_send_freq"] == 0.25 and saved["artex"]["jpeg_quality"] == 40
        assert saved["artex"]["max_speed_mps"] == 0.5 and saved["base"] == params["base"]
        assert list(saved) == list(params) and saved["drivers"] == params["drivers"]
        assert agent.control.limits()[0] == 0.5
        # applied live: telem now at most every 0.25 s while the robot moves
        await drive(hub, {"drive": {"vx": 1.0, "omega": 0.0}}, 1.5)
        snap = agent.control.snapshot()
        assert max(snap.tracks.duty_left, snap.tracks.duty_right) <= 0.5 + 1e-6  # the new limit holds
        assert agent.sim.physics.vx_mps <= 0.5 + 0.02
        recent = [t for t, _ in hub.telem if t > hub.telem[-1][0] - 1.0]
        assert len(recent) >= 2 and (recent[-1] - recent[0]) / (len(recent) - 1) >= 0.25 * 0.8, np.diff(recent)

        before = path.read_text()
        with caplog.at_level(logging.WARNING, logger=ADAPTER_LOG):
            await hub.command({"web_settings": {"server": "http://evil"}})
            await hub.command({"web_settings": {"max_send_freq": 0.5, "jpeg_quality": 0}})
            await hub.command({"web_settings": {"telem_can": "no"}})
            assert await wait_for(lambda: adapter.status().get("rejected", 0) >= 3, 5)
        assert "key 'server' is not settable" in caplog.text
        assert caplog.text.count("ARTEX: rejected web_settings") == 1  # one line per (source, reason)
        assert path.read_text() == before and adapter.cfg.max_send_freq == 0.25  # all or nothing

        await hub.command({"web_settings": {"telem_can": False}})
        assert await wait_for(lambda: not adapter.status()["telem_run"], 5)
        assert json.loads(path.read_text())["telem_can"] is True   # a stream switch lasts until restart


async def test_stream_switches_from_web_settings_end_with_a_restart(hub, tmp_path, caplog):
    """An SDK-style hub UI switches both streams off; after a restart the robot streams again
    (issue 20 item 1), and a params.json that keeps a stream off says so at start."""
    caplog.set_level(logging.INFO, logger=ADAPTER_LOG)
    params = artex_params(hub)
    path = tmp_path / "params.json"
    path.write_text(json.dumps(params, indent=2))
    async with running_agent(params, config_path=str(path)) as agent:
        adapter = agent.adapters["artex"]
        assert await wait_for(lambda: adapter.status()["telem_run"] and adapter.status()["video_run"], 10)
        await hub.command({"web_settings": {"telem_can": False, "video_can": False, "max_send_freq": 0.2}})
        assert await wait_for(lambda: not adapter.status()["telem_run"] and not adapter.status()["video_run"], 5)
    saved = json.loads(path.read_text())
    assert saved["telem_can"] is True and saved["video_can"] is True and saved["max_send_freq"] == 0.2
    assert "telem_can, video_can until the agent restarts" in caplog.text
    hub.telem.clear()
    hub.video.clear()
    async with running_agent(load(path), config_path=str(path)):
        assert await wait_for(lambda: hub.telem and hub.video, 10), "no telemetry or video after the restart"
        assert hub.passports[hub.connected[-1]]["telem_can"] is True
    # a stream params.json itself keeps off is said at start, with how to turn it on
    path.write_text(json.dumps({**saved, "video_can": False}, indent=2))
    caplog.clear()
    async with running_agent(load(path), config_path=str(path)):
        assert await wait_for(lambda: "ARTEX: video is off" in caplog.text, 5)
    assert f'{path} sets video_can false' in caplog.text and 'web_settings {"video_can": true}' in caplog.text


# ---------------------------------------------------------------------- the test hub script


def test_hub_console_lines():
    assert artex_hub.parse_line("forward") == ("command", {"com": "forward"})
    assert artex_hub.parse_line("drive 0.2 -0.5") == ("command", {"drive": {"vx": 0.2, "omega": -0.5}})
    assert artex_hub.parse_line("tracks 0.3 x")[0] == "error"
    assert artex_hub.parse_line('{"tracks": {"left": 1, "right": 1}}') == ("command", {"tracks": {"left": 1,
                                                                                                 "right": 1}})
    assert artex_hub.parse_line('{"author": "me", "payload": {"com": "stop"}}')[0] == "raw"
    assert artex_hub.parse_line("hb d_meta") == ("heartbeat", ["d_meta"])
    assert artex_hub.parse_line("error") == ("command", {"file": "error"})
    assert artex_hub.is_motion({"com": "forward"}) and not artex_hub.is_motion({"com": "stop"})
    assert not artex_hub.is_motion({"file": "log"})


async def test_hub_script_repeats_motion_until_stop():
    port = free_port()
    async with hub_script(port, "--repeat-ms", "150") as (proc, lines):
        params = sim_config(server="http://127.0.0.1", port=port)
        async with running_agent(params) as agent:
            assert await wait_for(lambda: any(x.startswith("heartbeat") for x in lines), 10)
            deep = b'{"drive":' + b'{"a":' * 900 + b"1" + b"}" * 901 + b"\n"   # the encoder's recursion limit
            proc.stdin.write(deep)
            assert await wait_for(lambda: any("failed: cannot send that payload" in x for x in lines), 10)
            proc.stdin.write(b"forward\n")                # the hub's console still reads commands
            await proc.stdin.drain()
            # three watchdog timeouts (0.5 s): only the repeat (every 150 ms) keeps it going
            artex = agent.adapters["artex"]
            accepted = artex.status().get("accepted", 0)
            assert await wait_for(lambda: artex.status().get("accepted", 0) >= accepted + 10, 10)
            # (a loaded machine may delay one repeat past the watchdog: the next one drives again)
            await wait_for(lambda: agent.control.snapshot().watchdog == "ok" and distance(agent) > 0.2, 5)
            assert agent.control.snapshot().watchdog == "ok" and distance(agent) > 0.2, \
                [x for x in lines if not x.startswith(("video", "telem"))]
            proc.stdin.write(b"stop\n")
            await proc.stdin.drain()
            assert await wait_for(lambda: agent.control.snapshot().stopped, 5)
            await asyncio.sleep(0.3)  # real time held on purpose: 2 repeat periods (150 ms) with no repeat
            assert agent.control.snapshot().stopped  # no more repeats after stop
        text = "".join(lines)
        assert "passport" in text and '"name":"tank-01"' in text
        assert "telem motors " in text and "| estop off | {" in text and "video {'front':" in text
        assert max(len(x) for x in lines) < 1000  # compact, clipped output


async def test_device_faults_reach_the_hub_in_telem(hub):
    """Issue 3: every fault is visible in ARTEX telemetry: serial unplug, I2C outage, recovery."""
    async with agent_on(hub, max_send_freq=0.05) as agent:
        def last_telem() -> dict:
            return hub.telem[-1][1] if hub.telem else {}

        assert await wait_for(lambda: last_telem().get("devices", {}).get("motor") == "ok", 5)
        agent.sim.motor_emulator.unplug()
        assert await wait_for(lambda: last_telem().get("devices", {}).get("motor") == "lost", 5), last_telem()
        assert any(f.startswith("motor: lost") for f in last_telem()["faults"])
        bus = agent.sim.i2c_bus()
        bus.remove(agent.cfg.drivers.imu.address)
        assert await wait_for(lambda: last_telem().get("devices", {}).get("imu") == "lost", 5), last_telem()
        assert any(f.startswith("imu: lost") for f in last_telem()["faults"])
        agent.sim.motor_emulator.replug()
        bus.restore(agent.cfg.drivers.imu.address, power_cycle=True)
        assert await wait_for(lambda: last_telem().get("devices", {}).get("motor") == "ok"
                              and last_telem().get("devices", {}).get("imu") == "ok", 10), last_telem()
        assert not [f for f in last_telem()["faults"] if f.startswith(("motor", "imu"))]
