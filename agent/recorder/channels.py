"""The recorder's channels: topic, schema name, JSON schema, and the message builders.

Every message is JSON (MCAP message encoding ``json``) with a ``timestamp`` ``{sec, nsec}`` (Unix
time), described by a JSON schema (schema encoding ``jsonschema``). Camera frames and log records
use Foxglove's well-known ``foxglove.CompressedImage`` and ``foxglove.Log`` (agent/recorder/schemas/,
copied from github.com/foxglove/schemas), so Foxglove shows them in its image and log panels; the
other channels have schemas of their own (:data:`SCHEMAS`). Units are SI and in the field names.

=================== ============================ ==============================================
topic               schema                       what, when
=================== ============================ ==============================================
/commands           robot_agent.Command          every command received, with its verdict
/drive              robot_agent.Drive            per tick: commanded speed and duty, measured
                                                 speed, encoder counts, who drives, watchdog
/odometry           robot_agent.Odometry         per tick: pose and twist
/imu                robot_agent.Imu              each new IMU sample
/battery            robot_agent.Battery          each new power-monitor sample
/servo              robot_agent.Servo            joint angles and targets when they change
/arbitration        robot_agent.Arbitration      who drives, when it changes
/safety             robot_agent.Safety           stops, e-stops, failsafes, speed cap, on change
/links              robot_agent.Link             link state changes (connect, drop and why)
/devices            robot_agent.Device           device health transitions
/incidents          robot_agent.Incident         each incident (agent.recorder.incidents)
/log                foxglove.Log                 log records at WARNING and above
/camera/<id>        foxglove.CompressedImage     JPEG frames at ``recorder.frame_fps``
=================== ============================ ==============================================
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import math
from pathlib import Path
from typing import Any

from agent.model import Snapshot

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

_TIME = {"type": "object", "required": ["sec", "nsec"], "additionalProperties": False,
         "properties": {"sec": {"type": "integer", "minimum": 0},
                        "nsec": {"type": "integer", "minimum": 0, "maximum": 999_999_999}}}
_NUM = {"type": "number"}
_NUM_OR_NULL = {"type": ["number", "null"]}
_STR = {"type": "string"}
_NUMS = {"type": "array", "items": _NUM}


def _obj(title: str, description: str, props: dict[str, Any]) -> dict[str, Any]:
    return {"title": title, "description": description, "type": "object",
            "required": ["timestamp", *props], "additionalProperties": False,
            "properties": {"timestamp": _TIME, **props}}


#: schema name -> JSON schema of the recorder's own channels
SCHEMAS: dict[str, dict[str, Any]] = {
    "robot_agent.Command": _obj("robot_agent.Command", "A command as received from a source, with its verdict", {
        "source": _STR, "command": _STR, "args": {"type": "object"},
        "verdict": {"enum": ["applied", "overridden", "refused", "rejected"]}, "reason": _STR}),
    "robot_agent.Drive": _obj("robot_agent.Drive", "Tracks after one control tick (m/s, duty -1..1, counts)", {
        "seq": {"type": "integer"}, "active_source": _STR, "watchdog": _STR, "stopped": {"type": "boolean"},
        "cmd_left_mps": _NUM, "cmd_right_mps": _NUM, "duty_left": _NUM, "duty_right": _NUM,
        "left_mps": _NUM, "right_mps": _NUM, "left_counts": {"type": "integer"}, "right_counts": {"type": "integer"}}),
    "robot_agent.Odometry": _obj("robot_agent.Odometry", "Dead-reckoned pose (m, rad) and twist (m/s, rad/s)", {
        "x_m": _NUM, "y_m": _NUM, "yaw_rad": _NUM, "vx_mps": _NUM, "omega_radps": _NUM, "distance_m": _NUM}),
    "robot_agent.Imu": _obj("robot_agent.Imu", "One IMU sample, body frame (x forward, z up)", {
        "accel_mps2": _NUMS, "gyro_radps": _NUMS,
        "orientation_xyzw": {"type": ["array", "null"], "items": _NUM}, "temperature_c": _NUM_OR_NULL}),
    "robot_agent.Battery": _obj("robot_agent.Battery", "Power monitor: V, A (+ discharging), W, %", {
        "voltage_v": _NUM_OR_NULL, "current_a": _NUM, "power_w": _NUM, "percent": _NUM_OR_NULL}),
    "robot_agent.Servo": _obj("robot_agent.Servo", "Servo joints: angle and target, rad; gripper 0..1", {
        "names": {"type": "array", "items": _STR}, "q": _NUMS, "target": _NUMS, "gripper": _NUM_OR_NULL}),
    "robot_agent.Arbitration": _obj("robot_agent.Arbitration", "Who drives the base (\"\" nobody)", {
        "active_source": _STR, "previous": _STR}),
    "robot_agent.Safety": _obj("robot_agent.Safety", "Stop latch, watchdog, halts (e-stop, failsafes), speed cap", {
        "stopped": {"type": "boolean"}, "watchdog": _STR, "halts": {"type": "array", "items": {"type": "object"}},
        "halt": _STR, "speed_cap_mps": _NUM_OR_NULL, "speed_cap_reason": _STR}),
    "robot_agent.Link": _obj("robot_agent.Link", "A protocol link's state change", {
        "link": _STR, "state": _STR, "connected": {"type": "boolean"}, "ready": {"type": ["boolean", "null"]},
        "event": {"enum": ["connect", "ready", "drop", "up", "connecting", "down"]},
        "failures": {"type": "integer", "minimum": 0}, "last_error": _STR}),
    "robot_agent.Device": _obj("robot_agent.Device", "A device's health transition", {
        "device": _STR, "state": _STR, "previous": _STR, "last_error": _STR, "errors": {"type": "integer"}}),
    "robot_agent.Incident": _obj("robot_agent.Incident", "An incident: e-stop, failsafe, stop, watchdog, lost", {
        "id": _STR, "kind": _STR, "reason": _STR, "source": _STR}),
}


@functools.cache
def foxglove_schema(name: str) -> dict[str, Any]:
    """A shipped Foxglove schema by its file stem (``CompressedImage``, ``Log``)."""
    return json.loads((SCHEMA_DIR / f"{name}.json").read_text())


#: topic -> schema name, for the fixed topics (camera topics are ``/camera/<id>``)
TOPICS: dict[str, str] = {
    "/commands": "robot_agent.Command", "/drive": "robot_agent.Drive", "/odometry": "robot_agent.Odometry",
    "/imu": "robot_agent.Imu", "/battery": "robot_agent.Battery", "/servo": "robot_agent.Servo",
    "/arbitration": "robot_agent.Arbitration", "/safety": "robot_agent.Safety", "/links": "robot_agent.Link",
    "/devices": "robot_agent.Device", "/incidents": "robot_agent.Incident", "/log": "foxglove.Log",
}
CAMERA_SCHEMA = "foxglove.CompressedImage"


def schema_for(topic: str) -> tuple[str, dict[str, Any]]:
    """(schema name, JSON schema) of ``topic``.

    Raises:
        KeyError: an unknown topic.
    """
    name = CAMERA_SCHEMA if topic.startswith("/camera/") else TOPICS[topic]
    if name.startswith("foxglove."):
        return name, foxglove_schema(name.split(".", 1)[1])
    return name, SCHEMAS[name]


def stamp(t_unix_s: float) -> dict[str, int]:
    """``{sec, nsec}`` of a Unix time, s."""
    ns = max(0, int(round(t_unix_s * 1e9)))
    return {"sec": ns // 1_000_000_000, "nsec": ns % 1_000_000_000}


#: ``json.dumps(message, separators=(",", ":"), allow_nan=False)``'s encoder, built once (dumps builds one per call)
_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def encode(message: dict[str, Any]) -> bytes:
    """JSON bytes of one message (compact; NaN and infinities are written as null)."""
    try:
        return _JSON(message).encode()
    except ValueError:
        return _JSON(_finite(message)).encode()


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def drive(s: Snapshot) -> dict[str, Any]:
    """/drive of one snapshot."""
    t = s.tracks
    return {"timestamp": stamp(s.t_unix_s), "seq": s.seq, "active_source": s.active_source, "watchdog": s.watchdog,
            "stopped": s.stopped, "cmd_left_mps": t.cmd_left_mps, "cmd_right_mps": t.cmd_right_mps,
            "duty_left": t.duty_left, "duty_right": t.duty_right, "left_mps": t.left_mps, "right_mps": t.right_mps,
            "left_counts": t.left_counts, "right_counts": t.right_counts}


def odometry(s: Snapshot) -> dict[str, Any]:
    """/odometry of one snapshot."""
    o = s.odom
    return {"timestamp": stamp(s.t_unix_s), "x_m": o.x_m, "y_m": o.y_m, "yaw_rad": o.yaw_rad,
            "vx_mps": o.vx_mps, "omega_radps": o.omega_radps, "distance_m": o.distance_m}


def imu(s: Snapshot) -> dict[str, Any]:
    """/imu of the snapshot's IMU sample (caller checks it is not None)."""
    i = s.imu
    return {"timestamp": stamp(s.t_unix_s), "accel_mps2": list(i.accel_mps2), "gyro_radps": list(i.gyro_radps),
            "orientation_xyzw": list(i.orientation_xyzw) if i.orientation_xyzw is not None else None,
            "temperature_c": i.temperature_c}


