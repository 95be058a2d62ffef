"""The RoboClaw emulator of scripts/bench_pi.py in a process of its own (``--emulator process``).

On a robot the RoboClaw is another chip: it never waits for the agent's GIL, and the agent's
threads never wait for it. In the default bench (``--emulator thread``) the emulator is a thread
of the agent's process (the simulated tank's, agent/devices/simtank.py): it takes the GIL to read
each packet and to answer, so its receipt stamp and its replies wait behind the agent's Python
threads. Here the same emulator (the simulated tank's, same config, pacing and reply latency)
serves its pty from this process; the agent opens the pty's slave path as its motor port.

Protocol with the parent: this process prints the slave path on its first line, then records
every duty change it applies (``time.monotonic()``: CLOCK_MONOTONIC, one clock for every process
of the machine); when its standard input closes it prints one JSON line
``{"duty_events": [[t, left, right], ...], "cpu_s": CPU seconds of this process}`` and exits.

Usage (by bench_pi.py): ``bench_pi_emulator.py PORTS_JSON``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> None:
    from agent.devices.simtank import SimTank
    from bench_pi_agent import DutyEvents, config

    cfg = config(json.loads(sys.argv[1]))
    sim = SimTank(cfg)
    duty = DutyEvents(sim.physics)
    print(sim.serial_port(cfg.drivers.motor), flush=True)
    sys.stdin.read()                      # until the parent closes it
    sim.motor_emulator.close()
    cpu = os.times()
    print(json.dumps({"duty_events": duty.events, "cpu_s": cpu.user + cpu.system}), flush=True)


if __name__ == "__main__":
    main()
