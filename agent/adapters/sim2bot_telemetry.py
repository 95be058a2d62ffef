"""The tank as a Sim2Bot scene: the simulator ``hello`` and ``telemetry`` packets.

Pure translation from :class:`agent.model.RobotDescription` and
:class:`agent.model.Snapshot` to bridge-protocol v1 JSON objects. The fields
``sim2bot.RobotInfo.from_json`` and ``sim2bot.RobotState.from_json`` read are
all filled; what each carries on a tracked robot is in docs/sim2bot.md:

- joints (``q``, ``target``, ``qd``, ``qdd``, ``qddd``) are the servo joints, rad;
- the TCP fields carry the *base* (``base_link``) in the ``odom`` frame: the
  tank announces no arm kinematics, and the base pose is what a controller of a
  mobile robot steers. Linear quantities are world(odom)-frame, angular ones
  about z; acceleration and jerk are unsmoothed finite differences over
  control ticks, like the protocol's own derivatives;
- ``sensors`` are named entries whose keys carry units (``voltage_v``); the ``control`` entry
  carries the halts (e-stop, failsafes) and the speed cap (docs/safety.md).

:func:`change_key` and :class:`ChangeGate` say when a packet is worth sending: the robot's values
compared with noise deadbands (ARTEX's, agent.adapters.artex_telem, for the values both carry) and
everything else compared as it is; times are left out (they change at every tick).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from agent.config import AgentConfig
from agent.adapters.sim2bot_wire import PacketText
from agent.model import RobotDescription, Snapshot

Vec3 = tuple[float, float, float]
_ZERO3: Vec3 = (0.0, 0.0, 0.0)


def camera_ids(desc: RobotDescription) -> tuple[str, ...]:
    """Global Sim2Bot camera ids, ``model:<i>`` in config camera order."""
    return tuple(f"model:{i}" for i in range(len(desc.cameras)))


def _num(value: float | None) -> float | None:
    """JSON-safe number: non-finite -> None (JSON has no NaN)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _nums(values: Sequence[float]) -> list[float | None]:
    """:func:`_num` of each value; all finite (the usual case): one float conversion each, one check."""
    try:
        out = [float(v) for v in values]
    except TypeError:                   # a None among them
        return [_num(v) for v in values]
    if math.isfinite(sum(out)):         # a NaN or inf anywhere makes the sum so (an overflow too: the slow way)
        return out                      # type: ignore[return-value]
    return [v if math.isfinite(v) else None for v in out]


def robot_entry(desc: RobotDescription, cfg: AgentConfig) -> dict[str, Any]:
    """The tank as one ``robots[]`` entry of the simulator hello (``RobotInfo.from_json``)."""
    drivers = cfg.drivers
    sensors = ["odometry", "tracks", "control"]
    if drivers.imu is not None:
        sensors.insert(0, "imu")
    if drivers.power is not None:
        sensors.insert(0, "battery")
    capabilities = ["base_velocity", "stop", "reset", "camera"]
    if desc.dof:
        capabilities[1:1] = ["joint_position", "joint_velocity", "joint_trajectory"]
    if desc.has_gripper:
        capabilities.append("gripper")
    return {
        "index": 0,
        "id": cfg.sim2bot.robot_id,
        "name": desc.name,
        "dof": desc.dof,
        "jointNames": list(desc.joint_names),
        "jointLimits": [[lo, hi] for lo, hi in desc.joint_limits],
        "home": list(desc.home),
        "hasGripper": desc.has_gripper,
        "locomotion": "mobile",
        "baseDof": 2,
        "category": "mobile-base",
        "manufacturer": "",
        "license": "",
        "sourceUrl": "",
        "sourceRevision": "",
        "snapshotDigest": "",
        "capabilities": capabilities,
        "armActuators": list(desc.joint_names),
        "gripperActuators": ["gripper"] if desc.has_gripper else [],
        "tcpSites": ["base_link"],
        "endEffectorBodies": [],
        "keyframes": ["home"],
        "modelCameras": list(desc.cameras),
        "modelSensors": sensors,
        "variant": desc.kind,
        "baseLimits": {
            "vxMps": desc.max_speed_mps,
            "omegaRadps": desc.max_omega_radps,
            "trackWidthM": desc.track_width_m,
        },
    }


