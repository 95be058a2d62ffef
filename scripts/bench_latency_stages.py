#!/usr/bin/env python3
"""Where one velocity command's time goes: per-stage p50/p99 on the simulated tank, prints numbers.

Bench-only instrumentation (instance attributes wrapped here, nothing in the hot path):

    t0 command handed to ControlLoop.submit (an adapter's receipt)
    t1 submit returned (the scheduler was woken)
    t2 the control tick that applies it starts
    t3 the tick posted the duty to the motor worker
    t4 the worker starts writing the duty packet (serial line free)
    t5 the driver's write returned (the 0xFF ack read back); tw the pty write inside it returned
    t6 the emulator received the last byte of the duty packet (wire time, wall clock of its thread)

Stages printed: submit t0->t1, wake t1->t2, tick t2->t3, handoff t3->t4 (includes waiting for the
transaction in progress on the motor line), wire+device t4->t6 (the duty packet's wire time is its
floor: 0.69 ms at 115200 baud, 2.08 ms at 38400), ack t6->t5, the rest of the tick after the post, and
the total t0->t6 with and without the wire floor; then the three slowest trials by stage, and the
handoff split by what the line carried when the duty was posted (idle, a duty write, a feedback read).
With ``--via robot_msg`` each command goes through the robot_msg adapter instead: a ZeroMQ PUB of
this process sends ``u_rt`` to the agent's action socket (its receiving thread decodes and submits,
agent/adapters/robotmsg_receive.py), and the stage ``adapter`` (send -> ControlLoop.submit:
ZeroMQ, the receiving thread's wake-up, decode, translation) comes first; the total is from the send.
Usage: ``python scripts/bench_latency_stages.py [--trials 300] [--baud B] [--from-rest] [--switch-interval S]
[--via robot_msg]`` (other adapters off: the control path alone; ``--from-rest``: each command from
standstill, as bench_pi's trials; run it beside a busy agent or under bench_pi's quota to see load;
scripts/bench_pi.py prints the same stages with everything on).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import time

from agent.commands import BaseVelocity
from agent.testing.running_agent import running_agent, sim_config
from drivers import roboclaw as rc
from drivers.serialport import transfer_s

#: (name, from, to) as indexes into a trial row [t0, t1, t2, t3, t4, t6, t5, tw, t7, send].
#: Pause after a --from-rest trial's stop: the ramp down (0.2 m/s at 2 m/s^2) and more, s.
REST_S = 0.2
STAGES = (("submit", 0, 1), ("wake", 1, 2), ("tick", 2, 3), ("handoff", 3, 4),
          ("wire+device", 4, 5), ("total", 0, 5))
#: With --via robot_msg: the adapter's stage first, the total from the send.
ADAPTER_STAGES = (("adapter", 9, 0), *STAGES[:-1], ("total", 9, 5))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class Probe:
    """Timestamps of the instrumented calls, appended from the threads that make them."""

    def __init__(self) -> None:
        self.events: dict[str, list[float]] = {k: [] for k in ("tick", "post", "write0", "wrote", "write1", "emu",
                                                                "read0", "read1", "tick1", "submit0", "submit1")}

    def wrap(self, obj: object, name: str, before: str | None, after: str | None = None) -> None:
        inner = getattr(obj, name)
        events = self.events

        def wrapped(*args, **kwargs):
            if before:
                events[before].append(time.monotonic())
            try:
                return inner(*args, **kwargs)
            finally:
                if after:
                    events[after].append(time.monotonic())

        setattr(obj, name, wrapped)

    def first_after(self, key: str, t: float) -> float | None:
        return next((x for x in self.events[key] if x >= t), None)

    def line_at(self, t: float) -> str:
        """What the motor line carried at ``t``: ``feedback`` (a read transaction), ``duty`` (a write) or ``idle``."""
        for kind, start, end in (("duty", "write0", "write1"), ("feedback", "read0", "read1")):
            began = [x for x in self.events[start] if x <= t]
            if began and (self.first_after(end, began[-1]) or float("inf")) > t:
                return kind
        return "idle"


def instrument(agent) -> Probe:
    probe = Probe()
    sched = agent.control._scheduler
    probe.wrap(sched, "_tick", "tick", "tick1")
    probe.wrap(agent.control, "submit", "submit0", "submit1")    # the robot port as adapters call it
    probe.wrap(agent.hardware.motor_io, "post", "post")
    drv = agent.hardware.motor_io.motor.driver
    probe.wrap(drv, "_write_duty", "write0", "write1")
    probe.wrap(drv, "_read", "read0", "read1")
    probe.wrap(drv._link, "write", None, "wrote")      # the serial link's write (the port's descriptor or pyserial)
    emu = agent.sim.motor_emulator
    inner = emu._write_command

    def on_command(cmd: int, data: bytes, now: float) -> None:
        if cmd == rc.CMD_DUTY_M1M2:
            probe.events["emu"].append(now)     # the last byte's arrival on the emulated wire
        inner(cmd, data, now)

    emu._write_command = on_command
    return probe


def trial_stages(probe: Probe, t0: float, t1: float) -> list[float] | None:
    t2 = probe.first_after("tick", t0)  # a tick started before submit may have read the state before it
    if t2 is None:
        return None
    t3 = probe.first_after("post", t2)
    t4 = probe.first_after("write0", t3) if t3 else None
    t5 = probe.first_after("write1", t4) if t4 else None
    t6 = probe.first_after("emu", t4) if t4 else None
    tw = probe.first_after("wrote", t4) if t4 else None
    t7 = probe.first_after("tick1", t3) if t3 else None
    if None in (t3, t4, t5, t6, tw, t7):
        return None
    return [t0, t1, t2, t3, t4, t6, t5, tw, t7]


def direct(agent):
    """Commands handed to ControlLoop.submit on this thread (as an adapter would)."""
    return lambda vx: agent.control.submit("sim2bot", BaseVelocity(vx, 0.0))


def robot_msg_sender(agent):
    """Commands sent as robot_msg ``u_rt`` to the agent's action socket from a PUB of this process;
    returns the sender once the agent's subscription is live."""
    import robot_msg as rm
    import zmq

    pub = zmq.Context.instance().socket(zmq.XPUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(agent.adapters["robot_msg"].status()["endpoints"]["action"])
    if not pub.poll(5000):
        raise RuntimeError("the agent's robot_msg action socket did not subscribe")
    pub.recv()

    def send(vx: float) -> None:
        pub.send(rm.encode(rm.RobotAction(frame_id="base_link",
                                          real_time_action=rm.RobotActionRealTimeAction(u_rt=[vx, 0.0]))))
    return send


def run_trials(agent, trials: int, from_rest: bool, via: str = "direct") -> tuple[list[list[float]], list[str]]:
    """Rows of stage times, and what the line carried when each trial's duty was posted.

    Alternating drive / zero commands (the duty ramps most of the time), or with ``from_rest`` a
    drive command from standstill followed by a stop that is left to settle (as bench_pi's trials).
    ``via``: ``direct`` (ControlLoop.submit on this thread) or ``robot_msg`` (see the module docstring).
    """
    probe = instrument(agent)
    send = robot_msg_sender(agent) if via == "robot_msg" else direct(agent)
    out, lines = [], []
    for i in range(trials):
        time.sleep(random.uniform(0.03, 0.07))  # random phase against the slots and the feedback reads
        vx = 0.2 + 0.001 * (i % 50) if i % 2 == 0 or from_rest else 0.0
        t_send = time.monotonic()
        send(vx)
        time.sleep(0.03)
        t0 = probe.first_after("submit0", t_send)
        t1 = probe.first_after("submit1", t0) if t0 is not None else None
        if from_rest:
            send(0.0)
            time.sleep(REST_S)
        got = trial_stages(probe, t0, t1) if t0 is not None and t1 is not None else None
        if got is not None:
            got.append(t_send)
            out.append(got)
            lines.append(probe.line_at(got[3]))
        for values in probe.events.values():   # keep the lists short
            del values[:-32]
    return out, lines


def report(rows: list[list[float]], lines: list[str], wire_s: float, via: str = "direct") -> None:
    print(f"  trials {len(rows)}; duty packet wire floor {wire_s * 1e3:.2f} ms")
    stages = ADAPTER_STAGES if via == "robot_msg" else STAGES
    for name, a, b in stages:
        values = [(r[b] - r[a]) * 1e3 for r in rows]
        print(f"  {name:12s} p50 {pct(values, 50):6.2f} ms  p99 {pct(values, 99):6.2f} ms  max {max(values):6.2f}")
    start = 9 if via == "robot_msg" else 0
    net = [(r[5] - r[start] - wire_s) * 1e3 for r in rows]
    print(f"  {'total-wire':12s} p50 {pct(net, 50):6.2f} ms  p99 {pct(net, 99):6.2f} ms")
    wrote = [(r[7] - r[4]) * 1e3 for r in rows]
    print(f"  {'pty write':12s} p50 {pct(wrote, 50):6.2f} ms  p99 {pct(wrote, 99):6.2f} ms  (t4 -> write returned)")
    emu = [(r[5] - wire_s - r[7]) * 1e3 for r in rows]
    print(f"  {'emu reads':12s} p50 {pct(emu, 50):6.2f} ms  p99 {pct(emu, 99):6.2f} ms  (write returned -> the emulator "
          "thread reads it)")
    rest = [(r[8] - r[3]) * 1e3 for r in rows]
    print(f"  {'tick rest':12s} p50 {pct(rest, 50):6.2f} ms  p99 {pct(rest, 99):6.2f} ms  (post -> the tick returns; "
          "the worker waits for the GIL meanwhile)")
    ack = [(r[6] - r[5]) * 1e3 for r in rows]      # reply latency + one byte + the driver's wake
    print(f"  {'ack (t6->t5)':12s} p50 {pct(ack, 50):6.2f} ms  p99 {pct(ack, 99):6.2f} ms")
    worst = sorted(range(len(rows)), key=lambda i: rows[i][5] - rows[i][start])[-3:]
    for i in reversed(worst):                      # where the tail's time went
        r = rows[i]
        parts = "  ".join(f"{name} {(r[b] - r[a]) * 1e3:.2f}" for name, a, b in stages[:-1])
        print(f"  worst: total {(r[5] - r[start]) * 1e3:6.2f} ms = {parts}  (line {lines[i]} at the post)")
    for kind in ("idle", "duty", "feedback"):      # the handoff by what the line carried at the post
        values = [(r[4] - r[3]) * 1e3 for r, line in zip(rows, lines, strict=True) if line == kind]
        if values:
            print(f"  handoff, line {kind:8s} {len(values) / len(rows):4.0%} of trials: p50 {pct(values, 50):5.2f} ms  "
                  f"p99 {pct(values, 99):5.2f} ms  max {max(values):5.2f}")


async def main(args: argparse.Namespace) -> None:
    overrides: dict = {"drivers": {"motor": {"baud": args.baud}}} if args.baud else {}
    if args.via == "robot_msg":
        overrides["robot_msg"] = {"enabled": True, "state": {"address": "tcp://127.0.0.1:*"},
                                  "command": {"address": "tcp://127.0.0.1:*"},
                                  "action": {"address": "tcp://127.0.0.1:*"}}
    cfg = sim_config(**overrides)
    async with running_agent(cfg) as agent:
        if args.switch_interval is not None:
            sys.setswitchinterval(args.switch_interval)
        await asyncio.sleep(1.0)
        baud = agent.cfg.drivers.motor.baud
        rows, lines = await asyncio.to_thread(run_trials, agent, args.trials, args.from_rest, args.via)
        print(f"command -> emulator receipt by stage ({'robot_msg on, the others' if args.via == 'robot_msg' else 'adapters'}"
              f" off, motor line {baud} baud, "
              f"{'from standstill, ' if args.from_rest else ''}"
              f"switch interval {sys.getswitchinterval() * 1e3:.1f} ms, gc frozen {gc.get_freeze_count()})")
        report(rows, lines, transfer_s(8, baud), args.via)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval, s")
    parser.add_argument("--from-rest", action="store_true", help="each command from standstill (as bench_pi)")
    parser.add_argument("--baud", type=int, default=None, help="motor line rate (default: config/params.json)")
    parser.add_argument("--via", choices=("direct", "robot_msg"), default="direct",
                        help="commands handed to ControlLoop.submit here, or sent over robot_msg (ZeroMQ)")
    asyncio.run(main(parser.parse_args()))
