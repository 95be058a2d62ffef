#!/usr/bin/env python3
"""Count the line firmware's own watchdog trips at the agent's start (docs/line-protocol.md, "Host behaviour").

Starts the whole agent (agent.app.Agent, as tests' agent.testing.running_agent does: adapters off,
cameras off) ``--starts`` times on the simulated tank with the motor on the line firmware emulator
at ``firmware_timeout_s`` ``--watchdog-s`` (0.1 s, the protocol's minimum, by default) and prints,
per start and in total, the trips the emulated firmware counted before the agent was up (its devices
open and the control loop ticking) and in the ``--after-s`` after, with the trips the driver
counted (drivers.linemotor.LineMotor.watchdog_trips). A trip after the start is the host not
writing a P for the interval: on a loaded machine the motor thread or the whole process paused.

Usage: scripts/bench_line_start.py [--starts 5] [--watchdog-s 0.1] [--after-s 1.5]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from agent.testing.running_agent import running_agent, sim_config


async def one_start(watchdog_s: float, after_s: float) -> tuple[int, int, int]:
    cfg = sim_config()
    cfg["drivers"]["cameras"] = []
    cfg["drivers"]["motor"] = {"kind": "line", "port": "sim://", "firmware_timeout_s": watchdog_s,
                               "reply_timeout_s": 0.2}
    async with running_agent(cfg) as agent:
        emu = agent.sim.motor_emulator
        at_start = emu.stats["timeouts"]
        await asyncio.sleep(after_s)
        driver = agent.hardware.motor.driver
        trips = getattr(driver, "watchdog_trips", -1)     # -1: lost, or a tree without the count (--before runs)
        return at_start, emu.stats["timeouts"] - at_start, trips


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--watchdog-s", type=float, default=0.1)
    ap.add_argument("--after-s", type=float, default=1.5)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    totals = [0, 0, 0]
    for n in range(args.starts):
        result = asyncio.run(one_start(args.watchdog_s, args.after_s))
        totals = [t + r for t, r in zip(totals, result)]
        print(f"start {n + 1}: firmware trips before up {result[0]}, in the {args.after_s:.1f} s after {result[1]}; "
              f"driver counted {result[2]}")
    print(f"{args.starts} starts at a {args.watchdog_s * 1000:.0f} ms watchdog (load {os.getloadavg()[0]:.1f}): "
          f"trips before up {totals[0]}, after {totals[1]}; driver counted {totals[2]}")


if __name__ == "__main__":
    main()
