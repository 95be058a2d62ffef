#!/usr/bin/env python3
"""Event-loop CPU per telemetry message: Sim2Bot ``telemetry`` and ARTEX ``telem``, built as the adapters build them.

A moving tank's ticks at 50 Hz (odometry, tracks and the IMU change at every tick, the power
monitor's reading every 25 ticks, the joints and the devices never), made up here (no agent runs),
feed the two senders' per-message work at their rates:

- Sim2Bot, one packet per 1 / 30 s (about 1.7 ticks): the change key and gate
  (``change_key``, ``ChangeGate.due``), the packet built from the newest snapshot and the ticks since
  the last one, and its JSON text (``TelemetryBuilder.text`` where the tree has it, else ``json.dumps``
  of ``build``: what ``RoomLink._telemetry`` does before ``ws.send``);
- ARTEX, one poll per 0.1 s (5 ticks): ``telemetry(snap)`` (``TelemBuilder.telemetry`` where the tree
  has it), ``TelemGate.due`` and the Socket.IO
  packet's text of the ``telem`` event (agent.adapters.artex_client.HubPacket, what ``emit`` encodes).

CPU is the thread's (``time.thread_time``) over ``--messages`` messages, best of ``--repeat``
rounds (the machine is shared: the least disturbed round is the cost), in microseconds per message.
``--tree PATH`` measures another checkout of the agent (its ``agent`` package imported instead):
run once per tree for before/after. Also prints a still tank's figures (the same snapshot content
at every tick). Usage: ``python scripts/bench_telemetry.py [--messages 3000] [--repeat 5] [--tree PATH]``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ticks(n: int, moving: bool, desc) -> list:
    """``n`` snapshots of a tank at 50 Hz, moving in a circle or standing still."""
    from agent.model import DeviceHealth, ImuSample, JointState, Odometry, PowerSample, SafetyState, Snapshot, TrackState

    joints = JointState(names=desc.joint_names, q=(0.1, -0.2), target=(0.1, -0.2), qd=(0.0, 0.0),
                        qdd=(0.0, 0.0), qddd=(0.0, 0.0))
    devices = (DeviceHealth("motor", "ok"), DeviceHealth("imu", "ok"), DeviceHealth("power", "ok"))
    safety = SafetyState()
    overridden = (("artex", 2),)
    out = []
    power = imu = None
    x = y = yaw = dist = 0.0
    counts = 0
    for k in range(n):
        t = 1000.0 + 0.02 * k
        v, w = (0.3 + 0.05 * math.sin(k / 40), 0.2) if moving else (0.0, 0.0)
        x += v * math.cos(yaw) * 0.02
        y += v * math.sin(yaw) * 0.02
        yaw = math.remainder(yaw + w * 0.02, math.tau)
        dist += abs(v) * 0.02
        counts += round(v * 50)
        if k % 25 == 0 or power is None:
            power = PowerSample(t, 11.9 - 1e-5 * k, 1.2 if moving else 0.1, 14.28, 80.0)
        if moving or imu is None:
            noise = 0.01 * math.sin(k * 1.7) if moving else 0.0
            imu = ImuSample(t, (0.1 + noise, 0.0, 9.81), (0.0, 0.0, w + noise), (0.0, 0.0, math.sin(yaw / 2),
                                                                                  math.cos(yaw / 2)), 31.0)
        out.append(Snapshot(
            seq=k + 1, t_mono_s=t, t_unix_s=1.7e9 + t,
            odom=Odometry(x, y, yaw, v, w, dist),
            tracks=TrackState(v, v, v / 1.5, v / 1.5, v, v, counts, counts),
            joints=joints, gripper=0.5, imu=imu, power=power, active_source="sim2bot" if moving else "",
            overridden=overridden, watchdog="ok" if moving else "idle", devices=devices, safety=safety,
        ))
    return out


def sim2bot_cpu(snaps: list, desc, messages: int) -> float:
    """Thread CPU of ``messages`` Sim2Bot packets, s."""
    from agent.adapters import sim2bot_room
    from agent.adapters.sim2bot_telemetry import ChangeGate, TelemetryBuilder, change_key

    builder = TelemetryBuilder(desc, "tank", "default")
    text = getattr(builder, "text", None)
    encode = sim2bot_room._encode
    gate = ChangeGate()
    last = 0
    total = 0
    t0 = time.thread_time()
    for m in range(messages):
        upto = min(len(snaps), (m + 1) * 5 // 3)    # 50 Hz ticks, 30 Hz packets
        batch = snaps[last:upto] or snaps[upto - 1:upto]
        last = upto
        newest = batch[-1]
        key = change_key(newest, "")
        gate.due(key)
        packet = text(newest, batch, "") if text is not None else encode(builder.build(newest, batch, ""))
        gate.mark_sent(key)
        total += len(packet)
    return time.thread_time() - t0


def artex_cpu(snaps: list, messages: int) -> float:
    """Thread CPU of ``messages`` ARTEX telem polls and their Socket.IO text, s."""
    from socketio import packet as sio_packet

    from agent.adapters.artex_client import HubPacket
    from agent.adapters import artex_telem
    from agent.adapters.artex_telem import TelemGate, telemetry

    if hasattr(artex_telem, "TelemBuilder"):
        telemetry = artex_telem.TelemBuilder().telemetry     # noqa: F811 - the adapter's way where it exists
    gate = TelemGate()
    t0 = time.thread_time()
    for m in range(messages):
        snap = snaps[min(len(snaps) - 1, (m + 1) * 5 - 1)]
        data = telemetry(snap)
        gate.due(data)
        HubPacket(sio_packet.EVENT, data=["telem", {"payload": data}], namespace="/robot").encode()
        gate.mark_sent(data)
    return time.thread_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tree", type=Path, default=ROOT, help="checkout whose agent package is measured")
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    from agent.config import AgentConfig
    from agent.control import describe
    from agent.testing.running_agent import sim_config

    desc = describe(AgentConfig.model_validate(sim_config()))
    n = args.messages
    print(f"tree {args.tree.resolve()}: CPU per message, us (best of {args.repeat} x {n} messages)")
    for label, moving in (("moving", True), ("still", False)):
        snaps = ticks(n * 5 + 10, moving, desc)
        s2b = min(sim2bot_cpu(snaps, desc, n) for _ in range(args.repeat)) / n * 1e6
        artex = min(artex_cpu(snaps, n) for _ in range(args.repeat)) / n * 1e6
        print(f"  {label:6}  Sim2Bot telemetry {s2b:6.1f} us/packet (x30/s = {s2b * 30 / 1e4:.3f} % of a core)   "
              f"ARTEX telem {artex:6.1f} us/poll (x10/s = {artex * 10 / 1e4:.3f} %)")


if __name__ == "__main__":
    main()
