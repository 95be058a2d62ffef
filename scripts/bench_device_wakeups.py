#!/usr/bin/env python3
"""Wake-ups per second of each agent thread at idle: the device threads' cost on a Pi's CPU budget.

Runs the agent in this process on the shipped simulated tank (config/params.json: RoboClaw,
MPU-6050, INA219 and PCA9685 on one emulated I2C bus, the GPIO e-stop input, one 640x480
test-pattern camera; adapters, console and recorder off: nothing commands or watches), waits
for the motor, lets it settle, then counts each thread's context switches over a window from
/proc/self/task/<tid>/status (``voluntary_ctxt_switches``: the thread went to sleep and was
woken; ``nonvoluntary_ctxt_switches``: preempted) and its CPU (utime + stime from
/proc/self/task/<tid>/stat, % of one core). Threads are named by Python's
``threading`` names (a thread's native id is its task id).

The emulators run in this process too: the RoboClaw emulator's pty thread (``RoboclawEmulator-pty``)
and the GPIO chip's; the I2C chips' emulation runs inline in the ``i2c-*`` thread and the test
pattern is drawn in the capture thread (those figures include their emulators).

Then each device thread's own work and wake-ups per second (the motor's: ``DeviceWorker.wakeups``,
feedback sets and duty writes; each I2C bus's: its wake-ups and sensor reads): a change to how the
threads wake must leave the work the same. ``--drive``: a velocity command every 0.1 s (the tank
moves; the motor line at its full rate) instead of a standing tank.

Usage: ``scripts/bench_device_wakeups.py [--window 20] [--drive]`` (about window + 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
from pathlib import Path

from agent.testing.running_agent import running_agent, sim_config


def switches() -> dict[int, tuple[int, int, float]]:
    """task id -> (voluntary, involuntary) context switches and CPU seconds so far."""
    out: dict[int, tuple[int, int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path("/proc/self/task").iterdir():
        try:
            status = (task / "status").read_text()
            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if "ctxt_switches" in line)
        out[int(task.name)] = (int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"]),
                               (int(stat[11]) + int(stat[12])) / tick)
    return out


def work(agent) -> dict[str, float]:
    """Counters of the device threads' work and wake-ups so far."""
    hw = agent.hardware
    out: dict[str, float] = {}
    if hw.motor_io is not None:
        io = hw.motor_io
        out.update({"motor: wake-ups": io.worker.wakeups, "motor: duty writes": io.writes})
        if hasattr(io, "sets"):                  # (a tree before MotorIO counted them)
            out["motor: feedback sets"] = io.sets
    for bus in hw._buses_io:
        out.update({f"{bus.worker.name}: wake-ups": bus.worker.wakeups, f"{bus.worker.name}: sensor reads": bus.reads})
    return out


async def main(window_s: float, drive: bool) -> None:
    from agent.commands import BaseVelocity

    async with running_agent(sim_config()) as agent:
        async def commands() -> None:
            while True:
                agent.control.submit("artex", BaseVelocity(0.2, omega=0.3))
                await asyncio.sleep(0.1)         # a controller's command rate (scripts/bench_side.py's)
        driving = asyncio.create_task(commands()) if drive else None
        await asyncio.sleep(3.0)                 # the start-up (first reads, opens) out of the window
        before, work0 = switches(), work(agent)
        started = asyncio.get_running_loop().time()
        await asyncio.sleep(window_s)
        after, work1 = switches(), work(agent)
        spent = asyncio.get_running_loop().time() - started
        names = {t.native_id: t.name for t in threading.enumerate()}
        if driving is not None:
            driving.cancel()
    rows = []
    for tid, (vol, inv, cpu) in after.items():
        v0, i0, c0 = before.get(tid, (0, 0, 0.0))
        rows.append((names.get(tid, f"tid {tid}"), (vol - v0) / spent, (inv - i0) / spent, 100 * (cpu - c0) / spent))
    rows.sort(key=lambda r: -r[1])
    print(f"window {spent:.1f} s, load average {os.getloadavg()[0]:.2f}")
    print(f"{'thread':<32} {'voluntary/s':>12} {'involuntary/s':>14} {'CPU %':>7}")
    for name, vol, inv, cpu in rows:
        print(f"{name:<32} {vol:>12.1f} {inv:>14.1f} {cpu:>7.2f}")
    print(f"{'total':<32} {sum(r[1] for r in rows):>12.1f} {sum(r[2] for r in rows):>14.1f} "
          f"{sum(r[3] for r in rows):>7.2f}")
    print(("tank moving" if drive else "tank standing") + ", per second: "
          + ", ".join(f"{k} {(v - work0.get(k, 0)) / spent:.1f}" for k, v in work1.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=20.0, help="measuring window, s")
    parser.add_argument("--drive", action="store_true", help="a velocity command every 0.1 s: the tank moves")
    args = parser.parse_args()
    asyncio.run(main(args.window, args.drive))
