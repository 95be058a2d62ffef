"""Two real ``sim2bot.Robot`` controllers on one camera in different formats (issue 11).

One room per controller (``sim2bot.rooms``): the bridge relays a room's ``/video`` messages
only to that room's controllers, and the agent streams each room's subscriptions on that room's
socket, so each controller receives exactly its own format; a stop from either room stops the
tank, and a room releases the source when its last controller leaves only if it commanded last.

Both in one room (docs/sim2bot.md, "Two controllers, two formats"): the bridge relays every
``/video`` message to every controller in the room and the reference reader keys frames by camera
id only, so each controller also sees the other's format; the agent guarantees that each
controller's own format keeps flowing at its rate, and that the other controller's
``camera_unsubscribe`` neither interrupts it nor keeps the other format alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time

import pytest
from sim2bot.client import _parse_frame   # the reference reader's frame parser
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from agent.adapters.sim2bot_room import video_url
from agent.adapters.sim2bot_video import UNSUBSCRIBE_GRACE_S
from agent.testing.running_agent import running_agent, wait_for
from agent.testing.sim2bot_bridge import Bridge, agent_params, controller

pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")


@pytest.fixture(scope="module")
def bridge():
    with Bridge() as b:
        yield b


class Reader:
    """Reads a CameraStream on a thread, keeping (arrival time, codec, width, height) of every frame."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.frames: list[tuple[float, int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            frame = self.stream.read(0.2)
            if frame is not None:
                self.frames.append((time.monotonic(), frame.codec, frame.width, frame.height))

    def of(self, codec: int, width: int) -> list[float]:
        return [t for t, c, w, _ in self.frames if c == codec and w == width]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


def max_gap(times: list[float], start: float, end: float) -> float:
    inside = [start] + [t for t in times if start <= t <= end] + [end]
    return max(b - a for a, b in zip(inside, inside[1:]))


async def test_in_one_room_two_formats_each_flow_and_one_unsubscribe_does_not_stop_the_other(bridge):
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as a, controller(bridge) as b:
        stream_a = a.camera("model:0", fps=10, width=160, height=120, quality=0.6)
        stream_b = b.camera("model:0", fps=10, width=64, height=48, codec="raw")
        reader_a, reader_b = Reader(stream_a), Reader(stream_b)
        try:
            await wait_for(lambda: len(reader_a.of(0, 160)) >= 8 and len(reader_b.of(2, 64)) >= 8, 10)
            assert len(reader_a.of(0, 160)) >= 8, "A's JPEG 160x120 does not flow"
            assert len(reader_b.of(2, 64)) >= 8, "B's raw 64x48 does not flow"
            assert {(c, w, h) for _, c, w, h in reader_a.frames} <= {(0, 160, 120), (2, 64, 48)}
            closed = time.monotonic()
            await asyncio.to_thread(stream_b.close)          # B unsubscribes model:0
            # until A's stream is past B's grace by 2 s: a stream ended with B's would pause >= 2 s here;
            # a loaded machine pauses one < 1.5 s
            await wait_for(lambda: reader_a.of(0, 160)[-1] > closed + UNSUBSCRIBE_GRACE_S + 2.0,
                           UNSUBSCRIBE_GRACE_S + 8)
            gap = max_gap(reader_a.of(0, 160), closed, closed + UNSUBSCRIBE_GRACE_S + 2.0)
            assert gap < 1.5, f"A's stream paused {gap:.2f} s after B's unsubscribe"
            late_raw = [t for t in reader_a.of(2, 64) if t > closed + UNSUBSCRIBE_GRACE_S + 0.5]
            assert late_raw == [], "B's format outlived its unsubscribe"
            status = agent.adapters["sim2bot"].status()
            streams = [name for name, v in status.detail["video"].items() if isinstance(v, dict) and "sent" in v]
            assert status["streams"] == 1 and streams == ["model:0 0 160x120@10"]
        finally:
            reader_a.close()
            reader_b.close()
            await asyncio.to_thread(stream_a.close)


# ---------------------------------------------------------------- one room per controller


class Tap:
    """A raw ``controller-video`` socket in ``room``: the codec, width and height of every frame the
    bridge relays there, read with the reference parser (``sim2bot.client._parse_frame``)."""

    def __init__(self, bridge, room: str) -> None:
        self.formats: list[tuple[float, int, int, int]] = []
        self._ws = ws_connect(video_url(bridge.url), max_size=None)
        self._ws.send(json.dumps({"type": "hello", "role": "controller-video", "room": room}))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            for raw in self._ws:
                frame = _parse_frame(raw) if isinstance(raw, bytes) else None
                if frame is not None:
                    self.formats.append((time.monotonic(), frame.codec, frame.width, frame.height))

    def since(self, start: float) -> set[tuple[int, int, int]]:
        return {(c, w, h) for t, c, w, h in self.formats if t >= start}

    def close(self) -> None:
        self._ws.close()
        self._thread.join(2)


async def drive(robot, seconds: float, vx: float = 0.4) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        robot.base_velocity(vx=vx)
        await asyncio.sleep(0.1)


