"""Sim2Bot camera streams: frame framing read by the reference reader, on a real VideoHub."""

from __future__ import annotations

import asyncio
import logging
import itertools
import json
import time

import cv2
import numpy as np
import pytest
from sim2bot.client import _parse_frame

from agent.adapters.sim2bot_commands import CameraRequest
from agent.adapters.sim2bot_video import (
    HEADER,
    MAX_STREAMS_PER_CAMERA,
    UNSUBSCRIBE_GRACE_S,
    StreamKey,
    VideoStreams,
    hub_format,
    pack_frame,
    resolve,
)
from agent.config.drivers import CameraConfig
from agent.errors import CommandError
from agent.video import Frame, FrameFormat, SendBudget, VideoHub, encode
from agent.testing.running_agent import running_agent, wait_for
from agent.testing.sim2bot_bridge import Bridge, agent_params, controller

# sim2bot.Robot (the peer under test, not ours) calls a websockets API that warns.
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")

CAM = CameraConfig(id="front", source="sim://pattern", width=160, height=120, fps=30, jpeg_quality=70)


def test_header_is_the_exact_20_byte_layout_and_parses_with_the_reference_reader():
    assert HEADER.size == 20
    data = pack_frame("model:0", 2, (1 << 32) + 7, 1_730_000_000.25, 4, 2, b"\x01" * 32)
    assert data[:4] == bytes([1, 2, 1, 0]) and data[20] == len("model:0") and data[21:28] == b"model:0"
    frame = _parse_frame(data)
    assert (frame.camera_id, frame.codec, frame.keyframe, frame.sequence) == ("model:0", 2, True, 7)
    assert (frame.capture_ts, frame.width, frame.height, frame.data) == (1_730_000_000.25, 4, 2, b"\x01" * 32)
    with pytest.raises(ValueError, match="longer than 255"):
        pack_frame("x" * 256, 0, 0, 0.0, 1, 1, b"")


def test_omitted_fields_come_from_the_camera_config_and_h264_becomes_jpeg():
    key = resolve(CameraRequest("model:0"), CAM)
    assert key == StreamKey("model:0", 0, 160, 120, 70, 30.0)
    key = resolve(CameraRequest("model:0", fps=5, width=64, height=48, quality=20, codec=1), CAM)
    assert key == StreamKey("model:0", 0, 64, 48, 20, 5.0)
    assert resolve(CameraRequest("model:0", codec=2, quality=20), CAM).quality == 0
    assert resolve(CameraRequest("model:0"), CAM.model_copy(update={"fps": 60})).fps == 30.0


@pytest.mark.parametrize("codec", [0, 2])
def test_encoded_frames_decode_to_the_captured_image(codec):
    image = np.zeros((48, 64, 3), np.uint8)
    image[:24, :, 2] = 255            # top half red, bottom half blue (BGR)
    image[24:, :, 0] = 255
    key = StreamKey("model:0", codec, 64, 48, 95, 30.0)
    enc = encode(Frame("front", 5, 0.0, 1_730_000_000.0, image), hub_format(key))
    frame = _parse_frame(pack_frame("model:0", codec, enc.seq, enc.t_unix_s, enc.width, enc.height, enc.data))
    decoded = frame.image()
    assert decoded.shape == (48, 64, 3)
    if codec == 2:                    # raw: exact, rows back in top-down order
        assert np.array_equal(decoded, image)
    else:                             # JPEG: away from the colour edge, close
        assert np.abs(decoded[:16].astype(int) - image[:16]).max() < 20
        assert np.abs(decoded[32:].astype(int) - image[32:]).max() < 20


