#!/usr/bin/env python3
"""Pi-class budget: the agent under a CPU quota of 25 % of one core, everything on at once.

The agent runs in a child process (this script with ``--child``) on the shipped
simulated tank (paced RoboClaw on a pty, paced 100 kHz I2C with MPU-6050,
INA219 and PCA9685, test-pattern cameras) with all three adapters on: ARTEX
(video and telemetry to :class:`scripts.artex_hub.ArtexHub`), Sim2Bot (the
real ``sim2bot bridge`` subprocess, a ``sim2bot.Robot`` taking telemetry) and
robot_msg (RobotState published to a ZeroMQ subscriber). The peers run in this
parent process, outside the quota: they stand for other machines.

Quota: a cgroup CPU controller limits the child to 25 % of one core. cgroup v2
``cpu.max`` when /sys/fs/cgroup is a writable v2 tree; else the v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; else ``systemd-run --scope -p
CPUQuota=25%``; else none (said so). The period is ``--period-ms`` (default
10 ms, quota 2.5 ms): a Pi core is slow all the time, not a fast core frozen
for 75 ms of every 100 ms (systemd's default period), so the shorter period is
the closer stand-in. Which one was used is printed. The motor emulator's thread
stands for another chip (the RoboClaw): under cgroup v1, which places single
threads, it is moved back to this parent's cgroup, outside the quota
(``--emulator-in-quota`` keeps it in; under v2 it stays in, said so). The I2C
devices' emulation runs inline in the agent's bus thread and stays in.

Printed: ticks on schedule per second (``rate_hz`` less the slots a gap of over
1.5 periods missed; a woken tick restarts the slot grid, so slots are counted
from the gaps, not on a fixed grid), the
worst gap between ticks, gc collections (the longest), CPU % and wake-ups per second
per thread, command -> motor-emulator receipt p50/p99 per protocol
next to each transport's bare relay measured in the same run and the duty
packet's wire time, CPU % of the child, its peak RSS.

The bare relays (scripts/bench_pi_relay.py) run interleaved with the agent's trials: after each
agent trial, one message of the same protocol through the same transport to a bare receiver in
a process of its own (as the agent is), so both figures come from the same minutes; the load
average over the trials is printed beside them.

Where the motor emulator runs (``--emulator``): ``thread`` (the default, as in the simulated tank)
keeps the RoboClaw emulator a thread of the agent's process: it takes the agent's GIL to read each
packet and to answer, so its receipt stamp and the line's transactions wait behind the agent's
Python threads, which a real RoboClaw (another chip) never does. ``process`` runs the same emulator
(same config, pacing and reply latency) in a process of its own on its pty
(scripts/bench_pi_emulator.py), its receipts stamped on the same CLOCK_MONOTONIC; ``both`` runs the
whole bench once each way and prints both reports (``=== the motor emulator ...`` heads each).

Stage by stage (scripts/bench_pi_stages.py): each trial's time from the send to the emulator's
receipt, split at robot_msg's receiving side, ControlLoop.submit, the control tick, the duty's post
and the motor thread's write, with p50 / p99 per stage and the slowest trials. Each tick gap over
30 ms is explained (scripts/bench_pi_gaps.py): the control thread's run-queue wait (the kernel ran
others), the previous tick's length, the rest (asleep past its slot or waiting for the GIL), gc and
event-loop lag meanwhile, and which of the agent's threads ran or waited then.

Usage: ``scripts/bench_pi.py [--seconds 300] [--trials 120] [--quota 0.25] [--period-ms 10]
[--emulator thread|process|both] [--protocols artex,sim2bot,robot_msg]``
(``--quota 0``: no quota, the latency comparison alone). 120 trials per protocol take ~290 s;
``--seconds`` must cover them (a trial that would start in the last second is not run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

CGROUP_V1 = Path("/sys/fs/cgroup/cpu")
CGROUP_V2 = Path("/sys/fs/cgroup")


# ---------------------------------------------------------------------- quota
def make_cgroup(quota: float, period_ms: float) -> tuple[Path | None, str]:
    """A fresh cgroup limited to ``quota`` of one core; (its cgroup.procs, how) or (None, why not)."""
    name = f"bench_pi_{os.getpid()}"
    period_us = int(period_ms * 1000)
    quota_us = max(1000, int(quota * period_us))
    if (CGROUP_V2 / "cgroup.controllers").exists():
        try:
            group = CGROUP_V2 / name
            group.mkdir()
            (group / "cpu.max").write_text(f"{quota_us} {period_us}\n")
            return group / "cgroup.procs", f"cgroup v2 cpu.max {quota_us} {period_us}"
        except OSError as err:
            return None, f"cgroup v2 not writable ({err})"
    try:
        group = CGROUP_V1 / name
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text(str(period_us))
        (group / "cpu.cfs_quota_us").write_text(str(quota_us))
        return group / "cgroup.procs", f"cgroup v1 cpu.cfs_quota_us {quota_us} / cpu.cfs_period_us {period_us}"
    except OSError as err:
        return None, f"cgroup v1 cpu controller not writable ({err})"


def spawn_child(args: argparse.Namespace, ports: dict, out: str) -> tuple[subprocess.Popen, str, Path | None]:
    cmd = [args.agent_python or sys.executable, __file__, "--child", "--out", out, "--seconds", str(args.seconds),
           "--ports", json.dumps(ports)]
    if args.switch_interval is not None:
        cmd += ["--switch-interval", str(args.switch_interval)]
    cmd += ["--no-gc-freeze"] if args.no_gc_freeze else []
    cmd += ["--no-video"] if args.no_video else []
    cmd += ["--emulator-in-quota"] if args.emulator_in_quota else []
    if args.quota <= 0:
        return subprocess.Popen(cmd), "none (--quota 0)", None
    procs, how = make_cgroup(args.quota, args.period_ms)
    if procs is not None:
        def join() -> None:             # in the child before exec: every thread it starts is limited
            procs.write_text(str(os.getpid()))
        return subprocess.Popen(cmd, preexec_fn=join), how, procs.parent
    probe = subprocess.run(["systemd-run", "--scope", "-p", "CPUQuota=1%", "true"], capture_output=True)
    if probe.returncode == 0:
        pct_quota = f"CPUQuota={args.quota * 100:g}%"
        return subprocess.Popen(["systemd-run", "--scope", "-p", pct_quota, *cmd]), f"systemd-run {pct_quota}", None
    return subprocess.Popen(cmd), f"NONE available ({how}; systemd-run failed): unlimited", None


# ---------------------------------------------------------------------- parent
def reference_work_ms() -> float:
    """CPU time of a fixed pure-Python workload, ms (best of 5): this machine's speed at the moment.
    A shared or throttled host drifts by tens of per cent within minutes; compare runs by it."""
    best = float("inf")
    for _ in range(5):
        t = time.thread_time()
        total = 0
        for i in range(200_000):
            total += i * i % 7
        best = min(best, time.thread_time() - t)
    return 1e3 * best


class EmulatorProcess:
    """The RoboClaw emulator in a process of its own (scripts/bench_pi_emulator.py); None for ``thread``."""

    def __init__(self, ports: dict) -> None:
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "bench_pi_emulator.py"), json.dumps(ports)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.started = time.monotonic()
        self.port = self.proc.stdout.readline().strip()
        if not self.port:
            raise RuntimeError("bench_pi_emulator.py did not start")

    def finish(self) -> dict:
        """Stop it; its duty events and CPU % of one core over its life."""
        out, _ = self.proc.communicate("", timeout=30)
        got = json.loads(out.strip().splitlines()[-1])
        return {**got, "cpu_pct": 100 * got["cpu_s"] / (time.monotonic() - self.started)}


async def parent(args: argparse.Namespace) -> None:
    modes = ("thread", "process") if args.emulator == "both" else (args.emulator,)
    for mode in modes:
        await run_once(args, mode)


async def run_once(args: argparse.Namespace, mode: str) -> None:
    from bench_pi_gaps import ThreadSampler
    from bench_pi_peers import Peers   # the peers' libraries stay out of the child
    from bench_pi_relay import Relays

    speed = [reference_work_ms()]
    peers = Peers()
    await peers.start()
    emulator = None
    try:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        ports = peers.ports()
        if mode == "process":
            emulator = EmulatorProcess(ports)
            ports = {**ports, "motor": emulator.port}
        child, how, group = spawn_child(args, ports, out)
        sampler = ThreadSampler(child.pid)
        try:
            sends = await peers.drive(args.trials, args.seconds, Relays(), tuple(args.protocols.split(",")))
            relays = {p: [x for x in times if x is not None] for p, times in peers.relay_times.items()}
            loads = peers.loads
        finally:
            code = await asyncio.to_thread(child.wait)
            sampler.stop()
            if group is not None:
                group.rmdir()
        result = json.loads(Path(out).read_text())
        os.unlink(out)
    finally:
        await peers.stop()
        if emulator is not None:
            emulated = await asyncio.to_thread(emulator.finish)
    if emulator is not None:
        result["duty_events"] = emulated["duty_events"]
        result["emulator_process_cpu_pct"] = emulated["cpu_pct"]
    speed.append(reference_work_ms())
    print(f"=== the motor emulator {'in a process of its own' if mode == 'process' else 'a thread of the agent'}")
    result["gaps"] = [f"{line}; threads then: {sampler.during(a, b, result['tids'])}"
                      for line, (a, b) in zip(result["gaps"], result["gap_spans"], strict=True)]
    report(args, how, code, relays, sends, result, speed, loads)


def report(args, how: str, code: int, relays: dict, sends: dict, result: dict, speed: list[float],
           loads: list[float]) -> None:
    from bench_pi_peers import MOTION_S, latencies, pct, split
    from bench_pi_stages import print_stages, stage_rows

    wire = result["duty_wire_s"]
    print(f"bench_pi: agent under CPU quota {args.quota * 100:g} % of one core ({how}); child exit {code}; "
          f"agent's interpreter {args.agent_python or sys.executable}")
    print(f"  machine speed: reference work {speed[0]:.1f} ms CPU before, {speed[1]:.1f} ms after "
          f"(lower is faster; runs compare only at similar figures)")
    print(f"  window {result['window_s']:.0f} s: ticks on schedule {result['on_schedule_hz']:.1f} /s "
          f"(of {result['rate_hz']:.0f}), ticks run {result['ticks_hz']:.1f} /s, worst gap {result['worst_gap_ms']:.1f} ms, "
          f"gaps > 30 ms: {result['gaps_over_30']}, at rest {result.get('rest_s', 0.0):.1f} s (its slots left out)")
    for line in result["gaps"]:
        print(f"    {line}")
    emulator = (f"the motor emulator's process beside it {result['emulator_process_cpu_pct']:.1f} %"
                if "emulator_process_cpu_pct" in result else f"of which the motor emulator's thread "
                f"{result['emulator_cpu_pct']:.1f} %: simulation, not agent")
    print(f"  CPU {result['cpu_pct']:.1f} % of one core ({emulator}; it runs {result['emulator_quota']})   "
          f"RSS peak {result['rss_peak_mib']:.1f} MiB "
          f"(now {result['rss_mib']:.1f} MiB)   switch interval {result['switch_interval_ms']:.2f} ms")
    quota = result["throttling"]
    if quota.get("periods"):
        print(f"  quota: throttled in {quota['throttled']} of {quota['periods']} periods "
              f"({100 * quota['throttled'] / quota['periods']:.1f} %), {quota['ns'] / 1e6:.0f} ms in all")
    print(f"  libraries loaded: {', '.join(result['heavy'])}")
    gcs = result["gc_pauses"]
    print(f"  gc: {result['gc_frozen']} objects frozen; collections (count, longest ms) "
          + ", ".join(f"gen{g} {n} / {ms:.1f}" for g, (n, ms) in gcs.items()))
    lag = result["loop_lag_ms"]
    print(f"  event loop lag (a 50 ms sleep wakes late by): p50 {lag[0]:.2f} ms  p99 {lag[1]:.2f} ms  max {lag[2]:.1f} ms")
    print("  gc: longest collections, wall (CPU) ms, generation, objects freed: "
          + ", ".join(f"{ms:.1f} ({cpu:.1f}) gen{g} {k}" for ms, cpu, g, k in result["gc_longest"]))
    print("  threads (CPU % of one core, wake-ups/s):")
    for share, wakeups, name in result["threads"]:
        if share >= 0.05 or wakeups >= 1:
            print(f"    {name:<32} {share:5.1f} %  {wakeups:6.0f}/s")
    print(f"  command -> motor emulator receipt; wire floor of the duty packet {wire * 1e3:.2f} ms "
          f"(RoboClaw 8 bytes at {result['baud']} baud), figures net of it; each agent trial followed by one "
          f"of the bare relay (its receiver in a process of its own), load (1 min) "
          f"{min(loads, default=0):.2f}..{max(loads, default=0):.2f} over the trials:")
    for proto, lat in latencies(sends, result["duty_events"]).items():
        net = [x - wire for x in lat]
        relay = relays[proto]
        if not net:
            print(f"    {proto:<9} no samples")
            continue
        print(f"    {proto:<9} p50 {pct(net, 50) * 1e3:6.2f} ms  p99 {pct(net, 99) * 1e3:6.2f} ms "
              f"(n={len(net)}/{len(sends[proto])})   "
              f"relay p50 {pct(relay, 50) * 1e3:5.2f} ms  p99 {pct(relay, 99) * 1e3:5.2f} ms (n={len(relay)})   "
              f"p99 ratio {pct(net, 99) / pct(relay, 99):4.2f}x")
    print("  where it goes: send -> the adapter's submit (transport and adapter), submit -> receipt net of the wire:")
    for proto, (before, after) in split(sends, result["submits"], result["duty_events"]).items():
        if before:
            print(f"    {proto:<9} to submit p50 {pct(before, 50) * 1e3:6.2f} ms  p99 {pct(before, 99) * 1e3:6.2f} ms   "
                  f"submit to receipt p50 {(pct(after, 50) - wire) * 1e3:6.2f} ms  p99 {(pct(after, 99) - wire) * 1e3:6.2f} ms")
    print_stages(stage_rows(sends, result["submits"], result["stages"], result["duty_events"], MOTION_S), wire, pct,
                 ticks=result["ticks"])


# ---------------------------------------------------------------------- child (the agent)
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=300.0,
                    help="agent run, s (120 trials x 3 protocols need ~290 s)")
    ap.add_argument("--trials", type=int, default=120,
                    help="latency trials per protocol (each followed by a relay trial)")
    ap.add_argument("--quota", type=float, default=0.25, help="share of one core (0: no quota)")
    ap.add_argument("--emulator", choices=("thread", "process", "both"), default="thread",
                    help="the RoboClaw emulator as a thread of the agent (the simulated tank's), in a process "
                         "of its own (as the chip it stands for), or one run of each")
    ap.add_argument("--protocols", default="artex,sim2bot,robot_msg",
                    help="the protocols tried, comma-separated (all three adapters run either way)")
    ap.add_argument("--period-ms", type=float, default=10.0, help="quota period, ms")
    ap.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval in the agent, s")
    ap.add_argument("--no-gc-freeze", action="store_true", help="undo the agent's gc.freeze() (A/B)")
    ap.add_argument("--no-video", action="store_true", help="no camera in the agent (A/B)")
    ap.add_argument("--emulator-in-quota", action="store_true",
                    help="keep the motor emulator's thread inside the quota (default: moved out where cgroup v1 allows)")
    ap.add_argument("--agent-python", help="interpreter for the agent (default: this one); e.g. a virtualenv "
                    "made by scripts/install.sh, which lacks the test extra's libraries this one may load")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        from bench_pi_agent import run_agent
        asyncio.run(run_agent(json.loads(args.ports), args.seconds, args.out, args.switch_interval,
                              gc_freeze=not args.no_gc_freeze, video=not args.no_video,
                              emulator_outside=not args.emulator_in_quota))
    else:
        asyncio.run(parent(args))


if __name__ == "__main__":
    main()
