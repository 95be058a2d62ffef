#!/usr/bin/env python3
"""Sim2Bot adapter benchmark: one run on loopback, prints numbers.

1. ``base_velocity`` sent by ``sim2bot.Robot`` -> the RoboClaw emulator applying the
   duty packet written by the agent's driver (p50/p99), next to the bare relay latency
   of the same bridge (a raw simulator-role socket receiving the same message), as a ratio.
2. Telemetry packets/s reaching a ``sim2bot.Robot`` at ``telemetry_hz`` 60.
3. Camera frames/s per subscriber and process CPU per frame sent, for 1 and 3
   subscribers of the same format.

Runs the real ``sim2bot bridge`` subprocess and the agent on its simulated tank.
Usage: ``python scripts/bench_sim2bot.py [--trials 200] [--seconds 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import threading
import time
import warnings

from sim2bot import Robot
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from agent.testing.running_agent import running_agent
from agent.testing.sim2bot_bridge import Bridge, agent_params


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def relay_latency(bridge: Bridge, trials: int) -> list[float]:
    """Bare bridge: controller send -> raw simulator socket receive, s."""
    received: dict[float, float] = {}
    with ws_connect(bridge.url) as sim:
        sim.send(json.dumps({"type": "hello", "role": "simulator", "robots": [{"index": 0, "dof": 0}],
                             "cameras": [], "devices": []}))
        done = threading.Event()

        def reader() -> None:
            while not done.is_set():
                try:
                    msg = json.loads(sim.recv(timeout=0.5))
                except TimeoutError:
                    continue
                except ConnectionClosed:  # closed at the end of the run
                    return
                if msg.get("type") == "base_velocity":
                    received[msg["vx"]] = time.monotonic()

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        out = []
        with Robot(url=bridge.url) as robot:
            time.sleep(0.2)
            for i in range(trials):
                key = 0.001 * (i + 1)
                t0 = time.monotonic()
                robot.base_velocity(vx=key)
                deadline = t0 + 2.0
                while key not in received and time.monotonic() < deadline:
                    time.sleep(0.0002)
                if key in received:
                    out.append(received[key] - t0)
                time.sleep(0.01)
        done.set()
    return out


def motor_latency(robot: Robot, emu, trials: int) -> list[float]:
    """base_velocity send -> the motor emulator holding a nonzero duty from the agent's driver, s."""
    out = []
    for _ in range(trials):
        robot.stop()
        emu.wait_for(lambda: emu.motor_duty == [0.0, 0.0], 2.0)
        time.sleep(0.03)
        t0 = time.monotonic()
        robot.base_velocity(vx=0.5)
        if emu.wait_for(lambda: emu.motor_duty[0] > 0.0, 2.0):
            out.append(time.monotonic() - t0)
    robot.stop()
    return out


def telemetry_rate(robot: Robot, seconds: float) -> float:
    count = [0]
    robot.on_telemetry(lambda _state: count.__setitem__(0, count[0] + 1))
    time.sleep(seconds)
    robot.on_telemetry(None)
    return count[0] / seconds


def camera_run(bridge: Bridge, adapter, hub, subscribers: int, seconds: float) -> dict:
    robots = [Robot(url=bridge.url).connect() for _ in range(subscribers)]
    try:
        streams = [r.camera("model:0", fps=30, width=640, height=480, quality=80) for r in robots]
        for s in streams:
            s.read(5.0)
        counts = [0] * subscribers

        def pump(i: int, end: float) -> None:
            while time.monotonic() < end:
                if streams[i].read(0.2) is not None:
                    counts[i] += 1

        sent0, enc0, cpu0 = adapter.status()["frames_sent"], hub.encode_count, time.process_time()
        end = time.monotonic() + seconds
        threads = [threading.Thread(target=pump, args=(i, end)) for i in range(subscribers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu = time.process_time() - cpu0
        sent = adapter.status()["frames_sent"] - sent0
        for s in streams:
            s.close()
        return {"fps_per_subscriber": [c / seconds for c in counts], "frames_sent": sent,
                "encodes": hub.encode_count - enc0, "cpu_s": cpu, "cpu_ms_per_frame": 1000 * cpu / max(1, sent)}
    finally:
        for r in robots:
            r.close()


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    # sim2bot.Robot (the peer, not ours) calls a websockets API that warns on every send.
    warnings.filterwarnings("ignore", message=r"connect\(\) must be used as a context manager")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()

    bridge = Bridge()
    await asyncio.to_thread(bridge.start)
    try:
        relay = await asyncio.to_thread(relay_latency, bridge, args.trials)
        params = agent_params(bridge, telemetry_hz=60)
        async with running_agent(params) as agent:
            adapter, emu = agent.adapters["sim2bot"], agent.sim.motor_emulator
            robot = Robot(url=bridge.url)
            await asyncio.to_thread(robot.connect)
            await asyncio.to_thread(robot.wait_for_sim, 10.0, 0.1)
            motor = await asyncio.to_thread(motor_latency, robot, emu, args.trials)
            hz = await asyncio.to_thread(telemetry_rate, robot, args.seconds)
            await asyncio.to_thread(robot.close)
            idle0 = time.process_time()
            await asyncio.sleep(args.seconds)
            idle_cpu_s = (time.process_time() - idle0) / args.seconds
            cams = {n: await asyncio.to_thread(camera_run, bridge, adapter, agent.video, n, args.seconds)
                    for n in (1, 3)}
            rate = agent.cfg.control.rate_hz
    finally:
        await asyncio.to_thread(bridge.stop)

    print(f"sim2bot bench (loopback, {args.trials} trials, control loop {rate:g} Hz)")
    print(f"  relay only      controller -> simulator socket: p50 {1e3 * pct(relay, 50):7.2f} ms   "
          f"p99 {1e3 * pct(relay, 99):7.2f} ms   (n={len(relay)})")
    print(f"  agent           base_velocity -> motor driver write: p50 {1e3 * pct(motor, 50):7.2f} ms   "
          f"p99 {1e3 * pct(motor, 99):7.2f} ms   (n={len(motor)})")
    print(f"  ratio agent/relay: p50 {pct(motor, 50) / pct(relay, 50):5.1f}x   "
          f"p99 {pct(motor, 99) / pct(relay, 99):5.1f}x   (mean {statistics.mean(motor) * 1e3:.2f} ms)")
    print(f"  telemetry at telemetry_hz=60: {hz:5.1f} packets/s received")
    print(f"  process CPU with no subscriber: {idle_cpu_s * 100:5.1f} % of one core")
    for n, r in cams.items():
        fps = ", ".join(f"{v:4.1f}" for v in r["fps_per_subscriber"])
        extra_ms = 1000 * (r["cpu_s"] - idle_cpu_s * args.seconds) / max(1, r["frames_sent"])
        print(f"  camera 640x480 JPEG q80, {n} subscriber(s): {fps} frames/s each; "
              f"{r['frames_sent']} sent, {r['encodes']} encodes; CPU {r['cpu_ms_per_frame']:5.1f} ms/frame sent "
              f"({extra_ms:5.1f} ms above idle)")


if __name__ == "__main__":
    asyncio.run(main())
