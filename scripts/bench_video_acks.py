#!/usr/bin/env python3
"""ARTEX video against hubs that ack and hubs that do not, and with cameras at different rates.

Prints, for the simulated tank on loopback (one 320x240 camera at 15 fps, ``max_send_freq`` 0.1):
frames/s and mean frame size from a python-socketio hub that acks ``video``; the same after that
hub restarts on the same port as one that does not ack (a Node socket.io hub's handler without a
callback); a fresh agent on a non-acking hub (time from the first to the fifth frame). Then three
cameras at 15, 2 and 5 fps: messages/s and the share of messages holding all three cameras.

    .venv/bin/python scripts/bench_video_acks.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from agent.testing.artex_hub import ArtexHub, agent_on
from agent.testing.running_agent import wait_for

ONE = {"drivers": {"cameras": [{"id": "front", "source": "sim://pattern", "width": 320, "height": 240,
                                "fps": 15, "jpeg_quality": 80}]},
       "telem_can": True, "video_can": True, "max_send_freq": 0.1}
THREE = {"drivers": {"cameras": [{"id": cam, "source": "sim://pattern", "width": 160, "height": 120, "fps": fps,
                                  "jpeg_quality": 70} for cam, fps in (("front", 15), ("rear", 2), ("arm", 5))]},
         "telem_can": True, "video_can": True, "max_send_freq": 0.1}


def rate(hub: ArtexHub, t0: float) -> tuple[float, float, list[dict[str, int]]]:
    got = [sizes for t, sizes in hub.video if t >= t0]
    seconds = time.monotonic() - t0
    mean = sum(sum(s.values()) for s in got) / max(1, len(got))
    return len(got) / seconds, mean, got


async def main(seconds: float) -> None:
    hub = ArtexHub(ready_delay_s=0.05)
    await hub.start()
    try:
        async with agent_on(hub, **ONE) as agent:
            await wait_for(lambda: hub.video, 10)
            t0 = time.monotonic()
            await asyncio.sleep(seconds)
            fps, size, _ = rate(hub, t0)
            print(f"acking hub:                     {fps:5.1f} frames/s, mean {size / 1000:5.1f} kB")
            await hub.stop()
            hub.ack_video = False
            hub.video.clear()
            await hub.start()
            await wait_for(lambda: hub.video, 10)
            t0 = time.monotonic()
            await asyncio.sleep(seconds)
            fps, size, _ = rate(hub, t0)
            acks = agent.adapters["artex"].status().detail.get("video", {}).get("acks", "?")
            print(f"same agent, hub restarted no-ack: {fps:5.1f} frames/s, mean {size / 1000:5.1f} kB (acks learnt: {acks})")
    finally:
        await hub.stop()
    hub = ArtexHub(ready_delay_s=0.05, ack_video=False)
    await hub.start()
    try:
        async with agent_on(hub, **ONE):
            await wait_for(lambda: len(hub.video) >= 5, 15)
            print(f"fresh agent, no-ack hub:        first to fifth frame {hub.video[4][0] - hub.video[0][0]:.2f} s")
        hub.video.clear()
        hub.ack_video = True
        async with agent_on(hub, **THREE):
            await wait_for(lambda: hub.video and len(hub.video[-1][1]) == 3, 10)
            t0 = time.monotonic()
            await asyncio.sleep(seconds)
            fps, _, got = rate(hub, t0)
            full = sum(len(s) == 3 for s in got) / max(1, len(got))
            print(f"cameras at 15/2/5 fps:          {fps:5.1f} messages/s, {100 * full:.0f} % carry all three cameras")
    finally:
        await hub.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    asyncio.run(main(ap.parse_args().seconds))
