"""Video under a budget on real links (issue 11).

- A real python-socketio hub at its default 1,000,000-byte ``max_http_buffer_size`` and a
  2592x1944 noisy camera (JPEG q80 frames of 1-2 MB): the link stays up, frames arrive
  re-encoded under the budget, and the re-encode count shows in ``telem``. The suite runs until
  five frames and such a ``telem`` arrived (the issue's 30 s run is ``scripts/bench_video.py``).
- The same hub behind a loopback proxy at 1 Mbit/s: the frame age at the hub (capture ->
  arrival, read from a time code drawn into each frame) stays bounded and a stop still
  reaches the control loop at once (loose bounds here; figures in the benchmark).
"""

from __future__ import annotations

import asyncio
import time

import cv2
import numpy as np
import pytest

from agent.testing.artex_hub import ArtexHub, agent_on
from agent.testing.proxy import TcpProxy
from agent.testing.running_agent import wait_for
from drivers.emulators import camera as emulated

WIDTH, HEIGHT = 2592, 1944
#: Time code: 24 bits (ms of the monotonic clock), squares of CODE_PX in the top rows.
BITS, CODE_PX = 24, 100
DEFAULT_LIMIT = 1_000_000


def stamp(image: np.ndarray, t_mono_s: float) -> None:
    """Draw ``t_mono_s`` (ms, 24 bits) as black/white squares across the top of ``image``."""
    ms = int(t_mono_s * 1000) & ((1 << BITS) - 1)
    for bit in range(BITS):
        image[:CODE_PX, bit * CODE_PX:(bit + 1) * CODE_PX] = 255 if ms >> bit & 1 else 0


def read_stamp(jpeg: bytes) -> float | None:
    """The time code of a received JPEG, s (ms resolution, modulo 2^24 ms), or None."""
    img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_GRAYSCALE)
    if img is None:
        return None
    scale = img.shape[1] / WIDTH
    y = int(CODE_PX * scale / 2)
    ms = 0
    for bit in range(BITS):
        x = int((bit + 0.5) * CODE_PX * scale)
        ms |= (int(img[y, x]) > 127) << bit
    return ms / 1000


def age_of(jpeg: bytes) -> float | None:
    """Capture -> now, s, from the time code."""
    sent = read_stamp(jpeg)
    if sent is None:
        return None
    return ((int(time.monotonic() * 1000) - int(sent * 1000)) % (1 << BITS)) / 1000


@pytest.fixture
def noisy_camera(monkeypatch):
    """The sim pattern camera drawing noise (JPEG q80 of 2592x1944: ~1.5 MB) and a capture time code."""
    install_noise(monkeypatch)


def install_noise(monkeypatch) -> None:
    """Patch :class:`PatternCapture` to draw noise and a time code at 2592x1944 (see :func:`stamp`)."""
    rng = np.random.default_rng(7)      # float32 normals: the same noise at half the setup time of float64
    noise = [(rng.standard_normal((HEIGHT, WIDTH, 3), dtype=np.float32) * 24).astype(np.int16) for _ in range(3)]
    original = emulated.PatternCapture._render

    def render(self) -> np.ndarray:
        image = original(self)
        if image.shape[:2] == (HEIGHT, WIDTH):
            image = np.clip(image.astype(np.int16) + noise[self.frames % 3], 0, 255).astype(np.uint8)
            stamp(image, time.monotonic())
        return image

    monkeypatch.setattr(emulated.PatternCapture, "_render", render)


class TimedHub(ArtexHub):
    """ArtexHub at python-socketio's default limit, keeping each frame's age at arrival."""

    def __init__(self) -> None:
        super().__init__(ready_delay_s=0.05, max_http_buffer_size=DEFAULT_LIMIT)
        self.ages: list[float] = []
        self.sizes: list[int] = []

    async def _video(self, sid, data) -> None:
        await super()._video(sid, data)
        frame = self.last_video.get("front")
        if isinstance(frame, bytes):
            self.sizes.append(len(frame))
            age = age_of(frame)
            if age is not None:
                self.ages.append(age)


def big_camera(**video) -> dict:
    return {"drivers": {"cameras": [{"id": "front", "source": "sim://pattern", "width": WIDTH,
                                     "height": HEIGHT, "fps": 10, "jpeg_quality": 80}]},
            "telem_can": True, "video_can": True, "max_send_freq": 0.1, "video": video}


def test_time_code_survives_the_smallest_re_encode() -> None:
    image = np.full((HEIGHT, WIDTH, 3), 128, np.uint8)
    stamp(image, 1234.567)
    small = cv2.resize(image, (WIDTH // 4, HEIGHT // 4), interpolation=cv2.INTER_AREA)
    ok, jpeg = cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, 40])
    assert ok and read_stamp(jpeg.tobytes()) == pytest.approx(1234.567, abs=0.002)


