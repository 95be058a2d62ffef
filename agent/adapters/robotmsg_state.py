"""robot_msg outbound: one control-tick :class:`~agent.model.Snapshot` -> one ``RobotState``.

Pure functions; the adapter (agent/adapters/robotmsg.py) owns the socket and
the publication counter. The full field table is docs/robot_msg.md, "RobotState".
Nothing here invents a value: a time is stamped only when the snapshot carries
it, IMU and battery arrays appear only when those devices reported a sample,
and quantities the tank cannot measure (external torques and wrench) are zero
as the docs say.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from robot_msg import RobotState
from robot_msg.types import MessageMetadata, NamedArray, Timestamp, Vec3, Wrench

from agent.model import RobotDescription, Snapshot
from agent.support.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
#: one WARNING per dropped aux name per minute
_dropped_log = RateLimitedLog(log, 60.0)

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_BOOT_ID = re.compile(r"^[0-9a-fA-F-]{8,64}$")


@functools.lru_cache(maxsize=4)
def monotonic_clock_id(boot_id_path: str = BOOT_ID_PATH) -> str:
    """Name of the agent's monotonic clock domain, for ``Timestamp.clock_id``.

    ``time.monotonic`` is Linux ``CLOCK_MONOTONIC``: one clock for every process
    of one boot, restarting at each boot. Its identity is therefore the kernel's
    per-boot random id, ``linux-boot:<boot_id>``. Where that file is missing
    (not Linux), the id is ``process-<pid>-<random>``: it changes with every
    agent start, which can only under-claim comparability, never over-claim.

    Args:
        boot_id_path: the kernel's boot id file (tests point it elsewhere).

    Returns:
        A string of at most 128 characters.
    """
    try:
        boot_id = Path(boot_id_path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as err:
        log.info("no boot id at %s (%s): monotonic clock id is per process", boot_id_path, err)
        boot_id = ""
    if _BOOT_ID.match(boot_id):
        return f"linux-boot:{boot_id.lower()}"
    return f"process-{os.getpid()}-{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class StateFrames:
    """Frame names used in RobotState (robot_msg config ``frame_id``, ``odom_frame_id``, ``imu_world_frame_id``)."""

    base: str = "base_link"
    odom: str = "odom"
    imu_world: str = "imu_world"


def _aux(name: str, values: tuple[float, ...] | list[float] | float, unit: str,
         frame_id: str | None = None) -> NamedArray:
    """A NamedArray: a bare float is a scalar (shape []), a sequence is a vector (shape [n])."""
    if isinstance(values, (int, float)):
        return NamedArray(name=name, shape=[], data=[float(values)], unit=unit, frame_id=frame_id)
    data = [float(v) for v in values]
    return NamedArray(name=name, shape=[len(data)], data=data, unit=unit, frame_id=frame_id)


#: One aux array before it is built: (name, value or values, unit, frame id or None).
AuxSpec = tuple[str, tuple[float, ...] | list[float] | float, str, str | None]


def aux_specs(snap: Snapshot, frames: StateFrames) -> list[AuxSpec]:
    """The ``metadata.aux`` arrays of one snapshot as (name, values, unit, frame_id), before any
    finiteness check: what :func:`state_aux` builds, and what agent/adapters/robotmsg_encode.py
    encodes without building them. A bare number is a scalar (shape []), a tuple a vector."""
    odom, tracks = snap.odom, snap.tracks
    base, odom_frame = frames.base, frames.odom
    out: list[AuxSpec] = [
        ("odom_position", (odom.x_m, odom.y_m), "m", odom_frame),
        ("odom_yaw", odom.yaw_rad, "rad", odom_frame),
        ("odom_vx", odom.vx_mps, "m/s", base),
        ("odom_omega", odom.omega_radps, "rad/s", base),
        ("odom_distance", odom.distance_m, "m", None),
        ("track_speed", (tracks.left_mps, tracks.right_mps), "m/s", base),
        ("track_speed_cmd", (tracks.cmd_left_mps, tracks.cmd_right_mps), "m/s", base),
        ("track_duty", (tracks.duty_left, tracks.duty_right), "1", None),
        ("track_counts", (tracks.left_counts, tracks.right_counts), "count", None),
    ]
    if snap.joints.target:
        out.append(("joint_target", snap.joints.target, "rad", None))
    if snap.gripper is not None:
        out.append(("gripper", snap.gripper, "1", None))
    imu = snap.imu
    if imu is not None:
        out.append(("imu_accel", imu.accel_mps2, "m/s^2", base))
        out.append(("imu_gyro", imu.gyro_radps, "rad/s", base))
        if imu.orientation_xyzw is not None:
            out.append(("imu_orientation", imu.orientation_xyzw, "1", frames.imu_world))
        if imu.temperature_c is not None:
            out.append(("imu_temperature", imu.temperature_c, "degC", None))
        out.append(("imu_age", snap.t_mono_s - imu.t_mono_s, "s", None))
    power = snap.power
    if power is not None:
        if power.voltage_v is not None:
            out.append(("battery_voltage", power.voltage_v, "V", None))
        out.append(("battery_current", power.current_a, "A", None))
        out.append(("battery_power", power.power_w, "W", None))
        if power.percent is not None:
            out.append(("battery_percent", power.percent, "%", None))
        out.append(("battery_age", snap.t_mono_s - power.t_mono_s, "s", None))
    out.append(("stopped", 1.0 if snap.stopped else 0.0, "1", None))
    out.append(("watchdog_expired", 1.0 if snap.watchdog == "expired" else 0.0, "1", None))
    out.append(("fault_count", len(snap.faults), "1", None))
    for dev in snap.devices:  # 0 ok, 1 degraded, 2 lost (text in ARTEX / Sim2Bot telemetry)
        out.append((f"health.{dev.name}", HEALTH_CODES.get(dev.state, 2.0), "1", None))
    out.extend(safety_specs(snap))
    return out


def state_aux(snap: Snapshot, frames: StateFrames) -> list[NamedArray]:
    """The ``metadata.aux`` arrays for one snapshot (docs/robot_msg.md, "aux arrays").

    Args:
        snap: the control tick.
        frames: frame names.

    Returns:
        Odometry, track, joint-target, gripper and status arrays always; IMU arrays only
        when ``snap.imu`` is set (orientation and temperature only when known); battery
        arrays only when ``snap.power`` is set. An array holding NaN or inf is left out
        (:func:`finite_aux`).
    """
    return finite_aux([_aux(*spec) for spec in aux_specs(snap, frames)])


def finite_aux(arrays: list[NamedArray]) -> list[NamedArray]:
    """``arrays`` without those holding NaN or inf (robot_msg's codecs refuse a non-finite number, and
    one bad sensor value must not cost the whole RobotState). Each dropped name is logged at WARNING
    (rate-limited per name); when any was dropped, ``nonfinite_dropped`` (count, unit "1") is appended so
    a subscriber sees that a value is missing on purpose."""
    dropped = [a for a in arrays if not all(math.isfinite(v) for v in a.data)]
    if not dropped:
        return arrays
    kept = [a for a in arrays if all(math.isfinite(v) for v in a.data)]
    for a in dropped:
        _dropped_log.log(logging.WARNING, ("nonfinite", a.name), "robot_msg: aux %s is %s (not finite); "
                         "left out of RobotState, the rest is sent", a.name, a.data)
    kept.append(_aux("nonfinite_dropped", float(len(arrays) - len(kept)), "1"))
    return kept


#: who set a halt -> aux value (``halt.<kind>.by``)
SETTER_CODES = {"robot": 0.0, "console": 1.0, "cli": 2.0, "input": 3.0}


def safety_specs(snap: Snapshot) -> list[AuxSpec]:
    """The halts and speed cap as aux specs (:func:`safety_aux`)."""
    safety = snap.safety
    out: list[AuxSpec] = [("estop", 1.0 if safety.estop is not None else 0.0, "1", None),
                          ("halted", 1.0 if safety.halted else 0.0, "1", None)]
    for halt in safety.halts:
        out.append((f"halt.{halt.kind}.since", halt.since_unix_s, "s", None))
        out.append((f"halt.{halt.kind}.by", SETTER_CODES.get(halt.by, -1.0), "1", None))
        out.append((f"halt.{halt.kind}.cleared", 1.0 if halt.cleared else 0.0, "1", None))
    if safety.speed_cap_mps is not None:
        out.append(("speed_cap", safety.speed_cap_mps, "m/s", None))
    return out


def safety_aux(snap: Snapshot) -> list[NamedArray]:
    """The halts and speed cap as aux arrays (docs/robot_msg.md; the reasons as text are in ARTEX and
    Sim2Bot telemetry, ``robot-agent status`` and each refusal): ``estop`` and ``halted`` (0/1) always;
    per halt ``halt.<kind>.since`` (Unix s), ``halt.<kind>.by`` (:data:`SETTER_CODES`) and
    ``halt.<kind>.cleared`` (0/1); ``speed_cap`` (m/s) while a cap holds."""
    return [_aux(*spec) for spec in safety_specs(snap)]


#: device health state -> aux value
HEALTH_CODES = {"ok": 0.0, "degraded": 1.0, "lost": 2.0}


def robot_state(snap: Snapshot, description: RobotDescription, *, sequence: int, clock_id: str,
                frames: StateFrames, send_unix_s: float) -> RobotState:
    """Build the RobotState for one snapshot.

    Args:
        snap: the newest control tick.
        description: the robot (joint order is ``description.joint_names``).
        sequence: publication counter, >= 0, +1 per published state.
        clock_id: ``monotonic_clock_id()``.
        frames: frame names.
        send_unix_s: the send time the caller stamps, Unix s.

    Returns:
        A RobotState: ``q``/``dq`` the servo joints (rad, rad/s; gripper excluded),
        ``tau_ext`` and ``base_wrench_ext`` zero (not measured), no joint/EE frames (the
        config has no link geometry), ``sample_time`` the tick's monotonic time when the
        snapshot has one, ``send_time`` Unix.
    """
    joints = snap.joints
    q = [float(v) for v in joints.q]
    dq = [float(v) for v in joints.qd] if len(joints.qd) == len(q) else [0.0] * len(q)
    if len(q) != description.dof:
        log.debug("snapshot carries %d joint values, robot has %d joints", len(q), description.dof)
    sample_time = (Timestamp(seconds=snap.t_mono_s, clock_kind="monotonic", clock_id=clock_id)
                   if snap.t_mono_s > 0 else None)
    metadata = MessageMetadata(
        sample_time=sample_time,
        send_time=Timestamp(seconds=send_unix_s, clock_kind="unix"),
        aux=state_aux(snap, frames),
    )
    zero = Vec3(0.0, 0.0, 0.0)
    return RobotState(
        base_wrench_ext=Wrench(force=zero, torque=Vec3(0.0, 0.0, 0.0)),
        dq=dq,
        ee_frames=[],
        frame_id=frames.base,
        joint_frames=[],
        q=q,
        sequence=sequence,
        tau_ext=[0.0] * len(dq),
        metadata=metadata,
    )
