#!/usr/bin/env python3
"""The agent's resident memory per feature: RSS after 3 s on the simulated tank, each in a fresh process.

Rows: the shipped tank with the adapters off (cameras on), without cameras, and with robot_msg /
Sim2Bot / ARTEX switched on alone (pointed at ports nobody serves: the adapters keep reconnecting,
their libraries are loaded). Prints RSS and which heavy libraries (cv2, numpy, zmq, robot_msg,
socketio, aiohttp, sim2bot, ahrs) the process imported. Usage: ``python scripts/bench_rss.py``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

HEAVY = ("cv2", "numpy", "ahrs", "zmq", "robot_msg", "socketio", "aiohttp", "sim2bot")
CASES = {
    "adapters off": {},
    "adapters off, no cameras": {"drivers": {"cameras": []}},
    "robot_msg on": {"robot_msg": {"enabled": True}},
    "sim2bot on": {"sim2bot": {"enabled": True, "url": "ws://127.0.0.1:9/ws"}},
    "artex on": {"server": "http://127.0.0.1", "port": 9},
}


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


async def child(overrides: dict) -> None:
    import logging

    from agent.testing.running_agent import running_agent, sim_config

    logging.basicConfig(level=logging.CRITICAL)
    async with running_agent(sim_config(**overrides)):
        await asyncio.sleep(3.0)
        print(json.dumps({"rss": rss_mib(), "heavy": [m for m in HEAVY if m in sys.modules]}))


def main() -> None:
    if len(sys.argv) > 1:
        asyncio.run(child(json.loads(sys.argv[1])))
        return
    for name, overrides in CASES.items():
        out = subprocess.run([sys.executable, __file__, json.dumps(overrides)], capture_output=True, text=True,
                             timeout=120)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            print(f"{name:28s} failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        got = json.loads(lines[-1])
        print(f"{name:28s} RSS {got['rss']:6.1f} MiB   imported: {', '.join(got['heavy']) or '-'}")


if __name__ == "__main__":
    main()
