#!/usr/bin/env python3
"""The control loop at rest (docs/safety.md, "The control loop at rest"): a command's time to the motor.

The agent runs in this process on the shipped simulated tank (no camera, no adapter's peer). Each
trial waits for the tank to stand long enough that the loop rests (the motor line rests 1 s after
the tracks read still, the loop 1 s after that), hands ``ControlLoop.submit`` a velocity command from
a worker thread (as an adapter's receiving thread would) and times it until the RoboClaw emulator
applies the duty; then a ``Stop``. Printed: whether the loop rested at each submit, p50 and max of the
trials, and the control thread's ticks and context switches per second while it rests.

Run it in two checkouts to compare (a tree without the rest shows ``resting: n/a``).

Usage: ``scripts/bench_rest.py [--trials 15]`` (about 3.5 s a trial).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_pi_agent import DutyEvents  # noqa: E402

from agent.commands import BaseVelocity, Stop  # noqa: E402
from agent.testing.running_agent import running_agent, sim_config  # noqa: E402

STAND_S = 3.0       # the motor line rests after 1 s still, the loop 1 s after that


def switches(tid: int) -> int:
    """Voluntary + involuntary context switches of thread ``tid`` of this process so far."""
    total = 0
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if "ctxt_switches" in line:
            total += int(line.split(":")[1])
    return total


async def run(trials: int) -> None:
    async with running_agent(sim_config(drivers={"cameras": []})) as agent:
        control = agent.control
        duty = DutyEvents(agent.physics)
        await asyncio.sleep(STAND_S)
        tid = next(t.native_id for t in threading.enumerate() if t.name == "control")
        s0, n0, t0 = switches(tid), control.tick_stats().ticks, time.monotonic()
        await asyncio.sleep(STAND_S)
        dt = time.monotonic() - t0
        print(f"standing: control ticks {(control.tick_stats().ticks - n0) / dt:.1f}/s, "
              f"context switches {(switches(tid) - s0) / dt:.1f}/s")
        lat, rested = [], []
        for _ in range(trials):
            await asyncio.sleep(STAND_S)
            rested.append(getattr(control.tick_stats(), "resting", None))
            n = len(duty.events)
            sent = time.monotonic()
            await asyncio.to_thread(control.submit, "robot_msg", BaseVelocity(0.3, 0.0))
            while len(duty.events) == n:
                await asyncio.sleep(0.0005)
            lat.append((duty.events[n][0] - sent) * 1e3)
            control.submit("robot_msg", Stop())
        shown = "n/a" if None in rested else f"{sum(rested)} of {len(rested)}"
        print(f"command at rest -> duty applied by the emulated RoboClaw: resting at submit {shown}; "
              f"p50 {statistics.median(lat):.2f} ms, max {max(lat):.2f} ms (n={len(lat)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=15, help="commands at rest (default 15)")
    asyncio.run(run(ap.parse_args().trials))


if __name__ == "__main__":
    main()
