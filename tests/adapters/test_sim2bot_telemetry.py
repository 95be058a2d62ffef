"""Sim2Bot scene announce and telemetry packets, read back with the real sim2bot client classes."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from sim2bot import RobotInfo, RobotState

from agent.adapters.sim2bot import Sim2botAdapter
from agent.adapters.sim2bot_telemetry import TelemetryBuilder, camera_ids, hello_message
from agent.config import AgentConfig
from agent.control import describe
from agent.model import (
    ImuSample,
    JointState,
    Odometry,
    PowerSample,
    Snapshot,
    TrackState,
)
from agent.testing.clock import VirtualClock
from agent.testing.running_agent import sim_config

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "sim2bot" / "v1" / "telemetry.json"
CFG = AgentConfig.model_validate(sim_config(sim2bot={"room": "bench-a", "robot_id": "tank-7"}))
DESC = describe(CFG)


def snap(seq: int, t: float, *, x=0.0, yaw=0.0, vx=0.0, omega=0.0, imu=True) -> Snapshot:
    return Snapshot(
        seq=seq, t_mono_s=t, t_unix_s=1_700_000_000.0 + t,
        odom=Odometry(x_m=x, y_m=0.0, yaw_rad=yaw, vx_mps=vx, omega_radps=omega, distance_m=abs(x)),
        tracks=TrackState(cmd_left_mps=vx, cmd_right_mps=vx, duty_left=vx, duty_right=vx,
                          left_mps=vx, right_mps=vx, left_counts=seq * 10, right_counts=seq * 10),
        joints=JointState(names=DESC.joint_names, q=(0.1, -0.2), target=(0.2, -0.2), qd=(0.5, 0.0),
                          qdd=(0.0, 0.0), qddd=(0.0, 0.0)),
        gripper=0.75,
        imu=ImuSample(t, (0.0, 0.0, 9.81), (0.0, 0.0, omega), (0.0, 0.0, 0.0, 1.0), 31.0) if imu else None,
        power=PowerSample(t, 11.8, 1.2, 14.16, 80.0),
        active_source="sim2bot", overridden=(("artex", 2),), watchdog="ok",
    )


def test_hello_announces_the_tank_as_robot_info_reads_it():
    hello = hello_message(DESC, CFG)
    assert (hello["type"], hello["role"], hello["room"], hello["devices"]) == ("hello", "simulator", "bench-a", [])
    info = RobotInfo.from_json(json.loads(json.dumps(hello))["robots"][0])
    assert (info.index, info.id, info.name) == (0, "tank-7", CFG.name)
    assert info.dof == 2 and info.joint_names == ["turret_pan", "camera_tilt"]
    assert info.joint_limits == [[-1.5708, 1.5708], [-0.5, 0.8]]
    assert info.home == [0.0, 0.0] and info.has_gripper is True
    assert (info.locomotion, info.base_dof, info.category) == ("mobile", 2, "mobile-base")
    assert info.model_cameras == ["front"] and "imu" in info.model_sensors and "battery" in info.model_sensors


def test_cameras_have_global_ids_labels_and_a_robot_mount():
    cams = hello_message(DESC, CFG)["cameras"]
    assert [c["id"] for c in cams] == list(camera_ids(DESC)) == ["model:0"]
    assert cams[0]["label"] == "front"
    assert cams[0]["mount"] == {"kind": "robot", "robotId": "tank-7", "robotName": CFG.name}
    assert cams[0]["defaults"]["width"] == 640 and cams[0]["defaults"]["fps"] == 15


def test_telemetry_has_the_fixture_field_set_and_parses_with_robot_state():
    builder = TelemetryBuilder(DESC, "tank-7", "bench-a")
    packet = json.loads(json.dumps(builder.build(snap(3, 1.0), [snap(2, 0.98), snap(3, 1.0)])))
    fixture = json.loads(FIXTURE.read_text())
    assert set(packet) == set(fixture) | {"sensors", "samples", "roomDevices"}   # roomDevices: robot 0 (sim2bot.RobotState)
    assert packet["roomDevices"] == []
    state = RobotState.from_json(packet)
    assert (state.robot, state.id, state.name, state.dof, state.t) == (0, "tank-7", CFG.name, 2, 1.0)
    assert state.q == [0.1, -0.2] and state.target == [0.2, -0.2] and state.qd == [0.5, 0.0]
    assert state.gripper == 0.75 and state.capture_ts == 1_700_000_001.0
    assert [s["t"] for s in state.samples] == [0.98, 1.0] and state.samples[0]["q"] == [0.1, -0.2]
    names = [s["name"] for s in state.sensors]
    assert names == ["odometry", "tracks", "imu", "battery", "control"]
    battery = state.sensors[3]
    assert (battery["voltage_v"], battery["current_a"], battery["percent"]) == (11.8, 1.2, 80.0)
    control = state.sensors[4]
    assert control["overridden"] == {"artex": 2} and control["watchdog"] == "ok"


def test_tcp_fields_carry_the_base_pose_twist_and_finite_differences():
    builder = TelemetryBuilder(DESC, "tank", "default")
    yaw = math.pi / 2
    builder.build(snap(1, 0.0, vx=0.0, yaw=yaw), [snap(1, 0.0, vx=0.0, yaw=yaw)])
    builder.build(snap(2, 0.1, vx=0.5, yaw=yaw), [snap(2, 0.1, vx=0.5, yaw=yaw)])
    p = builder.build(snap(3, 0.2, x=2.0, vx=0.5, omega=0.3, yaw=yaw), [snap(3, 0.2, x=2.0, vx=0.5, omega=0.3, yaw=yaw)])
    state = RobotState.from_json(p)
    assert state.tcp == [2.0, 0.0, 0.0]
    assert state.tcp_orientation == [0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)]
    vx_world, vy_world, _ = state.tcp_linear_velocity
    assert abs(vx_world) < 1e-9 and abs(vy_world - 0.5) < 1e-9   # heading +y: forward is world +y
    assert state.tcp_angular_velocity == [0.0, 0.0, 0.3]
    assert abs(state.tcp_angular_acceleration[2] - 3.0) < 1e-9    # 0 -> 0.3 rad/s in 0.1 s
    assert abs(state.tcp_linear_acceleration[1]) < 1e-9          # steady 0.5 m/s
    assert abs(state.tcp_linear_jerk[1] + 50.0) < 1e-9            # accel 5 -> 0 m/s^2 in 0.1 s


def test_non_finite_values_become_null_and_absent_devices_are_left_out():
    builder = TelemetryBuilder(DESC, "tank", "default")
    bad = snap(1, 0.0, imu=False)
    bad = Snapshot(**{**{f: getattr(bad, f) for f in bad.__slots__}, "gripper": float("nan"), "power": None})
    packet = builder.build(bad, [])
    text = json.dumps(packet, allow_nan=False)
    assert json.loads(text)["gripper"] is None and packet["samples"] == []
    assert [s["name"] for s in packet["sensors"]] == ["odometry", "tracks", "control"]


# ---------------------------------------------------------------- pacing, on a virtual clock


class SnapshotSource:
    """The RobotPort reads the telemetry loop makes: a snapshot that moves on by one seq per read."""

    def __init__(self, clock: VirtualClock) -> None:
        self.description = DESC
        self._clock = clock
        self.seq = 0

    def snapshot(self) -> Snapshot:
        self.seq += 1
        return snap(self.seq, self._clock.time(), x=0.01 * self.seq)

    def samples_since(self, seq: int, limit: int = 256) -> list[Snapshot]:
        return []


class Socket:
    """The control socket's send: records each packet at its virtual time; ``stall_s`` makes one send slow."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.sent: list[tuple[float, dict]] = []
        self.stall_at: int | None = None
        self.stall_s = 0.0

    async def send(self, text: str) -> None:
        if len(self.sent) == self.stall_at:
            self.clock.advance(self.stall_s)
        self.sent.append((self.clock.time(), json.loads(text)))


