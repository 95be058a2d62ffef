#!/usr/bin/env python3
"""Measure the e-stop input on the simulated tank: from opening the switch to zero duty at the motor.

Builds the simulated tank (agent.devices.simtank.SimTank: RoboClaw emulator on a pty, the GPIO chip
emulator behind the real gpiod-API driver, real agent.devices.hardware.Hardware with its e-stop watch
thread) and runs the real control loop thread. Per trial: drive at 0.3 m/s until the emulated
controller applies non-zero duty, open the switch, and time until the emulator applies zero duty;
then close the switch and time until the input's e-stop is released (the debounce), and send an
explicit zero so the next trial may drive. Cases:

- edges: the line with kernel edge detection (the watch wakes on the edge);
- polling: ``edge_events`` off (the watch reads every ``1 / poll_hz`` s);
- chip removed: the GPIO chip goes away (edge detection on), time to zero duty.

The requirement (issue 18 item 6): at most one control tick from opening to zero duty (no
debounce on the set). Prints min / median / max per case, and the release time after closing.

Usage: scripts/bench_estop_input.py [--trials 20] [--config config/params.json]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from agent.config import load  # noqa: E402
from agent.control import ControlLoop  # noqa: E402
from agent.devices.estopinput import LoopEstop  # noqa: E402
from agent.devices.hardware import Hardware  # noqa: E402
from agent.commands import BaseVelocity
from agent.devices.simtank import SimTank  # noqa: E402
from bench_watchdog import DutyLog, report  # noqa: E402


def wait(predicate, timeout_s: float, what: str) -> float:
    """Poll ``predicate`` every 1 ms; the monotonic time it held. Raises RuntimeError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout_s} s")
        time.sleep(0.001)
    return time.monotonic()


def trial(loop: ControlLoop, duty: DutyLog, sim: SimTank, remove: bool) -> tuple[float, float]:
    """One trial: (open or remove -> zero duty, close -> released), s."""
    emu = sim.gpio()
    loop.submit("console", BaseVelocity(0.0, 0.0))          # explicit zero: re-engaged after the last e-stop
    start = time.monotonic()
    for _ in range(10):
        loop.submit("console", BaseVelocity(0.3, 0.0))
        time.sleep(0.02)
    if duty.first(start, zero=False, timeout_s=2.0) is None:
        raise RuntimeError("the motor never moved")
    t0 = time.monotonic()
    emu.remove() if remove else emu.open_switch()
    zero_at = duty.first(t0, zero=True, timeout_s=5.0)
    if zero_at is None:
        raise RuntimeError("no zero duty within 5 s of opening the switch")
    t1 = time.monotonic()
    emu.replug() if remove else emu.close_switch()
    released = wait(lambda: loop.snapshot().safety.estop is None, 15.0, "release")
    return zero_at - t0, released - t1


def run_case(cfg, trials: int, remove: bool) -> tuple[list[float], list[float], object]:
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    loop = ControlLoop(cfg, hw)
    hw.watch_estop(LoopEstop(loop))
    hw.start()
    duty = DutyLog(sim.physics)
    loop.start()
    sets, releases = [], []
    try:
        for _ in range(trials):
            s, r = trial(loop, duty, sim, remove)
            sets.append(s)
            releases.append(r)
        stats = loop.tick_stats()
    finally:
        loop.close()
        hw.close()
        sim.close()
    return sets, releases, stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--config", default=str(ROOT / "config" / "params.json"))
    args = ap.parse_args()
    # CRITICAL: the "removed" case logs the e-stop device lost (ERROR) by design, once per trial
    logging.basicConfig(level=logging.CRITICAL, format="%(levelname)s %(name)s: %(message)s")

    cfg = load(args.config)
    d = cfg.drivers
    if d.motor is None or d.motor.port != "sim://" or d.estop is None or str(d.estop.chip) != "sim://":
        print("the config needs a sim:// motor controller and a sim:// e-stop input", file=sys.stderr)
        return 2
    base = cfg.model_copy(update={"drivers": d.model_copy(update={
        "imu": None, "power": None, "servo": None, "cameras": []})})
    polling = base.model_copy(update={"drivers": base.drivers.model_copy(update={
        "estop": d.estop.model_copy(update={"edge_events": False})})})
    tick_ms = 1000.0 / cfg.control.rate_hz
    poll_ms = 1000.0 / d.estop.poll_hz
    print(f"e-stop input on the simulated tank (GPIO chip emulator behind the gpiod driver, RoboClaw emulator "
          f"on a pty), {args.trials} trials each")
    print(f"  control {cfg.control.rate_hz:.0f} Hz (tick {tick_ms:.0f} ms); input poll {d.estop.poll_hz:.0f} Hz "
          f"({poll_ms:.0f} ms); release debounce {d.estop.debounce_s * 1000:.0f} ms")
    cases = (("edges", base, False, tick_ms), ("polling", polling, False, tick_ms + poll_ms),
             ("removed", base, True, tick_ms + poll_ms))
    for name, case_cfg, remove, bound in cases:
        sets, releases, stats = run_case(case_cfg, args.trials, remove)
        report(name, sets, bound)
        print(f"  {'':9s} release after closing: median {statistics.median(releases) * 1000:.0f} ms, "
              f"max {max(releases) * 1000:.0f} ms; loop max tick {stats.max_tick_s * 1000:.2f} ms, "
              f"{stats.late_ticks} late")
    return 0


if __name__ == "__main__":
    sys.exit(main())
