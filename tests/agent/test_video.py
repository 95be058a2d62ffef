"""agent/video/: VideoHub over the real camera driver and the test-pattern emulator.

Encodings are checked by decoding them (cv2.imdecode; Sim2Bot's own reference
reader ``sim2bot.client.CameraFrame.image`` for raw RGBA). Supervision is
checked by injecting faults into the emulated capture and watching health,
logged transitions and reopened captures. Time bounds are loose on purpose.
"""

from __future__ import annotations

import asyncio
import logging
import time

import cv2
import numpy as np
import pytest
from sim2bot.client import CameraFrame

from agent.config.drivers import CameraConfig
from agent.errors import CommandError
from agent.video import EncodedFrame, Frame, FrameFormat, VideoHub, encode
from drivers.camera import Camera
from drivers.emulators.camera import PatternCapture, write_test_video

SIM2BOT_RAW = 2  # wire codec of raw RGBA


class Recorder:
    """Capture factory handing out PatternCaptures and remembering them (fault injection handles)."""

    def __init__(self) -> None:
        self.made: list[PatternCapture] = []

    def __call__(self, target, api):
        cap = PatternCapture()
        self.made.append(cap)
        return cap


def make_hub(rec: Recorder | None = None, **cfg) -> VideoHub:
    conf = CameraConfig(**{"id": "front", "source": "sim://pattern", "width": 160, "height": 120, "fps": 30, **cfg})
    factory = (lambda c: Camera(c, capture_factory=rec)) if rec is not None else Camera
    return VideoHub([conf], camera_factory=factory, reopen_delay_s=0.05, reopen_delay_max_s=0.2)


def up_before_the_fault(before: list[str]) -> bool:
    """The transitions logged before a test's fault: the camera came up (``starting -> ok``), or on a
    loaded machine a start-up read stalled past ``stale_s`` (logged ``unavailable``, not counted
    here) and it came back (``lost -> ok``); either way it was ok when the fault began."""
    return before in (["starting -> ok"], ["lost -> ok"]) or (bool(before) and before[0] == "starting -> ok"
                                                              and before[-1].endswith("-> ok"))


async def running(hubs: list[VideoHub], rec: Recorder | None = None, **cfg) -> VideoHub:
    """A started hub (closed by the ``hubs`` fixture) that has delivered its first frame."""
    hub = make_hub(rec, **cfg)
    hubs.append(hub)
    hub.start()
    await wait_until(lambda: hub.health()[0].state == "ok", what="first frame")
    return hub


@pytest.fixture
async def hubs():
    """Hubs built by the test; closed (off the loop) afterwards."""
    made: list[VideoHub] = []
    yield made
    for hub in made:
        await asyncio.to_thread(hub.close)