async def test_one_room_per_controller_each_gets_only_its_own_format(bridge):
    jpeg, raw = (0, 160, 120), (2, 320, 240)
    params = agent_params(bridge, rooms=["ctl-a", "ctl-b"])
    async with running_agent(params) as agent, controller(bridge, "ctl-a") as a, \
            controller(bridge, "ctl-b") as b:
        tap_a, tap_b = Tap(bridge, "ctl-a"), Tap(bridge, "ctl-b")
        stream_a = a.camera("model:0", fps=10, width=160, height=120, quality=0.6)
        stream_b = b.camera("model:0", fps=10, width=320, height=240, codec="raw")
        reader_a, reader_b = Reader(stream_a), Reader(stream_b)
        try:
            await wait_for(lambda: len(reader_a.frames) >= 10 and len(reader_b.frames) >= 10, 15)
            # every frame relayed in each room, and every frame each client read, is its own format
            assert tap_a.since(0) == {jpeg} and tap_b.since(0) == {raw}, (tap_a.since(0), tap_b.since(0))
            assert {f[1:] for f in reader_a.frames} == {jpeg} and {f[1:] for f in reader_b.frames} == {raw}
            assert len(reader_a.frames) >= 10 and len(reader_b.frames) >= 10
            status = agent.adapters["sim2bot"].status()
            assert status["connected"] and status["video_connected"] and status["streams"] == 2
            assert sorted(status.detail["rooms"]) == ["ctl-a", "ctl-b"]
            streams = sorted(k for k, v in status.detail["video"].items() if isinstance(v, dict))
            assert streams == ["ctl-a model:0 0 160x120@10", "ctl-b model:0 2 320x240@10"]

            closed = time.monotonic()
            await asyncio.to_thread(stream_b.close)          # B unsubscribes: only room ctl-b's stream ends
            # until A's stream is past B's grace by 2 s: a stream ended with B's would pause >= 2.5 s here;
            # a loaded machine pauses one < 1.5 s
            await wait_for(lambda: reader_a.of(0, 160)[-1] > closed + UNSUBSCRIBE_GRACE_S + 2.0,
                           UNSUBSCRIBE_GRACE_S + 8)
            gap = max_gap(reader_a.of(0, 160), closed, time.monotonic())
            assert gap < 1.5, f"A's stream paused {gap:.2f} s after B's unsubscribe"
            assert tap_b.since(closed + UNSUBSCRIBE_GRACE_S + 0.5) == set(), "B's stream outlived its unsubscribe"
            assert tap_a.since(closed) == {jpeg}
        finally:
            reader_a.close()
            reader_b.close()
            tap_a.close()
            tap_b.close()
            await asyncio.to_thread(stream_a.close)


async def test_a_stop_from_either_room_stops_the_tank(bridge):
    params = agent_params(bridge, rooms=["ctl-a", "ctl-b"])
    async with running_agent(params) as agent, controller(bridge, "ctl-a") as a, \
            controller(bridge, "ctl-b") as b:
        emu = agent.sim.motor_emulator
        for driver, stopper in ((a, b), (b, a)):              # the stopper of the first round drives next
            driving = asyncio.create_task(drive(driver, 1.2))
            assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty[0] > 0, 3.0)
            stopper.stop()
            assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty == [0.0, 0.0], 0.5)
            await driving
            assert emu.motor_duty == [0.0, 0.0], "the other room's velocity stream undid the stop"


async def test_after_one_rooms_stop_it_drives_on_and_the_other_room_re_engages_with_a_zero(bridge):
    """Rooms are one source to the control loop; the adapter keeps the stop latch between them
    (docs/safety.md): the stopping room drives with its next command, the room that was
    streaming is refused until it sends a zero (or a stop, a reset, or pauses)."""
    params = agent_params(bridge, rooms=["ctl-a", "ctl-b"])
    async with running_agent(params) as agent, controller(bridge, "ctl-a") as a, \
            controller(bridge, "ctl-b") as b:
        emu = agent.sim.motor_emulator
        streaming = asyncio.create_task(drive(b, 1.5))
        assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty[0] > 0, 3.0)
        a.stop()
        assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty == [0.0, 0.0], 0.5)
        status = agent.adapters["sim2bot"].status
        assert await wait_for(lambda: status()["rejected"] >= 2, 2)   # ctl-b streams on: refused by the adapter
        assert emu.motor_duty == [0.0, 0.0]
        a.base_velocity(vx=-0.4)                              # the stopper drives again at once
        assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty[0] < 0, 1.0)
        await streaming
        b.base_velocity(vx=0.0)                               # ctl-b re-engages
        async with asyncio.timeout(5):
            while emu.motor_duty[0] <= 0:                     # and drives over ctl-a's last command
                b.base_velocity(vx=0.4)
                await asyncio.sleep(0.05)


async def test_a_room_releases_the_source_only_when_it_gave_the_last_command(bridge, caplog):
    caplog.set_level(logging.INFO)
    params = agent_params(bridge, rooms=["ctl-a", "ctl-b"])
    async with running_agent(params) as agent, controller(bridge, "ctl-a") as a:
        emu = agent.sim.motor_emulator
        driving = asyncio.create_task(drive(a, 2.5))
        assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty[0] > 0, 3.0)
        async with controller(bridge, "ctl-b") as b:
            b.gripper(0.5)                                    # ctl-b commands once, ctl-a's stream after it
            assert await wait_for(lambda: abs(agent.physics.servo_pulse_us.get(2, 0) - 1500.0) < 6, 3)
            await asyncio.sleep(0.2)  # real time held on purpose: ctl-a's next commands (every 0.1 s) come after it
        # ctl-b's last controller left while ctl-a drives: the source is kept, the tank goes on
        assert await wait_for(lambda: "source kept (room ctl-a gave the last command)" in caplog.text, 3)
        assert "sim2bot released" not in caplog.text and emu.motor_duty[0] > 0
        await driving
        a.base_velocity(vx=0.4)
        assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty[0] > 0, 1.0)
        await asyncio.to_thread(a.close)                      # ctl-a gave the last command: stopped at once
        assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty == [0.0, 0.0], 0.4)
        assert "sim2bot released (the last controller left the bridge) while driving base" in caplog.text
