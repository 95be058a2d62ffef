#!/usr/bin/env python3
"""Measure the flight recorder's cost on the simulated tank (issue 23): CPU, bytes per minute, loop lateness.

Runs the agent on the shipped simulated tank (``config/params.json`` devices and its camera, adapters
off) twice for ``--seconds`` each while a source streams a velocity command at 10 Hz (the same value:
slot ticks only, so lateness is the scheduler's): once with the recorder off (``recorder.enabled``
false) and once with it on at its defaults (every channel, camera frames at 2 fps, JPEG in ARTEX's
format; with no ARTEX link watching, the recorder's frames cost a capture at full rate and an encode
at 2 fps of their own: the worst case). Prints

- the recorder thread's CPU share of one core (``time.thread_time`` of the thread), and the whole
  process's CPU share with and without the recorder (the difference includes capture and encodes);
- bytes written per minute at default rates (SD card wear);
- the control loop's lateness p50 / p99 / max with and without it: per pair of consecutive slot ticks
  (from the snapshots' monotonic times), how much later than one period the second came, ms.

Usage: ``.venv/bin/python scripts/bench_recorder.py [--seconds 25]`` (two runs: ~55 s in all).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.commands import BaseVelocity
from agent.testing.running_agent import running_agent, sim_config  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100.0 * len(s)))]


async def run(seconds: float, record: bool, directory: str) -> dict:
    cfg = sim_config(recorder={"enabled": record, "dir": directory})
    async with running_agent(cfg) as agent:
        await asyncio.sleep(2.0)                        # devices settle, first frames
        period = 1.0 / agent.cfg.control.rate_hz
        seq = agent.control.snapshot().seq
        times: list[float] = []
        bytes0 = agent.recorder.bytes_written()
        cpu0, rec0, t0 = time.process_time(), agent.recorder.cpu_s, time.monotonic()
        while time.monotonic() - t0 < seconds:
            agent.control.submit("artex", BaseVelocity(0.3, 0.0))
            for s in agent.control.samples_since(seq, 512):
                times.append(s.t_mono_s)
                seq = s.seq
            await asyncio.sleep(0.1)
        wall = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        rec_cpu = agent.recorder.cpu_s - rec0
        await asyncio.to_thread(agent.recorder.flush)
        written = agent.recorder.bytes_written() - bytes0
        status = agent.recorder.status()
    late = [max(0.0, (b - a) - period) * 1e3 for a, b in zip(times, times[1:])]
    return {"wall_s": wall, "process_cpu_share": cpu / wall, "recorder_cpu_share": rec_cpu / wall,
            "bytes_per_min": written / wall * 60.0, "late_p50_ms": percentile(late, 50),
            "late_p99_ms": percentile(late, 99), "late_max_ms": max(late) if late else float("nan"),
            "ticks": len(times), "dropped": status["dropped"], "missed": status["missed_snapshots"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=25.0, help="seconds per run (default 25; two runs)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        off = asyncio.run(run(args.seconds, False, d))
        on = asyncio.run(run(args.seconds, True, d))
    print(f"flight recorder on the simulated tank, {args.seconds:.0f} s per run, 50 Hz loop, camera 640x480 "
          f"15 fps, a 10 Hz velocity stream:")
    print(f"  recorder thread CPU: {on['recorder_cpu_share'] * 100:.2f} % of one core")
    print(f"  process CPU: {off['process_cpu_share'] * 100:.1f} % without the recorder, "
          f"{on['process_cpu_share'] * 100:.1f} % with it (difference "
          f"{(on['process_cpu_share'] - off['process_cpu_share']) * 100:+.1f} %: recorder thread, its camera "
          f"capture at full rate and 2 fps JPEG encodes)")
    print(f"  written: {on['bytes_per_min'] / 2**20:.2f} MiB per minute ({on['bytes_per_min'] / 1e3:.0f} kB/min) "
          f"at default rates; dropped {on['dropped']}, snapshots missed {on['missed']}")
    for name, r in (("without", off), ("with", on)):
        print(f"  loop lateness {name} the recorder: p50 {r['late_p50_ms']:.2f} ms, p99 {r['late_p99_ms']:.2f} ms, "
              f"max {r['late_max_ms']:.2f} ms over {r['ticks']} ticks")
    if args.json:
        print(json.dumps({"off": off, "on": on}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