class Recorder:
    """The /video socket's send, recording what arrives and when."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.frames: list[tuple[float, bytes]] = []
        self.delay_s = delay_s

    async def __call__(self, data: bytes) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.frames.append((time.monotonic(), data))


@pytest.fixture
def hub():
    with VideoHub([CAM]) as h:
        yield h


async def test_streams_honour_fps_and_share_one_encode_per_frame(hub):
    streams = VideoStreams(hub, {"model:0": ("front", CAM)}, ttl_s=3.0)
    rec = Recorder()
    streams.attach(rec)
    streams.subscribe(CameraRequest("model:0", fps=5, width=80, height=60, codec=0))
    began = time.monotonic()
    await wait_for(lambda: len(rec.frames) >= 7, 5)
    took = time.monotonic() - began
    streams.close()
    # 5 fps: 7 frames (6 gaps) in 1.2 s; loose under load: 2..6.5 fps, as 4..13 frames in 2 s were
    assert len(rec.frames) >= 7 and 6 / 6.5 <= took <= 7 / 2, (len(rec.frames), took)
    f = _parse_frame(rec.frames[-1][1])
    assert (f.width, f.height, f.codec) == (80, 60, 0) and f.image().shape == (60, 80, 3)
    seqs = [_parse_frame(d).sequence for _, d in rec.frames]
    assert seqs == sorted(set(seqs))            # newest frames only, never repeated

    before, rec.frames[:] = hub.encode_count, []
    for _ in range(3):                          # three subscribers, same format: one stream
        key = streams.subscribe(CameraRequest("model:0", fps=30, width=80, height=60, codec=0))
    assert streams.active == (key,)
    await wait_for(lambda: len(rec.frames) >= 5, 5)  # a loaded machine may stall the camera
    streams.close()
    assert len(rec.frames) >= 5 and hub.encode_count - before <= len(rec.frames) + 2


async def test_artex_and_sim2bot_asking_the_same_output_of_one_frame_share_one_encode(hub):
    # the spellings the adapters use: ARTEX FrameFormat("jpeg", quality=q) through encoded_within
    # (agent.adapters.artex_video), Sim2Bot the size spelt out (hub_format of a resolved request)
    artex_fmt = FrameFormat("jpeg", quality=CAM.jpeg_quality)
    sim2bot_fmt = hub_format(resolve(CameraRequest("model:0"), CAM))
    assert artex_fmt != sim2bot_fmt and (sim2bot_fmt.width, sim2bot_fmt.height) == (160, 120)
    frame = await hub.next_frame("front", 0, 5.0)
    before = hub.encode_count
    (artex, level), sim2bot = await asyncio.gather(hub.encoded_within(frame, artex_fmt, 1 << 20),
                                                   hub.encoded(frame, sim2bot_fmt))
    assert level == 0 and artex.seq == sim2bot.seq == frame.seq
    assert hub.encode_count - before == 1 and artex.data is sim2bot.data
    # asked again later in either spelling: from the cache; a different output is a new encode
    assert (await hub.encoded(frame, artex_fmt)).data is artex.data
    smaller = await hub.encoded(frame, FrameFormat("jpeg", 80, 60, CAM.jpeg_quality))
    assert (smaller.width, smaller.height) == (80, 60) and hub.encode_count - before == 2


def test_a_format_resolves_to_one_key_per_output():
    assert FrameFormat("jpeg", quality=80).resolved(640, 480) == FrameFormat("jpeg", 640, 480, 80)
    assert FrameFormat("jpeg", width=320).resolved(640, 480) == FrameFormat("jpeg", 320, 240, 80)
    assert FrameFormat("rgba", quality=20).resolved(64, 48) == FrameFormat("rgba", 64, 48, 95).resolved(64, 48)
    assert FrameFormat("jpeg", quality=70).resolved(640, 480) != FrameFormat("jpeg", 640, 480, 80)
    big = FrameFormat("jpeg").resolved(4608, 2592)         # a camera bigger than a request may ask
    assert (big.width, big.height) == (4608, 2592)


async def test_on_a_slow_link_frames_come_smaller_than_asked_and_full_size_when_it_recovers(hub):
    streams = VideoStreams(hub, {"model:0": ("front", CAM)}, ttl_s=3.0)
    rec = Recorder()
    streams.attach(rec)
    streams.rate.bps = 2000.0           # what LinkRate learned of a slow path: 500-byte frames at most
    streams.subscribe(CameraRequest("model:0", fps=30, codec=0))
    assert await wait_for(lambda: len(rec.frames) >= 2, 10)
    small = _parse_frame(rec.frames[-1][1])
    assert (small.width, small.height) < (160, 120) and small.image().shape == (small.height, small.width, 3)
    assert streams.stats()["too_big"] >= 1      # not even the smallest fits 500 bytes: it goes, spaced out
    streams.rate.bps = None                     # the path recovered
    count = len(rec.frames)
    assert await wait_for(lambda: len(rec.frames) > count + 1 and
                          _parse_frame(rec.frames[-1][1]).width == 160, 10)
    streams.close()


#: the frame age limit of streams on a :class:`Skipping` clock (their frames look older by what was skipped)
SKIPPED_AGE_S = 60.0


class Skipping:
    """The streams' clock: real monotonic time (the camera's frames come on it) plus the time the
    test skipped, so a TTL or a grace passes at once instead of being waited out. Frames then look
    older by the skipped time: the streams get :data:`SKIPPED_AGE_S` as their frame age limit."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.skipped

    def skip(self, seconds: float) -> None:
        self.skipped += seconds