def camera_entries(desc: RobotDescription, cfg: AgentConfig) -> list[dict[str, Any]]:
    """``cameras[]`` of the simulator hello: global id, label = config camera id, robot mount."""
    by_id = {c.id: c for c in cfg.drivers.cameras}
    out = []
    for global_id, cam_id in zip(camera_ids(desc), desc.cameras):
        cam = by_id.get(cam_id)
        entry: dict[str, Any] = {
            "id": global_id,
            "label": cam_id,
            "kind": "model",
            "robot": desc.name,
            "mount": {"kind": "robot", "robotId": cfg.sim2bot.robot_id, "robotName": desc.name},
        }
        if cam is not None:
            entry["defaults"] = {"fps": min(30.0, cam.fps), "width": cam.width, "height": cam.height,
                                 "quality": cam.jpeg_quality, "codec": 0}
        out.append(entry)
    return out


def hello_message(desc: RobotDescription, cfg: AgentConfig, room: str | None = None) -> dict[str, Any]:
    """The simulator ``hello``: role, room and the scene the bridge serves to ``describe``.

    ``room``: the room this hello joins; None = ``cfg.sim2bot.room`` (no ``room`` key when that
    is None too: the bridge's default room)."""
    hello: dict[str, Any] = {
        "type": "hello",
        "role": "simulator",
        "robots": [robot_entry(desc, cfg)],
        "cameras": camera_entries(desc, cfg),
        "devices": [],
    }
    room = room or cfg.sim2bot.room
    if room:
        hello["room"] = room
    return hello


def _sub(a: Sequence[float], b: Sequence[float], dt: float) -> Vec3:
    return (a[0] - b[0]) / dt, (a[1] - b[1]) / dt, (a[2] - b[2]) / dt


class BaseMotion:
    """Base pose, twist and their unsmoothed derivatives in the odom frame, per control tick."""

    def __init__(self) -> None:
        self._t: float | None = None
        self._seq = -1
        self.lin_v: Vec3 = _ZERO3
        self.ang_v: Vec3 = _ZERO3
        self.lin_a: Vec3 = _ZERO3
        self.ang_a: Vec3 = _ZERO3
        self.lin_j: Vec3 = _ZERO3
        self.ang_j: Vec3 = _ZERO3

    def update(self, snap: Snapshot) -> None:
        """Feed ticks in order; older or repeated ticks are skipped."""
        if snap.seq <= self._seq:
            return
        o = snap.odom
        lin_v = (o.vx_mps * math.cos(o.yaw_rad), o.vx_mps * math.sin(o.yaw_rad), 0.0)
        ang_v = (0.0, 0.0, o.omega_radps)
        dt = None if self._t is None else snap.t_mono_s - self._t
        if dt is not None and dt > 0:
            lin_a, ang_a = _sub(lin_v, self.lin_v, dt), _sub(ang_v, self.ang_v, dt)
            self.lin_j, self.ang_j = _sub(lin_a, self.lin_a, dt), _sub(ang_a, self.ang_a, dt)
            self.lin_a, self.ang_a = lin_a, ang_a
        self.lin_v, self.ang_v = lin_v, ang_v
        self._t, self._seq = snap.t_mono_s, snap.seq

    def fields(self, snap: Snapshot) -> dict[str, Any]:
        """The telemetry ``tcp*`` fields for ``snap`` (pose) and the derivatives seen so far."""
        o = snap.odom
        half = 0.5 * o.yaw_rad
        return {
            "tcp": _nums((o.x_m, o.y_m, 0.0)),
            "tcpOrientation": _nums((0.0, 0.0, math.sin(half), math.cos(half))),
            "tcpLinearVelocity": _nums(self.lin_v),
            "tcpAngularVelocity": _nums(self.ang_v),
            "tcpLinearAcceleration": _nums(self.lin_a),
            "tcpAngularAcceleration": _nums(self.ang_a),
            "tcpLinearJerk": _nums(self.lin_j),
            "tcpAngularJerk": _nums(self.ang_j),
        }


