#!/usr/bin/env python3
"""Measure the safety path on the simulated tank: how soon zero duty reaches the motor controller.

Builds the simulated tank (agent.devices.simtank.SimTank: RoboClaw emulator on a pty,
real driver, real agent.devices.hardware.Hardware) and runs the real control loop
thread. Three cases, ``--trials`` each:

- watchdog: stream BaseVelocity at 20 Hz, stop sending; time from the last
  ``submit`` to the first zero duty the emulated controller applies. The
  requirement (docs/safety.md, the velocity watchdog) is ``timeout + one control tick``.
- stop: while driving (a source with a 5 s timeout), ``submit(Stop())``.
- release: while driving, ``release(source)`` (the adapter saw a disconnect).
- silent controller (once, at the end): the emulator stops answering; the
  worst tick and the worst gap between ticks until it is declared lost.

Prints min / median / max per case and the loop's tick statistics.

Usage: scripts/bench_watchdog.py [--trials 20] [--config config/params.json]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from agent.config import AgentConfig, load
from agent.config.control import SourceConfig
from agent.control import ControlLoop
from agent.devices.hardware import Hardware
from agent.commands import BaseVelocity, Reset, Stop
from agent.devices.simtank import SimTank
from drivers.serialport import transfer_s


class DutyLog:
    """Records (monotonic time, Unix time, left, right) of every duty the emulated controller applies
    (the newest 1000)."""

    def __init__(self, physics) -> None:
        self.events: list[tuple[float, float, float, float]] = []
        self.changed = threading.Condition()
        original = physics.set_duty

        def set_duty(left: float, right: float) -> None:
            original(left, right)
            with self.changed:
                self.events.append((time.monotonic(), time.time(), left, right))
                del self.events[:-1000]
                self.changed.notify_all()

        physics.set_duty = set_duty

    def first(self, after: float, zero: bool, timeout_s: float) -> float | None:
        """Time of the first applied duty after ``after`` that is zero (or non-zero), or None."""
        found = self.first_where(after, lambda left, right: (left == 0.0 and right == 0.0) == zero, timeout_s)
        return None if found is None else found[0]

    def first_where(self, after: float, test, timeout_s: float) -> tuple[float, float] | None:
        """(monotonic, Unix) time of the first applied duty after ``after`` with ``test(left, right)``, or None."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                for t, wall, left, right in self.events:
                    if t > after and test(left, right):
                        return t, wall
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.changed.wait(remaining)


def measure(loop: ControlLoop, duty: DutyLog, source: str, action) -> float:
    """Drive with ``source`` at 20 Hz for 0.3 s, then run ``action`` (None: just stop sending).

    Returns seconds from the action (or the last command) to the first zero duty applied.
    """
    loop.submit(source, Reset())  # re-engage a source latched out by the previous trial's stop (docs/safety.md)
    start = time.monotonic()
    for _ in range(6):
        last = time.monotonic()
        loop.submit(source, BaseVelocity(0.3, 0.0))
        time.sleep(0.05)
    if duty.first(start, zero=False, timeout_s=2.0) is None:
        raise RuntimeError("the motor never moved")
    t0 = last
    if action is not None:
        t0 = time.monotonic()
        action()
    zero_at = duty.first(t0, zero=True, timeout_s=8.0)
    if zero_at is None:
        raise RuntimeError("no zero duty within 8 s")
    time.sleep(0.05)
    return zero_at - t0


def silent_controller(loop: ControlLoop, hw: Hardware, sim: SimTank) -> dict:
    """Drive, then the controller stops answering (alive on the wire, never replies) until it is lost.

    Returns the worst tick duration and the worst gap between ticks from the silence until
    0.5 s after the controller was declared lost, and how long declaring it took, s.
    """
    loop.submit("artex", Reset())
    worst0 = loop.tick_stats().max_tick_s
    for _ in range(5):
        loop.submit("artex", BaseVelocity(0.3, 0.0))
        time.sleep(0.05)
    seq = loop.snapshot().seq
    silent_at = time.monotonic()
    sim.motor_emulator.drop_next_reply(10**6)
    while hw.motor.state != "lost" and time.monotonic() - silent_at < 10.0:
        loop.submit("artex", BaseVelocity(0.3, 0.0))
        time.sleep(0.02)
    lost_s = time.monotonic() - silent_at
    time.sleep(0.5)
    times = [s.t_mono_s for s in loop.samples_since(seq, limit=512)]
    gaps = [b - a for a, b in zip(times, times[1:])]
    return {"lost_s": lost_s, "max_tick_s": loop.tick_stats().max_tick_s, "before_s": worst0,
            "worst_gap_s": max(gaps), "ticks": len(times)}


