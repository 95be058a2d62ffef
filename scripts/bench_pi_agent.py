"""The agent side of scripts/bench_pi.py (runs in the quota-limited child process).

Starts the agent on the shipped simulated tank with ARTEX, Sim2Bot and
robot_msg pointed at the parent's peers, records every duty the RoboClaw
emulator applies (monotonic time: comparable across processes on Linux) and
the tick times from the snapshot ring, then writes the figures as JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from agent.app import Agent  # noqa: E402
from agent.config import AgentConfig  # noqa: E402
from drivers.serialport import transfer_s  # noqa: E402

WARMUP_S = 3.0
#: RoboClaw duty packet (cmd 34): address, command, 2 x int16, CRC16.
DUTY_PACKET_BYTES = 8


def config(ports: dict) -> AgentConfig:
    """params.json with every adapter on, pointed at the parent's peers."""
    cfg = json.loads((ROOT / "config" / "params.json").read_text())
    cfg.update(server="http://127.0.0.1", port=ports["artex"], max_send_freq=0.05, telem_can=True,
               video_can=True, logger_level="warning")
    for cam in cfg["drivers"].get("cameras", []):
        cam.update(width=640, height=480, fps=20)
    cfg["sim2bot"] = {**cfg.get("sim2bot", {}), "enabled": True, "url": ports["sim2bot"],
                      "reconnect_delay_s": 0.1, "reconnect_delay_max_s": 0.5}
    tcp = "tcp://127.0.0.1:{}".format
    cfg["robot_msg"] = {"enabled": True, "state_hz": 50, "state": {"address": tcp(ports["state"])},
                        "command": {"address": tcp(ports["command"])}, "action": {"address": tcp(ports["action"])}}
    return AgentConfig.model_validate(cfg)


class DutyEvents:
    """(monotonic s, left, right) of every duty change the emulated controller applies."""

    def __init__(self, physics) -> None:
        self.events: list[tuple[float, float, float]] = []
        self._lock = threading.Lock()
        self._last = (0.0, 0.0)
        original = physics.set_duty

        def set_duty(left: float, right: float) -> None:
            original(left, right)
            if (left, right) != self._last:
                self._last = (left, right)
                with self._lock:
                    self.events.append((time.monotonic(), left, right))

        physics.set_duty = set_duty


def _rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def tick_figures(times: list[float], rate_hz: float, window_s: float) -> dict:
    """Slots with a tick start per second, ticks per second, worst gap and gaps over 30 ms."""
    period = 1.0 / rate_hz
    start = times[0]
    slots = {int((t - start) / period) for t in times}
    gaps = [b - a for a, b in zip(times, times[1:])]
    return {"on_schedule_hz": len(slots) / window_s, "ticks_hz": len(times) / window_s,
            "worst_gap_ms": 1e3 * max(gaps), "gaps_over_30": sum(g > 0.030 for g in gaps)}


async def run_agent(ports: dict, seconds: float, out: str, switch_interval: float | None) -> None:
    logging.basicConfig(level=logging.ERROR)
    cfg = config(ports)
    async with Agent(cfg) as agent:
        if switch_interval is not None:
            sys.setswitchinterval(switch_interval)
        duty = DutyEvents(agent.physics)
        await asyncio.sleep(WARMUP_S)
        times: list[float] = []
        seq = agent.control.snapshot().seq
        cpu0, t0 = os.times(), time.monotonic()
        while time.monotonic() - t0 < seconds:
            await asyncio.sleep(0.5)
            got = agent.control.samples_since(seq, limit=512)
            if got:
                seq = got[-1].seq
                times.extend(s.t_mono_s for s in got)
        cpu1, window = os.times(), time.monotonic() - t0
        motor = cfg.drivers.motor
        result = {
            "window_s": window, "rate_hz": cfg.control.rate_hz, **tick_figures(times, cfg.control.rate_hz, window),
            "cpu_pct": 100 * (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / window,
            "rss_mib": _rss_mib("VmRSS"), "rss_peak_mib": _rss_mib("VmHWM"),
            "switch_interval_ms": sys.getswitchinterval() * 1e3,
            "baud": motor.baud, "duty_wire_s": transfer_s(DUTY_PACKET_BYTES, motor.baud),
            "duty_events": duty.events,
        }
    Path(out).write_text(json.dumps(result))
