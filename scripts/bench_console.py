#!/usr/bin/env python3
"""Operator console benchmark: one run on loopback with the simulated tank, prints numbers.

1. ``{"type": "drive"}`` sent on the console WebSocket -> the RoboClaw emulator applying the
   nonzero duty packet written by the agent's driver (p50/p99), the same measurement point as
   scripts/bench_sim2bot.py and scripts/bench_artex.py.
2. ``{"type": "stop"}`` while driving -> the emulator holding zero duty (p50/p99).
3. Frames/s one tab receives when it acknowledges each frame at once, and the JPEG size.

The client is a plain WebSocket (websockets.sync) in a thread, as a page would be.
Usage: ``python scripts/bench_console.py [--trials 200] [--seconds 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from websockets.sync.client import connect as ws_connect

from tests.conftest import free_port, running_agent, sim_config


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def drain(ws, seconds: float) -> None:
    """Read (and drop) whatever the agent sends for ``seconds`` (state messages, frames)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            ws.recv(timeout=max(0.001, end - time.monotonic()))
        except TimeoutError:
            return


def latencies(url: str, emu, trials: int, latch_s: float) -> tuple[list[float], list[float]]:
    """(drive -> nonzero duty, stop -> zero duty) per trial, s. ``latch_s``: the console's
    timeout; each trial's drive starts after the last claim timed out (from rest)."""
    drive, stop = [], []
    with ws_connect(url, max_size=None) as ws:
        drain(ws, 0.3)
        for _ in range(trials):
            ws.send(json.dumps({"type": "stop"}))
            emu.wait_for(lambda: emu.motor_duty == [0.0, 0.0], 2.0)
            drain(ws, latch_s + 0.03 + random.uniform(0.0, 0.02))   # from rest; every phase of the tick
            t0 = time.monotonic()
            ws.send(json.dumps({"type": "drive", "vx": 0.5, "omega": 0.0, "press": True}))   # a new key-down
            if emu.wait_for(lambda: emu.motor_duty[0] > 0.0, 2.0):
                drive.append(time.monotonic() - t0)
            drain(ws, 0.03)
            ws.send(json.dumps({"type": "drive", "vx": 0.5, "omega": 0.0}))   # the held key's repeat
            t1 = time.monotonic()
            ws.send(json.dumps({"type": "stop"}))
            if emu.wait_for(lambda: emu.motor_duty == [0.0, 0.0], 2.0):
                stop.append(time.monotonic() - t1)
        ws.send(json.dumps({"type": "stop"}))
    return drive, stop


def frame_rate(url: str, seconds: float) -> tuple[float, float]:
    """(frames/s, mean JPEG bytes) for a tab that acknowledges every frame at once."""
    sizes = []
    with ws_connect(url, max_size=None) as ws:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                msg = ws.recv(timeout=1.0)
            except TimeoutError:
                continue
            if isinstance(msg, bytes):
                sizes.append(len(msg))
                ws.send(json.dumps({"type": "frame"}))
    return len(sizes) / seconds, sum(sizes) / max(1, len(sizes))


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    port = free_port()
    async with running_agent(sim_config(console={"enabled": True, "port": port})) as agent:
        console = agent.adapters["console"]
        await asyncio.wait_for(console.ready.wait(), 10.0)
        url = f"ws://127.0.0.1:{port}/ws"
        drive, stop = await asyncio.to_thread(latencies, url, agent.sim.motor_emulator, args.trials,
                                              agent.cfg.source_timeout_s("console"))
        fps, size = await asyncio.to_thread(frame_rate, url, args.seconds)
        rate, cam = agent.cfg.control.rate_hz, agent.cfg.drivers.cameras[0]
        settings = agent.cfg.console
    print(f"console bench (loopback, {args.trials} trials, control loop {rate:g} Hz)")
    print(f"  console drive -> motor driver write: p50 {1e3 * pct(drive, 50):7.2f} ms   "
          f"p99 {1e3 * pct(drive, 99):7.2f} ms   (n={len(drive)})")
    print(f"  console stop  -> zero duty written:  p50 {1e3 * pct(stop, 50):7.2f} ms   "
          f"p99 {1e3 * pct(stop, 99):7.2f} ms   (n={len(stop)})")
    print(f"  camera {cam.width}x{cam.height} at {cam.fps:g} fps, JPEG q{settings.jpeg_quality}, "
          f"max_fps {settings.max_fps:g}: {fps:5.1f} frames/s to one tab, {size / 1024:5.1f} KiB each")


if __name__ == "__main__":
    asyncio.run(main())