async def wait_until(predicate, timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def transitions(caplog) -> list[str]:
    """Health transitions logged by the hub, e.g. ``ok -> lost``."""
    out = []
    for r in caplog.records:
        if r.name == "agent.video" and r.getMessage().startswith("camera.front: ") and " -> " in r.getMessage():
            out.append(" ".join(r.getMessage().split(" ")[1:4]).rstrip(":"))
    return out


def marked_image(width: int = 64, height: int = 48) -> np.ndarray:
    """Grey image with a red band in the top 4 rows and a blue pixel at the top-left corner."""
    img = np.full((height, width, 3), 128, np.uint8)
    img[:4] = (0, 0, 255)
    img[0, 0] = (255, 0, 0)
    return img


def frame_of(image: np.ndarray, seq: int = 7) -> Frame:
    return Frame("front", seq, time.monotonic(), time.time(), image)


# --------------------------------------------------------------------------- formats and encoders


@pytest.mark.parametrize("kwargs", [
    {"codec": "h264"}, {"codec": "jpeg", "width": 0}, {"codec": "jpeg", "height": 5000},
    {"codec": "jpeg", "quality": 101}, {"codec": "jpeg", "quality": True}, {"codec": "rgba", "width": 1.5},
])
def test_frame_format_rejects_bad_values(kwargs):
    with pytest.raises(CommandError):
        FrameFormat(**kwargs)


def test_frame_format_is_a_hashable_key():
    assert FrameFormat("jpeg", 320, 240, 80) == FrameFormat("jpeg", 320, 240, 80)
    assert len({FrameFormat("jpeg", 320, 240, 80), FrameFormat("jpeg", 320, 240, 80), FrameFormat("rgba")}) == 2
    assert FrameFormat(width=320).output_size(640, 480) == (320, 240)
    assert FrameFormat(height=120).output_size(640, 480) == (160, 120)
    assert FrameFormat().output_size(640, 480) == (640, 480)


@pytest.mark.parametrize("size", [(None, None), (320, 240), (32, 24)])
def test_jpeg_decodes_to_the_asked_size_and_content(size):
    cap = PatternCapture(160, 120, paced=False)
    image = cap.read()[1]
    fmt = FrameFormat("jpeg", size[0], size[1], 90)
    out = encode(frame_of(image), fmt)
    decoded = cv2.imdecode(np.frombuffer(out.data, np.uint8), cv2.IMREAD_COLOR)
    w, h = fmt.output_size(160, 120)
    assert (out.width, out.height, out.codec, out.seq) == (w, h, "jpeg", 7)
    assert decoded.shape == (h, w, 3)
    coarse = [cv2.resize(i, (8, 6), interpolation=cv2.INTER_AREA).astype(int) for i in (decoded, image)]
    assert np.abs(coarse[0] - coarse[1]).mean() < 12  # same picture (JPEG loss and chroma subsampling aside)


def test_rgba_rows_are_bottom_up_for_the_sim2bot_reader():
    image = marked_image()
    out = encode(frame_of(image), FrameFormat("rgba"))
    assert len(out.data) == 64 * 48 * 4
    rows = np.frombuffer(out.data, np.uint8).reshape(48, 64, 4)
    assert tuple(rows[-1, 0]) == (0, 0, 255, 255)      # top-left blue pixel is in the last row sent
    assert tuple(rows[-2, 5]) == (255, 0, 0, 255)      # red band near the end
    assert tuple(rows[0, 5]) == (128, 128, 128, 255)   # first row sent is the grey bottom
    decoded = CameraFrame("front", SIM2BOT_RAW, True, out.seq, out.t_unix_s, out.width, out.height, out.data).image()
    assert np.array_equal(decoded, image)             # the reference reader's flip restores it exactly


def test_rgba_resized_keeps_orientation():
    out = encode(frame_of(marked_image(64, 48)), FrameFormat("rgba", 32, 24))
    decoded = CameraFrame("front", SIM2BOT_RAW, True, 1, 0.0, 32, 24, out.data).image()
    assert decoded.shape == (24, 32, 3)
    assert tuple(decoded[0, 10]) == (0, 0, 255)       # red band still on top
    assert tuple(decoded[-1, 10]) == (128, 128, 128)


# --------------------------------------------------------------------------- hub: frames and fan-out


async def test_latest_frames_change_every_frame(hubs):
    hub = make_hub(Recorder())
    hubs.append(hub)
    assert hub.camera_ids == ("front",)
    assert hub.latest("front") is None
    hub.start()
    await wait_until(lambda: (hub.latest("front") or frame_of(np.zeros(1), 0)).seq >= 10, what="10 frames")
    frame = hub.latest("front")
    assert frame.image.shape == (120, 160, 3) and frame.image.flags.writeable is False
    assert abs(frame.t_unix_s - time.time()) < 5
    assert hub.health()[0].name == "camera.front" and hub.health()[0].state == "ok"
    seen = []
    for _ in range(5):
        got = await hub.next_frame("front", seen[-1].seq if seen else 0, 2.0)
        seen.append(got)
    assert [f.seq for f in seen] == sorted({f.seq for f in seen})
    assert all(not np.array_equal(a.image, b.image) for a, b in zip(seen, seen[1:]))


async def test_next_encoded_jpeg_and_after_seq(hubs):
    hub = await running(hubs, Recorder())
    first = await hub.next_encoded("front", FrameFormat("jpeg"), 0, 5.0)
    second = await hub.next_encoded("front", FrameFormat("jpeg"), first.seq, 5.0)
    assert isinstance(first, EncodedFrame) and second.seq > first.seq
    image = cv2.imdecode(np.frombuffer(second.data, np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (120, 160, 3)


async def test_three_subscribers_one_encode_per_frame(hubs):
    hub = await running(hubs, Recorder())
    fmt = FrameFormat("jpeg", 80, 60, 80)

    async def subscriber() -> list[int]:
        seqs, after = [], 0
        while len(seqs) < 8:
            got = await hub.next_encoded("front", fmt, after, 5.0)
            assert got is not None
            seqs.append(got.seq)
            after = got.seq
        return seqs

    results = await asyncio.gather(subscriber(), subscriber(), subscriber())
    distinct = set().union(*map(set, results))
    assert hub.encode_count == len(distinct)
    assert len(distinct) < 3 * 8  # frames were shared, not each encoded per subscriber


async def test_two_formats_encode_once_each(hubs):
    hub = await running(hubs, Recorder())
    jpeg, rgba = FrameFormat("jpeg"), FrameFormat("rgba", 80, 60)
    got = []
    for _ in range(4):
        after = got[-1][0].seq if got else 0
        pair = await asyncio.gather(*(hub.next_encoded("front", f, after, 5.0) for f in (jpeg, rgba, jpeg, rgba)))
        got.append(pair)
    keys = {(e.seq, e.codec) for pair in got for e in pair}
    assert hub.encode_count == len(keys)
    assert all(len(e.data) == 80 * 60 * 4 for pair in got for e in pair if e.codec == "rgba")


async def test_slow_consumer_skips_to_the_newest_frame(hubs):
    hub = await running(hubs, Recorder())
    first = await hub.next_encoded("front", FrameFormat("jpeg"), 0, 5.0)
    await wait_until(lambda: hub.latest("front").seq >= first.seq + 3, 5.0, "frames going by")
    newest = hub.latest("front").seq
    second = await hub.next_encoded("front", FrameFormat("jpeg"), first.seq, 5.0)
    assert second.seq >= newest > first.seq + 1


async def test_timeout_unknown_camera_and_close_wake_waiters(hubs, caplog):
    hub = make_hub(Recorder(), fps=1)
    hubs.append(hub)
    hub.start()
    t0 = time.monotonic()
    assert await hub.next_encoded("front", FrameFormat("jpeg"), 10**9, 0.2) is None
    assert time.monotonic() - t0 >= 0.15
    with pytest.raises(CommandError, match="unknown camera 'rear'"):
        await hub.next_encoded("rear", FrameFormat("jpeg"), 0, 0.1)
    assert any("unknown camera 'rear'" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    with pytest.raises(CommandError):
        await hub.next_encoded("front", "jpeg", 0, 0.1)
    with pytest.raises(CommandError, match="after_seq"):
        await hub.next_encoded("front", FrameFormat("jpeg"), None, 0.1)
    waiter = asyncio.create_task(hub.next_encoded("front", FrameFormat("jpeg"), 10**9, 30.0))
    await asyncio.sleep(0.1)
    t0 = time.monotonic()
    await asyncio.to_thread(hub.close)
    assert await asyncio.wait_for(waiter, 10.0) is None
    assert time.monotonic() - t0 < 10.0
    hub.close()  # idempotent
    with pytest.raises(RuntimeError):
        hub.start()


async def test_file_camera_through_the_hub(hubs, tmp_path):
    path = write_test_video(tmp_path / "clip.avi", frames=6, width=160, height=120, fps=15)
    hub = make_hub(source=path, fps=60)
    hubs.append(hub)
    hub.start()
    after = 0
    for _ in range(10):  # past the end of the 6-frame file: it loops
        got = await hub.next_encoded("front", FrameFormat("jpeg"), after, 5.0)
        after = got.seq
    assert after >= 10 and hub.health()[0].state == "ok"


# --------------------------------------------------------------------------- hub: supervision


@pytest.mark.parametrize("fault, reason", [("freeze", "frozen"), ("block", "read() blocked")])
async def test_stuck_camera_detected_and_reopened(hubs, caplog, fault, reason):
    caplog.set_level(logging.INFO, logger="agent.video")
    rec = Recorder()
    hub = await running(hubs, rec, stale_s=0.3)
    # a loaded machine may stall a start-up read past stale_s and reopen once: faults go to the
    # capture in use, transitions are counted from here
    made, start = len(rec.made), len(transitions(caplog))
    stuck = rec.made[-1]
    getattr(stuck, fault)()
    t0 = time.monotonic()
    # the transition, not a poll of the state: the reopen can end the "lost" spell between two polls
    await wait_until(lambda: "ok -> lost" in transitions(caplog)[start:], what=f"{fault} detected")
    assert time.monotonic() - t0 < 3.0  # stale_s 0.3 s; loose under load
    assert any(reason in r.getMessage() for r in caplog.records if "ok -> lost" in r.getMessage())
    await wait_until(lambda: len(rec.made) > made and hub.health()[0].state == "ok", what="reopen")
    before = hub.latest("front").seq
    await wait_until(lambda: hub.latest("front").seq > before + 3, what="frames after reopen")
    assert up_before_the_fault(transitions(caplog)[:start])
    assert transitions(caplog)[start:] == ["ok -> lost", "lost -> ok"]
    # a frozen capture is released at once; a blocked one never under its running read,
    # only by its left-behind thread once the read returns
    assert stuck.isOpened() is (fault == "block")
    stuck.unblock()
    await wait_until(lambda: not stuck.isOpened(), what="stuck capture released")


async def test_failing_reads_degrade_then_lose_then_recover(hubs, caplog):
    caplog.set_level(logging.INFO, logger="agent.video")
    rec = Recorder()
    hub = await running(hubs, rec, stale_s=0.3)
    made, start = len(rec.made), len(transitions(caplog))   # see test_stuck_camera_detected_and_reopened
    rec.made[-1].fail()
    await wait_until(lambda: len(rec.made) > made and hub.health()[0].state == "ok", what="reopen")
    assert up_before_the_fault(transitions(caplog)[:start])
    assert transitions(caplog)[start:] == ["ok -> degraded", "degraded -> lost", "lost -> ok"]
    health = hub.health()[0]
    assert "no frame" in health.last_error and health.errors >= 2


async def test_open_failures_back_off_and_recover(hubs, caplog):
    caplog.set_level(logging.INFO, logger="agent.video")
    attempts: list[float] = []
    rec = Recorder()

    def flaky(target, api):
        attempts.append(time.monotonic())
        if len(attempts) <= 3:
            cap = PatternCapture()
            cap.release()  # "cannot open"
            return cap
        return rec(target, api)

    conf = CameraConfig(id="front", source="sim://pattern", width=160, height=120)
    hub = VideoHub([conf], camera_factory=lambda c: Camera(c, capture_factory=flaky),
                   reopen_delay_s=0.05, reopen_delay_max_s=0.2)
    hubs.append(hub)
    hub.start()
    await wait_until(lambda: hub.health()[0].state == "ok", what="open after failures")
    health = hub.health()[0]
    assert health.errors == 3 and "OpenCV cannot open" in health.last_error
    gaps = [b - a for a, b in zip(attempts, attempts[1:])]
    assert all(g >= 0.02 for g in gaps)  # backoff waited (>= 50 % of 0.05 s)
    assert transitions(caplog) == ["lost -> ok"]  # lost from the start: no repeated ERROR lines
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1  # the reason, once


async def test_a_capture_bug_is_logged_and_the_camera_reopened(hubs, caplog):
    caplog.set_level(logging.INFO, logger="agent.video")
    rec = Recorder()
    hub = await running(hubs, rec)

    def buggy_read():                       # fault injection: the capture raises what no driver should
        raise RuntimeError("capture bug")

    rec.made[0].read = buggy_read
    await wait_until(lambda: len(rec.made) >= 2 and hub.health()[0].state == "ok", what="reopen after the bug")
    before = hub.latest("front").seq
    await wait_until(lambda: hub.latest("front").seq > before + 3, what="frames after the reopen")
    assert transitions(caplog) == ["starting -> ok", "ok -> lost", "lost -> ok"]
    assert "unexpected RuntimeError: capture bug" in hub.health()[0].last_error
    bug = [r for r in caplog.records if "instead of DriverError" in r.getMessage()]
    assert len(bug) == 1 and bug[0].exc_info is not None     # the traceback, once


async def test_two_cameras_independent(hubs):
    rec_a, rec_b = Recorder(), Recorder()
    confs = [CameraConfig(id="front", source="sim://pattern", width=160, height=120, stale_s=0.3),
             CameraConfig(id="rear", source="sim://pattern", width=80, height=60, stale_s=0.3)]
    recs = {"front": rec_a, "rear": rec_b}
    hub = VideoHub(confs, camera_factory=lambda c: Camera(c, capture_factory=recs[c.id]),
                   reopen_delay_s=0.05)
    hubs.append(hub)
    hub.start()
    await wait_until(lambda: all(h.state == "ok" for h in hub.health()), what="both ok")
    rec_b.made[0].block()
    # lost, then reopened (a new capture): the "lost" spell itself may fall between two polls
    await wait_until(lambda: len(rec_b.made) >= 2, what="rear lost and reopened")
    assert hub.health()[0].state == "ok"
    front = await hub.next_encoded("front", FrameFormat("jpeg"), hub.latest("front").seq, 5.0)
    assert front is not None and front.width == 160
    rec_b.made[0].unblock()


# ---------------------------------------------------------------- encoding ahead on the capture thread


async def take_every_frame(hub: VideoHub, fmt: FrameFormat, count: int) -> list[EncodedFrame]:
    """A consumer that asks for each next frame as soon as it has the last one."""
    got: list[EncodedFrame] = []
    after = hub.latest("front").seq
    while len(got) < count:
        enc = await hub.next_encoded("front", fmt, after, 5.0)
        assert enc is not None
        got.append(enc)
        after = enc.seq
    return got


async def test_an_output_taken_every_frame_is_encoded_ahead_once_and_the_same(hubs):
    hub = await running(hubs, Recorder(), fps=20)
    fmt = FrameFormat("jpeg", 80, 60, 80)
    got = await take_every_frame(hub, fmt, 24)
    stats = hub.stats()
    # a consumer keeping up with a 20 fps camera takes nearly every frame: once it took three in a
    # row the capture thread encodes the next before handing it out
    assert stats["encoded_ahead"] >= 1, stats
    assert hub.encode_count <= len({e.seq for e in got}) + 2     # never twice: ahead or on demand
    newest = hub.latest("front")
    again = await hub.encoded(newest, fmt)       # the cached encode comes back as it is, no new one
    count = hub.encode_count
    assert await hub.encoded(newest, fmt) is again and hub.encode_count == count
    assert again.data == encode(newest, fmt.resolved(newest.width, newest.height)).data


async def test_a_consumer_taking_one_frame_in_two_has_nothing_encoded_ahead(hubs):
    hub = await running(hubs, Recorder(), fps=20)
    fmt = FrameFormat("jpeg", 80, 60, 80)
    after, asked = hub.latest("front").seq, 0
    for _ in range(12):
        enc = await hub.next_encoded("front", fmt, after + 1, 5.0)   # skips the frame after the last
        assert enc is not None and enc.seq >= after + 2
        after, asked = enc.seq, asked + 1
    assert hub.stats()["encoded_ahead"] == 0
    assert hub.encode_count == asked                     # nothing encoded that nobody took


async def test_an_encode_longer_than_its_share_of_the_frame_period_stays_off_the_capture_thread(hubs, monkeypatch):
    from agent.video import hub as hub_module
    monkeypatch.setattr(hub_module, "AHEAD_SHARE", 1e-9)     # any encode is longer than this share
    hub = await running(hubs, Recorder(), fps=20)
    fmt = FrameFormat("jpeg", 80, 60, 80)
    got = await take_every_frame(hub, fmt, 12)
    assert hub.stats()["encoded_ahead"] == 0
    assert hub.encode_count == len({e.seq for e in got})    # each on an encoder thread, once


async def test_a_wait_cancelled_in_the_pass_its_frame_arrives_ends_cancelled(hubs):
    """A consumer cancelled in the event-loop pass in which its frame arrives is cancelled, not handed
    the frame: with Python 3.11's ``asyncio.wait_for`` it got the frame and ran on (a SIGTERM as a
    frame came in left the recorder's camera watch running and the agent never exited). The hub is
    not started: the only frame is the one published here, on the loop thread, just before the cancel."""
    hub = make_hub(Recorder())
    hubs.append(hub)
    feed = hub.capture.feeds["front"]
    waiter = asyncio.create_task(hub.next_frame("front", 0, 30.0))
    await wait_until(lambda: bool(feed.waiters), what="the consumer waiting")
    hub.capture.publish(feed, marked_image(), time.monotonic())   # its wake-up is queued for the next pass
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert feed.latest is not None and feed.latest.seq == 1
