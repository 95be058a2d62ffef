"""robot_msg inbound: ZeroMQ frames -> protocol-2 envelopes -> agent commands.

Pure functions, no sockets and no robot: the adapter (agent/adapters/robotmsg.py)
feeds them what it received and submits what they return. Every refusal is a
:class:`Rejected` carrying a short ``reason`` (the status counter key) and a
``detail`` naming what was wrong and where. The mapping tables are
docs/robot_msg.md, "RobotAction" and "ControllerCommand".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import robot_msg as rm

from agent.errors import CommandError, CommandRejected
from agent.commands import (
    MAX_TRAJECTORY_POINTS, BaseVelocity, CalibrateImu, Command, JointPosition, JointTrajectory, JointTrajectoryStop,
    Reset, Stop, TrajectoryPoint,
)

#: Magic of robot_msg protocol-1 binary frames (the bit-packed layout R2 replaced).
PROTOCOL_1_MAGIC = b"RM"
#: ctrl_modes action -> agent command.
MODE_COMMANDS: dict[str, Command] = {"stop": Stop(), "hold": JointTrajectoryStop(), "home": Reset()}
#: Envelope types each subscriber socket takes.
INBOUND_TYPES = (rm.RobotAction, rm.ControllerCommand)

_VERSION = re.compile(r"unsupported version: (-?\d+)")


T = TypeVar("T")

class Rejected(CommandRejected):
    """A received message the agent does not execute (agent.errors.CommandRejected).

    Attributes:
        reason: counter key (``oversize``, ``framing``, ``topic``, ``protocol_1``,
            ``unsupported_version``, ``parse``, ``truncated``, ``non_finite``, ``validation``,
            ``unknown_type``, ``unexpected_type``, ``dimension``, ``conflict``, ``too_long``,
            ``unsupported_mode``, ``empty``, ``invalid``, ``refused``, ``before_stop``).
        detail: what was wrong and where, for the log.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}", "robot_msg", reason)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Declined:
    """A field the agent understood but cannot execute; the rest of the message still applies."""

    field: str
    why: str


@dataclass(frozen=True, slots=True)
class Translation:
    """What one message asks of the robot.

    Attributes:
        commands: submit in this order; a refused one cancels the rest.
        declined: fields ignored, with the reason.
        publish_state: ``ctrl_update`` was present: publish a RobotState at once.
        fields: the message field each command came from (``real_time_action.q_rt``), same
            length as ``commands``; names the field when the robot refuses a command.
    """

    commands: tuple[Command, ...] = ()
    declined: tuple[Declined, ...] = ()
    publish_state: bool = False
    fields: tuple[str, ...] = ()


# --------------------------------------------------------------------------- frames


def unpack_frames(frames: Sequence[bytes], topic: bytes | None, max_bytes: int) -> bytes:
    """The envelope bytes of one ZeroMQ message.

    Args:
        frames: the message parts as received.
        topic: the configured topic frame, or None (one frame; a two-frame message is
            taken as ``[any topic, envelope]``).
        max_bytes: limit on the sum of all parts, bytes.

    Returns:
        The envelope frame.

    Raises:
        Rejected: ``oversize``, ``framing`` (wrong number of parts) or ``topic`` (mismatch).
    """
    size = sum(len(f) for f in frames)
    if size > max_bytes:
        raise Rejected("oversize", f"message is {size} bytes, the limit is {max_bytes}")
    if topic is None:
        if len(frames) in (1, 2):
            return frames[-1]
        raise Rejected("framing", f"{len(frames)} frames; expected [envelope] or [topic, envelope]")
    if len(frames) != 2:
        raise Rejected("framing", f"{len(frames)} frames; expected [topic {topic!r}, envelope]")
    if frames[0] != topic:
        raise Rejected("topic", f"topic frame {bytes(frames[0][:64])!r} is not {topic!r}")
    return frames[1]


def is_json(data: bytes) -> bool:
    """True when ``data`` is a JSON envelope (first non-blank byte ``{``), else binary R2."""
    return data[:64].lstrip()[:1] == b"{"


