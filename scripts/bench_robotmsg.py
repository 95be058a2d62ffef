#!/usr/bin/env python3
"""Benchmark the robot_msg adapter on loopback against the simulated tank; prints the figures.

1. RobotAction ``u_rt`` send -> motor driver write latency, p50/p99: the time from
   sending a new velocity to the first duty packet the RoboClaw emulator applies
   that moves toward it (recorded by wrapping the tank physics' ``set_duty``, which
   the emulator calls on each duty packet it receives).
2. RobotState publish rate achieved at ``state_hz`` 100 and its CPU cost: the
   per-state build+encode+send cost on the event loop, and the process CPU
   difference between 100 Hz and 1 Hz.
3. A flood: a separate process sends ``u_rt`` as fast as it can for a few
   seconds; prints what it sent, what the adapter received (absorbed) and applied
   per second, and the backlog: how many newer messages had already been sent when
   each applied one reached the control loop, and how old it was.

Usage: ``python scripts/bench_robotmsg.py [--samples 60] [--flood-s 3]``. Takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path

import robot_msg as rm
import zmq
import zmq.asyncio

from agent.adapters.robotmsg_state import StateFrames, monotonic_clock_id, robot_state
from agent.app import Agent
from agent.config import AgentConfig
from agent.commands import BaseVelocity

ROOT = Path(__file__).resolve().parent.parent

OMEGA_SCALE = 1e-6  # the flood encodes its message number in omega


def config(state_hz: float) -> AgentConfig:
    data = json.loads((ROOT / "config" / "params.json").read_text())
    data["server"] = None
    data.setdefault("sim2bot", {})["enabled"] = False
    data["drivers"]["cameras"] = []
    data["robot_msg"] = {"enabled": True, "state_hz": state_hz, "state": {"address": "tcp://127.0.0.1:*"},
                         "command": {"address": "tcp://127.0.0.1:*"}, "action": {"address": "tcp://127.0.0.1:*"}}
    return AgentConfig.model_validate(data)


def u_rt(vx: float, omega: float = 0.0) -> bytes:
    return rm.encode(rm.RobotAction(frame_id="base_link",
                                    real_time_action=rm.RobotActionRealTimeAction(u_rt=[vx, omega])))


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


async def started(state_hz: float) -> Agent:
    agent = Agent(config(state_hz))
    await agent.start()
    adapter = agent.adapters["robot_msg"]
    while not adapter.status()["connected"]:
        await asyncio.sleep(0.01)
    return agent


async def publisher(ctx: zmq.asyncio.Context, endpoint: str) -> zmq.asyncio.Socket:
    sock = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    await asyncio.wait_for(sock.recv(), 5)  # the agent's subscription is live
    return sock


# --------------------------------------------------------------------------- 1. latency


async def bench_latency(samples: int) -> None:
    agent = await started(50)
    ctx = zmq.asyncio.Context()
    writes: list[tuple[float, float]] = []
    lock = threading.Lock()
    physics = agent.physics
    original = physics.set_duty

    def recording(left: float, right: float) -> None:
        with lock:
            writes.append((time.perf_counter(), float(left)))
        original(left, right)

    physics.set_duty = recording
    try:
        act = await publisher(ctx, agent.adapters["robot_msg"].status()["endpoints"]["action"])
        latencies = []
        prev_v = 0.0
        for i in range(samples):
            v = 0.2 if i % 2 == 0 else -0.2
            with lock:
                before = writes[-1][1] if writes else 0.0
            t_send = time.perf_counter()
            await act.send(u_rt(v))
            end = t_send + 0.4
            while time.perf_counter() < end:
                await asyncio.sleep(0.05)
                await act.send(u_rt(v))
            sign = 1.0 if v > prev_v else -1.0
            with lock:
                first = next((t for t, d in writes if t > t_send and (d - before) * sign > 1e-9), None)
            if first is not None:
                latencies.append((first - t_send) * 1000)
            prev_v = v
        rate = agent.cfg.control.rate_hz
        print(f"1. u_rt send -> motor duty write (RoboClaw emulator), control loop {rate:.0f} Hz, "
              f"{len(latencies)}/{samples} samples:")
        print(f"   p50 {pct(latencies, 50):.1f} ms   p99 {pct(latencies, 99):.1f} ms   "
              f"max {max(latencies):.1f} ms   (one control tick = {1000 / rate:.0f} ms)")
    finally:
        physics.set_duty = original
        ctx.destroy(linger=0)
        await agent.close()


# --------------------------------------------------------------------------- 2. state rate and CPU


async def count_states(endpoint: str, seconds: float) -> tuple[int, float]:
    ctx = zmq.asyncio.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    await asyncio.wait_for(sub.recv(), 5)
    n, cpu0 = 0, time.process_time()
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        try:
            await asyncio.wait_for(sub.recv(), left)
            n += 1
        except TimeoutError:
            break
    cpu = time.process_time() - cpu0
    ctx.destroy(linger=0)
    return n, cpu


def state_cost(agent: Agent, n: int = 2000) -> tuple[float, int]:
    """Mean cost of what the adapter does per state (build, encode, send), us; and the state's size, bytes."""
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind("tcp://127.0.0.1:*")
    robot, frames = agent.control, StateFrames()
    clock_id = monotonic_clock_id()
    t0 = time.perf_counter()
    for seq in range(n):
        data = rm.encode(robot_state(robot.snapshot(), robot.description, sequence=seq, clock_id=clock_id,
                                     frames=frames, send_unix_s=time.time()))
        pub.send(data, flags=zmq.NOBLOCK)
    per_state_us = (time.perf_counter() - t0) / n * 1e6
    pub.close()
    return per_state_us, len(data)


