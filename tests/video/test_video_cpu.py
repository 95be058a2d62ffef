"""The video path's cheaper forms give what the longer ones gave (issue 22, "A Pi-core budget").

- ARTEX with one camera: each message holds that camera's newest frame, taken and encoded without a
  task of its own (no ``ensure_future``, ``asyncio.wait`` or ``gather`` per message);
- the fit ladder and a consumer's resolved format, worked out once per (format, size), equal the
  ones built anew, and a caller's copy of the ladder is its own;
- the Sim2Bot prefix's id field, built once per camera, still refuses an id over 255 bytes each time;
- ARTEX shrinks the send buffer of each connection's socket at its first video message (once per
  connection, not at every message).
On a real VideoHub with the test-pattern camera and a real ARTEX hub (agent.testing.artex_hub).
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter

import pytest
import socketio

from agent.adapters.artex_video import ArtexVideo, VideoDelivery, link_transport
from agent.adapters.sim2bot_video import frame_prefix
from agent.config.drivers import CameraConfig
from agent.config.video import VideoConfig
from agent.testing.artex_hub import ArtexHub
from agent.video import FrameFormat, VideoHub, fit_ladder
from agent.video.frames import resolved_format
from agent.video.links import SEND_BUFFER_BYTES

CAM = CameraConfig(id="front", source="sim://pattern", width=160, height=120, fps=30, jpeg_quality=70)


@pytest.fixture
def hub():
    with VideoHub([CAM]) as h:
        yield h


async def test_one_camera_messages_take_its_newest_frame_without_tasks(hub):
    video = ArtexVideo(hub, VideoConfig(), Counter())
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def factory(loop_, coro, **kwargs):
        made.append(getattr(coro, "__qualname__", repr(coro)))
        return asyncio.Task(coro, loop=loop_, **kwargs)

    first = await video.next_payload(80, 5.0)           # the first frame, and its encode timed by the encoders
    loop.set_task_factory(factory)
    try:
        payloads = [await video.next_payload(80, 5.0) for _ in range(3)]
    finally:
        loop.set_task_factory(None)
    assert list(first) == ["front"] and all(list(p) == ["front"] for p in payloads)
    assert all(p["front"][:2] == b"\xff\xd8" for p in payloads)           # JPEGs
    frames = [first["front"], *(p["front"] for p in payloads)]
    assert len(set(frames)) == 4                        # a new frame each time (the pattern moves)
    assert made == []                                   # no task per message


def test_the_ladder_built_once_equals_a_new_one_and_each_caller_gets_its_own_list():
    fmt = FrameFormat("jpeg", quality=80)
    first = fit_ladder(fmt, 640, 480)
    first.clear()                                        # a caller's copy: the next one is whole
    again = fit_ladder(FrameFormat("jpeg", quality=80), 640, 480)
    assert [(f.width, f.height, f.quality) for f in again] == [
        (None, None, 80), (None, None, 60), (None, None, 40), (480, 360, 40), (320, 240, 40), (224, 168, 40),
        (160, 120, 40)]
    assert fit_ladder(fmt, 1280, 960)[3].width == 960    # another frame size: its own ladder


@pytest.mark.parametrize("fmt", [FrameFormat("jpeg", quality=80), FrameFormat("jpeg", width=320),
                                 FrameFormat("rgba", quality=50), FrameFormat("jpeg", 640, 480, 80)])
def test_a_resolved_format_worked_out_once_equals_the_method(fmt):
    assert resolved_format(fmt, 640, 480) == fmt.resolved(640, 480)
    assert resolved_format(fmt, 1280, 960) == fmt.resolved(1280, 960)      # each frame size its own
    if fmt.resolved(640, 480) == fmt:
        assert resolved_format(fmt, 640, 480) == fmt


def test_a_camera_id_over_255_bytes_is_refused_every_time():
    for _ in range(2):                                   # the id field's cache keeps no refusal
        with pytest.raises(ValueError, match="longer than 255 bytes"):
            frame_prefix("x" * 256, 0, 1, 1.0, 640, 480)
    assert frame_prefix("cam", 0, 1, 1.0, 640, 480)[20:] == b"\x03cam"


async def test_each_connections_send_buffer_is_shrunk_at_its_first_video_message():
    hub = ArtexHub(auto_ready=False)
    port = await hub.start()
    delivery = VideoDelivery(Counter())
    try:
        for _ in range(2):                               # a new connection: its own socket is shrunk too
            client = socketio.AsyncClient(reconnection=False)
            await client.connect(f"http://127.0.0.1:{port}", namespaces=["/robot"], transports=["websocket"])
            try:
                sock = link_transport(client).get_extra_info("socket")
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) > 2 * SEND_BUFFER_BYTES
                for _ in range(2):
                    assert await delivery.send(client, {"front": b"\xff\xd8" + bytes(1000)}) is not None
                    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) <= 2 * SEND_BUFFER_BYTES
            finally:
                await client.disconnect()
            delivery.new_link()
        assert len(hub.video) == 4
    finally:
        await hub.stop()