def report(name: str, secs: list[float], bound_ms: float | None = None) -> None:
    ms = [x * 1000.0 for x in secs]
    line = f"  {name:9s} min {min(ms):7.1f} ms  median {statistics.median(ms):7.1f} ms  max {max(ms):7.1f} ms"
    if bound_ms is not None:
        line += f"  (bound {bound_ms:.0f} ms: {sum(x <= bound_ms for x in ms)}/{len(ms)} within)"
    print(line)


def print_results(trials: int, cfg, results: dict, stats, confirmed: bool, silent: dict) -> None:
    timeout_s = cfg.source_timeout_s("sim2bot")
    tick_s = 1.0 / cfg.control.rate_hz
    motor = cfg.drivers.motor
    print(f"safety path on the simulated tank (RoboClaw emulator on a pty), {trials} trials each")
    print(f"  control {cfg.control.rate_hz:.0f} Hz (tick {tick_s * 1000:.0f} ms), velocity timeout "
          f"{timeout_s * 1000:.0f} ms")
    report("watchdog", results["watchdog"], (timeout_s + tick_s) * 1000.0)
    report("stop", results["stop"], tick_s * 1000.0)
    report("release", results["release"], tick_s * 1000.0)
    print(f"  wire floor: the zero duty packet is {transfer_s(8, motor.baud) * 1000:.2f} ms of the figures above "
          f"(RoboClaw, 8 bytes at {motor.baud} baud, paced emulator)")
    print(f"  loop: {stats.ticks} ticks, {stats.late_ticks} late, max tick {stats.max_tick_s * 1000:.2f} ms, "
          f"{stats.achieved_hz:.1f} Hz; close() with the controller lost: zero confirmed {confirmed}")
    print(f"  silent controller: declared lost after {silent['lost_s'] * 1000:.0f} ms; while it was being declared "
          f"lost and 0.5 s after: worst tick {silent['max_tick_s'] * 1000:.2f} ms (before: "
          f"{silent['before_s'] * 1000:.2f} ms), worst gap between ticks {silent['worst_gap_s'] * 1000:.1f} ms "
          f"over {silent['ticks']} ticks")


def motor_only_tank(cfg: AgentConfig, long_source: str, drop: tuple[str, ...] = ("imu", "power", "servo")
                    ) -> tuple[AgentConfig, SimTank, Hardware, ControlLoop, DutyLog]:
    """The simulated tank without the devices in ``drop`` and without cameras, ``long_source``
    given a 5 s velocity timeout (a stream the benchmark stops by other means), the loop started.
    Returns (cfg, sim, hw, loop, duty); the caller closes loop, hw and sim."""
    sources = dict(cfg.control.sources)
    sources[long_source] = SourceConfig(priority=sources[long_source].priority if long_source in sources else 0,
                                        timeout_s=5.0)
    cfg = cfg.model_copy(update={
        "drivers": cfg.drivers.model_copy(update={**{name: None for name in drop}, "cameras": []}),
        "control": cfg.control.model_copy(update={"sources": sources}),
    })
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    hw.start()
    duty = DutyLog(sim.physics)
    loop = ControlLoop(cfg, hw)
    loop.start()
    return cfg, sim, hw, loop, duty


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
    cfg, sim, hw, loop, duty = motor_only_tank(cfg, "robot_msg")
    results: dict[str, list[float]] = {"watchdog": [], "stop": [], "release": []}
    try:
        for _ in range(args.trials):
            results["watchdog"].append(measure(loop, duty, "sim2bot", None))
            results["stop"].append(measure(loop, duty, "robot_msg", lambda: loop.submit("artex", Stop())))
            results["release"].append(measure(loop, duty, "robot_msg",
                                              lambda: loop.release("robot_msg", "benchmark")))
        stats = loop.tick_stats()
        silent = silent_controller(loop, hw, sim)
    finally:
        confirmed = loop.close()
        hw.close()
        sim.close()
    print_results(args.trials, cfg, results, stats, confirmed, silent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
