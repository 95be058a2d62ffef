#!/usr/bin/env python3
"""Measure the robot's own failsafes on the simulated tank: condition -> zero duty at the motor emulator.

Builds the simulated tank of ``config/params.json`` (RoboClaw emulator on a pty, MPU-6050 and
INA219 on the simulated I2C bus, real drivers, real agent.devices.hardware.Hardware) and runs the real
control loop thread. For each failsafe, ``--trials`` times: drive, apply the emulator control
(agent.devices.simtank.SimTank ``tilt``, ``drain_battery``, ``obstacle``), and time from that call to
the first zero duty the emulated controller applies (the battery's low level: to the first duty
at or under the speed cap). Then undo the condition, wait for it to clear, re-engage and drive
again for the next trial.

Expected: the failsafe's own time (debounce, or averaging window + timer) plus the sensor's
read period (the condition must first reach a reading) plus two control ticks (the reading is
first seen at a tick, and the time held is checked at ticks); after the tick that trips, the
zero duty goes out at once (the trip wakes a tick: "trip tick -> zero applied", the "at most one
tick" part). Printed beside each figure.

Usage: scripts/bench_failsafe.py [--trials 3] [--config config/params.json]   (about 40 s at 3 trials)
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_watchdog import DutyLog, motor_only_tank  # noqa: E402

from agent.config import load
from agent.control import ControlLoop
from agent.devices.hardware import Hardware
from agent.commands import BaseVelocity
from agent.devices.simtank import SimTank

SOURCE = "robot_msg"        # given a 5 s timeout here: one submit keeps it driving through a trial


def wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


class Bench:
    def __init__(self, loop: ControlLoop, hw: Hardware, sim: SimTank, duty: DutyLog) -> None:
        self.loop, self.hw, self.sim, self.duty = loop, hw, sim, duty

    def drive(self, vx: float) -> None:
        """(Re-)engage and drive at ``vx`` until the tracks move."""
        t = time.monotonic()
        self.loop.submit(SOURCE, BaseVelocity(0.0, 0.0))        # re-engages after a halt it streamed into
        self.loop.submit(SOURCE, BaseVelocity(vx, 0.0))
        if self.duty.first_where(t, lambda l, r: l >= vx * 0.99, 3.0) is None:
            raise RuntimeError("the motor never reached the commanded duty")
        wait(lambda: (fb := self.hw.read_motor()) is not None and (fb.left_cps or 0) > 0.5 * vx * 4000, 3, "motion")

    def halted(self) -> bool:
        return bool(self.loop.snapshot().safety.halts)

    def cleared(self) -> bool:
        halts = self.loop.snapshot().safety.halts
        return bool(halts) and all(h.cleared for h in halts)

    def trial(self, vx: float, apply, undo, zero=lambda l, r: l == 0.0 and r == 0.0) -> tuple[float, float | None]:
        """Seconds from ``apply()`` to the first duty passing ``zero``, and from the trip (the tick that
        latched the halt, by its Unix time) to that duty (None without a halt)."""
        self.drive(vx)
        t0 = time.monotonic()
        apply()
        at = self.duty.first_where(t0, zero, 10.0)
        if at is None:
            raise RuntimeError("the failsafe did not act within 10 s")
        halts = self.loop.snapshot().safety.halts
        after_trip = at[1] - halts[0].since_unix_s if halts else None
        undo()
        return at[0] - t0, after_trip


def report(name: str, runs: list[tuple[float, float | None]], own_s: float, sensor_s: float, tick_s: float) -> None:
    ms = [x * 1000 for x, _ in runs]
    trip = [y * 1000 for _, y in runs if y is not None]
    bound = (own_s + sensor_s + 2 * tick_s) * 1000
    excess = [x - own_s * 1000 for x in ms]
    print(f"  {name:16s} min {min(ms):6.0f}  median {statistics.median(ms):6.0f}  max {max(ms):6.0f} ms | "
          f"own time {own_s * 1000:5.0f} ms + sensor period {sensor_s * 1000:4.0f} + 2 ticks {2 * tick_s * 1000:.0f} "
          f"= {bound:5.0f} ms: {sum(x <= bound for x in ms)}/{len(ms)} within; beyond own time: "
          f"{min(excess):.0f}..{max(excess):.0f} ms"
          + (f"; trip tick -> zero applied {min(trip):.1f}..{max(trip):.1f} ms" if trip else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--config", default=str(ROOT / "config" / "params.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")

    cfg = load(args.config)
    d = cfg.drivers
    if d.motor is None or d.motor.port != "sim://" or d.imu is None or d.power is None:
        print("the config needs a sim:// motor controller, IMU and power monitor", file=sys.stderr)
        return 2
    cfg, sim, hw, loop, duty = motor_only_tank(cfg, SOURCE, drop=("servo",))
    f = cfg.failsafe
    b = Bench(loop, hw, sim, duty)
    tick_s = 1.0 / cfg.control.rate_hz
    imu_s = max(1.0 / d.imu.rate_hz, 4.0 / d.imu.rate_hz if d.imu.kind == "mpu6050" else 0.0)   # FIFO polled every 4 samples
    power_s = 1.0 / d.power.rate_hz
    feedback_s = 1.0 / d.motor.feedback_hz
    res: dict[str, list[tuple[float, float | None]]] = {k: [] for k in ("tilt", "battery low", "battery critical", "stall speed",
                                                   "stall current")}
    f_cap = f.battery.low_speed_mps
    try:
        for _ in range(args.trials):
            res["tilt"].append(b.trial(0.5, lambda: sim.tilt(roll_deg=f.tilt.max_deg + 15),
                                       lambda: (sim.tilt(), wait(b.cleared, 5, "tilt cleared"))))
            res["stall speed"].append(b.trial(0.6, sim.obstacle,
                                              lambda: (sim.obstacle(False), wait(b.cleared, 5, "stall cleared"))))
            res["stall current"].append(b.trial(0.9, sim.obstacle,
                                                lambda: (sim.obstacle(False), wait(b.cleared, 5, "stall cleared"))))
            low = (f.battery.low_v_per_cell + f.battery.critical_v_per_cell) / 2
            res["battery low"].append(b.trial(
                1.0, lambda: sim.drain_battery(low),
                lambda: (sim.drain_battery(4.1), wait(lambda: loop.snapshot().safety.speed_cap_mps is None, 10,
                                                      "speed cap lifted")),
                zero=lambda l, r: 0.0 < l <= f_cap / cfg.base.max_speed_mps + 1e-3))
            res["battery critical"].append(b.trial(
                0.4, lambda: sim.drain_battery(f.battery.critical_v_per_cell - 0.1),
                lambda: (sim.drain_battery(4.1), wait(b.cleared, 10, "battery cleared"))))
        stats = loop.tick_stats()
    finally:
        loop.close()
        hw.close()
        sim.close()
    print(f"failsafes on the simulated tank ({args.config}), {args.trials} trials each: emulator control -> "
          f"zero duty applied by the RoboClaw emulator (battery low: -> duty at the {f_cap} m/s cap, after "
          f"the ramp down at {cfg.base.max_accel_mps2} m/s^2); own time = debounce, or averaging window + timer "
          "(the average may cross sooner)")
    print(f"  control {cfg.control.rate_hz:.0f} Hz (tick {tick_s * 1000:.0f} ms); sensors: IMU read every "
          f"{imu_s * 1000:.0f} ms, power monitor {power_s * 1000:.0f} ms, motor feedback {feedback_s * 1000:.0f} ms")
    report("tilt", res["tilt"], f.tilt.for_s, imu_s, tick_s)
    report("stall speed", res["stall speed"], f.stall.for_s, feedback_s, tick_s)
    report("stall current", res["stall current"], f.stall.current_for_s, 3 * feedback_s, tick_s)  # 1 in 3 sets
    report("battery low", res["battery low"], f.battery.average_s + f.battery.low_for_s, power_s, tick_s)
    report("battery critical", res["battery critical"], f.battery.average_s + f.battery.critical_for_s, power_s,
           tick_s)
    print(f"  loop: {stats.ticks} ticks, {stats.late_ticks} late, max tick {stats.max_tick_s * 1000:.2f} ms, "
          f"{stats.achieved_hz:.1f} Hz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
