#!/usr/bin/env python3
"""ARTEX adapter figures on loopback (one run, prints numbers; nothing is asserted).

1. command latency: the hub emits ``{"drive": ...}``; time until the RoboClaw
   emulator on the pty has received and applied the duty packet
   (``RoboclawEmulator.wait_for`` wakes on every device event), p50 / p99 / max.
   Hub and agent share this process and its event loop (telem and video streaming).
2. watchdog stop: the hub drives for 0.3 s and goes silent; time from the last
   command to the zero-duty packet at the emulator, min / median / max.
3. CPU % and RSS while streaming telem and 640x480 video every ``--period`` s:
   the agent as a subprocess (``python -m agent run --config <tmp params>``, the
   simulated tank), the same agent with ARTEX off (baseline: control loop,
   emulators, camera), and the ``artex-robot`` 0.1.1 SDK streaming a telem dict
   and a 640x480 frame through ``set_video`` at the same period, against the
   same kind of hub; /proc/<pid>/stat sampled over ``--window`` s.

The machine is shared: CPU figures move with the load of other processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from agent.app import Agent
from agent.config import AgentConfig

from agent.testing import artex_hub

PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")


def params(port: int, period: float, artex: bool = True) -> dict:
    """The shipped simulated-tank params.json pointed at the hub on ``port``."""
    cfg = json.loads((ROOT / "config" / "params.json").read_text())
    cfg.update(server="http://127.0.0.1" if artex else None, port=port, max_send_freq=period,
               telem_can=True, video_can=True, logger_level="warning")
    cfg["sim2bot"] = {**cfg.get("sim2bot", {}), "enabled": False}
    cfg["robot_msg"] = {**cfg.get("robot_msg", {}), "enabled": False}
    for cam in cfg["drivers"].get("cameras", []):
        cam.update(width=640, height=480, fps=1.0 / period)
    return cfg


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


async def wait_until(predicate, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.01)
    return True


# ---------------------------------------------------------------------- 1 + 2: in-process


def _waiter(emu, predicate, timeout_s: float):
    ok = emu.wait_for(predicate, timeout_s)
    return ok, time.perf_counter()


async def latency_and_watchdog(trials: int, stops: int, period: float) -> None:
    hub = artex_hub.ArtexHub(ready_delay_s=0.05)
    port = await hub.start()
    cfg = AgentConfig.model_validate(params(port, period))
    async with Agent(cfg) as agent:
        await wait_until(lambda: hub.heartbeats, 15)
        emu = agent.sim.motor_emulator
        moving = lambda: any(emu.motor_duty)
        still = lambda: not any(emu.motor_duty)

        lat: list[float] = []
        for i in range(trials):
            await hub.command({"com": "stop"})
            await asyncio.to_thread(emu.wait_for, still, 2.0)
            # from rest, every claim timed out (the stopper itself could drive at once), then any tick phase
            await asyncio.sleep(cfg.source_timeout_s("artex") + 0.03 + random.uniform(0.0, 1.0 / cfg.control.rate_hz))
            watch = asyncio.ensure_future(asyncio.to_thread(_waiter, emu, moving, 2.0))
            await asyncio.sleep(0.01)  # the waiter thread is waiting
            t0 = time.perf_counter()
            await hub.command({"drive": {"vx": 0.2 + 0.001 * i, "omega": 0.0}})
            ok, t1 = await watch
            if ok:
                lat.append(t1 - t0)
        await hub.command({"com": "stop"})
        print(f"command -> motor duty packet at the emulator ({len(lat)}/{trials} trials, control 50 Hz, "
              f"telem+video streaming every {period} s):")
        print(f"  p50 {pct(lat, 50) * 1e3:.1f} ms   p99 {pct(lat, 99) * 1e3:.1f} ms   "
              f"min {min(lat) * 1e3:.1f} ms   max {max(lat) * 1e3:.1f} ms")

        stop_s: list[float] = []
        timeout = cfg.source_timeout_s("artex")
        for _ in range(stops):
            # from rest: the latency trials' last claim timed out
            await asyncio.sleep(timeout + 0.05 + random.uniform(0.0, 1.0 / cfg.control.rate_hz))
            end = time.perf_counter() + 0.3
            while True:
                t_last = time.perf_counter()
                await hub.command({"drive": {"vx": 0.3, "omega": 0.0}})
                if time.perf_counter() >= end:
                    break
                await asyncio.sleep(0.1)
            if not await asyncio.to_thread(emu.wait_for, moving, 1.0):
                continue  # never drove: nothing for the watchdog to stop (counted as a missing trial)
            ok, t_zero = await asyncio.to_thread(_waiter, emu, still, 3.0)
            if ok:
                stop_s.append(t_zero - t_last)
        print(f"watchdog: last command -> zero duty at the emulator ({len(stop_s)}/{stops} trials, "
              f"timeout {timeout} s, tick {1e3 / cfg.control.rate_hz:.0f} ms):")
        print(f"  min {min(stop_s) * 1e3:.0f} ms   median {statistics.median(stop_s) * 1e3:.0f} ms   "
              f"max {max(stop_s) * 1e3:.0f} ms")
    await hub.stop()


# ---------------------------------------------------------------------- 3: CPU of subprocesses


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def keep_driving(hub, period_s: float = 0.15) -> None:
    """An operator holding a key: the robot circles, so its telemetry keeps changing."""
    while True:
        if hub.connected and hub.heartbeats:
            await hub.command({"drive": {"vx": 0.2, "omega": 0.4}})
        await asyncio.sleep(period_s)


async def measure(name: str, argv: list[str], cwd: str, hub, warmup_s: float, window_s: float,
                  needs_hub: bool = True) -> dict:
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        if needs_hub and not await wait_until(lambda: hub.heartbeats, 30):
            why = (await proc.stderr.read(2000)).decode(errors="replace") if proc.returncode is not None else ""
            raise RuntimeError(f"{name}: never became ready {why}")
        driver = asyncio.ensure_future(keep_driving(hub))
        await asyncio.sleep(warmup_s)
        n_t, n_v = len(hub.telem), len(hub.video)
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        rss = []
        while time.monotonic() - t0 < window_s:
            await asyncio.sleep(1.0)
            rss.append(rss_mib(proc.pid))
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        driver.cancel()
        sizes = [sum(v for v in s.values() if v > 0) for _, s in list(hub.video)[n_v:]]
        return {"name": name, "cpu_pct": 100 * (c1 - c0) / (t1 - t0), "rss_mib": max(rss),
                "telem_hz": (len(hub.telem) - n_t) / (t1 - t0), "video_hz": (len(hub.video) - n_v) / (t1 - t0),
                "video_kib": statistics.mean(sizes) / 1024 if sizes else 0.0}
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


SDK_ROBOT = textwrap.dedent('''
    import math, sys
    from artex_robot import Robot

    period = float(sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    from drivers.emulators.camera import PatternCapture  # the agent's simulated camera, same frames

    camera = PatternCapture(640, 480, 1.0 / period, paced=False)
    robot = Robot()

    @robot.com_handler
    def on_command(type_command, command, author=None):
        pass

    robot.init_connector()
    n = 0

    @robot.mainloop
    def loop(context):
        global n
        n += 1
        robot.vault.set_telem("battery", round(11.7 - 1e-4 * n, 2))
        robot.vault.set_telem("speed", round(0.3 * math.sin(n / 20), 3))
        robot.vault.set_telem("imu", [0.01, -0.02, 9.81])
        robot.vault.set_telem("odom", {"x_m": round(0.01 * n, 3), "y_m": 0.0, "yaw_rad": 0.0,
                                       "vx_mps": 0.3, "omega_radps": 0.0, "distance_m": round(0.01 * n, 3)})
        robot.vault.set_telem("tracks", {"left_mps": 0.3, "right_mps": 0.3, "duty_left": 0.3,
                                         "duty_right": 0.3, "left_counts": 40 * n, "right_counts": 40 * n})
        robot.vault.set_telem("watchdog", "ok")
        ok, frame = camera.read()
        robot.vault.set_video("front", frame)

    robot.main_freq = period
    robot.start()
''')


async def cpu_phase(period: float, warmup_s: float, window_s: float) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_artex_") as tmp:
        for name, artex in (("agent, ARTEX streaming", True), ("agent, ARTEX off (baseline)", False)):
            hub = artex_hub.ArtexHub(ready_delay_s=0.05)
            port = await hub.start()
            cfg_path = Path(tmp) / f"params_{int(artex)}.json"
            cfg_path.write_text(json.dumps(params(port, period, artex)))
            argv = [PY, "-m", "agent", "run", "--config", str(cfg_path)]
            rows.append(await measure(name, argv, str(ROOT), hub, warmup_s, window_s, needs_hub=artex))
            await hub.stop()
        hub = artex_hub.ArtexHub(ready_delay_s=0.05)
        port = await hub.start()
        sdk_dir = Path(tmp) / "sdk"
        sdk_dir.mkdir()
        sdk_params = {"name": "sdk-bot", "type": "Robot", "telem_can": True, "video_can": True,
                      "server": "http://127.0.0.1", "port": port, "max_send_freq": period,
                      "logger_type": "file", "logger_level": "skip_TODO"}
        (sdk_dir / "params.json").write_text(json.dumps(sdk_params))
        (sdk_dir / "sdk_robot.py").write_text(SDK_ROBOT)
        rows.append(await measure("artex-robot 0.1.1 SDK", [PY, "sdk_robot.py", str(period), str(ROOT)], str(sdk_dir),
                                  hub, warmup_s, window_s))
        await hub.stop()
    print(f"CPU and memory while streaming (period {period} s, 640x480 JPEG q80, window {window_s:.0f} s, "
          f"{os.cpu_count()} cores shared):")
    for r in rows:
        print(f"  {r['name']:<30} CPU {r['cpu_pct']:5.1f} %   RSS {r['rss_mib']:6.1f} MiB   "
              f"telem {r['telem_hz']:4.1f}/s   video {r['video_hz']:4.1f}/s ({r['video_kib']:.0f} KiB)")
    agent, base, sdk = rows
    print(f"  agent / SDK CPU ratio: {agent['cpu_pct'] / sdk['cpu_pct']:.2f}   "
          f"ARTEX streaming share of the agent: {agent['cpu_pct'] - base['cpu_pct']:.1f} % CPU "
          f"(ratio to SDK {(agent['cpu_pct'] - base['cpu_pct']) / sdk['cpu_pct']:.2f})")


async def main(args: argparse.Namespace) -> None:
    if not args.skip_latency:
        await latency_and_watchdog(args.trials, args.stops, args.period)
    if not args.skip_cpu:
        await cpu_phase(args.period, args.warmup, args.window)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=50, help="latency trials (default 50)")
    p.add_argument("--stops", type=int, default=20, help="watchdog trials (default 20)")
    p.add_argument("--period", type=float, default=0.05, help="max_send_freq, s (default 0.05, the SDK default)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds before CPU sampling")
    p.add_argument("--window", type=float, default=10.0, help="CPU sampling window, s")
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--skip-cpu", action="store_true")
    p.add_argument("--log-level", default="CRITICAL", help="agent log level in the in-process phase")
    args = p.parse_args()
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main(args))
