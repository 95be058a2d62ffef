"""The Sim2Bot ``telemetry`` packet's JSON text, written section by section, unchanged sections reused.

:meth:`PacketText.packet` gives exactly the text of ``json.dumps(TelemetryBuilder.build(...))`` (the
same bytes on the wire; tests/adapters/test_telemetry_text.py compares them) for less CPU on the event
loop (issue 22, "A Pi-core budget"; docs/sim2bot.md, "Telemetry"):

- the sections a tick rarely changes are written once and kept with the object they were written
  from (the control loop hands on the same object while a value stays: agent/control/tick.py,
  ``observe``): the joints (:class:`agent.model.JointState`), the IMU and battery entries
  (:class:`agent.model.ImuSample`, :class:`agent.model.PowerSample`: a new reading is a new object),
  the ``control`` entry (its fields, the safety state by identity, and the room's warning). Kept by
  identity, never by equality: ``-0.0 == 0.0``, yet JSON writes them apart;
- the numbers a moving tank changes at every tick (the ``tcp*`` fields, ``gripper``, the
  ``odometry`` and ``tracks`` entries) fill one ``%r`` template in one C-level pass (:func:`fill`:
  ``%r`` of a float is ``float.__repr__``, what :mod:`json` writes for a float), and number arrays go
  straight to text (:func:`nums_text`) without a pass of the JSON encoder over a list;
- what is left (the times, a changed ``control`` entry) goes through the JSON encoder as before.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from agent.model import ImuSample, JointState, PowerSample, RobotDescription, Snapshot

__all__ = ["PacketText", "encode", "fill", "num_text", "nums_text"]

#: ``json.dumps`` with its defaults (the same text) without the circular-reference bookkeeping.
encode = json.JSONEncoder(check_circular=False).encode
_repr = float.__repr__


def num_text(value: float | None) -> str:
    """The JSON text of ``sim2bot_telemetry._num(value)``: a finite number, else ``null``."""
    if value is None:
        return "null"
    value = float(value)
    return _repr(value) if value - value == 0.0 else "null"


def nums_text(values: Sequence[float | None]) -> str:
    """The JSON text of ``sim2bot_telemetry._nums(values)``: ``[...]`` of :func:`num_text` of each."""
    try:
        out = [float(v) for v in values]     # type: ignore[arg-type]
    except TypeError:                   # a None among them
        return "[" + ", ".join([num_text(v) for v in values]) + "]"
    if math.isfinite(sum(out)):         # all finite (an overflow of the sum: the per-value way)
        return "[" + ", ".join(map(_repr, out)) + "]"
    return "[" + ", ".join([_repr(v) if v - v == 0.0 else "null" for v in out]) + "]"


def _raw(value: Any) -> str:
    """A value written as it is (``t``, ``captureTs``): the JSON encoder's text."""
    return _repr(value) if type(value) is float and value - value == 0.0 else encode(value)


def _joints(j: JointState) -> tuple[str, str]:
    """(the packet's ``q`` .. ``qddd`` fields, a sample's ``q`` and ``qd`` fields)."""
    q, qd = nums_text(j.q), nums_text(j.qd)
    head = (', "q": ' + q + ', "target": ' + nums_text(j.target) + ', "qd": ' + qd + ', "qdd": '
            + nums_text(j.qdd) + ', "qddd": ' + nums_text(j.qddd) + ', "captureTs": ')
    return head, ', "q": ' + q + ', "qd": ' + qd + ', "vx_mps": '


class _Null:
    """Written as ``null`` by ``%r``: a None or non-finite number among a template's values."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "null"


_NULL = _Null()


def _num_or_null(value: float | None) -> float | _Null:
    if value is None:
        return _NULL
    value = float(value)
    return value if value - value == 0.0 else _NULL


def fill(template: str, values: Sequence[float | None]) -> str:
    """``template`` (one ``%r`` per value) filled with :func:`num_text` of each value in one C-level pass:
    ``%r`` of a float is ``float.__repr__``, the JSON encoder's text."""
    try:
        numbers = tuple(map(float, values))  # type: ignore[arg-type]
        if math.isfinite(sum(numbers)):
            return template % numbers
    except TypeError:                   # a None among them
        pass
    return template % tuple(map(_num_or_null, values))


def _vector(name: str, n: int) -> str:
    return ', "' + name + '": [' + ", ".join(("%r",) * n) + "]"


#: The fields a moving tank changes at every tick, from ``tcp`` to the ``tracks`` entry's counts (written apart).
_MOTION = ("".join(_vector(name, n) for name, n in (
    ("tcp", 3), ("tcpOrientation", 4), ("tcpLinearVelocity", 3), ("tcpAngularVelocity", 3),
    ("tcpLinearAcceleration", 3), ("tcpAngularAcceleration", 3), ("tcpLinearJerk", 3), ("tcpAngularJerk", 3)))
    + ', "gripper": %r, "sensors": [{"name": "odometry", "frame": "odom", "x_m": %r, "y_m": %r, "yaw_rad": %r, '
    '"vx_mps": %r, "omega_radps": %r, "distance_m": %r}, {"name": "tracks", "cmd_left_mps": %r, '
    '"cmd_right_mps": %r, "duty_left": %r, "duty_right": %r, "left_mps": %r, "right_mps": %r, "left_counts": ')
