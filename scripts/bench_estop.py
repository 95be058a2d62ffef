#!/usr/bin/env python3
"""Measure the emergency stop on the simulated tank: how soon zero duty reaches the motor controller.

Builds the simulated tank (RoboClaw emulator on a pty, real driver, real agent.devices.hardware.Hardware)
and runs the real control loop thread; the tank is driven at 20 Hz by a source with a 5 s
timeout (so only the e-stop can stop it). Cases, ``--trials`` each:

- loop: ``ControlLoop.estop("console", ...)`` (what the console's STOP calls) -> the first zero
  duty the emulated controller applies;
- socket: ``robot-agent estop``'s request on the control socket (agent.ops.estopctl.ControlServer
  on its own event loop, the client's ``request``) -> the first zero duty;
- cli (once per trial, wall time): the whole ``python -m agent estop`` process, start to exit.

After each trial the e-stop is released and the source re-engages (a reset). Prints min / median /
max per case and the loop's tick figures.

Usage: scripts/bench_estop.py [--trials 20] [--config config/params.json]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_watchdog import DutyLog, motor_only_tank  # noqa: E402

from agent.config import load  # noqa: E402
from agent.control import ControlLoop  # noqa: E402
from agent.ops.estopctl import ControlServer, request  # noqa: E402
from agent.commands import BaseVelocity, Reset

SOURCE = "robot_msg"


def drive(loop: ControlLoop, duty: DutyLog) -> None:
    """Re-engage, then drive at 20 Hz for 0.3 s until the motor moves."""
    loop.submit(SOURCE, Reset())
    start = time.monotonic()
    for _ in range(6):
        loop.submit(SOURCE, BaseVelocity(0.3, 0.0))
        time.sleep(0.05)
    if duty.first(start, zero=False, timeout_s=2.0) is None:
        raise RuntimeError("the motor never moved")


def measure(loop: ControlLoop, duty: DutyLog, action) -> float:
    """Drive, run ``action``; seconds from the action to the first zero duty applied. Releases after."""
    drive(loop, duty)
    t0 = time.monotonic()
    action()
    zero_at = duty.first(t0, zero=True, timeout_s=5.0)
    if zero_at is None:
        raise RuntimeError("no zero duty within 5 s")
    loop.release_estop("cli")
    return zero_at - t0


def report(name: str, secs: list[float]) -> None:
    ms = [x * 1000.0 for x in secs]
    print(f"  {name:7s} min {min(ms):7.1f} ms  median {statistics.median(ms):7.1f} ms  max {max(ms):7.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--config", default=str(ROOT / "config" / "params.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    cfg = load(args.config)
    if cfg.drivers.motor is None or cfg.drivers.motor.port != "sim://":
        print("the config needs a sim:// motor controller", file=sys.stderr)
        return 2
    cfg, sim, hw, loop, duty = motor_only_tank(cfg, SOURCE)
    tmp = tempfile.TemporaryDirectory(prefix="bench-estop-")
    path = Path(tmp.name) / "control.sock"
    aloop = asyncio.new_event_loop()
    server = ControlServer(loop, path)
    thread = threading.Thread(target=aloop.run_forever, name="bench-estop-loop", daemon=True)
    thread.start()
    results: dict[str, list[float]] = {"loop": [], "socket": [], "cli": []}
    try:
        if not asyncio.run_coroutine_threadsafe(server.start(), aloop).result(5):
            raise RuntimeError(f"cannot listen on {path}")
        for _ in range(args.trials):
            results["loop"].append(measure(loop, duty, lambda: loop.estop("console", "bench")))
            results["socket"].append(measure(loop, duty, lambda: request(path, {"op": "estop", "reason": "bench"})))
            drive(loop, duty)
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-m", "agent", "estop", "--socket", str(path)], cwd=ROOT,
                           check=True, capture_output=True)
            results["cli"].append(time.monotonic() - t0)
            loop.release_estop("cli")
        stats = loop.tick_stats()
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), aloop).result(5)
        aloop.call_soon_threadsafe(aloop.stop)
        thread.join(5)
        loop.close()
        hw.close()
        sim.close()
        tmp.cleanup()
    tick_ms = 1000.0 / cfg.control.rate_hz
    print(f"emergency stop on the simulated tank (RoboClaw emulator on a pty), {args.trials} trials each; "
          f"control {cfg.control.rate_hz:.0f} Hz (tick {tick_ms:.0f} ms)")
    print("  e-stop -> first zero duty applied by the emulated controller:")
    report("loop", results["loop"])
    report("socket", results["socket"])
    print("  robot-agent estop, the whole process (interpreter start included), start to exit:")
    report("cli", results["cli"])
    print(f"  loop: {stats.ticks} ticks, {stats.late_ticks} late, max tick {stats.max_tick_s * 1000:.2f} ms, "
          f"{stats.achieved_hz:.1f} Hz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