def sensors(snap: Snapshot) -> list[dict[str, Any]]:
    """Named sensor readings; every key carries its unit. Absent devices are left out."""
    o, tr = snap.odom, snap.tracks
    out: list[dict[str, Any]] = [
        {"name": "odometry", "frame": "odom", "x_m": _num(o.x_m), "y_m": _num(o.y_m),
         "yaw_rad": _num(o.yaw_rad), "vx_mps": _num(o.vx_mps), "omega_radps": _num(o.omega_radps),
         "distance_m": _num(o.distance_m)},
        {"name": "tracks", "cmd_left_mps": _num(tr.cmd_left_mps), "cmd_right_mps": _num(tr.cmd_right_mps),
         "duty_left": _num(tr.duty_left), "duty_right": _num(tr.duty_right),
         "left_mps": _num(tr.left_mps), "right_mps": _num(tr.right_mps),
         "left_counts": int(tr.left_counts), "right_counts": int(tr.right_counts)},
    ]
    if snap.imu is not None:
        imu = snap.imu
        out.append({
            "name": "imu", "frame": "base_link", "t_mono_s": _num(imu.t_mono_s),
            "accel_mps2": _nums(imu.accel_mps2), "gyro_radps": _nums(imu.gyro_radps),
            "orientation_xyzw": None if imu.orientation_xyzw is None else _nums(imu.orientation_xyzw),
            "temperature_c": _num(imu.temperature_c),
        })
    if snap.power is not None:
        p = snap.power
        out.append({"name": "battery", "t_mono_s": _num(p.t_mono_s), "voltage_v": _num(p.voltage_v),
                    "current_a": _num(p.current_a), "power_w": _num(p.power_w),
                    "percent": _num(p.percent)})
    out.append(control_entry(snap))
    return out


def control_entry(snap: Snapshot) -> dict[str, Any]:
    """The ``control`` sensor: the command source, watchdog, stop latch, overrides, faults, devices and the
    halts (without ``bridge_warning``, which the packet adds)."""
    return {
        "name": "control", "active_source": snap.active_source, "watchdog": snap.watchdog,
        "stopped": snap.stopped, "overridden": {src: n for src, n in snap.overridden},
        "faults": list(snap.faults),
        "devices": [{"name": d.name, "state": d.state, "last_error": d.last_error, "errors": d.errors}
                    for d in snap.devices],
        **snap.safety.as_dict(),    # estop, halted, halt, halts, speed_cap_mps, speed_cap_reason
    }


def sample_entry(snap: Snapshot) -> dict[str, Any]:
    """One control tick for ``samples[]``: ``{t, q, qd}`` plus the base twist."""
    return {"t": snap.t_mono_s, "q": _nums(snap.joints.q), "qd": _nums(snap.joints.qd),
            "vx_mps": _num(snap.odom.vx_mps), "omega_radps": _num(snap.odom.omega_radps)}


class TelemetryBuilder:
    """Builds one ``telemetry`` packet per call from the newest snapshot and the ticks since the last.

    Args:
        desc: the robot description (name, dof). robot_id: the announced ``id``.
        room: the room name carried in the packet (``default`` when none).
    """

    def __init__(self, desc: RobotDescription, robot_id: str, room: str) -> None:
        self._desc = desc
        self._robot_id = robot_id
        self._room = room
        self._motion = BaseMotion()
        self._text = PacketText(desc, robot_id, room, control_entry)

    def build(self, newest: Snapshot, batch: Sequence[Snapshot], warning: str = "") -> dict[str, Any]:
        """Packet for ``newest``; ``batch`` = ticks since the previous packet, oldest first; ``warning``:
        the room's trouble (another simulator in it), carried as ``bridge_warning`` of the ``control``
        sensor, "" when none."""
        self._feed(newest, batch)
        j = newest.joints
        packet: dict[str, Any] = {
            "type": "telemetry",
            "room": self._room,
            "robot": 0,
            "id": self._robot_id,
            "name": self._desc.name,
            "dof": self._desc.dof,
            "t": newest.t_mono_s,
            "q": _nums(j.q),
            "target": _nums(j.target),
            "qd": _nums(j.qd),
            "qdd": _nums(j.qdd),
            "qddd": _nums(j.qddd),
            "captureTs": newest.t_unix_s,
        }
        packet.update(self._motion.fields(newest))
        packet["gripper"] = _num(newest.gripper)
        packet["sensors"] = sensors(newest)
        packet["sensors"][-1]["bridge_warning"] = warning
        packet["samples"] = [sample_entry(s) for s in batch]
        packet["roomDevices"] = []   # robot 0 carries the scene's doors and windows; the tank has none
        return packet

    def text(self, newest: Snapshot, batch: Sequence[Snapshot], warning: str = "") -> str:
        """The JSON text of :meth:`build` (``json.dumps`` of it, the same characters), with the sections that
        did not change since the last packet reused (agent.adapters.sim2bot_wire)."""
        self._feed(newest, batch)
        return self._text.packet(newest, batch, warning, self._motion)

    def _feed(self, newest: Snapshot, batch: Sequence[Snapshot]) -> None:
        """The packet's ticks (``batch``, then ``newest``) into the motion estimate."""
        for snap in batch:
            self._motion.update(snap)
        self._motion.update(newest)



