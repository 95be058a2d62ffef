"""agent/video/late.py: the VideoPort ARTEX holds while the video hub is not built yet.

Over a real VideoHub on the test-pattern camera emulator: before the hub is attached a wait for a
frame waits for it within its own timeout; a wait in progress when the hub arrives goes on to the
hub and gets a frame; after the attach every call is the hub's; an unknown camera is declined as
the hub declines it.
"""

from __future__ import annotations

import asyncio

import pytest

from agent.config.drivers import CameraConfig
from agent.errors import CommandDeclined
from agent.video import FrameFormat, VideoHub
from agent.video.late import LateVideo


@pytest.fixture
async def hub():
    conf = CameraConfig(id="front", source="sim://pattern", width=160, height=120, fps=30)
    made = VideoHub([conf], reopen_delay_s=0.05, reopen_delay_max_s=0.2)
    made.start()
    yield made
    await asyncio.to_thread(made.close)


async def test_before_the_hub_a_wait_ends_empty_at_its_timeout():
    late = LateVideo(("front",))
    assert late.camera_ids == ("front",) and late.hub is None
    assert await late.next_frame("front", 0, 0.05) is None
    assert await late.next_encoded("front", FrameFormat("jpeg", quality=80), 0, 0.0) is None


async def test_a_wait_in_progress_goes_on_to_the_hub_once_attached(hub):
    late = LateVideo(("front",))
    waiting = asyncio.ensure_future(late.next_frame("front", 0, 10.0))
    encoded = asyncio.ensure_future(late.next_encoded("front", FrameFormat("jpeg", quality=80), 0, 10.0))
    await asyncio.sleep(0)      # both are waiting for the hub now
    assert not waiting.done() and not encoded.done()
    late.attach(hub)
    frame = await asyncio.wait_for(waiting, 10)
    assert frame is not None and (frame.width, frame.height) == (160, 120)
    jpeg = await asyncio.wait_for(encoded, 10)
    assert jpeg is not None and jpeg.data[:2] == b"\xff\xd8"
    out, level = await late.encoded_within(frame, FrameFormat("jpeg", quality=80), 1_000_000)
    assert out is not None and level == 0 and out.data[:2] == b"\xff\xd8"
    later = await late.next_frame("front", frame.seq, 10.0)
    assert later is not None and later.seq > frame.seq


async def test_an_unknown_camera_is_declined_before_and_after_the_hub(hub):
    late = LateVideo(("front",))
    with pytest.raises(CommandDeclined, match="unknown camera 'rear'; known: front"):
        await late.next_frame("rear", 0, 0.0)
    late.attach(hub)
    with pytest.raises(CommandDeclined, match="unknown camera 'rear'; known: front"):
        await late.next_frame("rear", 0, 0.0)
