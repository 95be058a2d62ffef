"""Sim2Bot controller messages -> agent.model commands (bridge protocol v1).

Pure functions, no I/O: :func:`decode` turns one WebSocket text message into a
JSON object, :func:`parse` turns that object into what the adapter does with
it. Everything from the network is untrusted: types, shapes and sizes are
checked here, finiteness once per number by :func:`agent.commands.finite_number`
(the agent.model constructors for the values they hold, e.g. base_velocity's
``vx``/``omega``; here for wire-only ones), and a bad message raises
:class:`agent.errors.CommandError` naming the message type and the field.
The control loop checks what depends on the robot's state (joint limits).

Source: Sim2Bot bridge protocol v1 (``protocol.md``, sim2bot-python, sim2bot 0.1.0; docs/sim2bot.md) ("Every message, in full") and the
fixtures in ``fixtures/sim2bot/v1/``; the real peer is ``sim2bot.Robot``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from agent.errors import CommandDeclined, CommandRejected
from agent.support.jsonkeys import RepeatedKey, unique_keys
from agent.commands import (
    MAX_JOINTS, MAX_TRAJECTORY_POINTS, BaseVelocity, Command, Gripper, JointPosition, JointTrajectory,
    JointTrajectoryStop, JointVelocity, Reset, Stop, TrajectoryPoint, finite_number as _number,
)

#: Command types the bridge relays to a simulator (``bridge_server.COMMAND_TYPES``).
COMMAND_TYPES = frozenset({
    "joint_position", "joint_velocity", "joint_trajectory", "joint_trajectory_stop",
    "tcp_pose", "gripper", "base_velocity", "reset", "stop", "room_opening",
    "camera_subscribe", "camera_unsubscribe", "marker", "marker_delete", "marker_clear",
})

#: Types accepted but without effect on a tracked robot, and why (logged once each).
IGNORED_TYPES: dict[str, str] = {
    "tcp_pose": "the tank announces no arm kinematics (no IK solver); use joint_position",
    "marker": "debug markers are visual-only simulator scene helpers; a real robot has no scene",
    "marker_delete": "debug markers are visual-only simulator scene helpers; a real robot has no scene",
    "marker_clear": "debug markers are visual-only simulator scene helpers; a real robot has no scene",
    "room_opening": "room doors and windows are simulated scene devices; the robot announces none",
}

#: Longest string field accepted (camera ids, rooms).
MAX_STRING = 128
#: Camera stream limits, as ``sim2bot.Robot.camera`` documents them.
FPS_RANGE = (1.0, 30.0)
WIDTH_RANGE = (16, 1920)
HEIGHT_RANGE = (16, 1080)
#: Wire codec numbers of the frame header.
CODEC_JPEG, CODEC_H264, CODEC_RAW = 0, 1, 2
_CODEC_NAMES = {"jpeg": CODEC_JPEG, "h264": CODEC_H264, "raw": CODEC_RAW}
#: Session messages that the bridge consumes or sends itself; never a command to a simulator.
SESSION_TYPES = frozenset({"hello", "describe", "scene", "telemetry", "bridge_status"})
_ROOM_RE = re.compile(r"^[A-Za-z0-9._-]{1,80}$")
DEFAULT_ROOM = "default"


@dataclass(frozen=True, slots=True)
class ParseContext:
    """What the parser needs to know about the robot and the session.

    Attributes:
        dof: servo joints (gripper excluded); joint arrays may not be longer.
        has_gripper: a gripper servo is configured.
        cameras: global camera ids (``model:<i>``) that may be subscribed.
        room: the room this agent joined (``default`` when none was configured).
        robot_index: the tank's scene index (always 0: one robot per agent).
    """

    dof: int
    has_gripper: bool
    cameras: tuple[str, ...]
    room: str = DEFAULT_ROOM
    robot_index: int = 0


@dataclass(frozen=True, slots=True)
class Submit:
    """Submit ``command`` to the robot port.

    Attributes:
        kind: the message type. ignored: fields present and nonzero that a tank cannot
            act on (``vy``, ``vz``), for a one-time warning.
    """

    kind: str
    command: Command
    ignored: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CameraRequest:
    """``camera_subscribe``: start or renew a feed. None = use the camera's config default.

    Attributes:
        camera: global camera id (``model:<i>``). fps: frames/s, clamped to 1..30.
        width, height: pixels, clamped to 16..1920 x 16..1080. quality: JPEG quality 1..100.
        codec: 0 JPEG, 1 H.264 (answered with JPEG), 2 raw RGBA.
    """

    camera: str
    fps: float | None = None
    width: int | None = None
    height: int | None = None
    quality: int | None = None
    codec: int | None = None


@dataclass(frozen=True, slots=True)
class CameraRelease:
    """``camera_unsubscribe``: stop every feed of ``camera``."""

    camera: str


Parsed = Submit | CameraRequest | CameraRelease


def normalize_room(room: str | None) -> str:
    """The bridge's name for a configured room: ``default`` when None."""
    return room if room else DEFAULT_ROOM


