#!/usr/bin/env python3
"""The control tick's CPU and the recorder's, a moving tank on the simulated hardware.

The agent runs in a child process on the shipped simulated tank (no camera, no adapter's peer; the
flight recorder on, writing to a temporary directory). A thread hands ``ControlLoop.submit`` the
same velocity command every 0.1 s (as the Sim2Bot adapter does for a controller holding a key in
scripts/bench_side.py), so the tank drives a circle. Over the window the child measures:

- per tick: the control thread's CPU time (``time.thread_time``) of each ``ControlLoop`` tick
  (the scheduler's tick function is wrapped), p50 and mean, us;
- per thread: the control and recorder threads' CPU, % of one core (``/proc/self/task/<tid>/schedstat``,
  ns), and the control thread's wake-ups (context switches) per second.

A second child steps ``ControlLoop.tick(now)`` itself on an injected clock (the simulated tank's
devices on their own threads, the same command every 5 ticks), each tick after a 48 MiB write has
flushed the CPU's caches: the real thread's ticks come 20 ms apart on a shared machine and find
them cold (about 4x a hot tick). Its p50 is steadier than the thread's figures; steadier still, the
Python and C function calls of one tick (cProfile over 100 more ticks), a count of the work itself.
The flight recorder records those ticks on its own thread (to a temporary directory): its CPU time
per snapshot.

``--before TREE`` runs another checkout's agent in turn with this one's in every run (interleaved:
the machine's load falls on both alike); the child imports the agent from the tree it is given, so
TREE needs no copy of this script. Printed: one line per tree and run, then the medians.

Usage: ``scripts/bench_tick.py [--runs 3] [--window 8] [--ticks 500] [--before TREE]`` (~window + 10 s
per tree and run).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WARM_S = 2.0        # the tank starts moving and the ramp ends before the window opens
COMMAND_PERIOD_S = 0.1


def task_figures(name: str) -> tuple[float, int] | None:
    """(CPU time, s; context switches) of this process's Python thread called ``name``, or None."""
    import threading
    tid = next((t.native_id for t in threading.enumerate() if t.name == name), None)
    if tid is None:
        return None
    task = Path(f"/proc/self/task/{tid}")
    cpu_ns = int((task / "schedstat").read_text().split()[0])
    sw = sum(int(line.split(":")[1]) for line in (task / "status").read_text().splitlines() if "ctxt_switches" in line)
    return cpu_ns / 1e9, sw


