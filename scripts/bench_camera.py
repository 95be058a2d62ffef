"""Benchmark the camera pipeline on the test-pattern camera; prints numbers.

- frame age: capture (``Frame.t_mono_s``) to an asyncio consumer woken by the
  hub, and the age of ``latest()`` sampled at random instants (p50 / p99);
- JPEG encode time of one 640x480 frame at quality 80 (``cv2.imencode``);
- frames/s delivered and process CPU per captured frame through
  :class:`agent.video.VideoHub` with 1 and 3 subscribers of the same format.

Usage: ``python scripts/bench_camera.py [--seconds 5] [--fps 30]``
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import time

from agent.config.drivers import CameraConfig
from agent.video import Frame, FrameFormat, VideoHub, encode
from drivers.emulators.camera import PatternCapture

WIDTH, HEIGHT, QUALITY = 640, 480, 80


def pct(values: list[float], q: float) -> float:
    """q-th percentile (0..100) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def cpu_s() -> float:
    """User + system CPU of this process, s (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def hub_for(fps: float) -> VideoHub:
    return VideoHub([CameraConfig(id="bench", source="sim://pattern", width=WIDTH, height=HEIGHT, fps=fps)])


async def frame_age(seconds: float, fps: float) -> None:
    with hub_for(fps) as hub:
        await hub.next_frame("bench", 0, 5.0)
        woke, sampled = [], []
        after, end = 0, time.monotonic() + seconds

        async def consumer() -> None:
            nonlocal after
            while time.monotonic() < end:
                frame = await hub.next_frame("bench", after, 1.0)
                if frame is not None:
                    woke.append(time.monotonic() - frame.t_mono_s)
                    after = frame.seq

        async def sampler() -> None:
            rng = random.Random(1)
            while time.monotonic() < end:
                await asyncio.sleep(rng.uniform(0.0, 2.0 / fps))
                frame = hub.latest("bench")
                sampled.append(time.monotonic() - frame.t_mono_s)

        await asyncio.gather(consumer(), sampler())
    print(f"capture -> consumer woken : p50 {pct(woke, 50) * 1e3:6.2f} ms  p99 {pct(woke, 99) * 1e3:6.2f} ms"
          f"  ({len(woke)} frames)")
    print(f"age of latest() (random)  : p50 {pct(sampled, 50) * 1e3:6.2f} ms  p99 {pct(sampled, 99) * 1e3:6.2f} ms"
          f"  (frame period {1e3 / fps:.1f} ms)")


def jpeg_encode(frames: int = 100) -> None:
    cap = PatternCapture(WIDTH, HEIGHT, paced=False)
    images = [cap.read()[1] for _ in range(frames)]
    fmt = FrameFormat("jpeg", quality=QUALITY)
    times = []
    for i, image in enumerate(images):
        frame = Frame("bench", i + 1, 0.0, 0.0, image)
        t0 = time.perf_counter()
        encode(frame, fmt)
        times.append(time.perf_counter() - t0)
    print(f"JPEG encode {WIDTH}x{HEIGHT} q{QUALITY}: p50 {pct(times, 50) * 1e3:.2f} ms  "
          f"mean {statistics.fmean(times) * 1e3:.2f} ms  p99 {pct(times, 99) * 1e3:.2f} ms")


async def throughput(subscribers: int, seconds: float, fps: float) -> None:
    fmt = FrameFormat("jpeg", quality=QUALITY)
    with hub_for(fps) as hub:
        await hub.next_frame("bench", 0, 5.0)
        seq0, enc0 = hub.latest("bench").seq, hub.encode_count
        cpu0, proc0, t0 = cpu_s(), time.process_time(), time.monotonic()
        end = t0 + seconds

        async def subscriber() -> int:
            got, after = 0, hub.latest("bench").seq
            while time.monotonic() < end:
                frame = await hub.next_encoded("bench", fmt, after, 1.0)
                if frame is not None:
                    got, after = got + 1, frame.seq
            return got

        counts = await asyncio.gather(*(subscriber() for _ in range(subscribers)))
        elapsed = time.monotonic() - t0
        captured = hub.latest("bench").seq - seq0
        encodes = hub.encode_count - enc0
        cpu, proc = cpu_s() - cpu0, time.process_time() - proc0
    per_sub = ", ".join(f"{c / elapsed:.1f}" for c in counts)
    print(f"{subscribers} subscriber(s): captured {captured / elapsed:.1f} fps, delivered {per_sub} fps each, "
          f"{encodes} encodes for {captured} frames; CPU {cpu / max(captured, 1) * 1e3:.2f} ms/frame "
          f"(process_time {proc / max(captured, 1) * 1e3:.2f} ms/frame, {cpu / elapsed * 100:.0f} % of one core)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each timed run, s")
    parser.add_argument("--fps", type=float, default=30.0, help="pattern camera rate, Hz")
    args = parser.parse_args()
    print(f"pattern camera {WIDTH}x{HEIGHT} at {args.fps:g} fps")
    await frame_age(args.seconds, args.fps)
    jpeg_encode()
    for n in (1, 3):
        await throughput(n, args.seconds, args.fps)


if __name__ == "__main__":
    asyncio.run(main())