async def rounds_after(rec: "Recorder", *codecs: int) -> bool:
    """Wait until every stream (one per codec in ``codecs``) sent 2 more frames: the stream's loop,
    which checks the expiry before it takes a frame, then ran at least once after this call."""
    count = len(rec.frames)

    def sent() -> bool:
        got = [_parse_frame(d).codec for _, d in rec.frames[count:]]
        return all(got.count(codec) >= 2 for codec in codecs)
    return await wait_for(sent, 10)                  # a loaded machine may stall (and reopen) the camera


async def test_subscription_expires_after_its_ttl_and_renewal_keeps_it(hub):
    clock = Skipping()
    streams = VideoStreams(hub, {"model:0": ("front", CAM)}, ttl_s=1.0, clock=clock,
                           max_age_s=SKIPPED_AGE_S)
    rec = Recorder()
    streams.attach(rec)
    for _ in range(6):                          # renewed every 0.3 s for longer than the TTL: keeps streaming
        streams.subscribe(CameraRequest("model:0", fps=30))
        clock.skip(0.3)
        assert await rounds_after(rec, 0) and streams.active, "a renewed stream ended"
    await wait_for(lambda: len(rec.frames) >= 5, 5)          # a loaded machine may stall the camera
    assert streams.active and len(rec.frames) >= 5
    clock.skip(0.2)                             # 0.5 s (and the real time the rounds took) since the last
    assert await rounds_after(rec, 0) and streams.active, "ended before its TTL"      # renewal: streaming
    clock.skip(0.6)                             # over 1.1 s: expired at the stream's next round
    await wait_for(lambda: streams.active == (), 5)          # no renewal: expired
    assert streams.active == ()
    count, newest = len(rec.frames), hub.latest("front").seq
    assert await wait_for(lambda: hub.latest("front").seq >= newest + 6, 5)   # frames it would have sent
    assert len(rec.frames) == count


async def test_unsubscribe_ends_every_unrenewed_format_after_the_grace(hub, caplog):
    """The protocol names neither the controller nor the format: every stream of the camera ends
    UNSUBSCRIBE_GRACE_S later, except the ones renewed meanwhile (another controller's)."""
    clock = Skipping()
    streams = VideoStreams(hub, {"model:0": ("front", CAM)}, ttl_s=3.0, clock=clock,
                           max_age_s=SKIPPED_AGE_S)
    rec = Recorder()
    streams.attach(rec)
    jpeg = streams.subscribe(CameraRequest("model:0", codec=0))
    streams.subscribe(CameraRequest("model:0", codec=2))
    assert len(streams.active) == 2
    assert streams.unsubscribe("model:0") == 2 and len(streams.active) == 2
    clock.skip(UNSUBSCRIBE_GRACE_S / 2)
    assert await rounds_after(rec, 0, 2) and len(streams.active) == 2, "ended before the grace"
    streams.subscribe(CameraRequest("model:0", codec=0))          # the other controller renews
    caplog.set_level(logging.INFO, logger="agent.adapters.sim2bot_video")
    clock.skip(UNSUBSCRIBE_GRACE_S / 2 + 0.6)
    await wait_for(lambda: streams.active == (jpeg,), 5)          # at the unrenewed stream's next round
    assert streams.active == (jpeg,)
    ended = [r.getMessage() for r in caplog.records if "stopped streaming" in r.getMessage()]
    assert len(ended) == 1 and f"unsubscribed, not renewed within {UNSUBSCRIBE_GRACE_S:g} s" in ended[0], ended
    streams.close()