def _error_reason(err: Exception) -> str:
    """Counter key of a robot_msg library error. The library's errors carry no fields (only
    ParseError / ValidationError and a message), so truncation, non-finite numbers and the
    version are read from its message: the one place text is classified, at the foreign boundary."""
    text = str(err)
    if isinstance(err, rm.UnsupportedVersionError):
        found = _VERSION.search(text)
        return "protocol_1" if found and found.group(1) == "1" else "unsupported_version"
    if "finite" in text:
        return "non_finite"
    if "truncated" in text:
        return "truncated"
    if isinstance(err, rm.UnknownMessageError):
        return "unknown_type"
    if isinstance(err, rm.ValidationError):
        return "validation"
    return "parse"


def decode_envelope(data: bytes) -> object:
    """Decode and validate one robot_msg protocol-2 envelope with the library's codecs.

    Args:
        data: one envelope, JSON (``{...}``) or binary (``R2``).

    Returns:
        The robot_msg message (any registered type).

    Raises:
        Rejected: ``protocol_1``, ``unsupported_version``, ``parse``, ``truncated``,
            ``non_finite``, ``validation`` or ``unknown_type``, with the library's message.
    """
    if data[:2] == PROTOCOL_1_MAGIC:
        raise Rejected("protocol_1", "binary magic 'RM' is robot_msg protocol 1; protocol 2 ('R2') is required")
    text = is_json(data)
    try:
        return rm.decode_json(data) if text else rm.decode(data)
    except (rm.RobotMsgError, RecursionError, ValueError, TypeError, OverflowError) as err:
        raise Rejected(_error_reason(err), f"{'JSON' if text else 'binary'} envelope: {err}") from err


def expect_type(message: object, accepted: type) -> None:
    """Raise Rejected(``unexpected_type``) unless ``message`` is an ``accepted`` instance."""
    if not isinstance(message, accepted):
        got = getattr(type(message), "MSG_TYPE", type(message).__name__)
        raise Rejected("unexpected_type", f"{got} on a socket that takes {getattr(accepted, 'MSG_TYPE', accepted.__name__)}")


# --------------------------------------------------------------------------- commands


def _joint_vector(where: str, values: Sequence[float], dof: int) -> tuple[float, ...]:
    if dof == 0:
        raise Rejected("dimension", f"{where}: this robot has no servo joints")
    if len(values) != dof:
        raise Rejected("dimension", f"{where} has {len(values)} values, the robot has {dof} joints")
    return tuple(values)


def _command(where: str, factory: Callable[..., T], *args: Any) -> T:
    """Build an agent command; its own checks (finite, ranges) become ``non_finite`` / ``invalid``
    (the error's ``reason``)."""
    try:
        return factory(*args)
    except CommandError as err:
        raise Rejected(err.reason, f"{where}: {err}") from err


def trajectory_points(q_traj: Sequence[Sequence[float]], duration_s: float,
                      dof: int) -> tuple[TrajectoryPoint, ...]:
    """``q_traj`` waypoints evenly spaced over ``duration_s``.

    Waypoint i (0-based, of n) is reached at ``(i + 1) * duration_s / n``, the last
    one at ``duration_s``; the control loop moves from the pose the joints have when
    the trajectory arrives (t = 0) to the first waypoint.

    Raises:
        Rejected: wrong row lengths (``dimension``), too many points (``too_long``),
            times that do not increase (``invalid``), non-finite values (``non_finite``).
    """
    n = len(q_traj)
    if n > MAX_TRAJECTORY_POINTS:
        raise Rejected("too_long", f"trajectory_action.q_traj has {n} waypoints, at most "
                                   f"{MAX_TRAJECTORY_POINTS} allowed")
    rows = [_joint_vector(f"trajectory_action.q_traj[{i}]", row, dof) for i, row in enumerate(q_traj)]
    return tuple(_command(f"trajectory_action.q_traj[{i}]", TrajectoryPoint, (i + 1) * duration_s / n, row)
                 for i, row in enumerate(rows))


