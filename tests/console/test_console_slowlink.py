"""The console on a slow path: a client behind a TcpProxy throttled to 300 kbit/s (the real agent on the
simulated tank, the console's own protocol) gets fresh frames, and its STOP during the video reaches the
motor at once. Loose bounds only: the figures are scripts/bench_slowlink_console.py's."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time

import aiohttp
import cv2
import numpy as np

from agent.console.video import capture_stamp, stamped
from agent.testing.proxy import TcpProxy
from tests.conftest import free_port, wait_for
from tests.console.peers import console_agent

#: 300 kbit/s, bytes/s
SLOW_BPS = 37_500


def test_a_stamped_frame_is_still_a_jpeg() -> None:
    image = np.zeros((48, 64, 3), np.uint8)
    image[:, 32:] = (0, 0, 255)
    data = cv2.imencode(".jpg", image)[1].tobytes()
    out = stamped(memoryview(data), 42, 1764600000.25)
    assert capture_stamp(out) == {"seq": 42, "t": 1764600000.25}
    assert capture_stamp(data) is None
    decoded = cv2.imdecode(np.frombuffer(out, np.uint8), cv2.IMREAD_COLOR)
    assert decoded.shape == (48, 64, 3) and np.array_equal(decoded, cv2.imdecode(np.frombuffer(data, np.uint8),
                                                                                 cv2.IMREAD_COLOR))


async def test_slow_path_fresh_frames_and_a_prompt_stop() -> None:
    port = free_port()
    async with console_agent(port) as agent, \
            TcpProxy("127.0.0.1", port, rate_bps=SLOW_BPS, shared=True) as proxy, \
            aiohttp.ClientSession() as http:
        emu = agent.sim.motor_emulator
        ages: list[float] = []

        async with http.ws_connect(f"http://127.0.0.1:{proxy.port}/ws") as ws:
            async def read() -> None:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        stamp = capture_stamp(msg.data)
                        assert stamp is not None, msg.data[:16]
                        ages.append(time.time() - stamp["t"])
                        await ws.send_json({"type": "frame"})      # shown: the next one, please

            reader = asyncio.create_task(read())
            driver: asyncio.Task | None = None
            try:
                await ws.send_json({"type": "drive", "vx": 0.3, "omega": 0.0, "press": True})

                async def drive() -> None:       # the page's repeat while the key is held
                    while True:
                        await asyncio.sleep(0.1)
                        await ws.send_json({"type": "drive", "vx": 0.3, "omega": 0.0})

                driver = asyncio.create_task(drive())
                # ~1.2-1.4 frames/s get through 300 kbit/s (scripts/bench_slowlink_console.py); fewer on a loaded machine
                assert await wait_for(lambda: len(ages) >= 6 and emu.motor_duty[0] > 0.05, 15.0), (len(ages), emu.motor_duty)
                driver.cancel()
                # STOP during the video: the tank is at zero duty within a loose bound, frames still flowing
                t_stop = asyncio.get_running_loop().time()
                await ws.send_json({"type": "stop"})
                assert await wait_for(lambda: emu.motor_duty == [0.0, 0.0], 1.5, 0.005), emu.motor_duty
                stop_s = asyncio.get_running_loop().time() - t_stop
                assert stop_s < 1.5
                assert statistics.median(ages) < 2.0, ages
                video = agent.adapters["console"].status().detail["video"]["1"]
                # the tab's video learned the path is slow (a full-size frame took long to drain)
                assert video["sent"] >= 6 and video["rate_cuts"] >= 1, video
            finally:
                for task in (driver, reader):
                    if task is not None:
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