_SAMPLE = '%r, "omega_radps": %r}'


def _imu(imu: ImuSample) -> str:
    orientation = imu.orientation_xyzw
    return (', {"name": "imu", "frame": "base_link", "t_mono_s": ' + num_text(imu.t_mono_s) + ', "accel_mps2": '
            + nums_text(imu.accel_mps2) + ', "gyro_radps": ' + nums_text(imu.gyro_radps) + ', "orientation_xyzw": '
            + ("null" if orientation is None else nums_text(orientation)) + ', "temperature_c": '
            + num_text(imu.temperature_c) + '}')


def _battery(p: PowerSample) -> str:
    return (', {"name": "battery", "t_mono_s": ' + num_text(p.t_mono_s) + ', "voltage_v": ' + num_text(p.voltage_v)
            + ', "current_a": ' + num_text(p.current_a) + ', "power_w": ' + num_text(p.power_w) + ', "percent": '
            + num_text(p.percent) + '}')


class _Kept:
    """One section's text and the object it was written from."""

    __slots__ = ("key", "text")

    def __init__(self) -> None:
        self.key: Any = _Kept
        self.text: Any = None


class PacketText:
    """Writes telemetry packets for one robot and room (see the module docstring).

    Args:
        desc: the robot description (name, dof). robot_id: the announced ``id``. room: the packet's room.
        control: the ``control`` sensor entry of a snapshot (agent.adapters.sim2bot_telemetry.control_entry).
    """

    def __init__(self, desc: RobotDescription, robot_id: str, room: str,
                 control: Callable[[Snapshot], dict[str, Any]]) -> None:
        self._control_entry = control
        self._head = ('{"type": "telemetry", "room": ' + encode(room) + ', "robot": 0, "id": ' + encode(robot_id)
                      + ', "name": ' + encode(desc.name) + ', "dof": ' + encode(desc.dof) + ', "t": ')
        self._joints, self._imu, self._power, self._control = (_Kept() for _ in range(4))
        self._safety: object = None

    @staticmethod
    def _get(kept: _Kept, key: Any, write: Any) -> Any:
        if key is not kept.key:
            kept.key, kept.text = key, write(key)
        return kept.text

    def packet(self, newest: Snapshot, batch: Sequence[Snapshot], warning: str, motion: Any) -> str:
        """The text of ``TelemetryBuilder.build(newest, batch, warning)``; ``motion``: the builder's
        :class:`agent.adapters.sim2bot_telemetry.BaseMotion`, already fed ``batch`` and ``newest``."""
        get = self._get
        joints = get(self._joints, newest.joints, _joints)
        o, tr, m = newest.odom, newest.tracks, motion
        half = 0.5 * o.yaw_rad
        parts = [self._head, _raw(newest.t_mono_s), joints[0], _raw(newest.t_unix_s),
                 fill(_MOTION, (o.x_m, o.y_m, 0.0, 0.0, 0.0, math.sin(half), math.cos(half), *m.lin_v, *m.ang_v,
                                *m.lin_a, *m.ang_a, *m.lin_j, *m.ang_j, newest.gripper, o.x_m, o.y_m, o.yaw_rad,
                                o.vx_mps, o.omega_radps, o.distance_m, tr.cmd_left_mps, tr.cmd_right_mps,
                                tr.duty_left, tr.duty_right, tr.left_mps, tr.right_mps)),
                 '%d, "right_counts": %d}' % (int(tr.left_counts), int(tr.right_counts))]
        if newest.imu is not None:
            parts.append(get(self._imu, newest.imu, _imu))
        if newest.power is not None:
            parts.append(get(self._power, newest.power, _battery))
        parts += (', ', self._control_text(newest, warning), '], "samples": [')
        for k, s in enumerate(batch):
            q = joints if s.joints is newest.joints else _joints(s.joints)
            parts += (', {"t": ' if k else '{"t": ', _raw(s.t_mono_s), q[1],
                      fill(_SAMPLE, (s.odom.vx_mps, s.odom.omega_radps)))
        parts.append('], "roomDevices": []}')
        return "".join(parts)

    def _control_text(self, snap: Snapshot, warning: str) -> str:
        # no float among these but the safety state's, kept by identity (the latches hand on one object)
        key = (snap.active_source, snap.watchdog, snap.stopped, snap.overridden, snap.faults, snap.devices, warning)
        kept = self._control
        if snap.safety is not self._safety or key != kept.key:
            self._safety = snap.safety
            entry = self._control_entry(snap)
            entry["bridge_warning"] = warning
            kept.key, kept.text = key, encode(entry)
        return kept.text