def action_commands(action: rm.RobotAction, dof: int) -> Translation:
    """Translate a RobotAction (docs/robot_msg.md, "RobotAction").

    ``q_rt`` -> JointPosition, ``u_rt`` = [vx m/s, omega rad/s] -> BaseVelocity,
    ``q_traj`` over ``traj_duration`` -> JointTrajectory (see :func:`trajectory_points`);
    ``ee_pose_rt`` / ``ee_pose_traj`` (non-empty) are declined. Joint commands come
    before the base command.

    Args:
        action: a decoded RobotAction.
        dof: number of servo joints; every joint vector must have exactly this length.

    Raises:
        Rejected: ``dimension``, ``conflict`` (``q_rt`` and ``q_traj`` together), ``too_long``,
            ``non_finite``, ``invalid`` or ``empty``; nothing of the message applies then.
    """
    rt, traj = action.real_time_action, action.trajectory_action
    joints: Command | None = None
    joints_field = "real_time_action.q_rt"
    base: Command | None = None
    declined: list[Declined] = []
    if rt is not None:
        if rt.ee_pose_rt:
            declined.append(Declined("ee_pose_rt", "no arm kinematics on a tank: end-effector poses are not executed"))
        if rt.q_rt is not None:
            joints = _command("real_time_action.q_rt", JointPosition,
                              _joint_vector("real_time_action.q_rt", rt.q_rt, dof))
        if rt.u_rt is not None:
            if len(rt.u_rt) != 2:
                raise Rejected("dimension", f"real_time_action.u_rt has {len(rt.u_rt)} values; "
                                            "expected 2: [vx m/s, omega rad/s]")
            base = _command("real_time_action.u_rt", BaseVelocity, rt.u_rt[0], rt.u_rt[1])
    if traj is not None:
        if traj.ee_pose_traj and any(traj.ee_pose_traj):
            declined.append(Declined("ee_pose_traj", "no arm kinematics on a tank: end-effector trajectories "
                                                     "are not executed"))
        if traj.q_traj:
            if joints is not None:
                raise Rejected("conflict", "real_time_action.q_rt and trajectory_action.q_traj both target the joints")
            points = trajectory_points(traj.q_traj, traj.traj_duration, dof)
            joints = _command("trajectory_action", JointTrajectory, points)
            joints_field = "trajectory_action.q_traj"
    pairs = [(c, f) for c, f in ((joints, joints_field), (base, "real_time_action.u_rt")) if c is not None]
    if not pairs and not declined:
        raise Rejected("empty", "RobotAction carries no q_rt, u_rt, q_traj or end-effector target")
    return Translation(commands=tuple(c for c, _ in pairs), declined=tuple(declined),
                       fields=tuple(f for _, f in pairs))


def controller_commands(command: rm.ControllerCommand, dof: int, modes: Mapping[int, str]) -> Translation:
    """Translate a ControllerCommand (docs/robot_msg.md, "ControllerCommand").

    Order: ``joint_pos`` (JointPosition; skipped when ``ctrl_mode`` stops), then the
    ``ctrl_mode`` command from ``modes`` (stop -> Stop, hold -> JointTrajectoryStop,
    home -> Reset), then ``calibrate_sensor: true`` (CalibrateImu). ``ctrl_update``
    present (true or false) sets ``publish_state``.

    Args:
        command: a decoded ControllerCommand.
        dof: number of servo joints.
        modes: ``ctrl_mode`` value -> ``stop`` | ``hold`` | ``home``.

    Raises:
        Rejected: ``unsupported_mode``, ``dimension``, ``non_finite``, ``invalid`` or ``empty``.
    """
    mode_cmd: Command | None = None
    if command.ctrl_mode is not None:
        action = modes.get(command.ctrl_mode)
        if action is None:
            known = ", ".join(f"{k}={v}" for k, v in sorted(modes.items()))
            raise Rejected("unsupported_mode", f"ctrl_mode {command.ctrl_mode} is not configured ({known})")
        mode_cmd = MODE_COMMANDS[action]
    commands: list[Command] = []
    fields: list[str] = []
    declined: list[Declined] = []
    if command.joint_pos is not None:
        target = _command("joint_pos", JointPosition, _joint_vector("joint_pos", command.joint_pos, dof))
        if isinstance(mode_cmd, Stop):
            declined.append(Declined("joint_pos", f"ctrl_mode {command.ctrl_mode} stops and holds; joint_pos ignored"))
        else:
            commands.append(target)
            fields.append("joint_pos")
    if mode_cmd is not None:
        commands.append(mode_cmd)
        fields.append("ctrl_mode")
    if command.calibrate_sensor:
        commands.append(CalibrateImu())
        fields.append("calibrate_sensor")
    publish = command.ctrl_update is not None
    if not commands and not declined and not publish:
        if command.calibrate_sensor is False:
            raise Rejected("empty", "calibrate_sensor is false and nothing else is set")
        raise Rejected("empty", "ControllerCommand sets no ctrl_mode, joint_pos, calibrate_sensor or ctrl_update")
    return Translation(commands=tuple(commands), declined=tuple(declined), publish_state=publish,
                       fields=tuple(fields))