async def bench_state(seconds: float) -> None:
    figures = {}
    for hz in (100.0, 1.0):
        agent = await started(hz)
        try:
            adapter = agent.adapters["robot_msg"]
            await asyncio.sleep(0.5)  # let the IMU and power monitor report
            figures[hz] = await count_states(adapter.status()["endpoints"]["state"], seconds)
            if hz == 100.0:
                per_state_us, size = state_cost(agent)
        finally:
            await agent.close()
    n100, cpu100 = figures[100.0]
    n1, cpu1 = figures[1.0]
    print(f"2. RobotState at state_hz 100: {n100 / seconds:.1f} states/s received over {seconds:.0f} s")
    print(f"   build+encode+send one state (snapshot with IMU, battery, 2 joints): {per_state_us:.0f} us "
          f"-> {per_state_us * 100 / 1e4:.2f} % of one core at 100 Hz; {size} B binary")
    print(f"   whole process CPU (agent, emulators, this subscriber): {cpu100 / seconds * 100:.1f} % at 100 Hz vs "
          f"{cpu1 / seconds * 100:.1f} % at 1 Hz -> {(cpu100 - cpu1) / seconds * 100:.1f} % for 99 extra states/s")


# --------------------------------------------------------------------------- 3. flood


def flood_sender(endpoint: str, seconds: float, sent_at, count) -> None:
    """Child process: send u_rt as fast as possible; message k carries omega = k * OMEGA_SCALE."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.recv()
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end and k < len(sent_at):
        data = u_rt(0.2, k * OMEGA_SCALE)
        sent_at[k] = time.perf_counter()
        sock.send(data)
        k += 1
        count.value = k
    ctx.destroy(linger=0)


async def bench_flood(seconds: float) -> None:
    agent = await started(50)
    adapter = agent.adapters["robot_msg"]
    control = agent.control
    applied: list[tuple[float, int, int]] = []  # (time, message number, messages sent by then)
    sent_at = mp.Array("d", 2_000_000, lock=False)
    count = mp.Value("l", 0, lock=False)
    original = control.submit

    def spying(source: str, command) -> None:
        if isinstance(command, BaseVelocity):
            applied.append((time.perf_counter(), round(command.omega / OMEGA_SCALE), count.value))
        original(source, command)

    control.submit = spying
    try:
        before = adapter.status()
        proc = mp.get_context("spawn").Process(
            target=flood_sender, args=(adapter.status()["endpoints"]["action"], seconds, sent_at, count))
        proc.start()
        await asyncio.to_thread(proc.join, seconds + 20)
        await asyncio.sleep(0.3)
        after = adapter.status()
    finally:
        control.submit = original
    sent = count.value
    received = after["received"] - before["received"]
    n_applied = after["applied"] - before["applied"]
    backlog = [max(0, by_then - 1 - k) for _, k, by_then in applied]
    age_ms = [(t - sent_at[k]) * 1000 for t, k, _ in applied if 0 <= k < sent]
    print(f"3. flood for {seconds:.0f} s from another process (rcvhwm {agent.cfg.robot_msg.rcvhwm}):")
    print(f"   sent {sent / seconds:.0f} msg/s, received (absorbed) {received / seconds:.0f} msg/s, "
          f"applied {n_applied / seconds:.0f} msg/s, superseded {after['superseded'] - before['superseded']}, "
          f"rejected {after['rejected'] - before['rejected']}, lost in transport (PUB high-water mark) "
          f"{sent - received}")
    if applied:
        print(f"   backlog at apply (newer messages already sent): p50 {pct(backlog, 50):.0f}  p99 "
              f"{pct(backlog, 99):.0f}  max {max(backlog)};  age of the applied message: p50 "
              f"{pct(age_ms, 50):.1f} ms  p99 {pct(age_ms, 99):.1f} ms")
        print(f"   after the flood the robot's command was message {applied[-1][1]} of {sent} "
              f"(the last one is {sent - 1})")
    await agent.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=60, help="latency samples (0.4 s each)")
    parser.add_argument("--state-s", type=float, default=5.0, help="seconds per state-rate window")
    parser.add_argument("--flood-s", type=float, default=3.0, help="flood duration, s")
    args = parser.parse_args()
    print(f"robot_msg benchmark on loopback, simulated tank; {time.strftime('%Y-%m-%d %H:%M:%S')}")
    await bench_latency(args.samples)
    await bench_state(args.state_s)
    await bench_flood(args.flood_s)


if __name__ == "__main__":
    asyncio.run(main())