async def test_streams_per_camera_are_bounded_and_renewals_still_accepted(hub):
    streams = VideoStreams(hub, {"model:0": ("front", CAM)}, ttl_s=3.0)
    streams.attach(Recorder())
    first = [streams.subscribe(CameraRequest("model:0", width=64 + i, codec=2)) for i in range(MAX_STREAMS_PER_CAMERA)]
    for i in range(50):                         # a flood of distinct formats: each one refused
        with pytest.raises(CommandError, match="already streams"):
            streams.subscribe(CameraRequest("model:0", width=200 + i, codec=2))
    assert sorted(streams.active, key=lambda k: k.width) == first
    assert streams.subscribe(CameraRequest("model:0", width=64, codec=2)) == first[0]   # renewal
    assert streams.unsubscribe("model:0") == MAX_STREAMS_PER_CAMERA
    assert streams.subscribe(CameraRequest("model:0", width=300)).width == 300         # room again
    streams.close()


async def test_a_slow_socket_skips_frames_instead_of_queueing(hub):
    streams = VideoStreams(hub, {"model:0": ("front", CAM)}, ttl_s=3.0)
    rec = Recorder(delay_s=0.25)                # a socket draining 4 frames/s
    newest_then: list[int] = []
    send = rec.__call__

    async def noting(data: bytes) -> None:      # the hub's newest frame when each one reaches the socket
        newest_then.append(hub.latest("front").seq)
        await send(data)

    streams.attach(noting)
    streams.subscribe(CameraRequest("model:0", fps=30))
    began = time.monotonic()
    await wait_for(lambda: len(rec.frames) >= 4, 5)
    took = time.monotonic() - began
    streams.close()
    seqs = [_parse_frame(d).sequence for _, d in rec.frames]
    assert 4 <= len(seqs) <= 8 and took >= 3 * 0.25, (len(seqs), took)      # paced by the socket
    assert max(b - a for a, b in itertools.pairwise(seqs)) >= 3   # frames in between were skipped
    # each one sent was the newest when taken, not a backlog (a few frames of encode time under load)
    assert all(newest - seq <= 8 for newest, seq in zip(newest_then, seqs))


async def test_without_a_video_socket_frames_are_dropped(hub):
    streams = VideoStreams(hub, {"model:0": ("front", CAM)}, ttl_s=3.0)
    streams.subscribe(CameraRequest("model:0", fps=30))
    newest = hub.latest("front").seq if hub.latest("front") is not None else 0
    assert await wait_for(lambda: hub.latest("front") is not None and hub.latest("front").seq >= newest + 6, 5)
    assert streams.frames_sent == 0 and not streams.attached
    rec = Recorder()
    streams.attach(rec)
    await wait_for(lambda: len(rec.frames) >= 3, 5)
    streams.close()
    assert streams.frames_sent == len(rec.frames) > 0


# ---------------------------------------------------------------- through the real bridge


@pytest.fixture(scope="module")
def bridge():
    with Bridge() as b:
        yield b


async def read_frames(stream, seconds: float, at_least: int = 0, at_most_s: float = 0.0) -> list:
    """Frames read for ``seconds``, and on until ``at_least`` arrived (``at_most_s`` in all): a
    loaded machine may stall the camera for a while."""
    start, frames = time.monotonic(), []
    while True:
        end = start + (seconds if len(frames) >= at_least else max(seconds, at_most_s))
        if (left := end - time.monotonic()) <= 0:
            return frames
        frame = await asyncio.to_thread(stream.read, max(0.05, min(left, 0.5)))
        if frame is not None:
            frames.append(frame)


async def test_jpeg_and_raw_frames_decode_with_the_reference_client(bridge):
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as robot:
        with robot.camera("model:0", fps=10, width=160, height=120, quality=0.6) as stream:
            frame = await asyncio.to_thread(stream.read, 5.0)
            assert (frame.camera_id, frame.codec, frame.keyframe) == ("model:0", 0, True)
            assert frame.image().shape == (120, 160, 3) and frame.age < 5
        with robot.camera("model:0", fps=10, width=64, height=48, codec="raw") as stream:
            frame = await asyncio.to_thread(stream.read, 5.0)
            while frame is not None and frame.codec != 2:   # a JPEG frame still in flight
                frame = await asyncio.to_thread(stream.read, 5.0)
            assert len(frame.data) == 64 * 48 * 4 and frame.image().shape == (48, 64, 3)
            latest = agent.video.latest("front").image
            small = cv2.resize(latest, (64, 48), interpolation=cv2.INTER_AREA)
            # bottom-up rows flipped back by the client: the top bar row matches the camera's top
            assert np.abs(frame.image()[2].astype(int) - small[2]).mean() < 60
        assert await wait_for(lambda: agent.adapters["sim2bot"].status()["streams"] == 0, 3)


