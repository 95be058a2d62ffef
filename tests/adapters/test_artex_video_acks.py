"""ARTEX video pacing is learnt per connection (issue 20 item 2).

A real python-socketio hub that acknowledges ``video`` restarts on the same port as one that does
not (a Node socket.io hub's handler without a callback, ``ArtexHub(ack_video=False)``): the video
keeps its rate and size on the new connection, and a fresh agent on a non-acking hub does not
wait an ack timeout after its first frame.
"""

from __future__ import annotations

import time

from agent.testing.artex_hub import ArtexHub, agent_on
from agent.testing.running_agent import wait_for

CAMERA = {"drivers": {"cameras": [{"id": "front", "source": "sim://pattern", "width": 320, "height": 240,
                                   "fps": 15, "jpeg_quality": 80}]},
          "telem_can": True, "video_can": True, "max_send_freq": 0.1}


def frames_since(hub: ArtexHub, t0: float) -> list[dict[str, int]]:
    return [sizes for t, sizes in hub.video if t >= t0]


async def test_a_hub_that_stops_acking_after_a_restart_keeps_the_video_rate():
    hub = ArtexHub(ready_delay_s=0.05)
    await hub.start()
    try:
        async with agent_on(hub, **CAMERA) as agent:
            adapter = agent.adapters["artex"]
            assert await wait_for(lambda: len(hub.video) >= 5, 10), "no video from the acking hub"
            assert adapter.status().detail["video"]["acks"] is True
            full = max(s["front"] for s in frames_since(hub, 0))
            await hub.stop()
            hub.ack_video = False
            hub.video.clear()
            await hub.start()
            assert await wait_for(lambda: hub.connected and hub.heartbeats, 10), "no reconnect"
            assert await wait_for(lambda: hub.video, 5), "no video after the restart"
            t0 = time.monotonic()
            assert await wait_for(lambda: len(frames_since(hub, t0)) >= 8, 4), \
                f"{len(frames_since(hub, t0))} frames in 4 s from a hub that does not ack (10 fps configured)"
            assert adapter.status().detail["video"]["acks"] is False
            assert adapter.status().detail["video"]["front"]["level"] == 0
            assert min(s["front"] for s in frames_since(hub, t0)) > full / 3, "video shrunk to the smallest step"
    finally:
        await hub.stop()


async def test_a_fresh_agent_on_a_non_acking_hub_sends_on_without_an_ack_timeout():
    hub = ArtexHub(ready_delay_s=0.05, ack_video=False)
    await hub.start()
    try:
        async with agent_on(hub, **CAMERA):
            assert await wait_for(lambda: hub.video, 10), "no first frame"
            first = hub.video[0][0]
            assert await wait_for(lambda: len(hub.video) >= 5, 3), \
                f"{len(hub.video)} frames within 3 s of the first (the second waited for an ack?)"
            assert hub.video[4][0] - first < 3.0
    finally:
        await hub.stop()


THREE = {"drivers": {"cameras": [
    {"id": cam, "source": "sim://pattern", "width": 160, "height": 120, "fps": fps, "jpeg_quality": 70}
    for cam, fps in (("front", 15), ("rear", 2), ("arm", 5))]},
    "telem_can": True, "video_can": True, "max_send_freq": 0.1}


async def test_every_message_carries_every_cameras_latest_frame():
    """Cameras at 15, 2 and 5 fps: once each has a frame, each ``video`` message holds all three, as the
    SDK's vault sends its whole dict (issue 20 item 5); the rate follows the fastest camera."""
    hub = ArtexHub(ready_delay_s=0.05)
    await hub.start()
    try:
        async with agent_on(hub, **THREE) as agent:
            assert await wait_for(lambda: hub.video and set(hub.video[-1][1]) == {"front", "rear", "arm"}, 10), \
                "never a message with all three cameras"
            t0 = time.monotonic()
            assert await wait_for(lambda: len(frames_since(hub, t0)) >= 10, 4), "fewer than 10 messages in 4 s"
            got = frames_since(hub, t0)
            assert all(list(sizes) == ["front", "rear", "arm"] for sizes in got), got
            assert all(min(sizes.values()) > 0 for sizes in got)
            assert agent.adapters["artex"].status().detail["video"]["repeated"] >= 10
            assert list(hub.last_video) == ["front", "rear", "arm"]
            assert all(frame[:2] == b"\xff\xd8" for frame in hub.last_video.values())   # JPEGs
    finally:
        await hub.stop()
