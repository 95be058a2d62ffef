"""robot_msg outbound, fast path: one snapshot -> RobotState binary bytes, the constant parts encoded once.

:func:`agent.adapters.robotmsg_state.robot_state` builds the ``RobotState`` object and
``robot_msg.encode`` checks and encodes all of it, 50 times a second; :class:`StateEncoder` takes about a
tenth of that CPU (scripts/bench_robotstate.py prints both). Most of it is the same every time: the aux arrays' names, shapes, units and frames, the frame
id, the empty frame lists, the zero wrench. :class:`StateEncoder` writes the robot_msg binary format
(robot_msg's public wire format: header, metadata, payload; every field byte-aligned, little-endian)
directly from the snapshot: each layout's constant bytes (array names, shapes, units, frames, the frame
id, the empty lists, the zero wrench) are kept from the first time it was seen, and per state only the
numbers are packed (one ``struct`` call) and joined with them.

It never sends what the library would not: each new *layout* (which arrays, their lengths, units and
frames, joint count, whether a sample time is set) is encoded once by both ways and the bytes compared;
only a layout whose bytes were equal, and that the library's full check accepted, is encoded the fast way
afterwards. A mismatch (another robot_msg version laying a field out differently) logs one WARNING and
sends every later state through the library. Per state the fast path checks what can change within a
layout: every number finite (else the library path, which leaves a non-finite aux array out and says
so) and the sequence in range.
"""

from __future__ import annotations

import logging
import math
import struct
from dataclasses import dataclass

import robot_msg as rm

from agent.adapters.robotmsg_state import AuxSpec, StateFrames, aux_specs, robot_state
from agent.model import RobotDescription, Snapshot

log = logging.getLogger(__name__)

#: The library's limits the fast path keeps to (larger goes the library's way and fails there).
MAX_AUX = 64
MAX_JOINTS = 256
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


@dataclass(frozen=True, slots=True)
class _Plan:
    """One layout's message: constant chunks around the runs of numbers, all numbers packed by one struct."""

    pieces: list                   # [const, run, const, run, ..., const]: runs filled per message
    numbers: struct.Struct         # every number of the message, in order
    bounds: tuple[tuple[int, int], ...]   # byte range of each run within the packed numbers


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
        bounds, at = [], 0
        for codes in self.codes:
            size = struct.calcsize("<" + codes)
            bounds.append((at, at + size))
            at += size
        pieces: list = []
        for const in self.consts[:-1]:
            pieces += [const, b""]
        pieces.append(self.consts[-1])
        return _Plan(pieces, struct.Struct("<" + "".join(self.codes)), tuple(bounds))


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
        self.fast = 0
        self.checked = 0
        self.trusted = True

    def encode(self, snap: Snapshot, *, sequence: int, send_unix_s: float) -> bytes:
        """The RobotState of ``snap`` as ``robot_msg.encode`` writes it (equal bytes).

        Raises:
            robot_msg.RobotMsgError: the state fails the library's check (as ``robot_msg.encode``).
        """
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
                or not 0 <= sequence <= 2**63 - 1):
            return self._library(snap, sequence, send_unix_s)   # a non-finite aux value is left out there
        numbers.append(sequence)
        # an aux array's unit, frame and shape follow from its name (aux_specs); joint_target's length varies
        layout = (tuple([spec[0] for spec in specs]), len(joints.target), len(q), sampled)
        plan = self._plans.get(layout)
        if plan is not None:
            self.fast += 1
            return self._fill(plan, numbers)
        plan = self._plan(specs, len(q), sampled)
        data = self._fill(plan, numbers)
        full = self._library(snap, sequence, send_unix_s)    # raises as robot_msg.encode would
        self.checked += 1
        if full != data:
            self.trusted = False
            log.warning("robot_msg: this robot_msg version lays RobotState out differently from the agent's "
                        "fast encoder; every state now goes through robot_msg.encode (more CPU, same bytes)")
            return full
        if len(self._plans) >= MAX_LAYOUTS:
            self._plans.clear()
        self._plans[layout] = plan
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
        packed = memoryview(plan.numbers.pack(*numbers))
        pieces = plan.pieces
        pieces[1::2] = [packed[a:b] for a, b in plan.bounds]
        return b"".join(pieces)

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