async def test_big_frames_stay_under_the_default_buffer(noisy_camera) -> None:
    hub = TimedHub()
    await hub.start()
    try:
        async with agent_on(hub, **big_camera()) as agent:
            sid = hub.connected[-1]

            def reported() -> dict:
                return agent.adapters["artex"].status().detail["video"]

            # five frames and a status that counts a re-encode, or the hub closing the link
            await wait_for(lambda: hub.disconnects or (len(hub.sizes) >= 5 and reported()["reencoded"] >= 1
                                                       and reported()["front"]["age_p50_s"] is not None), 30)
            assert hub.disconnects == 0 and hub.connected == [sid], "the hub closed the link"
            assert len(hub.sizes) >= 5, f"only {len(hub.sizes)} frames in 30 s"
            assert max(hub.sizes) < 900_000
            counters = agent.adapters["artex"].counters
            assert counters["video_reencoded"] >= 1
            assert not [p for _, p in hub.telem if "video" in p], "video figures in telem (a hub UI shows a sensor)"
            video = reported()
            assert video["reencoded"] >= 1, "re-encodes not reported in status"
            assert video["front"]["age_p50_s"] is not None
    finally:
        await hub.stop()


@pytest.mark.slow     # 2592x1944 frames over 1 Mbit/s for several seconds: the frame size is the point
async def test_slow_link_keeps_frames_young_and_stop_prompt(noisy_camera) -> None:
    hub = TimedHub()
    await hub.start()
    try:
        async with TcpProxy("127.0.0.1", hub.port, rate_bps=125_000) as proxy:
            async with agent_on(hub, **{**big_camera(), "port": proxy.port}) as agent:
                assert await wait_for(lambda: len(hub.ages) >= 3, 20), "no frame through the 1 Mbit/s link"
                # the first frames find the link's rate; then 30 frames (~3 s at 10 fps) or 6 s, whichever first
                assert await wait_for(lambda: len(hub.ages) >= 6, 10), f"only {len(hub.ages)} frames in 10 s"
                hub.ages.clear()
                await wait_for(lambda: len(hub.ages) >= 30, 6)
                assert len(hub.ages) >= 5, f"only {len(hub.ages)} frames in 6 s at 1 Mbit/s"
                ages = sorted(hub.ages)
                p95 = ages[int(0.95 * (len(ages) - 1))]
                assert p95 < 1.5, f"p95 frame age {p95:.2f} s at the hub over 1 Mbit/s"
                await hub.command({"drive": {"vx": 0.2}})
                assert await wait_for(lambda: not agent.control.snapshot().stopped, 3)
                sent = time.monotonic()
                await hub.command({"com": "stop"})
                assert await wait_for(lambda: agent.control.snapshot().stopped, 2)
                assert time.monotonic() - sent < 0.5, "stop delayed behind video"
    finally:
        await hub.stop()


async def test_cyrillic_log_answer_fits_the_default_buffer() -> None:
    """``log_tail_kib`` 900 of Cyrillic text is ~2.7 MB JSON-escaped: the answer is cut to the budget."""
    import logging

    from agent.support.logtail import LogTail, wire_size
    from agent.testing.artex_hub import artex_params
    from agent.testing.running_agent import running_agent

    tail = LogTail(max_bytes=900 * 1024)
    line = "журнал: двигатель левой гусеницы в норме, напряжение батареи в пределах " * 4
    for i in range(3000):
        tail.emit(logging.LogRecord("t", logging.WARNING, __file__, 1, "%d %s", (i, line), None))
    hub = TimedHub()
    await hub.start()
    try:
        async with running_agent(artex_params(hub, artex={"log_tail_kib": 900}), logs=tail):
            assert await wait_for(lambda: hub.heartbeats, 10)
            sid = hub.connected[-1]
            await hub.command({"file": "log"})
            assert await wait_for(lambda: hub.files, 5), "no file answer"
            content = hub.files[-1][1]["content"]
            assert 800_000 < wire_size(content) < 900_000
            # the link is still up after the big answer: a heartbeat round trip on the same session
            assert (await hub.heartbeat(["d_meta"]))["d_meta"]["sid"] == sid
            assert hub.disconnects == 0 and hub.connected == [sid]
    finally:
        await hub.stop()


async def test_a_raw_frame_over_the_budget_is_skipped_counted_and_logged_once(caplog) -> None:
    from collections import Counter

    from agent.adapters.artex_video import ArtexVideo
    from agent.config.drivers import CameraConfig
    from agent.config.video import VideoConfig
    from agent.video import VideoHub

    cams = [CameraConfig(id="rgb_strip", source="sim://pattern", width=200, height=200, fps=30),
            CameraConfig(id="front", source="sim://pattern", width=160, height=120, fps=30)]
    counters: Counter[str] = Counter()
    hub = VideoHub(cams)
    hub.start()
    try:
        video = ArtexVideo(hub, VideoConfig(max_message_bytes=65_536), counters)
        payloads: list[dict] = []
        for _ in range(20):   # a round whose only new frame was the skipped raw one returns {}
            payload = await video.next_payload(80, 5.0)   # 5 s: a loaded camera may stall
            if payload and len(payloads) < 3:
                payloads.append(payload)
            if len(payloads) == 3 and counters["video_oversize_skipped"] >= 3:
                break
    finally:
        await asyncio.to_thread(hub.close)
    assert len(payloads) == 3 and all(set(p) == {"front"} for p in payloads)   # 120,000 raw bytes never sent
    assert counters["video_oversize_skipped"] >= 3
    assert sum("rgb_strip" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records) == 1