def telemetry_loop(hz: float):
    clock = VirtualClock(start=100.0)
    cfg = AgentConfig.model_validate(sim_config(sim2bot={"enabled": True, "telemetry_hz": hz}))
    adapter = Sim2botAdapter(cfg, SnapshotSource(clock), None, clock=clock.time, sleep=clock.sleep)
    return adapter, clock, Socket(clock)


async def test_telemetry_goes_out_at_telemetry_hz():
    adapter, clock, ws = telemetry_loop(20.0)
    clock.stop_when(lambda: len(ws.sent) >= 40)
    with pytest.raises(asyncio.CancelledError):
        await adapter.rooms[0]._telemetry(ws)
    times = [t for t, _ in ws.sent]
    assert times[-1] - times[0] == pytest.approx(39 * 0.05)
    assert all(p == pytest.approx(0.05) for p in clock.sleeps)
    assert [m["type"] for _, m in ws.sent] == ["telemetry"] * 40 and adapter.status()["sent"] == 40


async def test_a_slow_send_skips_ahead_and_never_bursts():
    adapter, clock, ws = telemetry_loop(20.0)
    ws.stall_at, ws.stall_s = 10, 1.0                # the 11th send takes a whole second
    clock.stop_when(lambda: len(ws.sent) >= 30)
    with pytest.raises(asyncio.CancelledError):
        await adapter.rooms[0]._telemetry(ws)
    gaps = [b - a for (a, _), (b, _) in zip(ws.sent, ws.sent[1:])]
    after = gaps[11:]
    assert sum(g < 0.05 - 1e-9 for g in after) <= 1      # one catch-up packet at most, then the period
    assert all(g == pytest.approx(0.05) for g in after[1:])
