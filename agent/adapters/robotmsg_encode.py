"""robot_msg outbound, fast path: one snapshot -> RobotState binary bytes, the constant parts encoded once.

:func:`agent.adapters.robotmsg_state.robot_state` builds the ``RobotState`` object and
``robot_msg.encode`` checks and encodes all of it, 50 times a second; :class:`StateEncoder` takes about a
tenth of that CPU (scripts/bench_robotstate.py prints both). Most of it is the same every time: the aux arrays' names, shapes, units and frames, the frame
id, the empty frame lists, the zero wrench. :class:`StateEncoder` writes the robot_msg binary format
(robot_msg's public wire format: header, metadata, payload; every field byte-aligned, little-endian)
directly from the snapshot: each layout's constant bytes (array names, shapes, units, frames, the frame
id, the empty lists, the zero wrench) are kept from the first time it was seen, and per state only the
numbers are read off the snapshot in message order (:func:`_numbers`, no aux tuples built) and packed with
the constant bytes by one ``struct`` call. The layout is found from the snapshot's shape (:func:`_shape`:
which values are present, the devices' and halts' names).

It never sends what the library would not: each new *layout* (which arrays, their lengths, units and
frames, joint count, whether a sample time is set) is encoded once by both ways and the bytes compared;
only a layout whose bytes were equal, whose numbers :func:`_numbers` read in the same order, and that the
library's full check accepted, is encoded the fast way afterwards. A mismatch (another robot_msg version laying a field out differently) logs one WARNING and
sends every later state through the library. Per state the fast path checks what can change within a
layout: every number finite (else the library path, which leaves a non-finite aux array out and says
so) and the sequence in range.
"""

from __future__ import annotations

import logging
import math
import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass

import robot_msg as rm

from agent.adapters.robotmsg_state import HEALTH_CODES, SETTER_CODES, AuxSpec, StateFrames, aux_specs, robot_state
from agent.model import RobotDescription, Snapshot

log = logging.getLogger(__name__)

#: The library's limits the fast path keeps to (larger goes the library's way and fails there).
MAX_AUX = 64
MAX_JOINTS = 256
MAX_SEQUENCE = 2**63 - 1
#: Layouts remembered as checked (names come from devices and halts: a handful in practice).
MAX_LAYOUTS = 64

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_CLOCK_UNIX, _CLOCK_MONOTONIC = 0, 1

ArrayKey = tuple[str, int, str, str | None]   # name, element count (-1: scalar), unit, frame id


def _str(text: str) -> bytes:
    data = text.encode("utf-8")
    return _U16.pack(len(data)) + data


def _array_parts(key: ArrayKey) -> tuple[bytes, bytes]:
    """NamedArray bytes before and after its f64 values: flags, name, shape, value count | unit, frame."""
    name, n, unit, frame = key
    count = 1 if n < 0 else n
    shape = _U8.pack(0) if n < 0 else _U8.pack(1) + _U32.pack(n)
    flags = 1 | (2 if frame is not None else 0)
    head = _U8.pack(flags) + _str(name) + shape + _U32.pack(count)
    tail = _str(unit) + (_str(frame) if frame is not None else b"")
    return head, tail


def _shape(snap: Snapshot) -> tuple:
    """What decides a state's layout (:func:`agent.adapters.robotmsg_state.aux_specs` names and shapes,
    joint count, sample time): which values are present, the devices' and halts' names."""
    joints, imu, power, safety = snap.joints, snap.imu, snap.power, snap.safety
    return (len(joints.target), len(joints.q), snap.t_mono_s > 0, snap.gripper is None,
            None if imu is None else (imu.orientation_xyzw is None, imu.temperature_c is None),
            None if power is None else (power.voltage_v is None, power.percent is None),
            tuple([d.name for d in snap.devices]), tuple([h.kind for h in safety.halts]),
            safety.speed_cap_mps is None)