def decode(raw: object, max_bytes: int) -> dict[str, Any]:
    """One WebSocket message -> a JSON object (the console's decode too).

    Args:
        raw: the received message (``str`` for text frames, ``bytes`` for binary).
        max_bytes: longest accepted message, bytes (UTF-8).

    Raises:
        CommandError: binary frame, too long, not JSON, too deeply nested, not an object, or a key
            given twice in one object (agent.support.jsonkeys.unique_keys: never resolved to the
            last value, which is what ``json.loads`` would do).
    """
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raise CommandRejected(f"binary message of {len(raw)} bytes on the control socket; expected JSON text")
    if not isinstance(raw, str):
        raise CommandRejected(f"message must be text, got {type(raw).__name__}")
    if len(raw) > max_bytes or len(raw.encode("utf-8", "surrogatepass")) > max_bytes:
        size = len(raw.encode("utf-8", "surrogatepass"))       # (refused: encoded once more, in bytes)
        raise CommandRejected(f"message of {size} bytes exceeds max_message_bytes={max_bytes}", detail=f"{size} bytes")
    try:
        data = json.loads(raw, object_pairs_hook=unique_keys)
    except RecursionError as err:
        raise CommandRejected("message nests too deeply") from err
    except RepeatedKey as err:
        raise CommandRejected(str(err), detail=f"key '{err.key}'") from err   # escaped where logged
    except ValueError as err:
        raise CommandRejected(f"message is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise CommandRejected(f"message must be a JSON object, got {type(data).__name__}")
    return data


def _integer(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandRejected(f"{where} must be an integer, got {type(value).__name__}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise CommandRejected(f"{where} must be an integer, got {value!r}")
    if abs(value) > 1 << 31:
        raise CommandRejected(f"{where} is out of range: {value!r}")
    return int(value)


def _string(where: str, value: object) -> str:
    if not isinstance(value, str):
        raise CommandRejected(f"{where} must be a string, got {type(value).__name__}")
    if not value or len(value) > MAX_STRING:
        raise CommandRejected(f"{where} must be 1..{MAX_STRING} characters, got {len(value)}")
    return value


def _joint_list(where: str, value: object, dof: int) -> list:
    """A joint array's shape: a list of at most dof (and 32) entries, as it came; the model's
    constructor checks the numbers (``q[1] must be finite``), once."""
    if not isinstance(value, list):
        raise CommandRejected(f"{where} must be a list of numbers, got {type(value).__name__}")
    limit = min(dof, MAX_JOINTS)
    if len(value) > limit:
        raise CommandRejected(f"{where} has {len(value)} values; the robot has dof {dof} (at most {limit})")
    return value


def _joints(where: str, value: object, dof: int) -> tuple[float, ...]:
    """A trajectory point's joint array, each number checked here to name it by its path
    (``points[2].q[1] must be finite``)."""
    return tuple(_number(f"{where}[{i}]", v) for i, v in enumerate(_joint_list(where, value, dof)))


def _optional(message: dict[str, Any], key: str, default: float = 0.0) -> float:
    value = message.get(key)
    return default if value is None else _number(key, value)


#: Types the browser simulator applies to the scene's primary base whatever ``robot`` index they carry
#: (``sim2bot.Robot.base_velocity`` documents it); the tank is that base, so any index >= 0 addresses it.
PRIMARY_BASE_TYPES = frozenset({"base_velocity", "stop"})


def _check_address(message: dict[str, Any], ctx: ParseContext) -> None:
    if message.get("robot") is not None:
        index = _integer("robot", message["robot"])
        primary = message.get("type") in PRIMARY_BASE_TYPES and index >= 0
        if index != ctx.robot_index and not primary:
            raise CommandRejected(f"unknown robot index {index}; this agent is robot {ctx.robot_index} "
                                  f"(any index >= 0 is accepted only for {', '.join(sorted(PRIMARY_BASE_TYPES))}, "
                                  "which drive the primary base)")
    room = message.get("room")
    if room is not None and room != "":  # the bridge treats "" as absent too
        if not isinstance(room, str) or not _ROOM_RE.match(room):
            raise CommandRejected(f"bad room {str(room)[:MAX_STRING]!r}: 1..80 letters, digits or ._-")
        if room != ctx.room:
            raise CommandRejected(f"room {room!r} is not this agent's room {ctx.room!r}")


def _base_velocity(message: dict[str, Any]) -> Submit:
    # vx and omega go to the model as they came: its constructor is their one finite check (agent.model);
    # vy and vz never become model values, so they are checked here, once
    vx, omega = message.get("vx"), message.get("omega")
    command = BaseVelocity(vx=0.0 if vx is None else vx, omega=0.0 if omega is None else omega)
    ignored = tuple(k for k in ("vy", "vz") if _optional(message, k) != 0.0)
    return Submit("base_velocity", command, ignored)


def _trajectory(message: dict[str, Any], dof: int) -> Submit:
    points = message.get("points")
    if not isinstance(points, list):
        raise CommandRejected(f"points must be a list of {{t, q}}, got {type(points).__name__}")
    if not points or len(points) > MAX_TRAJECTORY_POINTS:
        raise CommandRejected(f"points has {len(points)} entries; 1..{MAX_TRAJECTORY_POINTS} allowed")
    out = []
    for i, point in enumerate(points):
        if not isinstance(point, dict):
            raise CommandRejected(f"points[{i}] must be an object {{t, q}}, got {type(point).__name__}")
        out.append(TrajectoryPoint(t=_number(f"points[{i}].t", point.get("t")),
                                   q=_joints(f"points[{i}].q", point.get("q"), dof)))
    loop = message.get("loop", False)
    if loop is None:
        loop = False
    if not isinstance(loop, bool):
        raise CommandRejected(f"loop must be a boolean, got {type(loop).__name__}")
    return Submit("joint_trajectory", JointTrajectory(points=tuple(out), loop=loop))


def _quality(value: object) -> int:
    """JPEG quality 1..100 from the two documented forms: a fraction 0 < q <= 1 (``sim2bot.Robot.camera``
    documents 0.1..1.0) or a whole percent 1..100 (the fixtures' ``80``); a whole number above 100 is
    clamped to 100 as width and height are clamped. A fraction above 1 (``1.5``) is neither form and is
    refused rather than guessed (it was read as 2 %)."""
    q = _number("quality", value)
    if q <= 0:
        raise CommandRejected(f"quality must be > 0, got {q}")
    if q <= 1.0:
        return max(1, round(q * 100.0))
    if q != int(q):
        raise CommandRejected(f"quality {q} is neither a fraction 0..1 (sim2bot.Robot) nor a whole percent "
                              "1..100 (the protocol fixtures)")
    return int(min(100.0, q))


def _codec(value: object) -> int:
    if isinstance(value, str):
        if value.lower() not in _CODEC_NAMES:
            raise CommandRejected(f"codec {value[:MAX_STRING]!r} is not one of jpeg, h264, raw")
        return _CODEC_NAMES[value.lower()]
    codec = _integer("codec", value)
    if codec not in (CODEC_JPEG, CODEC_H264, CODEC_RAW):
        raise CommandRejected(f"codec {codec} is not 0 (JPEG), 1 (H.264) or 2 (raw RGBA)")
    return codec


def _clamp_int(where: str, value: object, bounds: tuple[int, int]) -> int:
    return max(bounds[0], min(bounds[1], _integer(where, value)))


def _camera(message: dict[str, Any], ctx: ParseContext) -> str:
    camera = _string("camera", message.get("camera"))
    if camera not in ctx.cameras:
        known = ", ".join(ctx.cameras) or "none"
        raise CommandRejected(f"unknown camera {camera!r}; this robot has: {known}")
    return camera


def _camera_subscribe(message: dict[str, Any], ctx: ParseContext) -> CameraRequest:
    camera = _camera(message, ctx)
    get = message.get
    fps = None if get("fps") is None else max(FPS_RANGE[0], min(FPS_RANGE[1], _number("fps", get("fps"))))
    return CameraRequest(
        camera=camera,
        fps=fps,
        width=None if get("width") is None else _clamp_int("width", get("width"), WIDTH_RANGE),
        height=None if get("height") is None else _clamp_int("height", get("height"), HEIGHT_RANGE),
        quality=None if get("quality") is None else _quality(get("quality")),
        codec=None if get("codec") is None else _codec(get("codec")),
    )


def parse(message: dict[str, Any], ctx: ParseContext) -> Parsed:
    """Translate one controller message.

    Args:
        message: a decoded JSON object (see :func:`decode`).
        ctx: the robot's dof, gripper, cameras and the session's room.

    Returns:
        :class:`Submit` (a command for ``robot.submit``), :class:`CameraRequest` or
        :class:`CameraRelease`.

    Raises:
        CommandDeclined: a valid message that does nothing on a tank (scene, IK, a gripper
            command without a gripper); the message says why.
        CommandRejected: unknown type, wrong robot index or room, wrong field type or shape,
            non-finite number, array longer than dof or 32, unknown camera. The message
            text names the field (``points[2].q[1] must be finite, got nan``).
    """
    kind = message.get("type")
    if not isinstance(kind, str):
        raise CommandRejected(f"message type must be a string, got {type(kind).__name__}")
    if kind in SESSION_TYPES:
        raise CommandRejected(f"{kind} is a session message between bridge and peers, not a command")
    if kind not in COMMAND_TYPES:
        raise CommandRejected(f"unknown message type {kind[:MAX_STRING]!r}")
    _check_address(message, ctx)
    if kind in IGNORED_TYPES:
        raise CommandDeclined(IGNORED_TYPES[kind], "sim2bot")
    if kind == "base_velocity":
        return _base_velocity(message)
    if kind == "joint_position":
        return Submit(kind, JointPosition(q=tuple(_joint_list("q", message.get("q"), ctx.dof))))
    if kind == "joint_velocity":
        return Submit(kind, JointVelocity(qd=tuple(_joint_list("qd", message.get("qd"), ctx.dof))))
    if kind == "joint_trajectory":
        return _trajectory(message, ctx.dof)
    if kind == "joint_trajectory_stop":
        return Submit(kind, JointTrajectoryStop())
    if kind == "gripper":
        fraction = _number("fraction", message.get("fraction"))
        if not ctx.has_gripper:
            raise CommandDeclined("the robot announces hasGripper=false; no gripper servo is configured", "sim2bot")
        return Submit(kind, Gripper(fraction=fraction))
    if kind == "stop":
        return Submit(kind, Stop())
    if kind == "reset":
        return Submit(kind, Reset())
    if kind == "camera_subscribe":
        return _camera_subscribe(message, ctx)
    return CameraRelease(_camera(message, ctx))  # camera_unsubscribe