def _pad(values: Sequence[float] | None, n: int) -> tuple[float, ...]:
    return tuple(values) if values is not None else (math.nan,) * n


def change_key(snap: Snapshot, warning: str = "") -> ChangeKey:
    """What a telemetry packet of ``snap`` says, without its times: (numbers, the rest), numbers in a fixed
    order (an absent device's are NaN) for :class:`ChangeGate`."""
    o, tr, j, imu, p = snap.odom, snap.tracks, snap.joints, snap.imu, snap.power
    nan = math.nan
    numbers: tuple[float, ...] = (
        (p.voltage_v if p.voltage_v is not None else nan, p.current_a, p.percent if p.percent is not None else nan,
         p.power_w) if p is not None else (nan, nan, nan, nan))
    numbers += (o.x_m, o.y_m, o.yaw_rad, o.vx_mps, o.omega_radps, o.distance_m,
                tr.left_mps, tr.right_mps, tr.cmd_left_mps, tr.cmd_right_mps, tr.duty_left, tr.duty_right,
                tr.left_counts, tr.right_counts)
    if imu is not None:
        numbers += (*imu.accel_mps2, *imu.gyro_radps, *_pad(imu.orientation_xyzw, 4),
                    imu.temperature_c if imu.temperature_c is not None else nan)
    else:
        numbers += (nan,) * 11
    numbers += (snap.gripper if snap.gripper is not None else nan, *j.q, *j.target, *j.qd)
    rest = (snap.active_source, snap.watchdog, snap.stopped, snap.overridden, snap.faults, snap.devices,
            snap.safety, warning, len(j.q), len(j.target), len(j.qd))
    return numbers, rest


ChangeKey = tuple[tuple[float, ...], tuple[Any, ...]]

#: Smallest change that counts, per value of :func:`change_key` (ARTEX's deadbands, docs/artex.md "telem"):
#: battery V, A, %, W; odometry and track speeds and duties; encoder counts (any whole count); IMU
#: accel (noise ~0.035 m/s^2 rms), gyro, orientation, temperature; gripper; then the joints (rad, rad/s).
_HEAD_DEADBANDS = ((0.05, 0.05, 2.0, 0.1) + (0.005,) * 12 + (0.5, 0.5)
                   + (0.2,) * 3 + (0.02,) * 3 + (0.005,) * 4 + (0.5,) + (0.005,))


class ChangeGate:
    """When a Sim2Bot telemetry packet is worth sending: a value moved by its deadband from what was last sent
    (an absent value appearing or going counts), or anything else changed (the active source, the watchdog,
    a halt, a device's state or error, the room's warning). Noise below the deadbands never counts; the
    resting values go out with the next keepalive."""

    def __init__(self) -> None:
        self._sent: ChangeKey | None = None
        self._deadbands: tuple[float, ...] = ()

    def due(self, key: ChangeKey) -> bool:
        """True when ``key`` differs from the one last sent (nothing sent yet: True)."""
        sent = self._sent
        if sent is None or key[1] != sent[1] or len(key[0]) != len(sent[0]):
            return True
        dbs = self._deadbands
        if len(dbs) != len(key[0]):
            dbs = self._deadbands = _HEAD_DEADBANDS + (0.005,) * (len(key[0]) - len(_HEAD_DEADBANDS))
        for a, b, d in zip(key[0], sent[0], dbs):
            # a NaN on both sides is no change; a NaN on one side is
            if a != b and not abs(a - b) < d and (a == a or b == b):
                return True
        return False

    def mark_sent(self, key: ChangeKey) -> None:
        """``key`` went out: the reference for the next comparisons."""
        self._sent = key