def _numbers(snap: Snapshot, send_unix_s: float) -> list:
    """Every number of the state in message order, but the sequence: the times, the aux arrays'
    values in :func:`agent.adapters.robotmsg_state.aux_specs` order, dq, q. Checked equal to the
    specs' numbers on each layout's first state (:meth:`StateEncoder.encode`)."""
    t = snap.t_mono_s
    o, tr, joints = snap.odom, snap.tracks, snap.joints
    out = [t, send_unix_s] if t > 0 else [send_unix_s]
    out += (o.x_m, o.y_m, o.yaw_rad, o.vx_mps, o.omega_radps, o.distance_m,
            tr.left_mps, tr.right_mps, tr.cmd_left_mps, tr.cmd_right_mps, tr.duty_left, tr.duty_right,
            tr.left_counts, tr.right_counts)
    out += joints.target
    if snap.gripper is not None:
        out.append(snap.gripper)
    imu = snap.imu
    if imu is not None:
        out += imu.accel_mps2
        out += imu.gyro_radps
        if imu.orientation_xyzw is not None:
            out += imu.orientation_xyzw
        if imu.temperature_c is not None:
            out.append(imu.temperature_c)
        out.append(t - imu.t_mono_s)
    power = snap.power
    if power is not None:
        if power.voltage_v is not None:
            out.append(power.voltage_v)
        out += (power.current_a, power.power_w)
        if power.percent is not None:
            out.append(power.percent)
        out.append(t - power.t_mono_s)
    safety = snap.safety
    out += (1.0 if snap.stopped else 0.0, 1.0 if snap.watchdog == "expired" else 0.0, len(snap.faults))
    out += [HEALTH_CODES.get(d.state, 2.0) for d in snap.devices]
    out += (1.0 if safety.estop is not None else 0.0, 1.0 if safety.halted else 0.0)
    for halt in safety.halts:
        out += (halt.since_unix_s, SETTER_CODES.get(halt.by, -1.0), 1.0 if halt.cleared else 0.0)
    if safety.speed_cap_mps is not None:
        out.append(safety.speed_cap_mps)
    q = joints.q
    out += joints.qd if len(joints.qd) == len(q) else (0.0,) * len(q)
    out += q
    return out


@dataclass(frozen=True, slots=True)
class _Plan:
    """One layout's message as one struct: its constant chunks (``Ns`` fields) around the runs of numbers.

    ``order`` picks the struct's arguments in message order from ``consts + numbers`` (C speed: no
    slice, view or join per run)."""

    consts: list[bytes]            # the constant chunks, in message order
    full: struct.Struct            # the whole message: chunk, run, chunk, run, ..., chunk
    order: Callable[[list], tuple]


class _PlanBuilder:
    """Collects constant bytes and number runs in message order."""

    def __init__(self) -> None:
        self.consts: list[bytes] = []
        self.codes: list[str] = []
        self._const = bytearray()

    def const(self, data: bytes) -> None:
        self._const += data

    def run(self, code: str, count: int) -> None:
        self.consts.append(bytes(self._const))
        self._const = bytearray()
        self.codes.append(code * count)

    def plan(self) -> _Plan:
        self.consts.append(bytes(self._const))
        consts, fmt, order = self.consts, ["<"], []
        at = len(consts)                    # the numbers follow the chunks in consts + numbers
        for i, const in enumerate(consts):
            fmt.append(f"{len(const)}s")
            order.append(i)
            if i < len(self.codes):
                fmt.append(self.codes[i])
                order += range(at, at + len(self.codes[i]))
                at += len(self.codes[i])
        return _Plan(consts, struct.Struct("".join(fmt)), operator.itemgetter(*order))


