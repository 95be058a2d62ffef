"""robot_msg outbound, fast path: one snapshot -> RobotState binary bytes, the constant parts encoded once.

:func:`agent.adapters.robotmsg_state.robot_state` builds the ``RobotState`` object and
``robot_msg.encode`` checks and encodes all of it: about 350 us a state on a desktop core, 50 times a
second. Most of it is the same every time: the aux arrays' names, shapes, units and frames, the frame
id, the empty frame lists, the zero wrench. :class:`StateEncoder` writes the robot_msg binary format
(robot_msg's public wire format: header, metadata, payload; every field byte-aligned, little-endian)
directly from the snapshot, with each array's constant head and tail bytes kept from the first time
it was seen, and only the numbers packed per state.

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
from collections.abc import Sequence

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
_I64 = struct.Struct("<q")
_TIME = struct.Struct("<dB")      # Timestamp: seconds, clock kind
_CLOCK_UNIX, _CLOCK_MONOTONIC = 0, 1
_F64: dict[int, struct.Struct] = {}

ArrayKey = tuple[str, int, str, str | None]   # name, element count (-1: scalar), unit, frame id


def _f64s(n: int) -> struct.Struct:
    s = _F64.get(n)
    if s is None:
        s = _F64[n] = struct.Struct(f"<{n}d")
    return s


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


def _values(value: Sequence[float] | float) -> tuple[float, ...]:
    if isinstance(value, (int, float)):
        return (float(value),)
    return tuple(float(v) for v in value)


class StateEncoder:
    """RobotState binary bytes for snapshots, the constant parts once (module docstring).

    Args:
        description: the robot (joint count). clock_id: ``monotonic_clock_id()``. frames: frame names.

    Attributes:
        fast: states encoded the fast way. checked: layouts compared with the library's bytes.
        trusted: False once a layout's bytes differed from the library's (every state then goes the
            library's way).
    """

    def __init__(self, description: RobotDescription, clock_id: str, frames: StateFrames) -> None:
        self._description = description
        self._clock_id = clock_id
        self._frames = frames
        self._parts: dict[ArrayKey, tuple[bytes, bytes]] = {}
        self._layouts: set[tuple] = set()
        self._header: bytes | None = None
        self._sample_tail = b""
        self._payload_mid = b""
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
        q = tuple(float(v) for v in joints.q)
        dq = tuple(float(v) for v in joints.qd) if len(joints.qd) == len(q) else (0.0,) * len(q)
        arrays = [(spec, _values(spec[1])) for spec in specs]
        numbers_ok = (math.isfinite(snap.t_mono_s) and math.isfinite(send_unix_s)
                      and all(map(math.isfinite, q)) and all(map(math.isfinite, dq))
                      and all(math.isfinite(v) for _, vals in arrays for v in vals))
        if (not self.trusted or not numbers_ok or len(arrays) > MAX_AUX or len(q) > MAX_JOINTS
                or not 0 <= sequence <= 2**63 - 1):
            return self._library(snap, sequence, send_unix_s)
        keys = [self._key(spec, vals) for spec, vals in arrays]
        layout = (tuple(keys), len(q), snap.t_mono_s > 0)
        data = self._fast(snap, keys, arrays, q, dq, sequence, send_unix_s)
        if layout in self._layouts:
            self.fast += 1
            return data
        full = self._library(snap, sequence, send_unix_s)    # raises as robot_msg.encode would
        self.checked += 1
        if full != data:
            self.trusted = False
            log.warning("robot_msg: this robot_msg version lays RobotState out differently from the agent's "
                        "fast encoder; every state now goes through robot_msg.encode (more CPU, same bytes)")
            return full
        if len(self._layouts) >= MAX_LAYOUTS:
            self._layouts.clear()
        self._layouts.add(layout)
        return data

    def _library(self, snap: Snapshot, sequence: int, send_unix_s: float) -> bytes:
        state = robot_state(snap, self._description, sequence=sequence, clock_id=self._clock_id,
                            frames=self._frames, send_unix_s=send_unix_s)
        return rm.encode(state)

    @staticmethod
    def _key(spec: AuxSpec, values: tuple[float, ...]) -> ArrayKey:
        name, value, unit, frame = spec
        return name, -1 if isinstance(value, (int, float)) else len(values), unit, frame

    def _constants(self) -> bytes:
        if self._header is None:
            zero = rm.Vec3(0.0, 0.0, 0.0)
            empty = rm.RobotState(base_wrench_ext=rm.Wrench(zero, zero), dq=[], ee_frames=[], frame_id=self._frames.base,
                                  joint_frames=[], q=[], sequence=0, tau_ext=[])
            header = rm.encode(empty)[:8]      # magic, version, message id
            self._header = header
            self._sample_tail = _str(self._clock_id)
            self._payload_mid = _U8.pack(0) + _str(self._frames.base) + _U16.pack(0)  # ee_frames, frame_id, joint_frames
        return self._header

    def _fast(self, snap: Snapshot, keys: list[ArrayKey], arrays: list[tuple[AuxSpec, tuple[float, ...]]],
              q: tuple[float, ...], dq: tuple[float, ...], sequence: int, send_unix_s: float) -> bytes:
        out = bytearray(self._constants())
        sampled = snap.t_mono_s > 0
        out += _U8.pack((1 if sampled else 0) | 4 | 8)            # sample_time?, send_time, aux
        if sampled:
            out += _U8.pack(1) + _TIME.pack(snap.t_mono_s, _CLOCK_MONOTONIC) + self._sample_tail
        out += _U8.pack(0) + _TIME.pack(send_unix_s, _CLOCK_UNIX)
        out += _U8.pack(len(arrays))
        parts = self._parts
        for key, (_, values) in zip(keys, arrays):
            got = parts.get(key)
            if got is None:
                if len(parts) >= 4 * MAX_AUX * 4:
                    parts.clear()
                got = parts[key] = _array_parts(key)
            out += got[0]
            out += _f64s(len(values)).pack(*values)
            out += got[1]
        n = len(q)
        zeros = _f64s(n).pack(*((0.0,) * n))
        out += bytes(48)                                         # base_wrench_ext: not measured
        out += _U16.pack(n) + _f64s(n).pack(*dq)
        out += self._payload_mid
        out += _U16.pack(n) + _f64s(n).pack(*q)
        out += _I64.pack(sequence)
        out += _U16.pack(n) + zeros                              # tau_ext: not measured
        return bytes(out)