async def test_a_raw_frame_of_many_fragments_arrives_whole_through_the_bridge(bridge):
    """640x480 raw is 1.2 MB: five masked fragments (agent.video.wsframes) reassembled by the bridge."""
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as robot:
        with robot.camera("model:0", fps=5, width=640, height=480, codec="raw") as stream:
            frame = await asyncio.to_thread(stream.read, 5.0)
            while frame is not None and frame.codec != 2:
                frame = await asyncio.to_thread(stream.read, 5.0)
            assert len(frame.data) == 640 * 480 * 4 and frame.width == 640
            latest = agent.video.latest("front")
            # the pattern moves a little between the two frames; a masking error would be noise (~85)
            assert np.abs(frame.image().astype(int) - latest.image).mean() < 30
            assert frame.sequence <= latest.seq
        assert agent.adapters["sim2bot"].status().detail["video"]["budget_bytes_per_s"] > 0


async def test_fps_is_clamped_to_at_least_one(bridge):
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as robot:
        with robot.camera("model:0", fps=0.2, width=80, height=60) as stream:
            frames = await read_frames(stream, 2.6)
        assert 2 <= len(frames) <= 5                   # 1 fps, not 0.2 fps
        assert agent.adapters["sim2bot"].status()["frames_sent"] >= len(frames)


async def test_a_subscription_that_is_not_renewed_expires(bridge):
    from sim2bot.client import _parse_frame as parse
    from websockets.sync.client import connect as ws_connect

    async with running_agent(agent_params(bridge, subscription_ttl_s=2.0)) as agent:
        adapter = agent.adapters["sim2bot"]
        assert await wait_for(lambda: adapter.status()["video_connected"], 5)
        with ws_connect(bridge.url.replace("/ws", "/video")) as vid:
            vid.send(json.dumps({"type": "hello", "role": "controller-video"}))
            with ws_connect(bridge.url) as ctl:       # a controller that subscribes once, then dies
                ctl.send(json.dumps({"type": "hello", "role": "controller"}))
                ctl.send(json.dumps({"type": "camera_subscribe", "camera": "model:0", "fps": 15,
                                     "width": 64, "height": 48}))
                assert await wait_for(lambda: adapter.status()["streams"] == 1, 3)

            def frames_for(seconds, enough=None):
                got, end = [], time.monotonic() + seconds
                while (left := end - time.monotonic()) > 0 and len(got) != enough:
                    try:
                        got.append(parse(vid.recv(timeout=left)))
                    except TimeoutError:
                        break
                return got

            # three frames within the TTL (a loaded machine may stall the camera for a while)
            first = await asyncio.to_thread(frames_for, 1.8, 3)
            assert len(first) >= 3 and first[0].camera_id == "model:0"
            assert await wait_for(lambda: adapter.status()["streams"] == 0, 4)   # the TTL runs out
            await asyncio.to_thread(frames_for, 0.3)           # frames sent before it ran out
            assert await asyncio.to_thread(frames_for, 0.8) == []


async def test_a_flood_of_distinct_formats_is_refused_and_the_link_stays_up(bridge, caplog):
    from websockets.sync.client import connect as ws_connect

    # a long TTL: on a loaded machine no accepted stream expires while the flood is read
    async with running_agent(agent_params(bridge, subscription_ttl_s=30.0)) as agent:
        adapter = agent.adapters["sim2bot"]
        assert await wait_for(lambda: adapter.status()["connected"], 5)
        with ws_connect(bridge.url) as ctl:
            ctl.send(json.dumps({"type": "hello", "role": "controller"}))
            before = adapter.status()
            for i in range(40):                       # raw full-HD frames, 40 different widths
                ctl.send(json.dumps({"type": "camera_subscribe", "camera": "model:0", "codec": 2,
                                     "width": 1920 - i, "height": 1080, "fps": 30}))
            assert await wait_for(lambda: adapter.status()["received"] >= before["received"] + 40, 5)
            status = adapter.status()
            assert status["streams"] == MAX_STREAMS_PER_CAMERA and status["connected"]
            assert status["rejected"] - before["rejected"] == 40 - MAX_STREAMS_PER_CAMERA
        assert f"already streams {MAX_STREAMS_PER_CAMERA} formats" in caplog.text


