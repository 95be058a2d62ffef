#!/usr/bin/env python3
"""RobotState encode CPU per state: the library's full path (``robot_state`` + ``robot_msg.encode``) against
agent/adapters/robotmsg_encode.StateEncoder, on a snapshot of the simulated tank with every device (thread CPU
time, 2000 states each, best of 3). Usage: ``scripts/bench_robotstate.py`` (a few seconds)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import robot_msg as rm  # noqa: E402

from agent.adapters.robotmsg_encode import StateEncoder  # noqa: E402
from agent.adapters.robotmsg_state import StateFrames, robot_state  # noqa: E402
from agent.model import (  # noqa: E402
    DeviceHealth, ImuSample, JointState, Odometry, PowerSample, RobotDescription, Snapshot, TrackState,
)

N = 2000
DESC = RobotDescription(name="tank", kind="Robot", joint_names=("turret_pan", "camera_tilt"),
                        joint_limits=((-1.57, 1.57), (-0.5, 0.8)), home=(0.0, 0.0), has_gripper=True,
                        track_width_m=0.3, max_speed_mps=1.0, max_omega_radps=6.6, cameras=("front",))
SNAP = Snapshot(
    seq=42, t_mono_s=1000.5, t_unix_s=1.7e9,
    odom=Odometry(x_m=1.5, y_m=-0.25, yaw_rad=0.3, vx_mps=0.4, omega_radps=-0.1, distance_m=7.0),
    tracks=TrackState(cmd_left_mps=0.45, cmd_right_mps=0.35, duty_left=0.45, duty_right=0.35,
                      left_mps=0.44, right_mps=0.36, left_counts=1200, right_counts=-80),
    joints=JointState(names=DESC.joint_names, q=(0.1, -0.2), target=(0.2, -0.2), qd=(0.5, 0.0)),
    gripper=0.75,
    imu=ImuSample(1000.49, (0.1, 0.0, 9.81), (0.0, 0.0, -0.1), (0.0, 0.0, 0.149, 0.989), 31.0),
    power=PowerSample(1000.4, 11.9, 1.2, 14.28, 80.0),
    devices=tuple(DeviceHealth(name, "ok") for name in ("motor", "imu", "power", "servo", "estop", "camera.front")),
)


def per_state_us(encode) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        for i in range(N):
            encode(i)
        best = min(best, (time.thread_time() - start) / N * 1e6)
    return best


def main() -> None:
    frames = StateFrames()
    enc = StateEncoder(DESC, "linux-boot:bench", frames)
    full = per_state_us(lambda i: rm.encode(robot_state(SNAP, DESC, sequence=i, clock_id="linux-boot:bench",
                                                        frames=frames, send_unix_s=1.7e9 + i)))
    fast = per_state_us(lambda i: enc.encode(SNAP, sequence=i, send_unix_s=1.7e9 + i))
    assert enc.trusted and enc.fast > 0
    print(f"RobotState encode, thread CPU per state: library {full:.1f} us, StateEncoder {fast:.1f} us "
          f"({full / fast:.1f}x); at 50 Hz: {full * 50 / 1e4:.2f} % vs {fast * 50 / 1e4:.2f} % of a core")


if __name__ == "__main__":
    main()