def battery(s: Snapshot) -> dict[str, Any]:
    """/battery of the snapshot's power sample (caller checks it is not None)."""
    p = s.power
    return {"timestamp": stamp(s.t_unix_s), "voltage_v": p.voltage_v, "current_a": p.current_a,
            "power_w": p.power_w, "percent": p.percent}


def servo(s: Snapshot) -> dict[str, Any]:
    """/servo of one snapshot."""
    j = s.joints
    return {"timestamp": stamp(s.t_unix_s), "names": list(j.names), "q": list(j.q), "target": list(j.target),
            "gripper": s.gripper}


def safety(s: Snapshot) -> dict[str, Any]:
    """/safety of one snapshot."""
    d = s.safety.as_dict()
    return {"timestamp": stamp(s.t_unix_s), "stopped": s.stopped, "watchdog": s.watchdog, "halts": d["halts"],
            "halt": d["halt"], "speed_cap_mps": d["speed_cap_mps"], "speed_cap_reason": d["speed_cap_reason"]}


#: logging level -> foxglove.LogLevel
def log_level(levelno: int) -> int:
    """foxglove.LogLevel (1 DEBUG .. 5 FATAL) of a logging level."""
    return 5 if levelno >= logging.CRITICAL else 4 if levelno >= logging.ERROR else \
        3 if levelno >= logging.WARNING else 2 if levelno >= logging.INFO else 1


def log_record(record: logging.LogRecord, message: str) -> dict[str, Any]:
    """/log (foxglove.Log) of one record with its formatted ``message``."""
    return {"timestamp": stamp(record.created), "level": log_level(record.levelno), "message": message,
            "name": record.name, "file": record.pathname or "", "line": max(0, int(record.lineno or 0))}


def image(t_unix_s: float, camera_id: str, jpeg: bytes | memoryview) -> dict[str, Any]:
    """/camera/<id> (foxglove.CompressedImage) of one JPEG."""
    return {"timestamp": stamp(t_unix_s), "frame_id": camera_id,
            "data": base64.b64encode(jpeg).decode("ascii"), "format": "jpeg"}


def command_args(command: object) -> dict[str, Any]:
    """A command's fields as JSON-ready values (dataclass fields; tuples as lists)."""
    out: dict[str, Any] = {}
    for name in getattr(command, "__slots__", ()) or getattr(command, "__dataclass_fields__", {}):
        value = getattr(command, name, None)
        out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, float) and value != value:
        return None
    return value