class StateEncoder:
    """RobotState binary bytes for snapshots, the constant parts once (module docstring).

    Args:
        description: the robot (joint count). clock_id: ``monotonic_clock_id()``. frames: frame names.

    Not thread-safe: one caller (the adapter's publish loop on the event loop).

    Attributes:
        fast: states encoded the fast way. checked: layouts compared with the library's bytes.
        trusted: False once a layout's bytes differed from the library's (every state then goes the
            library's way).
    """

    def __init__(self, description: RobotDescription, clock_id: str, frames: StateFrames) -> None:
        self._description = description
        self._clock_id = clock_id
        self._frames = frames
        self._plans: dict[tuple, _Plan] = {}
        # the last fast state: (snapshot, its plan, its numbers but the sequence, where the send time is);
        # a state between two ticks (state_hz above the tick rate, a resting loop) repeats that snapshot
        self._last: tuple[Snapshot, _Plan, list, int] | None = None
        self.fast = 0
        self.checked = 0
        self.trusted = True

    def encode(self, snap: Snapshot, *, sequence: int, send_unix_s: float) -> bytes:
        """The RobotState of ``snap`` as ``robot_msg.encode`` writes it (equal bytes).

        Raises:
            robot_msg.RobotMsgError: the state fails the library's check (as ``robot_msg.encode``).
        """
        last = self._last
        if (last is not None and last[0] is snap and self.trusted and 0 <= sequence <= MAX_SEQUENCE
                and math.isfinite(send_unix_s)):     # the same tick again: only the send time and sequence move
            numbers = last[2].copy()
            numbers[last[3]] = send_unix_s
            numbers.append(sequence)
            self.fast += 1
            return self._fill(last[1], numbers)
        shape = _shape(snap)
        plan = self._plans.get(shape) if self.trusted and 0 <= sequence <= MAX_SEQUENCE else None
        if plan is not None:
            numbers = _numbers(snap, send_unix_s)
            if math.isfinite(sum(numbers)):
                self._last = (snap, plan, numbers.copy(), 1 if snap.t_mono_s > 0 else 0)
                numbers.append(sequence)
                self.fast += 1
                return self._fill(plan, numbers)
            return self._library(snap, sequence, send_unix_s)   # a non-finite aux value is left out there
        specs = aux_specs(snap, self._frames)
        joints = snap.joints
        q = joints.q
        dq = joints.qd if len(joints.qd) == len(q) else (0.0,) * len(q)
        sampled = snap.t_mono_s > 0
        numbers = [snap.t_mono_s, send_unix_s] if sampled else [send_unix_s]
        for spec in specs:
            value = spec[1]
            if isinstance(value, (tuple, list)):
                numbers += value
            else:
                numbers.append(value)
        numbers += dq
        numbers += q
        if (not self.trusted or not math.isfinite(sum(numbers)) or len(specs) > MAX_AUX or len(q) > MAX_JOINTS
                or not 0 <= sequence <= MAX_SEQUENCE):
            return self._library(snap, sequence, send_unix_s)   # a non-finite aux value is left out there
        quick = _numbers(snap, send_unix_s)
        numbers.append(sequence)
        plan = self._plan(specs, len(q), sampled)
        data = self._fill(plan, numbers)
        full = self._library(snap, sequence, send_unix_s)    # raises as robot_msg.encode would
        self.checked += 1
        if full != data or quick != numbers[:-1]:
            self.trusted = False
            log.warning("robot_msg: this robot_msg version lays RobotState out differently from the agent's "
                        "fast encoder; every state now goes through robot_msg.encode (more CPU, same bytes)")
            return full
        if len(self._plans) >= MAX_LAYOUTS:
            self._plans.clear()
        self._plans[shape] = plan
        return data

    def envelope(self, snap: Snapshot, encoding: str, *, sequence: int, send_unix_s: float) -> bytes:
        """The RobotState of ``snap`` in ``robot_msg.encoding``: ``binary`` (:meth:`encode`) or ``json``
        (``robot_msg.encode_json``, UTF-8). Raises robot_msg.RobotMsgError as the library does."""
        if encoding == "binary":
            return self.encode(snap, sequence=sequence, send_unix_s=send_unix_s)
        state = robot_state(snap, self._description, sequence=sequence, clock_id=self._clock_id,
                            frames=self._frames, send_unix_s=send_unix_s)
        return rm.encode_json(state).encode()

    def _library(self, snap: Snapshot, sequence: int, send_unix_s: float) -> bytes:
        state = robot_state(snap, self._description, sequence=sequence, clock_id=self._clock_id,
                            frames=self._frames, send_unix_s=send_unix_s)
        return rm.encode(state)

    @staticmethod
    def _fill(plan: _Plan, numbers: list) -> bytes:
        return plan.full.pack(*plan.order(plan.consts + numbers))

    def _plan(self, specs: list[AuxSpec], n: int, sampled: bool) -> _Plan:
        """The layout of a message with these aux arrays, ``n`` joints and a sample time or not."""
        zero = rm.Vec3(0.0, 0.0, 0.0)
        empty = rm.RobotState(base_wrench_ext=rm.Wrench(zero, zero), dq=[], ee_frames=[], frame_id=self._frames.base,
                              joint_frames=[], q=[], sequence=0, tau_ext=[])
        b = _PlanBuilder()
        b.const(rm.encode(empty)[:8])                              # magic, version, message id
        b.const(_U8.pack((1 if sampled else 0) | 4 | 8))           # metadata: sample_time?, send_time, aux
        if sampled:                                                # Timestamp: flags (clock_id), seconds, kind, clock_id
            b.const(_U8.pack(1))
            b.run("d", 1)
            b.const(_U8.pack(_CLOCK_MONOTONIC) + _str(self._clock_id))
        b.const(_U8.pack(0))
        b.run("d", 1)
        b.const(_U8.pack(_CLOCK_UNIX))
        b.const(_U8.pack(len(specs)))
        for name, value, unit, frame in specs:
            count = -1 if isinstance(value, (int, float)) else len(value)
            head, tail = _array_parts((name, count, unit, frame))
            b.const(head)
            b.run("d", max(count, 1))
            b.const(tail)
        b.const(bytes(48))                                         # base_wrench_ext: not measured
        b.const(_U16.pack(n))
        b.run("d", n)                                              # dq
        b.const(_U8.pack(0) + _str(self._frames.base) + _U16.pack(0))   # ee_frames, frame_id, joint_frames
        b.const(_U16.pack(n))
        b.run("d", n)                                              # q
        b.run("q", 1)                                              # sequence
        b.const(_U16.pack(n) + bytes(8 * n))                       # tau_ext: not measured
        return b.plan()
