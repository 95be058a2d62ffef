"""agent.video budgets: capture on demand with a health probe, encode cache bounded in bytes,
encoder CPU share, re-encode ladder under a byte limit, link pacing (issue 11, issue 10 item)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agent.config.drivers import CameraConfig
from agent.video import CpuBudget, Frame, FrameFormat, LinkPacer, VideoHub, fit_ladder, socketio_wire_size
from agent.video.hub import MAX_CACHED_ENCODES
from drivers.camera import Camera
from drivers.emulators.camera import PatternCapture
from tests.agent.test_video import hubs, wait_until  # noqa: F401 - hubs: the fixture


class Counting:
    """Capture factory counting the frames its PatternCaptures render."""

    def __init__(self) -> None:
        self.made: list[PatternCapture] = []

    def __call__(self, target, api):
        cap = PatternCapture(160, 120, 30)
        self.made.append(cap)
        return cap

    @property
    def reads(self) -> int:
        return sum(c.reads for c in self.made)


def hub_of(rec, **kw) -> VideoHub:
    conf = CameraConfig(id="front", source="sim://pattern", width=160, height=120, fps=30, stale_s=2.0)
    return VideoHub([conf], camera_factory=lambda c: Camera(c, capture_factory=rec), **kw)


async def started(hubs: list[VideoHub], rec: Counting, **kw) -> VideoHub:
    """A started hub (closed by the ``hubs`` fixture) past its first frame."""
    hub = hub_of(rec, **kw)
    hubs.append(hub)
    hub.start()
    await wait_until(lambda: hub.health()[0].state == "ok", what="first frame")
    return hub


async def test_capture_only_while_watched_with_a_slow_probe(hubs):
    rec = Counting()
    hub = await started(hubs, rec, probe_period_s=0.5, idle_after_s=0.3)
    await wait_until(lambda: not hub.watching("front"), 5.0, "idle")
    before = rec.reads
    await asyncio.sleep(1.2)  # real time held on purpose: nobody watches: about 2 probe frames, not 36
    assert 1 <= rec.reads - before <= 4 and not hub.watching("front")
    assert hub.health()[0].state == "ok"
    seq = hub.latest("front").seq
    loop = asyncio.get_running_loop()
    got = [await hub.next_encoded("front", FrameFormat(), seq, 1.0)]
    start = loop.time()
    for _ in range(10):                               # a watcher: full rate again at once
        got.append(await hub.next_encoded("front", FrameFormat(), got[-1].seq, 1.0))
    took = loop.time() - start
    assert all(got) and hub.watching("front")
    # 10 new frames (a loaded consumer may skip some) in less than the probe's 5 s (30 fps: 0.33 s)
    assert got[-1].seq - got[0].seq >= 10 and took < 4.0, (got[-1].seq - got[0].seq, took)


async def test_probe_still_notices_a_failed_camera(hubs):
    rec = Counting()
    hub = await started(hubs, rec, probe_period_s=0.3, idle_after_s=0.1)
    rec.made[-1].fail()
    await wait_until(lambda: hub.health()[0].state != "ok", timeout_s=5.0, what="the failure noticed")


async def test_encode_cache_bounded_in_bytes_and_released_when_nobody_watches(hubs):
    hub = await started(hubs, Counting(), probe_period_s=0.5, idle_after_s=0.3, cache_max_bytes=200_000)
    seq = 0
    for size in range(4):                             # raw 160x120 = 76,800 bytes per format
        fmt = FrameFormat("rgba", 160 - size, 120)
        out = await hub.next_encoded("front", fmt, seq, 1.0)
        seq = out.seq - 1
        assert hub.stats()["cache_bytes"] <= 200_000
    await wait_until(lambda: hub.stats()["cache_bytes"] == 0, timeout_s=3.0, what="cache released")
    assert MAX_CACHED_ENCODES >= 4


def test_cpu_budget_waits_once_the_share_is_spent() -> None:
    now = [0.0]
    budget = CpuBudget(0.3, window_s=1.0, clock=lambda: now[0])
    for _ in range(3):
        now[0] += 0.1
        budget.spend(0.1)                             # 0.3 s of encoding in 0.3 s: the share is spent
    assert budget.wait_s() == 0.0
    budget.spend(0.1)
    assert budget.wait_s() == pytest.approx(0.8)      # until the first 0.1 s leaves the window
    now[0] += 0.8
    assert budget.wait_s() == 0.0 and budget.used_share() == pytest.approx(0.3)


async def test_encoders_keep_within_their_share(hubs):
    hub = await started(hubs, Counting(), encode_cpu_share=0.05)
    seq, sizes = 0, iter(range(10_000))
    loop = asyncio.get_running_loop()
    end = loop.time() + 1.5
    while loop.time() < end:                          # a new format every frame: no cache hits
        out = await hub.next_encoded("front", FrameFormat("jpeg", 1200 - next(sizes), quality=95), seq, 1.0)
        seq = out.seq
    stats = hub.stats()
    # encode_s is wall time in the encoder: a loaded machine stretches each encode past the share;
    # unbudgeted, encoding back to back would take ~all of the 1.5 s
    assert stats["cpu_waits"] >= 1 and stats["encode_s"] / 1.5 < 0.05 + 0.35, stats


def noisy_frame(width: int, height: int) -> Frame:
    image = np.random.default_rng(1).integers(0, 255, (height, width, 3), np.uint8)
    image.flags.writeable = False
    return Frame("front", 1, 1.0, 1.0, image)


def test_ladder_lowers_quality_first_then_scales() -> None:
    ladder = fit_ladder(FrameFormat("jpeg", quality=80), 2592, 1944)
    assert [(f.quality, f.width) for f in ladder[:4]] == [(80, None), (60, None), (40, None), (40, 1944)]
    assert all(f.codec == "jpeg" for f in ladder) and ladder[-1].width == 648
    assert [f.width for f in fit_ladder(FrameFormat("rgba"), 640, 480)] == [None, 480, 320, 224, 160]


async def test_encoded_within_fits_a_noisy_frame_under_the_limit(hubs):
    hub = hub_of(Counting())
    hubs.append(hub)
    hub.start()
    frame = noisy_frame(1296, 972)
    big, level0 = await hub.encoded_within(frame, FrameFormat(quality=80), 10_000_000)
    small, level = await hub.encoded_within(frame, FrameFormat(quality=80), 200_000)
    assert level0 == 0 and len(big.data) > 200_000
    assert level > 0 and len(small.data) <= 200_000 and small.width < 1296
    none, steps = await hub.encoded_within(frame, FrameFormat(quality=80), 100)
    assert none is None and steps == len(fit_ladder(FrameFormat(quality=80), 1296, 972))


def test_wire_size_counts_what_python_socketio_sends() -> None:
    jpeg = b"\xff\xd8" + bytes(100_000)
    size = socketio_wire_size("video", {"payload": {"front": jpeg}})
    assert 100_002 < size < 100_002 + 100
    text = socketio_wire_size("file", {"payload": {"type": "log", "content": "ж" * 1000}})
    assert 6000 < text < 6100                         # \u0436: 6 bytes per Cyrillic letter


def test_pacer_drops_old_frames_and_adapts_down_and_back_up() -> None:
    now = [10.0]
    pacer = LinkPacer(0.5, 0.1, clock=lambda: now[0])
    assert not pacer.fresh(9.4) and pacer.too_old == 1 and pacer.level == 1
    assert pacer.fresh(9.6)
    pacer.drained(50_000, 0.4)                        # 4 periods: two steps down
    assert pacer.level == 3 and pacer.throughput_bps == pytest.approx(125_000)
    pacer.drained(1000, 0.15)                         # 1.5 periods: one step
    assert pacer.level == 4
    for _ in range(LinkPacer.RECOVER_AFTER):
        pacer.drained(1000, 0.01)
    assert pacer.level == 3
    pacer.handed(9.8)
    assert pacer.age_stats()["p50_s"] == pytest.approx(0.2)