def child(tree: str, window_s: float, out: str) -> None:
    sys.path.insert(0, tree)
    import asyncio
    import threading

    from agent.commands import BaseVelocity
    from agent.testing.running_agent import running_agent, sim_config

    async def run() -> dict:
        rec_dir = tempfile.mkdtemp(prefix="bench_tick_")
        cfg = sim_config(drivers={"cameras": []}, recorder={"enabled": True, "dir": rec_dir})
        async with running_agent(cfg) as agent:
            control = agent.control
            stop = threading.Event()

            def commands() -> None:
                while not stop.wait(COMMAND_PERIOD_S):
                    control.submit("sim2bot", BaseVelocity(0.2, 0.3))

            threading.Thread(target=commands, daemon=True).start()
            await asyncio.sleep(WARM_S)
            sched = control._scheduler       # bench-only: the tick function, timed on the control thread
            tick_fn, cpu = sched._tick, []

            def timed(now: float):
                t0 = time.thread_time()
                try:
                    return tick_fn(now)
                finally:
                    cpu.append(time.thread_time() - t0)

            sched._tick = timed
            c0, r0, t0 = task_figures("control"), task_figures("recorder"), time.monotonic()
            await asyncio.sleep(window_s)
            c1, r1, dt = task_figures("control"), task_figures("recorder"), time.monotonic() - t0
            sched._tick = tick_fn
            odom = control.snapshot().odom
            stop.set()
        cpu.sort()
        return {"ticks_hz": len(cpu) / dt, "p50_us": 1e6 * cpu[len(cpu) // 2], "mean_us": 1e6 * statistics.fmean(cpu),
                "control_pct": 100 * (c1[0] - c0[0]) / dt, "control_sw": (c1[1] - c0[1]) / dt,
                "recorder_pct": 100 * (r1[0] - r0[0]) / dt if r0 and r1 else float("nan"),
                "distance_m": odom.distance_m}

    Path(out).write_text(json.dumps(asyncio.run(run())))


def stepped(tree: str, ticks: int, out: str) -> None:
    """``ticks`` ticks on an injected clock, each with cold caches: p50 and mean CPU per tick, us."""
    sys.path.insert(0, tree)
    from agent.commands import BaseVelocity
    from agent.config import AgentConfig
    from agent.control import ControlLoop
    from agent.devices.hardware import Hardware
    from agent.devices.simtank import SimTank
    from agent.testing.running_agent import sim_config

    cfg = AgentConfig.model_validate(sim_config(drivers={"cameras": []}))
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    hw.start()
    clock = [0.0]
    loop = ControlLoop(cfg, hw, clock=lambda: clock[0])
    from agent.recorder.recorder import Recorder
    recorder = Recorder(cfg, loop, directory=Path(tempfile.mkdtemp(prefix="bench_tick_")))
    recorder.start()            # its thread records the stepped ticks' snapshots as they come
    deadline = time.monotonic() + 10.0
    while hw.motor is not None and hw.motor.state != "ok" and time.monotonic() < deadline:
        time.sleep(0.01)    # real time held on purpose: the emulated controller opens on real time
    flush, ones = bytearray(48 << 20), b"\x01" * ((48 << 20) // 64)
    cpu = []
    profile = cProfile.Profile()
    try:
        for k in range(ticks + 150):        # the first 50: the ramp; the last 100: counted calls
            clock[0] = k / cfg.control.rate_hz
            if k % 5 == 0:
                loop.submit("sim2bot", BaseVelocity(0.2, 0.3))
            if k < ticks + 50:
                flush[::64] = ones          # one byte per 64-byte line: every cache line written
                t0 = time.thread_time()
                loop.tick()
                if k >= 50:
                    cpu.append(time.thread_time() - t0)
            else:                           # Python and C function calls of the tick (its submits apart)
                profile.runcall(loop.tick)
    finally:
        recorder.close()
        loop.close(timeout_s=0.5)
        hw.close()
        sim.close()
    cpu.sort()
    calls = pstats.Stats(profile).total_calls / 100 - 1      # less the runcall's own
    Path(out).write_text(json.dumps({"p50_us": 1e6 * cpu[len(cpu) // 2], "mean_us": 1e6 * statistics.fmean(cpu),
                                     "calls": calls, "recorder_us": 1e6 * recorder.cpu_s / (ticks + 150)}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--window", type=float, default=8.0, help="measured window per child, s")
    p.add_argument("--ticks", type=int, default=500, help="ticks of the injected-clock child")
    p.add_argument("--before", help="another checkout whose agent runs in turn with this one's")
    args = p.parse_args()
    trees = [("after", ROOT)] + ([("before", Path(args.before).resolve())] if args.before else [])
    got: dict[str, list[dict]] = {name: [] for name, _ in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name, tree in (trees if run % 2 == 0 else trees[::-1]):
                out = str(Path(tmp) / f"{name}_{run}.json")
                load = os.getloadavg()[0]
                subprocess.run([sys.executable, __file__, "--child", str(tree), str(args.window), out],
                               check=True, cwd=str(tree))
                r = json.loads(Path(out).read_text())
                subprocess.run([sys.executable, __file__, "--stepped", str(tree), str(args.ticks), out],
                               check=True, cwd=str(tree))
                r.update({f"stepped_{k}": v for k, v in json.loads(Path(out).read_text()).items()})
                r["load"] = (load + os.getloadavg()[0]) / 2
                got[name].append(r)
                print(f"run {run + 1} {name:6}: {r['ticks_hz']:.1f} ticks/s, tick CPU p50 {r['p50_us']:.0f} us "
                      f"mean {r['mean_us']:.0f} us; control thread {r['control_pct']:.2f} % "
                      f"({r['control_sw']:.0f} wake-ups/s), recorder {r['recorder_pct']:.2f} %; "
                      f"driven {r['distance_m']:.2f} m; stepped, cold: p50 {r['stepped_p50_us']:.0f} us "
                      f"mean {r['stepped_mean_us']:.0f} us, {r['stepped_calls']:.0f} calls, recorder "
                      f"{r['stepped_recorder_us']:.0f} us a snapshot; load {r['load']:.2f}", flush=True)
    keys = ("p50_us", "mean_us", "control_pct", "recorder_pct", "stepped_p50_us", "stepped_mean_us", "stepped_calls",
            "stepped_recorder_us")
    for name, rs in got.items():
        med = {k: statistics.median(r[k] for r in rs) for k in keys}
        print(f"median {name:6}: tick CPU p50 {med['p50_us']:.0f} us mean {med['mean_us']:.0f} us; "
              f"control thread {med['control_pct']:.2f} %, recorder {med['recorder_pct']:.2f} % of a core; "
              f"stepped, cold: p50 {med['stepped_p50_us']:.0f} us mean {med['stepped_mean_us']:.0f} us; "
              f"{med['stepped_calls']:.0f} function calls per tick; recorder {med['stepped_recorder_us']:.0f} us "
              f"of CPU per snapshot")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "--stepped":
        stepped(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main()