async def test_three_subscribers_of_one_format_share_one_stream(bridge):
    async with running_agent(agent_params(bridge)) as agent:
        adapter = agent.adapters["sim2bot"]
        async with controller(bridge) as r1, controller(bridge) as r2, controller(bridge) as r3:
            streams = [r.camera("model:0", fps=10, width=96, height=72) for r in (r1, r2, r3)]
            assert await wait_for(lambda: adapter.status()["streams"] == 1, 3)
            before_enc, before_sent = agent.video.encode_count, adapter.status()["frames_sent"]
            start = time.monotonic()
            got = await asyncio.gather(*(read_frames(s, 1.5, at_least=5, at_most_s=6.0) for s in streams))
            took = time.monotonic() - start
            sent = adapter.status()["frames_sent"] - before_sent
            encodes = agent.video.encode_count - before_enc
            for s in streams:
                s.close()
        assert all(len(g) >= 5 for g in got)          # every subscriber gets the ~10 fps feed
        # one stream (three would send ~30/s), about one encode per frame sent; a loaded machine encodes
        # ahead a few frames the stream then skips (18 encodes for 15 sent at load 17)
        assert sent <= 20 * max(1.0, took / 1.5) and encodes <= 1.5 * sent + 2


async def test_frames_over_the_link_budget_are_dropped_not_delayed(hub):
    """A link allowed ~5 frames/s of 80x60 raw (19,200 B + header) asked for 30 fps: frames are
    dropped (the delivered fps falls) and counted per stream and for the link."""
    frame_bytes = 80 * 60 * 4 + 30
    streams = VideoStreams(hub, {"model:0": ("front", CAM)}, ttl_s=3.0,
                           budget=SendBudget(max_bytes_per_s=5 * frame_bytes))
    rec = Recorder()
    streams.attach(rec)
    key = streams.subscribe(CameraRequest("model:0", fps=30, width=80, height=60, codec=2))
    began = time.monotonic()
    await wait_for(lambda: len(rec.frames) >= 8, 5)
    took = time.monotonic() - began
    stats = streams.stats()
    streams.close()
    # ~5/s: 8 frames (7 gaps) in 1.4 s; loose under load: 2..7 per s, as 4..14 frames in 2 s were; 30/s asked for
    assert len(rec.frames) >= 8 and 7 / 7 <= took <= 8 / 2, (len(rec.frames), took)
    name = f"model:0 2 80x60@{key.fps:g}"
    assert stats[name]["dropped"] >= 10 and stats["dropped"] == stats[name]["dropped"]
    assert stats[name]["sent"] == len(rec.frames) and stats[name]["p99_s"] is not None


async def test_the_format_limit_per_camera_spans_rooms_and_a_shared_format_costs_nothing(bridge):
    def subscribe(room: str, width: int) -> str:
        message = {"type": "camera_subscribe", "camera": "model:0", "width": width, "height": 48, "codec": 2}
        return adapter.handle_message(json.dumps(message), room)

    async with running_agent(agent_params(bridge, rooms=["ctl-a", "ctl-b"])) as agent:
        adapter = agent.adapters["sim2bot"]
        assert [subscribe("ctl-a", 64 + i) for i in range(MAX_STREAMS_PER_CAMERA)] == ["camera"] * 4
        assert subscribe("ctl-b", 64) == "camera"              # a format room ctl-a streams: shared
        assert subscribe("ctl-b", 200) == "rejected"            # a fifth distinct format of the camera
        assert adapter.status()["streams"] == MAX_STREAMS_PER_CAMERA + 1
        unsubscribe = {"type": "camera_unsubscribe", "camera": "model:0"}
        assert adapter.handle_message(json.dumps(unsubscribe), "ctl-a") == "camera"
        assert subscribe("ctl-b", 200) == "camera"              # ctl-a's formats are ending: room again
        with pytest.raises(KeyError, match="not served"):
            adapter.handle_message(json.dumps(unsubscribe), "ctl-c")
